"""Multi-Paxos tunables, validated once (same timing defaults as Raft: heartbeat 50 ms, timeout 150–300 ms; a
snapshot every 65,536 executed slots, like Raft's ``snapshot_entries``)."""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import SpecError
from seedance.models.protocols.options import Options, check_counts, check_timing


@dataclass(frozen=True, kw_only=True, slots=True)
class MultiPaxosConfig(Options):
    prefix = "multipaxos"

    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    max_batch: int = 1  # slots per Accept for client commands; 1: batching off (one Accept per command, pipelined)
    catchup_batch: int = 1024  # chosen values per Decide sent to a lagging replica
    snapshot_slots: int = 65536  # slots executed beyond the last snapshot before the next compacts them; 0: never

    def __post_init__(self) -> None:
        check_timing("multipaxos", self.heartbeat_s, self.election_timeout_s_min, self.election_timeout_s_max)
        check_counts("multipaxos", self, ("max_batch", "catchup_batch"))
        if isinstance(self.snapshot_slots, bool) or not isinstance(self.snapshot_slots, int) \
                or self.snapshot_slots < 0:
            raise SpecError("multipaxos.snapshot_slots", f"must be an integer >= 0 (0: never), got "
                            f"{self.snapshot_slots!r}")
