"""Multi-Paxos tunables, validated once (same timing defaults as Raft: heartbeat 50 ms, timeout 150–300 ms)."""

from __future__ import annotations

from dataclasses import dataclass

from seedance.models.protocols.options import Options, check_counts, check_timing


@dataclass(frozen=True, kw_only=True, slots=True)
class MultiPaxosConfig(Options):
    prefix = "multipaxos"

    heartbeat_s: float = 0.05
    election_timeout_s_min: float = 0.15
    election_timeout_s_max: float = 0.30
    max_batch: int = 1  # slots per Accept for client commands; 1: batching off (one Accept per command, pipelined)
    catchup_batch: int = 1024  # chosen values per Decide sent to a lagging replica

    def __post_init__(self) -> None:
        check_timing("multipaxos", self.heartbeat_s, self.election_timeout_s_min, self.election_timeout_s_max)
        check_counts("multipaxos", self, ("max_batch", "catchup_batch"))

