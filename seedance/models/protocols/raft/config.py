"""Raft's tunables, validated once: timing (§5.2, §9.3), batching, read path (§6.4 / §8).

Defaults suit a datacenter: heartbeat 50 ms, election timeout uniform in [150, 300] ms (the paper's §9.3 range),
batches of up to 256 entries per AppendEntries, one AppendEntries with new entries in flight per follower (requests
that arrive meanwhile are batched into the next one), linearizable reads by ReadIndex, and a snapshot of the state
machine once 65,536 applied entries are held (§7; the log before it is then compacted; 0: never). The simulator runs in virtual
time, so these are virtual seconds there.
"""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import SpecError
from seedance.models.protocols.options import Options, check_counts, check_timing

READ_MODES = ("readindex", "log")


@dataclass(frozen=True, kw_only=True, slots=True)
class RaftConfig(Options):
    prefix = "raft"

    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    reads: str = "readindex"  # "readindex" (§6.4) or "log" (reads are log entries)
    max_batch_entries: int = 256
    max_inflight: int = 1  # AppendEntries carrying new entries outstanding per follower (>1: pipelining)
    snapshot_entries: int = 65536  # applied entries held before a snapshot compacts them (§7); 0: never

    def __post_init__(self) -> None:
        check_timing("raft", self.heartbeat_s, self.election_timeout_s_min, self.election_timeout_s_max)
        if self.reads not in READ_MODES:
            raise SpecError("raft.reads", f"unknown read mode {self.reads!r}", f"valid: {', '.join(READ_MODES)}")
        check_counts("raft", self, ("max_batch_entries", "max_inflight"))
        if isinstance(self.snapshot_entries, bool) or not isinstance(self.snapshot_entries, int) \
                or self.snapshot_entries < 0:
            raise SpecError("raft.snapshot_entries", f"must be an integer >= 0 (0: never), got "
                            f"{self.snapshot_entries!r}")

