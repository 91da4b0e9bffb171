"""The cost model's fast paths equal the slow ones they replace (issue A: speed without changing any result).

- vectorised route link ids (GraphRoutes.link_ids) against one route lookup per pair;
- a source's routes from one shortest-path tree (GraphRoutes.row) against one lookup per pair;
- the ring heuristic's host-cut proof and identity shortcut against the full strong-connectivity test and the
  plain enumeration;
- host grouping and per-host searches against one scan per host.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from seedance.models.cost import COLLECTIVES, ALGORITHMS, collective_times, fabric_of
from seedance.models.cost import ring as ring_module
from seedance.models.cost._algorithms import _contention
from seedance.models.cost._fabric import Fabric
from seedance.models.topology import load

# These tests pin the alpha-beta model's fast paths; the default model is NCCL's (tests/test_cost_nccl.py).
collective_times = functools.partial(collective_times, model="alpha-beta")  # noqa: F811


class _PlainRoutes(dict):
    """The routes as a plain mapping: no ``link_ids``, so the Fabric looks routes up one pair at a time."""


def _slow_fabric(fabric: Fabric, topology) -> Fabric:
    routes = _PlainRoutes({key: topology.routes[key] for key in topology.routes})
    return dataclasses.replace(fabric, routes=routes, cache={})


@pytest.mark.parametrize("name, nodes", [("dgx-a100", 3), ("mixed", 2), ("pcie-8gpu", 2)])
def test_a_sources_routes_from_one_tree_equal_per_pair_lookups(name, nodes):
    topology = load(name, nodes=nodes)
    routes, n = topology.routes, topology.num_devices
    index = {link: k for k, link in enumerate(topology.links)}
    for i in range(n):
        targets = [j for j in range(n - 1, -1, -1) if j != i]  # any order
        assert routes.row(i, targets) == [routes[(i, j)] for j in targets]
        assert routes.row(i, targets, index) == [tuple(index[link] for link in routes[(i, j)]) for j in targets]
        for few in (targets[:1], targets[:3], targets[-8:]):  # a few targets read the trees item by item
            assert routes.row(i, few, index) == [tuple(index[link] for link in routes[(i, j)]) for j in few]
            assert all(type(link) is int for route in routes.row(i, few, index) for link in route)
    with pytest.raises(KeyError):
        routes.row(0, [0])
    with pytest.raises(KeyError):
        routes.row(0, [1, 0])


@pytest.mark.parametrize("name, nodes", [("dgx-a100", 2), ("mixed", 2), ("pcie-8gpu", 2)])
def test_vectorised_route_links_equal_per_pair_lookups(name, nodes):
    topology = load(name, nodes=nodes)
    fast = dataclasses.replace(fabric_of(topology), cache={})
    slow = _slow_fabric(fast, topology)
    rng = np.random.default_rng(11)
    n = topology.num_devices
    for _ in range(5):
        src = rng.integers(0, n, 40)
        dst = rng.integers(0, n, 40)  # some pairs repeat, some are i == i (no link)
        for fabric_a, fabric_b in ((fast, slow),):
            a = _contention(fabric_a, src, dst)
            b = _contention(fabric_b, src, dst)
            np.testing.assert_array_equal(np.sort(a[1]), np.sort(b[1]))
    sizes = np.array([0.0, 8, 4096, 2**20, 2**30])
    for collective in COLLECTIVES:
        for algorithm in ALGORITHMS[collective]:
            np.testing.assert_array_equal(
                collective_times(collective, sizes, fast, algorithm=algorithm),
                collective_times(collective, sizes, slow, algorithm=algorithm),
            )


def test_graph_link_ids_are_the_routes_links():
    topology = load("mixed", nodes=2)
    routes = topology.routes
    keys = routes.link_keys
    n = topology.num_devices
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    ids, owners = routes.link_ids(src, dst)
    for k in range(len(src)):
        found = sorted(keys[i] for i in ids[owners == k])
        assert found == sorted(routes[(int(src[k]), int(dst[k]))])
    for i, key in enumerate(keys):
        assert routes.link_bandwidth_GBps[i] == topology.links[key][0]
    with pytest.raises(KeyError):
        routes.link_ids(np.array([0]), np.array([0]))


def _random_hosts(rng: np.random.Generator, hosts: int, g: int, uniform: bool):
    n = hosts * g
    host_of = np.repeat(np.arange(hosts), g)
    same = host_of[:, None] == host_of[None, :]
    inside = np.full((n, n), 230.0) if uniform else rng.choice([50.0, 100.0, 230.0], size=(n, n))
    inside = np.minimum(inside, inside.T)
    b = np.where(same, inside, rng.choice([12.5, 23.5], size=(n, n)))
    np.fill_diagonal(b, np.inf)
    latency = np.where(same, 0.6, 2.7)
    np.fill_diagonal(latency, 0.0)
    return b, latency, host_of


@pytest.mark.parametrize("uniform", [True, False])
def test_heuristic_shortcuts_equal_the_full_search(uniform, monkeypatch):
    rng = np.random.default_rng(3 + uniform)
    for hosts, g in ((3, 8), (5, 4), (2, 9)):
        b, latency, host_of = _random_hosts(rng, hosts, g, uniform)
        fast = ring_module.best_ring(b, latency, host_of)
        with monkeypatch.context() as patch:
            patch.setattr(ring_module, "_cut_by_hosts", lambda *args: False)
            patch.setattr(ring_module, "_identity_is_optimal", lambda *args, **kw: False)
            slow = ring_module.best_ring(b, latency, host_of)
        assert fast == slow
        # the host grouping equals one scan per host
        members = ring_module.host_members(host_of)
        assert [m.tolist() for m in members] == [np.flatnonzero(host_of == h).tolist() for h in np.unique(host_of)]


def test_host_cut_is_sound():
    # whenever the host-level test proves a cut, the device-level graph is not strongly connected either
    rng = np.random.default_rng(9)
    for _ in range(20):
        b, latency, host_of = _random_hosts(rng, int(rng.integers(2, 5)), int(rng.integers(1, 5)), False)
        host_of = rng.permutation(host_of)  # hosts need not be contiguous
        for low in np.unique(b[np.isfinite(b)]):
            if ring_module._cut_by_hosts(b, host_of, low):
                assert not ring_module._strongly_connected(b > low)


def _reference_scalar(collective, size, fabric, algorithm):
    """The scalar evaluation before it was compiled: Σ term.at(size) + base per plan, the first fastest kept."""
    from seedance.errors import SpecError
    from seedance.models.cost._algorithms import build_plan

    best = float("inf")
    for name in ALGORITHMS[collective] if algorithm == "auto" else (algorithm,):
        try:
            plan = build_plan(fabric, collective, name)
        except SpecError:
            continue
        base = fabric.base_latency_s if plan.curve else 0.0
        best = min(best, sum(term.at(float(size)) for term in plan.curve) + base)
    return best


def test_scalar_path_equals_the_vectorised_path_on_random_fabrics():
    """collective_time (compiled plain-Python terms) equals the uncompiled scalar evaluation bit for bit, and the
    vectorised one to the last bit or so, for every algorithm."""
    from seedance.models.cost import bus_bandwidth_factor, collective_time

    collective_time = functools.partial(collective_time, model="alpha-beta")

    rng = np.random.default_rng(2024)
    for trial in range(12):
        n = int(rng.integers(1, 20))
        hosts = int(rng.integers(1, 4))
        topo = (rng.uniform(1, 300, (n, n)), rng.uniform(0, 10, (n, n)), np.sort(rng.integers(0, hosts, n)))
        sizes = [0, 1, 7, *rng.integers(8, 2**34, 6).tolist()]
        for collective in COLLECTIVES:
            for algorithm in (*ALGORITHMS[collective], "auto"):
                try:
                    vector = collective_times(collective, sizes, topo, algorithm=algorithm)
                except Exception as err:  # hierarchical on unequal hosts
                    assert algorithm == "hierarchical", err
                    continue
                fabric = fabric_of(topo)
                for k, size in enumerate(sizes):
                    cost = collective_time(collective, size, topo, algorithm=algorithm)
                    assert cost.time_s == _reference_scalar(collective, size, fabric, algorithm)
                    # Pipeline.at (math) and Pipeline.__call__ (numpy) may differ in the last bit
                    assert cost.time_s == pytest.approx(vector[k], rel=1e-14, abs=0)
                    np.testing.assert_equal(cost.busbw_GBps, cost.algbw_GBps * bus_bandwidth_factor(collective, n))
                    assert type(cost.size_bytes) is int and cost.num_devices == n


def test_fabric_cache_follows_the_topology_object():
    import gc

    from seedance.models.cost import _fabric

    topology = dataclasses.replace(load("dgx-a100"))
    fabric = fabric_of(topology)
    assert fabric_of(topology) is fabric
    other = dataclasses.replace(topology)
    assert fabric_of(other) is not fabric  # a new object: its own fabric
    key = id(topology)
    del topology
    gc.collect()
    assert key not in _fabric._BY_ID


def test_host_ring_fast_equals_best_ring_or_declines():
    """The unscaled host-structured ring (ring_of's first try) is best_ring's result exactly, or None."""
    rng = np.random.default_rng(17)
    answered = 0
    for trial in range(16):
        hosts, g = int(rng.integers(2, 6)), int(rng.integers(2, 9))
        if hosts * g <= ring_module.DP_MAX_DEVICES:
            g = ring_module.DP_MAX_DEVICES // hosts + 1
        b, latency, host_of = _random_hosts(rng, hosts, g, uniform=bool(trial % 2))
        same = host_of[:, None] == host_of[None, :]
        if trial % 4 < 2:  # one inter-host rate (as on a rail-optimised fat tree): the cut proves the ring
            b = np.where(same, b, 23.5)
        elif trial % 4 == 3:  # one fast inter-host pair in each direction: the cut no longer proves anything
            b[0, g] = b[g, 0] = 230.0
        b_Bps, latency_s = b * 1e9, latency * 1e-6
        fast = ring_module.host_ring_fast(b_Bps, latency_s, host_of)
        if fast is not None:
            answered += 1
            assert fast == ring_module.best_ring(b_Bps / 1e9, latency_s * 1e6, host_of)
    assert answered >= 8
