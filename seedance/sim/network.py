"""The fabric model: per-message latency plus size/bandwidth over shared, contended links; network faults.

Rules:

* Node ``i`` runs on device ``i`` of the topology (error if there are more nodes than devices). With
  ``nodes_per_host = K``, node ``i`` runs instead on device ``i % K`` of host ``i // K`` (e.g. K = 1: one node per
  server, so consensus traffic crosses the inter-host fabric). A client is attached to the device of node
  ``client_id % nodes`` (it shares that host's links, like a client co-located with a server). Everything below is
  in node ids; the placement maps them to devices.
* A message from device ``s`` to ``d`` crosses the directed links of ``topology.routes[(s, d)]``. Each link is a
  FIFO serialising resource with a bandwidth (GB/s per direction) and a latency (µs): the message is transmitted
  cut-through — its head enters link ``k`` once it has left link ``k-1`` (after that link's latency) *and* the link
  has finished the bytes reserved before it; the link is then busy for ``size / bandwidth``. Reservations are made
  in send order (a message's whole path is booked when it is sent), so a bulk transfer already booked on a link
  delays every message queued behind it — the contention of Hockney's α–β model with a shared resource.
  Uncontended, a message takes ``sum(latency) + size / min(bandwidth)`` (the α–β cost, Hockney 1994).
* Same-device traffic (a client to its own node, a node to itself) takes ``loopback_s`` (default 1 µs).
* No topology given: :func:`uniform_topology` — every device hangs off one non-blocking switch by a 25 GB/s
  (200 Gb/s) link each way with 10 µs latency per link (20 µs one way between devices). A bulk transfer from a
  device saturates its uplink, so contention is real even in the default fabric.
* Faults (set by :mod:`seedance.sim.nemesis`, applied to node-to-node traffic only; client traffic is a reliable
  session as in Jepsen): partitions (a count matrix of blocked directed pairs, so overlapping partitions compose),
  loss, duplication, reordering (uniform extra delay), delay spikes. Decided at send time, with the network's own
  seeded generator, drawn only while such a fault is active.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.topology import Topology

UNIFORM_LINK_GBPS = 25.0
UNIFORM_LINK_LATENCY_US = 10.0
# distinct peers a node routes to one at a time before its whole row is cached: at least ROW_AFTER, and a
# sixteenth of the nodes. A route alone costs about 9 µs, one in a row about 1.1 µs, but a row holds n routes (at
# 1,024 nodes about 90 KB): with a fixed 8 the causal protocol's replicas, each acknowledging the 16 writers, had
# routed every row (1.2 s and 90 MB); a node past the threshold has spent at most about half a row's time alone.
ROW_AFTER = 8
ROW_FRACTION = 16


class StarRoutes(Mapping):
    """Routes of the default fabric, computed on lookup: ``(i, j) -> ((i, "switch"), ("switch", j))``. Lazy, so a
    1,024-device fabric does not hold a million-entry dict (1 s and 260 MB to build eagerly here)."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __getitem__(self, key: tuple[int, int]) -> tuple[tuple[Any, Any], ...]:
        try:
            i, j = key
        except (TypeError, ValueError):
            raise KeyError(key) from None
        if not (isinstance(i, (int, np.integer)) and isinstance(j, (int, np.integer))
                and 0 <= i < self._n and 0 <= j < self._n and i != j):
            raise KeyError(key)
        return ((int(i), "switch"), ("switch", int(j)))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((i, j) for i in range(self._n) for j in range(self._n) if i != j)

    def __len__(self) -> int:
        return self._n * (self._n - 1)


def uniform_topology(num_devices: int, *, bandwidth_GBps: float = UNIFORM_LINK_GBPS,
                     link_latency_us: float = UNIFORM_LINK_LATENCY_US) -> Topology:
    """``num_devices`` devices, one host each, on a single non-blocking switch (the default fabric)."""
    n = num_devices
    links: dict[tuple[Any, Any], tuple[float, float]] = {}
    for i in range(n):
        links[(i, "switch")] = (bandwidth_GBps, link_latency_us)
        links[("switch", i)] = (bandwidth_GBps, link_latency_us)
    routes = StarRoutes(n)
    bandwidth = np.full((n, n), bandwidth_GBps, dtype=float)
    latency = np.full((n, n), 2 * link_latency_us, dtype=float)
    np.fill_diagonal(bandwidth, np.inf)
    np.fill_diagonal(latency, 0.0)
    return Topology(name=f"uniform-{n}", bandwidth_GBps=bandwidth, latency_us=latency,
                    host_of=np.arange(n), device_kinds=("gpu",) * n, routes=routes, links=links,
                    source="seedance.sim.network.uniform_topology")


