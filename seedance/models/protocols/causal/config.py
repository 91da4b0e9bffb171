"""The causal protocol's options (``protocol_config`` of a run, prefix ``causal``): the grid's size, the periods of
anti-entropy and of the sync-traffic reports, and the bounds on the groups and the waiting intervals a replica keeps
(see :mod:`seedance.models.protocols.causal.node`)."""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import SpecError
from seedance.models.protocols.options import Options, check_counts


@dataclass(frozen=True, kw_only=True, slots=True)
class CausalConfig(Options):
    prefix = "causal"

    width: int = 64
    height: int = 64
    sync_interval_s: float = 0.005  # anti-entropy period
    stats_interval_s: float = 0.05  # sync-traffic reports
    max_groups: int = 4096  # delta-groups kept for peers that lag (older ones: full state)
    max_waiting: int = 64  # intervals per sender waiting for their causal predecessors

    def __post_init__(self) -> None:
        check_counts("causal", self, ("width", "height", "max_groups", "max_waiting"))
        if self.width * self.height > 1 << 20:
            raise SpecError("causal.width", f"grid {self.width}x{self.height} exceeds 1,048,576 pixels",
                            "at most 1024x1024")
        for name in ("sync_interval_s", "stats_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1e-5 <= value <= 10:
                raise SpecError(f"causal.{name}", f"must be seconds in [1e-5, 10], got {value!r}")
