"""Raft with planted bugs, reachable only from tests: each breaks one rule the paper states and must be caught.

* :class:`OldTermCommitRaft` — commits an entry of an earlier term by counting replicas, ignoring §5.4.2 (the Figure 8
  scenario shows a committed entry being overwritten).
* :class:`NoLogCheckVoteRaft` — grants votes without the election restriction of §5.4.1, so a candidate missing
  committed entries can win and overwrite them.
* :class:`VoteBeforePersistRaft` — replies to RequestVote before persisting the vote (a write-back cache that a crash
  empties): after crash and recovery the server has forgotten its vote and may vote again in the same term (§5.2,
  Figure 2), electing two leaders for one term.

``MUTANTS`` maps a short name to a :class:`ProtocolSpec` building that mutant, for simulator campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import Persist, ProtocolSpec, Send
from seedance.models.protocols.raft import SPEC, RaftConfig, RaftNode
from seedance.models.protocols.raft.node import HARD_STATE_KEY


class OldTermCommitRaft(RaftNode):
    def _may_commit(self, index: int) -> bool:
        return True  # BUG: §5.4.2 requires log[index].term == currentTerm


class NoLogCheckVoteRaft(RaftNode):
    def _log_up_to_date(self, last_log_term: int, last_log_index: int) -> bool:
        return True  # BUG: §5.4.1 election restriction skipped


class VoteBeforePersistRaft(RaftNode):
    def _on_request_vote(self, src, m, now):
        effects = super()._on_request_vote(src, m, now)
        if not any(isinstance(e, Send) and e.message.vote_granted for e in effects):
            return effects
        # BUG: the vote is sent first; the durable write carries the term but not the vote (lost with the cache).
        persists = [e for e in effects if isinstance(e, Persist) and e.key == HARD_STATE_KEY]
        rest = [e for e in effects if not (isinstance(e, Persist) and e.key == HARD_STATE_KEY)]
        last_send = max(k for k, e in enumerate(rest) if isinstance(e, Send))
        lazy = [Persist(key=HARD_STATE_KEY, value=[self.current_term, None], size_bytes=p.size_bytes)
                for p in persists]
        return rest[: last_send + 1] + lazy + rest[last_send + 1:]


MUTANT_CLASSES: dict[str, type[RaftNode]] = {
    "old-term-commit": OldTermCommitRaft,
    "vote-without-log-check": NoLogCheckVoteRaft,
    "vote-before-persist": VoteBeforePersistRaft,
}


def _factory(cls: type[RaftNode]):
    def make(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> RaftNode:
        return cls(node_id, num_nodes, rng, RaftConfig.from_mapping(config))
    return make


MUTANTS: dict[str, ProtocolSpec] = {
    name: ProtocolSpec(name=f"raft-mutant-{name}", factory=_factory(cls), message_types=SPEC.message_types,
                       description=f"Raft with a planted bug: {name}", default_config=SPEC.default_config)
    for name, cls in MUTANT_CLASSES.items()
}
