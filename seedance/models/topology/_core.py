"""The :class:`Topology` value every other part consumes, and the vocabulary of links (seed §2.4).

Rules:
- ``bandwidth_GBps[i, j]`` is GB/s (1e9 bytes/s) per direction from device i to device j, effective (link
  efficiency already applied), finite and > 0 off the diagonal, ``inf`` on it. It may be asymmetric.
- ``latency_us[i, j]`` is the one-way latency in µs, finite and >= 0, 0 on the diagonal.
- ``host_of[i]`` is the server index of device i; servers are numbered 0..H-1 with none skipped.
- Arrays are read-only: a Topology never changes after construction.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

LinkKey = tuple[Hashable, Hashable]  # a directed link (u, v) of the graph

#: Link kinds a fabric may use. ``upi`` is the inter-socket CPU link (Intel UPI/QPI, AMD xGMI/Infinity Fabric),
#: which the PCIe-only and DGX-1 presets cross between the two CPU sockets.
LINK_KINDS: tuple[str, ...] = ("nvlink", "nvswitch", "pcie", "upi", "infiniband", "ethernet")

#: Kinds of non-device nodes (switch-like: they forward traffic; devices never do).
SWITCH_KINDS: tuple[str, ...] = ("nvswitch", "pcie_switch", "cpu", "nic", "ib_switch", "eth_switch")


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated cluster.

    ``bandwidth_GBps[i, j]`` is the effective bandwidth from device i to device j (bottleneck of the route, times
    any documented link efficiency); ``latency_us[i, j]`` the one-way latency (sum over the route).
    ``host_of[i]`` is the server (node) index of device i, used by hierarchical collectives.
    ``routes[(i, j)]`` lists the directed links a message from i to j crosses, and ``links[link]`` gives that link's
    effective ``(bandwidth_GBps, latency_us)``: the simulator makes each link a shared resource so traffic contends.
    ``device_nodes[i]`` is the graph node of device i (in the matrix form, the integer i itself).
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
    device_nodes: tuple[Hashable, ...] = ()

    def __post_init__(self) -> None:
        # Own read-only copies: freezing the caller's arrays in place would surprise them.
        object.__setattr__(self, "bandwidth_GBps", np.array(self.bandwidth_GBps, dtype=float))
        object.__setattr__(self, "latency_us", np.array(self.latency_us, dtype=float))
        object.__setattr__(self, "host_of", np.array(self.host_of, dtype=np.int64))
        n = self.bandwidth_GBps.shape[0]
        if self.bandwidth_GBps.shape != (n, n) or self.latency_us.shape != (n, n) or self.host_of.shape != (n,):
            raise ValueError("Topology arrays disagree in shape")  # a bug in a constructor, not user input
        if len(self.device_kinds) != n:
            raise ValueError("Topology.device_kinds has the wrong length")
        for array in (self.bandwidth_GBps, self.latency_us, self.host_of):
            array.setflags(write=False)
        if not self.device_nodes:
            object.__setattr__(self, "device_nodes", tuple(range(n)))

    @property
    def num_devices(self) -> int:
        return int(self.bandwidth_GBps.shape[0])

    @property
    def num_hosts(self) -> int:
        return int(self.host_of.max()) + 1 if self.num_devices else 0

    def route(self, src: int, dst: int) -> tuple[LinkKey, ...]:
        return self.routes[(src, dst)]

    def devices_on_host(self, host: int) -> np.ndarray:
        """Indices of the devices of server ``host``, ascending."""
        return np.flatnonzero(self.host_of == host)


class MatrixRoutes(Mapping):
    """Routes of the matrix form: each ordered pair (i, j), i != j, is its own link ``(i, j)``. Lazy: O(1) memory."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __getitem__(self, key: tuple[int, int]) -> tuple[LinkKey, ...]:
        i, j = _pair(key, self._n)
        return ((i, j),)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((i, j) for i in range(self._n) for j in range(self._n) if i != j)

    def __len__(self) -> int:
        return self._n * (self._n - 1)


class MatrixLinks(Mapping):
    """Links of the matrix form: ``links[(i, j)] = (B[i, j], latency[i, j])`` for i != j. Lazy view of the arrays."""

    def __init__(self, bandwidth_GBps: np.ndarray, latency_us: np.ndarray) -> None:
        self._bandwidth = bandwidth_GBps
        self._latency = latency_us

    def __getitem__(self, key: tuple[int, int]) -> tuple[float, float]:
        i, j = _pair(key, self._bandwidth.shape[0])
        return float(self._bandwidth[i, j]), float(self._latency[i, j])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(MatrixRoutes(self._bandwidth.shape[0]))

    def __len__(self) -> int:
        n = self._bandwidth.shape[0]
        return n * (n - 1)


def _pair(key: object, n: int) -> tuple[int, int]:
    try:
        i, j = key  # type: ignore[misc]
    except (TypeError, ValueError):
        raise KeyError(key) from None
    if not (isinstance(i, (int, np.integer)) and isinstance(j, (int, np.integer))):
        raise KeyError(key)
    if not (0 <= i < n and 0 <= j < n) or i == j:
        raise KeyError(key)
    return int(i), int(j)
