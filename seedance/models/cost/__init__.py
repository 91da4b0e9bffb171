"""Communication cost on heterogeneous GPU fabrics (seed §2.4): the seed's point-to-point formula and collectives.

- :func:`comm_cost` — the seed's formula, exactly (:mod:`.p2p`).
- :func:`collective_time` / :func:`collective_times` — alpha-beta time, algbw and busbw of allreduce,
  reducescatter, allgather, broadcast, alltoall and sendrecv by ring, tree, rhd, direct, hierarchical or auto, with a
  straggler vector τ (:mod:`.collectives`; formulas in :mod:`._algorithms`).
- :func:`ring_order` — the bottleneck-aware ring (:mod:`.ring`); :func:`ring_channels` — the rings the ring
  algorithms actually run (that ring, or NCCL-style channels across hosts).

Every function takes a :class:`~seedance.models.topology.Topology` or plain arrays ``(bandwidth_GBps, latency_us,
host_of)``; per-topology preprocessing is cached.
"""

from seedance.models.cost._algorithms import ALGORITHMS, COLLECTIVES
from seedance.models.cost._fabric import Fabric, fabric_of
from seedance.models.cost.collectives import (
    SIZE_MEANING,
    CollectiveCost,
    best_algorithms,
    bus_bandwidth_factor,
    collective_time,
    collective_times,
    ring_channels,
    ring_order,
)
from seedance.models.cost.p2p import comm_cost
from seedance.models.cost.ring import RingOrder, best_ring

__all__ = [
    "ALGORITHMS", "COLLECTIVES", "SIZE_MEANING", "CollectiveCost", "Fabric", "RingOrder", "best_algorithms",
    "best_ring", "bus_bandwidth_factor", "collective_time", "collective_times", "comm_cost", "fabric_of",
    "ring_channels", "ring_order",
]
