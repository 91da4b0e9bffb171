"""EPaxos tunables, validated once. The timing keys share Raft's and Multi-Paxos's names so one ``--set`` works for
all three: ``heartbeat_s`` is the tick (retransmission, catch-up), ``election_timeout_s_min/max`` the range of the
randomised wait on an instance that does not commit before this replica recovers it (explicit prepare)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from seedance.errors import SpecError

FAST_QUORUMS = ("auto", "optimized", "simple")


@dataclass(frozen=True, kw_only=True, slots=True)
class EPaxosConfig:
    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    # "optimized": F + floor((F+1)/2) (SOSP'13 §4.3); "simple": 2F; "auto": optimized where the two coincide
    # (N <= 4), simple above (the optimized quorum's recovery needs TryPreAccept, not implemented: see node.py)
    fast_quorum: str = "auto"
    fetch_batch: int = 64  # instances asked for per Fetch

    def __post_init__(self) -> None:
        if not (isinstance(self.heartbeat_s, (int, float)) and not isinstance(self.heartbeat_s, bool)
                and self.heartbeat_s > 0):
            raise SpecError("epaxos.heartbeat_s", f"must be a positive number, got {self.heartbeat_s!r}")
        lo, hi = self.election_timeout_s_min, self.election_timeout_s_max
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 < lo <= hi):
            raise SpecError("epaxos.election_timeout_s_min", f"need 0 < min <= max, got [{lo!r}, {hi!r}]")
        if lo <= self.heartbeat_s:
            raise SpecError("epaxos.election_timeout_s_min", f"{lo} must exceed heartbeat_s {self.heartbeat_s}",
                            "a recovery wait several ticks long")
        if self.fast_quorum not in FAST_QUORUMS:
            raise SpecError("epaxos.fast_quorum", f"unknown fast quorum {self.fast_quorum!r}",
                            f"valid: {', '.join(FAST_QUORUMS)}")
        if not (isinstance(self.fetch_batch, int) and not isinstance(self.fetch_batch, bool) and self.fetch_batch >= 1):
            raise SpecError("epaxos.fetch_batch", f"must be an integer >= 1, got {self.fetch_batch!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> EPaxosConfig:
        config = dict(config or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise SpecError(f"epaxos.{unknown[0]}", "unknown option", f"valid: {', '.join(valid)}")
        return cls(**config)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