def resolve_topology(topology: Any, num_nodes: int, *, hosts: int | None = None,
                     nodes_per_host: int | None = None) -> Topology:
    """A Topology from a preset name / file path (``seedance.models.topology.load``), an object, or None.

    ``hosts`` is the number of servers of a preset; when None, a preset is grown to the fewest servers that hold
    ``num_nodes`` nodes (``dgx-a100`` with 12 nodes: two 8-GPU servers; with 5 nodes at 1 per host: five servers).
    """
    if nodes_per_host is not None and (isinstance(nodes_per_host, bool) or not isinstance(nodes_per_host, int)
                                       or nodes_per_host < 1):
        raise SpecError("nodes_per_host", f"must be an integer >= 1, got {nodes_per_host!r}")
    if topology is None:
        if nodes_per_host not in (None, 1):
            raise SpecError("nodes_per_host", "the default fabric has one device per host",
                            "give a multi-GPU --topology (e.g. dgx-a100) to place several nodes per host")
        return uniform_topology(num_nodes)
    if isinstance(topology, Topology):
        found = topology
    else:
        from seedance.models.topology import PRESETS, load

        name = str(topology)
        found = load(name, nodes=hosts)
        if hosts is None and name in PRESETS:
            per_host = int(found.num_devices / max(found.num_hosts, 1))
            wanted = -(-num_nodes // min(nodes_per_host or per_host, per_host))
            if wanted != found.num_hosts:
                found = load(name, nodes=wanted)
    placement(found, num_nodes, nodes_per_host)  # validates the fit
    return found


def placement(topology: Topology, num_nodes: int, nodes_per_host: int | None = None) -> list[int]:
    """The device of each node (see the module rules)."""
    if nodes_per_host is None:
        if topology.num_devices < num_nodes:
            raise SpecError("nodes", f"{num_nodes} nodes do not fit topology {topology.name!r} of "
                            f"{topology.num_devices} devices",
                            f"use at most {topology.num_devices} nodes or a larger topology")
        return list(range(num_nodes))
    host_of = [int(h) for h in np.asarray(topology.host_of)]
    by_host: dict[int, list[int]] = {}
    for device, host in enumerate(host_of):
        by_host.setdefault(host, []).append(device)
    hosts = [by_host[h] for h in sorted(by_host)]
    needed = -(-num_nodes // nodes_per_host)
    if needed > len(hosts) or any(len(devices) < nodes_per_host for devices in hosts[:needed]):
        raise SpecError("nodes", f"{num_nodes} nodes at {nodes_per_host} per host do not fit topology "
                        f"{topology.name!r} ({len(hosts)} hosts of {min(map(len, hosts))}+ devices)",
                        "fewer nodes per host, fewer nodes, or a larger topology (--hosts)")
    return [hosts[i // nodes_per_host][i % nodes_per_host] for i in range(num_nodes)]


class Network:
    """Link reservations and network faults for ``num_nodes`` nodes placed on ``topology``."""

    def __init__(self, topology: Topology, num_nodes: int, rng: np.random.Generator, *,
                 devices: list[int] | None = None, loopback_s: float = 1e-6) -> None:
        self.topology = topology
        self.num_nodes = num_nodes
        self.devices = list(devices) if devices is not None else list(range(num_nodes))
        self.rng = rng
        self.loopback_s = loopback_s
        self._link_index: dict[Any, int] = {}
        self.busy_until: list[float] = []
        self._inv_bandwidth: list[float] = []
        self._latency_s: list[float] = []
        for link, (bandwidth_GBps, latency_us) in topology.links.items():
            self._link_index[link] = len(self.busy_until)
            self.busy_until.append(0.0)
            self._inv_bandwidth.append(1.0 / (float(bandwidth_GBps) * 1e9))
            self._latency_s.append(float(latency_us) * 1e-6)
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        # per node whose whole row was routed (_route_row): its routes by destination (None: same device), so a
        # send looks its route up without building a key (a million (src, dst) keys at 1,024 nodes otherwise)
        self._rows: list[list[tuple[int, ...] | None] | None] = [None] * num_nodes
        self._asked = [0] * num_nodes  # routes asked for from each node (past _row_after: its whole row at once)
        self._row_after = max(ROW_AFTER, num_nodes // ROW_FRACTION)
        self.bytes_sent = 0
        # faults
        self.blocked = [[0] * num_nodes for _ in range(num_nodes)]
        self.loss_p = 0.0
        self.duplicate_p = 0.0
        self.reorder_s = 0.0
        self.spike_p = 0.0
        self.spike_s = 0.0
        self.faulty = False
        self.partitioned = False

    # ------------------------------------------------------------------------------------------------ timing
    def _route(self, src: int, dst: int) -> tuple[int, ...]:
        cached = self._rows[src]
        route = cached[dst] if cached is not None else None
        if route is None:
            route = self._routes.get((src, dst))
        row = getattr(self.topology.routes, "row", None)
        if route is None and row is not None and self.devices[src] != self.devices[dst]:
            self._asked[src] += 1
            if self._asked[src] > self._row_after:  # every route from src at once (all-to-all protocols use them all)
                self._route_row(src, row)
                return self._rows[src][dst]  # type: ignore[index,return-value]
            # a few peers (ring heartbeats at 1,024 ranks): n routes per node would be n² in all
            route = self._routes[(src, dst)] = row(self.devices[src], [self.devices[dst]], self._link_index)[0]
        if route is None:
            a, b = self.devices[src], self.devices[dst]
            try:
                links = self.topology.routes[(a, b)]
            except KeyError:
                raise SpecError("topology", f"{self.topology.name!r} has no route from device {a} to {b}",
                                "every ordered device pair needs a route") from None
            route = tuple(self._link_index[link] for link in links)
            self._routes[(src, dst)] = route
        return route

    def _route_row(self, src: int, row: Any) -> None:
        """Cache the routes from node ``src`` to every node on another device (:attr:`_rows`), from one walk of the
        routing tables; those already routed one at a time are kept as they were."""
        a, devices, routes = self.devices[src], self.devices, self._routes
        dsts = [d for d in range(self.num_nodes) if devices[d] != a]
        found = iter(row(a, [devices[d] for d in dsts if (src, d) not in routes], self._link_index))
        cached: list[tuple[int, ...] | None] = [None] * self.num_nodes
        for d in dsts:
            known = routes.get((src, d))
            cached[d] = known if known is not None else next(found)
        self._rows[src] = cached

    def transit_devices(self, a: int, b: int, size_bytes: int, depart_s: float) -> float:
        """:meth:`transit` between topology devices ``a`` and ``b`` (background traffic: no node needed)."""
        if a == b:
            return depart_s + self.loopback_s
        key = ("device", a, b)
        route = self._routes.get(key)  # type: ignore[call-overload]
        if route is None:
            try:
                links = self.topology.routes[(a, b)]
            except KeyError:
                raise SpecError("topology", f"{self.topology.name!r} has no route from device {a} to {b}",
                                "every ordered device pair needs a route") from None
            route = self._routes[key] = tuple(self._link_index[link] for link in links)  # type: ignore[index]
        return self._book(route, size_bytes, depart_s)

    def transit(self, src: int, dst: int, size_bytes: int, depart_s: float) -> float:
        """Book the path from node ``src``'s device to ``dst``'s for a message leaving at ``depart_s``; its arrival."""
        self.bytes_sent += size_bytes
        if src == dst:
            return depart_s + self.loopback_s
        cached = self._rows[src]
        # a route found one at a time is kept by (src, dst) (a topology without rows, e.g. the default fabric,
        # keeps every route so): read it here, not through _route's search
        route = cached[dst] if cached is not None else self._routes.get((src, dst))
        if route is None:
            route = self._route(src, dst)
        return self._book(route, size_bytes, depart_s)

    def _book(self, route: tuple[int, ...], size_bytes: int, depart_s: float) -> float:
        busy = self.busy_until
        inv_bw = self._inv_bandwidth
        latency = self._latency_s
        head = tail = depart_s
        # pipelined: the head moves on one link latency after it starts on a link (not store-and-forward); a link
        # is busy until the whole message has been sent on it, and a tail never overtakes the one before it
        for link in route:
            free = busy[link]
            start = head if head > free else free
            end = start + size_bytes * inv_bw[link]
            if end < tail:
                end = tail
            busy[link] = end
            head = start + latency[link]
            tail = end + latency[link]
        return tail

    def uncontended_s(self, src: int, dst: int, size_bytes: int) -> float:
        """The α–β time of a message on an idle fabric (for tests and cost cross-checks)."""
        if src == dst:
            return self.loopback_s
        route = self._route(src, dst)
        return sum(self._latency_s[k] for k in route) + size_bytes * max(self._inv_bandwidth[k] for k in route)

    # ------------------------------------------------------------------------------------------------ faults
    def plan(self, src: int, dst: int) -> tuple[str | None, int, float]:
        """Fault decision for one node-to-node message: (drop reason or None, copies, extra delay of each copy)."""
        if self.blocked[src][dst]:
            return "partition", 0, 0.0
        rng = self.rng
        if self.loss_p and rng.random() < self.loss_p:
            return "loss", 0, 0.0
        extra = 0.0
        if self.reorder_s:
            extra += rng.random() * self.reorder_s
        if self.spike_p and rng.random() < self.spike_p:
            extra += self.spike_s
        copies = 2 if self.duplicate_p and rng.random() < self.duplicate_p else 1
        return None, copies, extra

    def extra_delay(self) -> float:
        """Extra delay of a duplicate copy (its own reorder draw, or 1 µs)."""
        return self.rng.random() * self.reorder_s if self.reorder_s else 1e-6

    def block(self, pairs: list[tuple[int, int]], delta: int) -> None:
        for src, dst in pairs:
            self.blocked[src][dst] += delta
        self.partitioned = any(any(row) for row in self.blocked)
        self._refresh()

    def set_fault(self, name: str, value: float) -> None:
        setattr(self, name, value)
        self._refresh()

    def _refresh(self) -> None:
        self.faulty = bool(self.partitioned or self.loss_p or self.duplicate_p or self.reorder_s or self.spike_p)
