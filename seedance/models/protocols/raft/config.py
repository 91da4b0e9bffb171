"""Raft's tunables, validated once: timing (§5.2, §9.3), batching, read path (§6.4 / §8).

Defaults suit a datacenter: heartbeat 50 ms, election timeout uniform in [150, 300] ms (the paper's §9.3 range),
batches of up to 256 entries per AppendEntries, one AppendEntries with new entries in flight per follower (requests
that arrive meanwhile are batched into the next one), linearizable reads by ReadIndex. The simulator runs in virtual
time, so these are virtual seconds there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from seedance.errors import SpecError

READ_MODES = ("readindex", "log")


@dataclass(frozen=True, kw_only=True, slots=True)
class RaftConfig:
    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    reads: str = "readindex"  # "readindex" (§6.4) or "log" (reads are log entries)
    max_batch_entries: int = 256
    max_inflight: int = 1  # AppendEntries carrying new entries outstanding per follower (>1: pipelining)

    def __post_init__(self) -> None:
        if not (isinstance(self.heartbeat_s, (int, float)) and self.heartbeat_s > 0):
            raise SpecError("raft.heartbeat_s", f"must be a positive number, got {self.heartbeat_s!r}")
        lo, hi = self.election_timeout_s_min, self.election_timeout_s_max
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 < lo <= hi):
            raise SpecError("raft.election_timeout_s_min", f"need 0 < min <= max, got [{lo!r}, {hi!r}]")
        if lo <= self.heartbeat_s:
            raise SpecError("raft.election_timeout_s_min", f"{lo} must exceed heartbeat_s {self.heartbeat_s}",
                            "an election timeout several heartbeats long")
        if self.reads not in READ_MODES:
            raise SpecError("raft.reads", f"unknown read mode {self.reads!r}", f"valid: {', '.join(READ_MODES)}")
        for name in ("max_batch_entries", "max_inflight"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise SpecError(f"raft.{name}", f"must be an integer >= 1, got {value!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> RaftConfig:
        """Build from a plain mapping; an unknown key is a :class:`SpecError` naming the valid ones."""
        config = dict(config or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise SpecError(f"raft.{unknown[0]}", "unknown option", f"valid: {', '.join(valid)}")
        return cls(**config)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
