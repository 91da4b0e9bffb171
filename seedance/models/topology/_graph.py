"""The link-graph form: devices and switches joined by links, routed into the matrices (seed §2.4).

Rules:
- A node is a *device* (``role="device"``: a GPU, which sends and receives but never forwards) or a *switch*
  (``role="switch"``: NVSwitch, PCIe switch, CPU root complex, NIC, InfiniBand/Ethernet switch, which forwards).
- A link has a ``kind`` (one of :data:`LINK_KINDS`), a ``bandwidth_GBps`` per direction (already multiplied by its
  ``count`` of parallel lanes/links), a ``latency_us`` and an ``efficiency`` in (0, 1] (default 1.0): the fraction of
  the nominal rate a collective achieves on it. An undirected link carries its bandwidth in each direction.
- Routing rule (documented, deterministic): from device i to device j take the **widest** path (largest bottleneck
  effective bandwidth); among the widest, the one of **least total latency**; among those, the one with the fewest
  links (then scipy's deterministic order). Devices are never transit nodes, so a direct NVLink wins over any path
  through a narrower PCIe tree, and a GPU never relays another's traffic (relaying is a collective's choice).
- ``B[i, j]`` = the bottleneck effective bandwidth along the route (= nominal × efficiency of the narrowest link);
  ``latency[i, j]`` = the sum of link latencies along it. A device pair with no route is an error that names it.

The file form (YAML/JSON)::

    name: two-gpus-and-a-switch
    devices:                               # in device-index order
      - {id: g0, kind: A100, host: 0}      # kind default "gpu"; host: server label (int or string), default 0
      - {id: g1, kind: A100, host: 0}
    switches:                              # optional
      - {id: sw, kind: nvswitch}           # kind: one of SWITCH_KINDS
    links:
      - {ends: [g0, sw], kind: nvswitch, bandwidth_GBps: 25, count: 12, latency_us: 0.5, efficiency: 0.8}
      - {ends: [g1, sw], kind: nvswitch, bandwidth_GBps: 25, count: 12, latency_us: 0.5, efficiency: 0.8}
      # optional per link: count (default 1), latency_us (default: LINK_LATENCY_US of its kind),
      # efficiency (default 1.0), directed (default false: the link exists in both directions)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from seedance.errors import SpecError
from seedance.models.topology._core import LINK_KINDS, SWITCH_KINDS, LinkKey, Topology
from seedance.models.topology._matrix import check_name, check_number, describe, is_number

GRAPH_FIELDS = ("name", "devices", "switches", "links", "description")
DEVICE_FIELDS = ("id", "kind", "host")
SWITCH_FIELDS = ("id", "kind", "host")
LINK_FIELDS = ("ends", "kind", "bandwidth_GBps", "count", "latency_us", "efficiency", "directed")

#: Default one-way latency of one link of each kind, µs, used when a file omits ``latency_us``. Order of magnitude
#: of NCCL's own per-hop hardware latencies for the Simple protocol (NCCL src/graph/tuning.cc, ``hwLat``); presets
#: set their own values and cite them.
LINK_LATENCY_US: dict[str, float] = {
    "nvlink": 0.6, "nvswitch": 0.6, "pcie": 1.0, "upi": 1.0, "infiniband": 2.5, "ethernet": 5.0,
}

_HOP_PENALTY_US = 1e-9  # breaks latency ties in favour of fewer links; makes zero-latency links usable edges
_SAME = 1e-12  # relative tolerance when grouping equal bandwidths


def _check_efficiency(value: object, field: str) -> float:
    number = check_number(value, field, positive=True, unit="(fraction of nominal)")
    if number > 1.0:
        raise SpecError(field, f"is {number!r}", "a fraction in (0, 1]")
    return number


def _check_kind(value: object, field: str, valid: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise SpecError(field, f"is {describe(value)}", f"one of {', '.join(valid)}")
    return value


def from_graph(
    graph: nx.Graph, *, name: str = "graph", source: str = "", meta: Mapping[str, object] | None = None
) -> Topology:
    """Validate a link graph and route it into a :class:`Topology`.

    Nodes carry ``role`` ("device" or "switch"), ``kind`` and, for devices, ``host`` (server label; default 0).
    Devices are indexed in node insertion order. Edges carry ``kind``, ``bandwidth_GBps``, optional ``latency_us``
    (default :data:`LINK_LATENCY_US`) and ``efficiency`` (default 1.0). An undirected graph is expanded to both
    directions.

    >>> g = nx.Graph()
    >>> g.add_nodes_from(["a", "b"], role="device", kind="A100")
    >>> g.add_node("sw", role="switch", kind="nvswitch")
    >>> g.add_edge("a", "sw", kind="nvswitch", bandwidth_GBps=300.0, latency_us=1.0)
    >>> g.add_edge("b", "sw", kind="nvswitch", bandwidth_GBps=300.0, latency_us=1.0)
    >>> t = from_graph(g)
    >>> float(t.bandwidth_GBps[0, 1]), float(t.latency_us[0, 1]), t.route(0, 1)
    (300.0, 2.0, (('a', 'sw'), ('sw', 'b')))
    """
    name = check_name(name)
    directed = nx.DiGraph()
    devices, host_of, kinds = _add_nodes(graph, directed)
    _add_links(graph, directed)
    bandwidth_matrix, latency_matrix, routes = _route(directed, devices)
    links = MappingProxyType({
        (u, v): (a["effective_bandwidth_GBps"], a["latency_us"]) for u, v, a in directed.edges(data=True)
    })
    nx.freeze(directed)
    return Topology(
        name=name,
        bandwidth_GBps=bandwidth_matrix,
        latency_us=latency_matrix,
        host_of=np.asarray(host_of, dtype=np.int64),
        device_kinds=tuple(kinds),
        routes=routes,
        links=links,
        graph=directed,
        source=source,
        meta=MappingProxyType(dict(meta or {})),
        device_nodes=tuple(devices),
    )


def _add_nodes(graph: nx.Graph, directed: nx.DiGraph) -> tuple[list[Hashable], list[int], list[str]]:
    """Validate the graph's devices and switches into ``directed``: the devices (insertion order), each device's
    host index and kind."""
    devices: list[Hashable] = []
    hosts: dict[object, int] = {}
    host_of: list[int] = []
    kinds: list[str] = []
    for node, attrs in graph.nodes(data=True):
        role = attrs.get("role")
        if role == "device":
            kind = attrs.get("kind", "gpu")
            if not isinstance(kind, str) or not kind:
                raise SpecError(f"devices[{node!r}].kind", f"is {describe(kind)}", "a non-empty string like 'A100'")
            label = attrs.get("host", 0)
            if isinstance(label, np.integer):
                label = int(label)
            if not (isinstance(label, str) and label) and not (isinstance(label, int) and not isinstance(label, bool)):
                raise SpecError(f"devices[{node!r}].host", f"is {describe(label)}", "an int or a non-empty string")
            host_of.append(hosts.setdefault(label, len(hosts)))
            devices.append(node)
            kinds.append(kind)
            directed.add_node(node, role="device", kind=kind, host=host_of[-1], index=len(devices) - 1)
        elif role == "switch":
            kind = _check_kind(attrs.get("kind"), f"switches[{node!r}].kind", SWITCH_KINDS)
            extra = {"host": attrs["host"]} if "host" in attrs else {}
            directed.add_node(node, role="switch", kind=kind, **extra)
        else:
            raise SpecError(f"nodes[{node!r}].role", f"is {describe(role)}", "'device' or 'switch'")
    if len(devices) < 2:
        raise SpecError("devices", f"has {len(devices)} device(s)", "at least 2 devices")
    return devices, host_of, kinds


def _add_links(graph: nx.Graph, directed: nx.DiGraph) -> None:
    """Validate the graph's links into ``directed``, both directions of an undirected graph."""
    edges = graph.edges(data=True)
    pairs = [(u, v, a) for u, v, a in edges]
    if not graph.is_directed():
        pairs += [(v, u, a) for u, v, a in edges]
    for u, v, attrs in pairs:
        field = f"links[({u!r}, {v!r})]"
        if u == v:
            raise SpecError(field, "joins a node to itself", "a link between two different nodes")
        kind = _check_kind(attrs.get("kind"), f"{field}.kind", LINK_KINDS)
        bandwidth = check_number(attrs.get("bandwidth_GBps"), f"{field}.bandwidth_GBps", positive=True, unit="GB/s")
        latency = check_number(
            attrs.get("latency_us", LINK_LATENCY_US[kind]), f"{field}.latency_us", positive=False, unit="µs"
        )
        efficiency = _check_efficiency(attrs.get("efficiency", 1.0), f"{field}.efficiency")
        directed.add_edge(
            u, v, kind=kind, bandwidth_GBps=bandwidth, latency_us=latency, efficiency=efficiency,
            effective_bandwidth_GBps=bandwidth * efficiency,
        )


