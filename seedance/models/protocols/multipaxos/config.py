"""Multi-Paxos tunables, validated once (same timing defaults as Raft: heartbeat 50 ms, timeout 150–300 ms)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from seedance.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class MultiPaxosConfig:
    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    max_batch: int = 1  # slots per Accept for client commands; 1: batching off (one Accept per command, pipelined)
    catchup_batch: int = 1024  # chosen values per Decide sent to a lagging replica

    def __post_init__(self) -> None:
        if not (isinstance(self.heartbeat_s, (int, float)) and not isinstance(self.heartbeat_s, bool)
                and self.heartbeat_s > 0):
            raise SpecError("multipaxos.heartbeat_s", f"must be a positive number, got {self.heartbeat_s!r}")
        lo, hi = self.election_timeout_s_min, self.election_timeout_s_max
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 < lo <= hi):
            raise SpecError("multipaxos.election_timeout_s_min", f"need 0 < min <= max, got [{lo!r}, {hi!r}]")
        if lo <= self.heartbeat_s:
            raise SpecError("multipaxos.election_timeout_s_min", f"{lo} must exceed heartbeat_s {self.heartbeat_s}",
                            "an election timeout several heartbeats long")
        for name in ("max_batch", "catchup_batch"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise SpecError(f"multipaxos.{name}", f"must be an integer >= 1, got {value!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> MultiPaxosConfig:
        config = dict(config or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise SpecError(f"multipaxos.{unknown[0]}", "unknown option", f"valid: {', '.join(valid)}")
        return cls(**config)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
