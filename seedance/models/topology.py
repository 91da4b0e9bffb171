"""Heterogeneous GPU fabrics: devices, switches and links, and the matrices derived from them (seed §2.4).

A cluster is a link graph (networkx) of devices and switches joined by links of a kind (nvlink, nvswitch, pcie,
infiniband, ethernet) with a bandwidth in GB/s per direction and a latency in µs. Routing over it gives the effective
pairwise bandwidth matrix ``B`` (n×n, GB/s, may be asymmetric; diagonal ``inf``) and latency matrix (µs; diagonal 0).
The plain matrix form of the seed is accepted too; it has no switches, and each ordered pair is its own link.

:class:`Topology` is what every other part consumes (cost model, simulator network, calibration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Hashable

import networkx as nx
import numpy as np

LinkKey = tuple[Hashable, Hashable]  # a directed link (u, v) of the graph


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated cluster.

    ``bandwidth_GBps[i, j]`` is the effective bandwidth from device i to device j (bottleneck of the route, times
    any documented link efficiency); ``latency_us[i, j]`` the one-way latency (sum over the route).
    ``host_of[i]`` is the server (node) index of device i, used by hierarchical collectives.
    ``routes[(i, j)]`` lists the directed links a message from i to j crosses, and ``links[link]`` gives that link's
    ``(bandwidth_GBps, latency_us)``: the simulator makes each link a shared resource so traffic contends.
    """

    name: str
    bandwidth_GBps: np.ndarray
    latency_us: np.ndarray
    host_of: np.ndarray
    device_kinds: tuple[str, ...]
    routes: Mapping[tuple[int, int], tuple[LinkKey, ...]]
    links: Mapping[LinkKey, tuple[float, float]]
    graph: nx.DiGraph | None = None
    source: str = ""  # where it came from: preset name + citation key, or file path
    meta: Mapping[str, object] = field(default_factory=dict)

    @property
    def num_devices(self) -> int:
        return int(self.bandwidth_GBps.shape[0])

    @property
    def num_hosts(self) -> int:
        return int(self.host_of.max()) + 1 if self.num_devices else 0

    def route(self, src: int, dst: int) -> tuple[LinkKey, ...]:
        return self.routes[(src, dst)]
