"""Multi-Paxos and EPaxos with planted bugs, reachable only from tests: each breaks one rule its paper states.

* :class:`LowestBallotMultiPaxos` — phase 1 adopts, per slot, the value of the *lowest* ballot among the promises
  instead of the highest (Paxos Made Simple §2.2, P2c): a value chosen at a later ballot can be replaced.
* :class:`BelowPromiseMultiPaxos` — an acceptor accepts an Accept whose ballot is below its promise (P1a broken): a
  deposed leader still gets values chosen after a new leader has read the slots.
* :class:`SnapshotlessPromiseMultiPaxos` — an acceptor whose snapshot covers the candidate's ``low`` answers the
  Promise without it (and without the values it compacted): the new leader fills those chosen slots with no-ops
  (the phase-1 rule of seedance/models/protocols/multipaxos/snapshots.py broken).
* :class:`SingleBallotEPaxos` — one ballot variable per instance (EPaxos as published, efficient/epaxos issue #20):
  a PrepareReply reports the last ballot the replica *promised*, not the one it accepted at, so recovery can adopt a
  stale accepted value (Sutra, IPL 2020).
* :class:`UncheckedFastPathEPaxos` — the command leader commits on the fast path as soon as it has a fast quorum
  of replies, without checking that they left its attributes unchanged (SOSP'13 §4.3 requires identical replies).
* :class:`NoTryPreAcceptEPaxos` — the optimized fast quorum F + ⌊(F+1)/2⌋ at N ≥ 5 with a recovery that accepts
  the attributes of ⌊(F+1)/2⌋ witnesses as they are, without TryPreAccept (technical report CMU-PDL-13-111): an
  interfering command committed without a dependency on them is missed.
* :class:`EarlyForgetEPaxos` — a replica forgets instances once its *own* durable snapshot reflects them, not once
  every replica's does (the watermark rule of seedance/models/protocols/epaxos/snapshots.py broken): a replica that
  lags can no longer get them from it.

``MUTANTS`` maps a short name to a :class:`ProtocolSpec` building that mutant, for simulator campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols import epaxos, multipaxos
from seedance.models.protocols.contract import ProtocolSpec
from seedance.models.protocols.epaxos import EPaxosConfig, EPaxosNode
from seedance.models.protocols.multipaxos import MultiPaxosConfig, MultiPaxosNode


class LowestBallotMultiPaxos(MultiPaxosNode):
    def _choose(self, candidates):
        return min(candidates, key=lambda v: v.ballot)  # BUG: P2c adopts the highest ballot's value


class BelowPromiseMultiPaxos(MultiPaxosNode):
    def _accepts_below_promise(self, ballot: int) -> bool:
        return False  # BUG: P1a — never accept a ballot below the promise


class SnapshotlessPromiseMultiPaxos(MultiPaxosNode):
    def _promised_snapshot(self, low: int) -> dict:
        return {}  # BUG: the compacted slots are neither reported nor covered by a snapshot


class SingleBallotEPaxos(EPaxosNode):
    def _reported_ballot(self, inst):
        return inst.bal  # BUG: the promised ballot stands in for the ballot the value was accepted at


class UncheckedFastPathEPaxos(EPaxosNode):
    def _fast_path_ok(self, coord) -> bool:
        return True  # BUG: the replies' attributes are not compared with the leader's


class NoTryPreAcceptEPaxos(EPaxosNode):
    def _recover_agreed(self, iid, coord, witnesses, value, out, now) -> None:
        # BUG: fewer than F witnesses are taken as proof enough; no TryPreAccept
        self._start_accept(iid, coord.ballot, value.command, value.seq, value.deps, out, now)


class EarlyForgetEPaxos(EPaxosNode):
    def _watermark(self) -> list[int]:
        return list(self.snapshot_prefix)  # BUG: the minimum over every replica's durable snapshot


def _spec(name: str, base: ProtocolSpec, cls: type, config_cls: type) -> ProtocolSpec:
    def make(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]):
        return cls(node_id, num_nodes, rng, config_cls.from_mapping(config))

    return ProtocolSpec(name=f"{base.name}-mutant-{name}", factory=make, message_types=base.message_types,
                        description=f"{base.name} with a planted bug: {name}", default_config=base.default_config,
                        operations=base.operations, checker=base.checker, monitor=base.monitor, routing=base.routing)


MUTANT_CLASSES: dict[str, tuple[type, ProtocolSpec, type]] = {
    "lowest-ballot": (LowestBallotMultiPaxos, multipaxos.SPEC, MultiPaxosConfig),
    "accept-below-promise": (BelowPromiseMultiPaxos, multipaxos.SPEC, MultiPaxosConfig),
    "snapshotless-promise": (SnapshotlessPromiseMultiPaxos, multipaxos.SPEC, MultiPaxosConfig),
    "single-ballot": (SingleBallotEPaxos, epaxos.SPEC, EPaxosConfig),
    "unchecked-fast-path": (UncheckedFastPathEPaxos, epaxos.SPEC, EPaxosConfig),
    "no-try-pre-accept": (NoTryPreAcceptEPaxos, epaxos.SPEC, EPaxosConfig),
    "early-forget": (EarlyForgetEPaxos, epaxos.SPEC, EPaxosConfig),
}

MUTANTS: dict[str, ProtocolSpec] = {name: _spec(name, base, cls, config_cls)
                                    for name, (cls, base, config_cls) in MUTANT_CLASSES.items()}
