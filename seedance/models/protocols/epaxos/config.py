"""EPaxos tunables, validated once. The timing keys share Raft's and Multi-Paxos's names so one ``--set`` works for
all three: ``heartbeat_s`` is the tick (retransmission, catch-up), ``election_timeout_s_min/max`` the range of the
randomised wait on an instance that does not commit before this replica recovers it (explicit prepare)."""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import SpecError
from seedance.models.protocols.options import Options, check_counts, check_timing

FAST_QUORUMS = ("auto", "optimized", "simple")


@dataclass(frozen=True, kw_only=True, slots=True)
class EPaxosConfig(Options):
    prefix = "epaxos"

    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    # "optimized": F + floor((F+1)/2) (SOSP'13 §4.3; recovery with TryPreAccept at N >= 5); "simple": 2F;
    # "auto": the optimized quorum
    fast_quorum: str = "auto"
    fetch_batch: int = 64  # instances asked for per Fetch
    # client commands per instance; 1: batching off (one instance per command, proposed at once). Above 1, the
    # commands a replica receives before its zero-delay flush timer fires are proposed together, up to this many
    # per instance (Multi-Paxos's knob of the same name packs that many slots into one Accept)
    max_batch: int = 1
    # instances executed beyond the last snapshot before the next one is taken (Multi-Paxos's snapshot_slots);
    # instances every replica's durable snapshot reflects are then forgotten (epaxos/snapshots.py); 0: never
    snapshot_instances: int = 65536

    def __post_init__(self) -> None:
        check_timing("epaxos", self.heartbeat_s, self.election_timeout_s_min, self.election_timeout_s_max,
                     why="a recovery wait several ticks long")
        if self.fast_quorum not in FAST_QUORUMS:
            raise SpecError("epaxos.fast_quorum", f"unknown fast quorum {self.fast_quorum!r}",
                            f"valid: {', '.join(FAST_QUORUMS)}")
        check_counts("epaxos", self, ("fetch_batch", "max_batch"))
        if isinstance(self.snapshot_instances, bool) or not isinstance(self.snapshot_instances, int) \
                or self.snapshot_instances < 0:
            raise SpecError("epaxos.snapshot_instances", f"must be an integer >= 0 (0: never), got "
                            f"{self.snapshot_instances!r}")

