"""The cost model's view of a cluster: validated matrices in SI units, plus a per-fabric cache.

A :class:`Fabric` is built from a :class:`~seedance.models.topology.Topology` or from plain arrays
``(bandwidth_GBps, latency_us, host_of)``; every cost function takes either. Preprocessing that does not depend on
the message size (ring orders, trees, line envelopes per algorithm) is computed once per fabric and kept in
``Fabric.cache``; fabrics themselves are cached per Topology object (weakly) and per matrix content (a small LRU),
so repeated evaluation on the same cluster is cheap.
"""

from __future__ import annotations

import hashlib
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.cost.ring import host_members

_BY_ID: dict[int, tuple[weakref.ref, Fabric]] = {}  # id(Topology) -> (weak reference to it, its Fabric)
_MATRIX_CACHE: OrderedDict[str, Fabric] = OrderedDict()
_MATRIX_CACHE_SIZE = 32


@dataclass(frozen=True, eq=False)
class Fabric:
    """Matrices in SI units. ``bandwidth_Bps[i, j]`` bytes/s from i to j (diagonal inf); ``latency_s`` (diagonal 0);
    ``host_of`` the server index of each device. ``routes``/``links`` (optional, from a link-graph Topology) let
    concurrent transfers that share a link contend. ``base_latency_s`` is a constant software latency added once to
    every collective on two or more devices — NCCL's own model has one (``baseLat`` in src/graph/tuning.cc, a few µs
    per algorithm and protocol); it is ``Topology.meta["base_latency_us"]`` when the topology sets it, else 0."""

    bandwidth_Bps: np.ndarray
    latency_s: np.ndarray
    host_of: np.ndarray
    routes: Mapping[tuple[int, int], tuple[Hashable, ...]] = field(default_factory=dict)
    links: Mapping[Hashable, tuple[float, float]] = field(default_factory=dict)
    base_latency_s: float = 0.0  # per collective call on >= 2 devices (software: launch, protocol setup)
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def num_devices(self) -> int:
        return int(self.bandwidth_Bps.shape[0])

    @property
    def seconds_per_byte(self) -> np.ndarray:
        """``1 / bandwidth_Bps`` with a zero diagonal (cached)."""
        if "inv" not in self.cache:
            inv = 1.0 / self.bandwidth_Bps
            np.fill_diagonal(inv, 0.0)
            inv.setflags(write=False)
            self.cache["inv"] = inv
        return self.cache["inv"]

    def seconds_per_byte_at(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """``seconds_per_byte[src, dst]`` without building the whole matrix (the same values: 1/inf is 0)."""
        if "inv" in self.cache:
            return self.cache["inv"][src, dst]
        return 1.0 / self.bandwidth_Bps[src, dst]

    def route_links(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For flat pair codes ``i·n + j``: (link ids of each route, concatenated; the index of the pair each id
        belongs to; the effective bandwidth in bytes/s of every link id seen so far). Routes are looked up once."""
        n = self.num_devices
        link_ids = getattr(self.routes, "link_ids", None)
        if link_ids is not None:  # a link-graph Topology: every route at once, ids are the graph's link ids
            if "link_Bps_all" not in self.cache:
                self.cache["link_Bps_all"] = np.asarray(self.routes.link_bandwidth_GBps, dtype=float) * 1e9
            i, j = np.divmod(np.asarray(pairs, dtype=np.int64), n)
            moving = np.flatnonzero(i != j)  # a device "sending to itself" crosses no link
            ids, owners = link_ids(i[moving], j[moving])
            return ids, moving[owners], self.cache["link_Bps_all"]
        routes = self.cache.setdefault("route_ids", {})
        index = self.cache.setdefault("link_index", {})
        bandwidth = self.cache.setdefault("link_Bps", [])
        ids, owners = [], []
        for k, code in enumerate(pairs.tolist()):
            found = routes.get(code)
            if found is None:
                found = []
                for link in self.routes.get(divmod(code, n), ()):
                    if link not in index:
                        index[link] = len(bandwidth)
                        bandwidth.append(self.links[link][0] * 1e9)
                    found.append(index[link])
                routes[code] = found
            ids += found
            owners += [k] * len(found)
        return np.array(ids, dtype=np.int64), np.array(owners, dtype=np.int64), np.array(bandwidth, dtype=float)

    def hosts(self) -> list[np.ndarray]:
        """Device indices of each host, hosts in index order, devices sorted (cached)."""
        if "hosts" not in self.cache:
            self.cache["hosts"] = host_members(self.host_of)
        return self.cache["hosts"]


def _validated(bandwidth_GBps: Any, latency_us: Any, host_of: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bandwidth in bytes/s, latency in s, host_of), new arrays; each matrix is scaled and checked in one pass or two
    (a minimum and a maximum catch every negative, zero, NaN or infinite entry)."""
    try:
        bandwidth = np.asarray(bandwidth_GBps, dtype=float)
    except (TypeError, ValueError):
        raise SpecError("bandwidth_GBps", "is not a numeric matrix", "an n×n matrix of GB/s") from None
    if bandwidth.ndim != 2 or bandwidth.shape[0] != bandwidth.shape[1] or bandwidth.shape[0] < 1:
        raise SpecError("bandwidth_GBps", f"has shape {bandwidth.shape}", "a square n×n matrix, n >= 1")
    n = bandwidth.shape[0]
    bandwidth = bandwidth * 1e9
    np.fill_diagonal(bandwidth, 1.0)  # the diagonal is not checked
    if not (bandwidth.min() > 0 and bandwidth.max() < np.inf):
        raise SpecError("bandwidth_GBps", "has a non-positive, NaN or infinite off-diagonal entry", "finite GB/s > 0")
    np.fill_diagonal(bandwidth, np.inf)
    if latency_us is None:
        latency_us = 0.0
    try:
        latency = np.asarray(latency_us, dtype=float)
        if latency.shape != (n, n):
            latency = np.broadcast_to(latency, (n, n))
    except (TypeError, ValueError):
        raise SpecError(
            "latency_us", "is neither a scalar nor an n×n matrix", f"a scalar or a {n}×{n} matrix"
        ) from None
    latency = latency * 1e-6
    if not (latency.min() >= 0 and latency.max() < np.inf):
        raise SpecError("latency_us", "has a negative, NaN or infinite entry", "finite microseconds >= 0")
    np.fill_diagonal(latency, 0.0)
    hosts = np.zeros(n, dtype=np.int64) if host_of is None else np.asarray(host_of)
    if hosts.shape != (n,) or not np.issubdtype(hosts.dtype, np.integer) or (n and hosts.min() < 0):
        raise SpecError("host_of", f"is not {n} non-negative integers", "one server index per device")
    return bandwidth, latency, hosts.astype(np.int64)


def _make(bandwidth_GBps: Any, latency_us: Any, host_of: Any, routes=None, links=None, base_latency_us=0.0) -> Fabric:
    bandwidth, latency, hosts = _validated(bandwidth_GBps, latency_us, host_of)
    try:
        base = float(base_latency_us)
    except (TypeError, ValueError):
        base = float("nan")
    if not (base >= 0 and base < float("inf")):
        raise SpecError("base_latency_us", f"is {base_latency_us!r}", "finite microseconds >= 0")
    for array in (bandwidth, latency, hosts):
        array.setflags(write=False)
    return Fabric(
        bandwidth_Bps=bandwidth, latency_s=latency, host_of=hosts, routes=routes or {}, links=links or {},
        base_latency_s=base * 1e-6,
    )


def fabric_of(topology: Any) -> Fabric:
    """The (cached) :class:`Fabric` of a Topology, a Fabric, or ``(bandwidth_GBps[, latency_us[, host_of]])``."""
    entry = _BY_ID.get(id(topology))
    if entry is not None and entry[0]() is topology:  # the fast path: a Topology seen before
        return entry[1]
    if isinstance(topology, Fabric):
        return topology
    if hasattr(topology, "bandwidth_GBps") and hasattr(topology, "latency_us") and hasattr(topology, "host_of"):
        # Only a link graph has links shared between pairs; the matrix form's routes are one private link per pair.
        graph = getattr(topology, "graph", None) is not None
        fabric = _make(
            topology.bandwidth_GBps, topology.latency_us, topology.host_of,
            getattr(topology, "routes", None) if graph else None, getattr(topology, "links", None) if graph else None,
            (getattr(topology, "meta", None) or {}).get("base_latency_us", 0.0),
        )
        key = id(topology)
        try:  # the entry goes when the Topology does (before its id can be reused)
            _BY_ID[key] = (weakref.ref(topology, lambda _, key=key: _BY_ID.pop(key, None)), fabric)
        except TypeError:  # not weak-referenceable: no caching
            pass
        return fabric
    if isinstance(topology, (tuple, list)) and 1 <= len(topology) <= 3 and not np.isscalar(topology[0]):
        parts = list(topology) + [None] * (3 - len(topology))
        key = _content_key(parts)
        if key in _MATRIX_CACHE:
            _MATRIX_CACHE.move_to_end(key)
            return _MATRIX_CACHE[key]
        fabric = _make(*parts)
        _MATRIX_CACHE[key] = fabric
        if len(_MATRIX_CACHE) > _MATRIX_CACHE_SIZE:
            _MATRIX_CACHE.popitem(last=False)
        return fabric
    raise SpecError(
        "topology", f"{type(topology).__name__} is not a topology",
        "a Topology, or a tuple (bandwidth_GBps, latency_us, host_of) of arrays",
    )


def _content_key(parts: list[Any]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if part is None:
            digest.update(b"none|")
            continue
        try:
            array = np.ascontiguousarray(np.asarray(part, dtype=float))
        except (TypeError, ValueError):
            digest.update(repr(part).encode())
            continue
        digest.update(str(array.shape).encode())
        digest.update(memoryview(array).cast("B"))
        digest.update(b"|")
    return digest.hexdigest()