class GraphRoutes(Mapping):
    """Routes of a link graph, rebuilt on access from the shortest-path predecessor arrays (O(n·V) memory).

    :meth:`link_ids` walks many routes at once (vectorised over pairs) and returns integer link ids, with
    :attr:`link_keys` and :attr:`link_bandwidth_GBps` to interpret them: what the cost model's link-contention
    accounting needs, without one tuple per route."""

    def __init__(self, names, out_idx, in_idx, predecessors, group, edges=None) -> None:  # noqa: ANN001 - private
        self._names = names
        self._out = out_idx
        self._in = in_idx
        self._predecessors = predecessors
        self._group = group
        self._edges = edges  # (head, tail, effective bandwidth GB/s) per link id, in node-index space, or None
        self._edge_lookup: tuple[np.ndarray, np.ndarray] | None = None
        self._in_list: list[int] | None = None  # ``in_idx`` as a list, for :meth:`row` (built on first use)

    @property
    def link_keys(self) -> tuple[LinkKey, ...]:
        """The directed link of each link id used by :meth:`link_ids` (the keys of ``Topology.links``)."""
        head, tail, _ = self._require_edges()
        return tuple((self._names[h], self._names[t]) for h, t in zip(head.tolist(), tail.tolist()))

    @property
    def link_bandwidth_GBps(self) -> np.ndarray:
        """Effective bandwidth of each link id (``Topology.links[link_keys[k]][0]``), read-only."""
        return self._require_edges()[2]

    def _require_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._edges is None:
            raise ValueError("these routes were built without their link table")  # a constructor bug
        return self._edges

    def link_ids(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links the routes ``src[k] → dst[k]`` cross, vectorised over pairs (every pair must have i != j).

        Returns ``(ids, owners)``: the link ids of every route concatenated (ids index :attr:`link_keys` and
        :attr:`link_bandwidth_GBps`; within a route in no particular order) and, for each id, the index k of its
        pair. The same links as ``self[(src[k], dst[k])]``, without building a tuple per pair.
        """
        head, tail, _ = self._require_edges()
        size = len(self._names)
        if self._edge_lookup is None:
            codes = head * size + tail
            order = np.argsort(codes, kind="stable")
            self._edge_lookup = (codes[order], order)
        sorted_codes, order = self._edge_lookup
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        n = len(self._out)
        if src.shape != dst.shape or src.size and (
            src.min() < 0 or dst.min() < 0 or src.max() >= n or dst.max() >= n or np.any(src == dst)
        ):
            raise KeyError("link_ids needs pairs of distinct device indices in [0, n)")
        groups = self._group[src, dst]
        ids_parts, owner_parts = [], []
        for g in np.unique(groups).tolist():
            members = np.flatnonzero(groups == g)
            pred = self._predecessors[g]
            rows = src[members]
            sources = self._out[rows]
            current = self._in[dst[members]]
            owner = members
            while owner.size:
                previous = pred[rows, current].astype(np.int64)
                ids_parts.append(order[np.searchsorted(sorted_codes, previous * size + current)])
                owner_parts.append(owner)
                active = previous != sources
                rows, sources, current, owner = rows[active], sources[active], previous[active], owner[active]
        if not ids_parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(ids_parts), np.concatenate(owner_parts)

    def __getitem__(self, key: tuple[int, int]) -> tuple[LinkKey, ...]:
        n = len(self._out)
        try:
            i, j = (int(k) for k in key)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise KeyError(key) from None
        if not (0 <= i < n and 0 <= j < n) or i == j:
            raise KeyError(key)
        pred = self._predecessors[self._group[i, j]]
        path = [int(self._in[j])]
        while path[-1] != self._out[i]:
            path.append(int(pred[i, path[-1]]))
        names = [self._names[k] for k in reversed(path)]
        return tuple(zip(names[:-1], names[1:]))

    def row(self, i: int, targets: list[int],
            link_index: Mapping[LinkKey, Any] | None = None) -> list[tuple[Any, ...]]:
        """``[self[(i, j)] for j in targets]`` (each ``j != i``), from one shortest-path tree per source: the route
        to each switch or device on the tree is built once, from its parent's, and shared by every route through it
        (a simulator whose every node talks to every other needs all n² routes: at 1,024 devices about 1.5 µs a
        route instead of 2.4). With ``link_index``, each link of a route is given as ``link_index[link]``."""
        n = len(self._out)
        if not 0 <= i < n:
            raise KeyError((i, targets[0] if targets else None))
        names, start = self._names, int(self._out[i])
        if self._in_list is None:
            self._in_list = self._in.tolist()
        in_idx = self._in_list
        # a few targets (a node's first peers) read their tree's predecessors one by one, a row converts it whole:
        # a tree row is 2n + switches long, and most nodes route to a few peers first
        few = len(targets) <= _FEW_TARGETS
        group = self._group[i] if few else self._group[i].tolist()
        trees: dict[int, tuple[Any, dict[int, tuple[LinkKey, ...]]]] = {}
        out: list[tuple[LinkKey, ...]] = []
        for j in targets:
            if not 0 <= j < n or j == i:
                raise KeyError((i, j))
            g = group.item(j) if few else group[j]
            tree = trees.get(g)
            if tree is None:
                pred_row = self._predecessors[g][i]
                tree = trees[g] = (_Items(pred_row) if few else pred_row.tolist(), {start: ()})
            pred, known = tree
            node = in_idx[j]
            route = known.get(node)
            if route is None:
                path = [node]  # up the tree to the nearest node whose route is known
                while (route := known.get(pred[path[-1]])) is None:
                    path.append(pred[path[-1]])
                for k in reversed(path):
                    link = (names[pred[k]], names[k])
                    route = known[k] = route + ((link if link_index is None else link_index[link]),)
            out.append(route)
        return out

    def __iter__(self) -> Iterator[tuple[int, int]]:
        n = len(self._out)
        return ((i, j) for i in range(n) for j in range(n) if i != j)

    def __len__(self) -> int:
        n = len(self._out)
        return n * (n - 1)


_FEW_TARGETS = 8  # at most this many targets: GraphRoutes.row reads the predecessor arrays item by item


class _Items(dict):
    """An array's items as Python ints, each read from the array when first asked for (a few hops of a long row)."""

    def __init__(self, array: np.ndarray) -> None:
        super().__init__()
        self._array = array

    def __missing__(self, index: int) -> int:
        value = self[index] = self._array.item(index)
        return value


_NETWORK_KINDS = frozenset({"infiniband", "ethernet"})


def _route(graph: nx.DiGraph, devices: list[Hashable]) -> tuple[np.ndarray, np.ndarray, GraphRoutes]:
    """Widest, then least-latency, then fewest-link routes between all device pairs (see the module rules).

    Exact: for each distinct effective bandwidth w, from the widest down, a Dijkstra over the links of bandwidth
    >= w finds the least-latency paths; a pair is settled at the first w at which it is reachable, which is its
    bottleneck. Each device is split into a source copy (out-links only) and a sink copy (in-links only), so no route
    passes through a device. Two devices of one server are routed over that server's own links only (network links,
    kind infiniband or ethernet, are left out for them whenever the server's links connect them): NCCL moves
    intra-node data over P2P or shared memory, never through the NIC.
    """
    n = len(devices)
    device_set = set(devices)
    switches = [node for node in graph.nodes if node not in device_set]
    names: list[Hashable] = list(devices) + list(devices) + switches
    out_idx = np.arange(n)
    in_idx = np.arange(n, 2 * n)
    switch_idx = {node: 2 * n + k for k, node in enumerate(switches)}
    device_idx = {node: k for k, node in enumerate(devices)}
    size = len(names)
    heads, tails, bandwidths, latencies, network = [], [], [], [], []
    for u, v, attrs in graph.edges(data=True):
        heads.append(device_idx[u] if u in device_idx else switch_idx[u])
        tails.append(n + device_idx[v] if v in device_idx else switch_idx[v])
        bandwidths.append(attrs["effective_bandwidth_GBps"])
        latencies.append(attrs["latency_us"])
        network.append(attrs.get("kind") in _NETWORK_KINDS)
    head = np.asarray(heads, dtype=np.int64)
    tail = np.asarray(tails, dtype=np.int64)
    bandwidth = np.asarray(bandwidths, dtype=float)
    latency = np.asarray(latencies, dtype=float)
    edge_id = sp.csr_matrix((np.arange(1, len(head) + 1), (head, tail)), shape=(size, size))

    bandwidth_matrix = np.full((n, n), np.inf)
    latency_matrix = np.zeros((n, n))
    group = np.full((n, n), -1, dtype=np.int64)
    np.fill_diagonal(group, 0)
    predecessors: list[np.ndarray] = []
    host = np.array([graph.nodes[d].get("host", 0) for d in devices])
    same_host = host[:, None] == host[None, :]
    network_links = np.asarray(network, dtype=bool)
    # intra-server pairs first, over the server's own links; then every pair still unsettled over all links
    passes = [(~network_links, same_host)] if network_links.any() and not same_host.all() else []
    passes.append((np.ones(len(head), dtype=bool), np.ones((n, n), dtype=bool)))
    for allowed, wanted in passes:
        levels = np.unique(bandwidth[allowed])[::-1]
        for level in levels:
            keep = allowed & (bandwidth >= level * (1 - _SAME))
            weights = sp.csr_matrix(
                (latency[keep] + _HOP_PENALTY_US, (head[keep], tail[keep])), shape=(size, size)
            )
            dist, pred = dijkstra(weights, directed=True, indices=out_idx, return_predecessors=True)
            reached = np.isfinite(dist[:, in_idx]) & (group < 0) & wanted
            if not reached.any():
                continue
            rows, cols = np.nonzero(reached)
            group[rows, cols] = len(predecessors)
            predecessors.append(pred[:, :].astype(np.int32))
            bandwidth_matrix[rows, cols] = level
            latency_matrix[rows, cols] = _path_latency(pred, edge_id, latency, rows, in_idx[cols], out_idx[rows])
            if (group[wanted] >= 0).all():
                break
    missing = np.argwhere(group < 0)
    if missing.size:
        i, j = (int(k) for k in missing[0])
        raise SpecError(
            "links", f"device {devices[i]!r} cannot reach device {devices[j]!r} ({len(missing)} pair(s) unreachable)",
            "links that connect every device to every other device",
        )
    for array in (head, tail, bandwidth):
        array.setflags(write=False)
    routes = GraphRoutes(names, out_idx, in_idx, predecessors, group, edges=(head, tail, bandwidth))
    return bandwidth_matrix, latency_matrix, routes


def _path_latency(pred, edge_id, latency, rows, targets, sources) -> np.ndarray:  # noqa: ANN001 - private
    """Sum of link latencies along each (row source → target) shortest-path tree branch, vectorised over pairs."""
    total = np.zeros(len(rows))
    current = targets.copy()
    active = current != sources
    while active.any():
        previous = pred[rows[active], current[active]]
        ids = np.asarray(edge_id[previous, current[active]]).ravel() - 1
        total[active] += latency[ids]
        current[active] = previous
        active = current != sources
    return total


def _entries(doc: Mapping[str, object], key: str, required: bool) -> list[object]:
    value = doc.get(key)
    if value is None:
        if required:
            raise SpecError(key, "is missing", f"a list of {key} (see the link-graph form)")
        return []
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise SpecError(key, f"is {describe(value)}", f"a list of {key}")
    return list(value)


def _mapping(entry: object, field: str, allowed: Sequence[str]) -> Mapping[str, object]:
    if not isinstance(entry, Mapping):
        raise SpecError(field, f"is {describe(entry)}", f"a mapping with fields {', '.join(allowed)}")
    for key in entry:
        if key not in allowed:
            raise SpecError(f"{field}.{key}", "is not a valid field", f"valid fields: {', '.join(allowed)}")
    return entry


def _node_id(value: object, field: str) -> Hashable:
    if not ((isinstance(value, str) and value) or (isinstance(value, int) and not isinstance(value, bool))):
        raise SpecError(field, f"is {describe(value)}", "a node id: a non-empty string or an int")
    return value


def graph_from_dict(doc: Mapping[str, object], *, default_name: str, source: str) -> Topology:
    """The link-graph form read from a parsed YAML/JSON mapping (schema in the module docstring)."""
    for key in doc:
        if key not in GRAPH_FIELDS:
            raise SpecError(
                str(key), "is not a field of the link-graph form", f"valid fields: {', '.join(GRAPH_FIELDS)}"
            )
    graph = nx.DiGraph()
    for section, role, allowed in (("devices", "device", DEVICE_FIELDS), ("switches", "switch", SWITCH_FIELDS)):
        for k, entry in enumerate(_entries(doc, section, required=section == "devices")):
            field = f"{section}[{k}]"
            entry = _mapping(entry, field, allowed)
            node = _node_id(entry.get("id"), f"{field}.id")
            if node in graph:
                raise SpecError(f"{field}.id", f"repeats the id {node!r}", "ids unique across devices and switches")
            attrs = {key: entry[key] for key in ("kind", "host") if key in entry}
            if role == "switch":
                _check_kind(attrs.get("kind"), f"{field}.kind", SWITCH_KINDS)
            graph.add_node(node, role=role, **attrs)
    for k, entry in enumerate(_entries(doc, "links", required=True)):
        field = f"links[{k}]"
        entry = _mapping(entry, field, LINK_FIELDS)
        ends = entry.get("ends")
        if not isinstance(ends, Sequence) or isinstance(ends, (str, bytes)) or len(ends) != 2:
            raise SpecError(f"{field}.ends", f"is {describe(ends)}", "a list of two node ids [u, v]")
        u, v = (_node_id(end, f"{field}.ends") for end in ends)
        for end in (u, v):
            if end not in graph:
                raise SpecError(f"{field}.ends", f"names unknown node {end!r}", "ids of declared devices or switches")
        kind = _check_kind(entry.get("kind"), f"{field}.kind", LINK_KINDS)
        count = entry.get("count", 1)
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
            raise SpecError(f"{field}.count", f"is {describe(count)}", "an int >= 1 (parallel links aggregated)")
        per_link = check_number(entry.get("bandwidth_GBps"), f"{field}.bandwidth_GBps", positive=True, unit="GB/s")
        attrs = {
            "kind": kind,
            "bandwidth_GBps": per_link * count,
            "latency_us": check_number(
                entry.get("latency_us", LINK_LATENCY_US[kind]), f"{field}.latency_us", positive=False, unit="µs"
            ),
            "efficiency": _check_efficiency(entry.get("efficiency", 1.0), f"{field}.efficiency"),
        }
        one_way = entry.get("directed", False)
        if not isinstance(one_way, bool):
            raise SpecError(f"{field}.directed", f"is {describe(one_way)}", "true or false")
        for a, b in ((u, v),) if one_way else ((u, v), (v, u)):
            if graph.has_edge(a, b):
                raise SpecError(field, f"repeats the link {a!r} -> {b!r}", "one link per pair; use count for lanes")
            graph.add_edge(a, b, **attrs)
    name = doc.get("name", default_name)
    return from_graph(graph, name=name, source=source)  # type: ignore[arg-type]


def is_graph_doc(doc: Mapping[str, object]) -> bool:
    return "links" in doc or "devices" in doc


__all__ = ["LINK_LATENCY_US", "from_graph", "graph_from_dict", "is_number"]
