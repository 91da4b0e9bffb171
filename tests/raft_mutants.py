"""Raft with planted bugs, reachable only from tests: each breaks one rule the paper states and must be caught.

* :class:`OldTermCommitRaft` — commits an entry of an earlier term by counting replicas, ignoring §5.4.2 (the Figure 8
  scenario shows a committed entry being overwritten).
* :class:`NoLogCheckVoteRaft` — grants votes without the election restriction of §5.4.1, so a candidate missing
  committed entries can win and overwrite them.
* :class:`VoteBeforePersistRaft` — replies to RequestVote before persisting the vote (a write-back cache that a crash
  empties): after crash and recovery the server has forgotten its vote and may vote again in the same term (§5.2,
  Figure 2), electing two leaders for one term.
* :class:`CountingWindowRaft` — the flow control Raft had before issue R (a liveness bug, not a safety one): the
  leader counts every AppendEntries it sends to a follower as in flight, heartbeats included and even when the
  window is already full, decrements the count for every reply (duplicates included), and resets it only when no
  reply at all came for a heartbeat interval. One lost AppendEntries while heartbeat replies keep flowing leaves the
  window full for good, so every later entry waits for a heartbeat; duplicated replies open it wider than
  ``max_inflight``.

``MUTANTS`` maps a short name to a :class:`ProtocolSpec` building that mutant, for simulator campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import Persist, ProtocolSpec, Send, SetTimer
from seedance.models.protocols.raft import SPEC, RaftConfig, RaftNode
from seedance.models.protocols.raft.messages import HEADER_BYTES, AppendEntries
from seedance.models.protocols.raft.node import HARD_STATE_KEY
from seedance.models.protocols.raft.roles import HEARTBEAT, Role


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


class CountingWindowRaft(RaftNode):
    """The pre-issue-R flow control, verbatim in behaviour: ``_count[peer]`` replaces the window."""

    def _reset_progress(self) -> None:
        super()._reset_progress()
        self._count = [0] * self.num_nodes
        self._replied = [False] * self.num_nodes

    def _window_open(self, peer):
        return self._count[peer] < self.config.max_inflight

    def _replicate(self, peer):
        log = self.log
        first = self._next[peer]
        last = min(self._sendable_last(), first + self.config.max_batch_entries - 1)
        entries = log.entries(first, last)
        size = HEADER_BYTES + sum(e.size_bytes for e in entries)
        message = AppendEntries(term=self.current_term, leader_id=self.node_id, prev_log_index=first - 1,
                                prev_log_term=log.term_at(first - 1), entries=entries,
                                leader_commit=self.commit_index, read_seq=self._read_seq)
        self._next[peer] = last + 1
        self._count[peer] += 1  # BUG: every send counts, heartbeats included, even past max_inflight
        return Send(dst=peer, message=message, size_bytes=size)

    def _start_read_round(self, out):
        self._read_seq += 1
        self._acked_seq[self.node_id] = self._read_seq
        out.extend(self._replicate(p) for p in self.peers if self._count[p] < self.config.max_inflight)
        return self._read_seq

    def _on_heartbeat(self, now):
        if self.role is not Role.LEADER:
            return []
        out = []
        for peer in self.peers:
            if not self._replied[peer] and self._count[peer]:  # BUG: the only reset: no reply at all
                self._next[peer] = self._acked_next[peer]
                self._count[peer] = 0
            self._replied[peer] = False
            out.append(self._replicate(peer))
        out.append(SetTimer(name=HEARTBEAT, delay_s=self.config.heartbeat_s))
        return out

    def _on_append_reply(self, src, m, now):
        if m.term > self.current_term:
            out = []
            self._become_follower(m.term, out, now)
            return self._flush(out)
        if self.role is not Role.LEADER or m.term != self.current_term:
            return []
        out = []
        self._replied[src] = True
        if self._count[src]:
            self._count[src] -= 1  # BUG: any reply frees a slot, a duplicate too
        if m.read_seq > self._acked_seq[src]:
            self._acked_seq[src] = m.read_seq
            if m.read_seq > self._confirmed_seq:
                self._confirm_reads(out)
        if m.success:
            if m.match_index > self._match[src]:
                self._match[src] = m.match_index
                if m.match_index > self.commit_index:
                    self._advance_commit(out)
            if self._next[src] <= m.match_index:
                self._next[src] = m.match_index + 1
        else:
            self._next[src] = max(self._match[src] + 1, min(m.conflict_index, self._next[src]))
        self._acked_next[src] = self._match[src] + 1 if m.success else self._next[src]
        if (self._next[src] <= self._sendable_last() or self._acked_seq[src] < self._read_seq) \
                and self._count[src] < self.config.max_inflight:
            out.append(self._replicate(src))
        return self._flush(out)


MUTANT_CLASSES: dict[str, type[RaftNode]] = {
    "old-term-commit": OldTermCommitRaft,
    "vote-without-log-check": NoLogCheckVoteRaft,
    "vote-before-persist": VoteBeforePersistRaft,
    "counting-window": CountingWindowRaft,
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
