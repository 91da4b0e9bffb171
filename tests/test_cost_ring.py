"""Bottleneck-aware ring orders (seed §2.4: a ring on a heterogeneous B must avoid its slow links).

Oracles: all (n-1)! rings by itertools for n ≤ 7, and a subset dynamic programme (max over Hamiltonian cycles of the
slowest hop) for n ≤ 12.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from seedance.models.cost import best_ring, collective_time, ring_channels, ring_order
from seedance.models.cost import ring as ring_module


def _random_fabric(rng: np.random.Generator, n: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([12.5, 25.0, 50.0, 100.0, 150.0, 300.0])
    b = rng.choice(values, size=(n, n)) * rng.uniform(0.9, 1.0, size=(n, n))
    if symmetric:
        b = np.minimum(b, b.T)
    np.fill_diagonal(b, np.inf)
    latency = rng.uniform(0.5, 5.0, size=(n, n))
    np.fill_diagonal(latency, 0.0)
    return b, latency


def _brute_force_bottleneck(b: np.ndarray) -> float:
    n = b.shape[0]
    best = 0.0
    for rest in itertools.permutations(range(1, n)):
        order = (0, *rest)
        best = max(best, min(b[order[k], order[(k + 1) % n]] for k in range(n)))
    return best


def _dp_bottleneck(b: np.ndarray) -> float:
    """max over Hamiltonian cycles through 0 of the slowest hop, by DP over subsets."""
    n = b.shape[0]
    full = (1 << n) - 1
    best = np.full((1 << n, n), -np.inf)
    best[1, 0] = np.inf
    for mask in range(1, 1 << n, 2):
        for last in range(n):
            value = best[mask, last]
            if value == -np.inf:
                continue
            for nxt in range(1, n):
                if mask >> nxt & 1:
                    continue
                cand = min(value, b[last, nxt])
                if cand > best[mask | 1 << nxt, nxt]:
                    best[mask | 1 << nxt, nxt] = cand
    return max(min(best[full, last], b[last, 0]) for last in range(1, n))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("symmetric", [True, False])
def test_small_rings_are_optimal_against_brute_force(n, symmetric):
    rng = np.random.default_rng(1000 * n + symmetric)
    for _ in range(6):
        b, latency = _random_fabric(rng, n, symmetric)
        ring = best_ring(b, latency, np.zeros(n, dtype=np.int64))
        order = ring.order
        assert sorted(order) == list(range(n))
        hops = [b[order[k], order[(k + 1) % n]] for k in range(n)]
        assert min(hops) == ring.bottleneck_GBps == _brute_force_bottleneck(b)
        assert ring.exact and ring.upper_bound_GBps == ring.bottleneck_GBps


def test_index_order_is_not_used_when_it_is_bad():
    # 0-1 and 2-3 are fast pairs, every other link slow except 1-2 and 3-0: index order 0,1,2,3 hits 1→2 = 5 GB/s
    b = np.full((4, 4), 5.0)
    for i, j in [(0, 2), (2, 0), (1, 3), (3, 1), (0, 1), (1, 0), (2, 3), (3, 2), (0, 3), (3, 0)]:
        b[i, j] = 100.0
    ring = ring_order((b, 1.0))
    assert ring.bottleneck_GBps == 100.0 and ring.order != (0, 1, 2, 3)
    index_time = collective_time("allreduce", 2**30, (b, 1.0), algorithm="ring", model="alpha-beta").time_s
    assert index_time < 2 * 3 / 4 * 2**30 / 5e9  # far faster than the index ring's 5 GB/s bottleneck


@pytest.mark.parametrize("n", [10, 12])
def test_dynamic_programme_is_optimal_for_mid_sizes(n):
    rng = np.random.default_rng(n)
    for symmetric in (True, False):
        b, latency = _random_fabric(rng, n, symmetric)
        ring = best_ring(b, latency, np.zeros(n, dtype=np.int64))
        assert ring.method == "dynamic-programme" and ring.exact
        assert ring.bottleneck_GBps == _dp_bottleneck(b) == min(b[ring.order, np.roll(ring.order, -1)])


def test_large_n_heuristic_matches_the_optimum_on_symmetric_fabrics():
    # the heuristic runs above 14 devices; here it is called directly where the DP oracle is affordable
    rng = np.random.default_rng(7)
    n, hits = 11, 0
    for _ in range(4):
        b, latency = _random_fabric(rng, n, symmetric=True)
        order = ring_module._heuristic(b, latency, np.zeros(n, dtype=np.int64), ring_module.upper_bound(b))
        assert sorted(order.tolist()) == list(range(n))
        hits += min(b[order, np.roll(order, -1)]) == _dp_bottleneck(b)
    assert hits >= 3


@pytest.mark.parametrize("symmetric", [True, False])
def test_heuristic_is_within_its_bound_and_honest_about_exactness(symmetric):
    rng = np.random.default_rng(20 + symmetric)
    n = 24
    b, latency = _random_fabric(rng, n, symmetric)
    ring = best_ring(b, latency, np.zeros(n, dtype=np.int64))
    assert ring.method == "heuristic" and sorted(ring.order) == list(range(n))
    assert min(b[ring.order, np.roll(ring.order, -1)]) == ring.bottleneck_GBps <= ring.upper_bound_GBps
    assert ring.bottleneck_GBps >= min(b[np.arange(n), np.roll(np.arange(n), -1)])  # never worse than index order
    assert ring.exact == (ring.bottleneck_GBps >= ring.upper_bound_GBps)


def test_multi_host_ring_crosses_hosts_only_where_it_must():
    # 4 hosts × 4 devices; inside a host a PCIe-like structure (0-1 and 2-3 fast, the rest slow), 25 GB/s between hosts
    g, hosts = 4, 4
    n = g * hosts
    host_of = np.repeat(np.arange(hosts), g)
    intra = np.array([[0, 200, 20, 20], [200, 0, 100, 20], [20, 100, 0, 200], [20, 20, 200, 0]], dtype=float)
    b = np.full((n, n), 25.0)
    for h in range(hosts):
        sl = slice(h * g, (h + 1) * g)
        b[sl, sl] = intra
    np.fill_diagonal(b, np.inf)
    ring = best_ring(b, np.ones((n, n)), host_of)
    assert ring.bottleneck_GBps == 25.0 and ring.exact
    crossings = sum(host_of[ring.order[k]] != host_of[ring.order[(k + 1) % n]] for k in range(n))
    assert crossings == hosts
    assert _dp_bottleneck(b[:12, :12]) == best_ring(b[:12, :12], np.ones((12, 12)), host_of[:12]).bottleneck_GBps


def test_channels_leave_each_host_through_different_devices():
    # two-level fabric: 3 hosts × 4 devices, fast inside, 25 GB/s between (one NIC per device)
    hosts, g = 3, 4
    host_of = np.repeat(np.arange(hosts), g)
    same = host_of[:, None] == host_of[None, :]
    topo = (np.where(same, 300.0, 25.0), np.where(same, 1.0, 5.0), host_of)
    channels = ring_channels(topo)
    assert len(channels) == g
    exits = set()
    for channel in channels:
        assert sorted(channel) == list(range(hosts * g))
        nxt = np.roll(channel, -1)
        crossing = [int(i) for i, j in zip(channel, nxt) if host_of[i] != host_of[j]]
        assert len(crossing) == hosts
        exits.update(crossing)
    assert exits == set(range(hosts * g))  # every device (NIC) carries one channel's inter-host hop
    # so the channelled ring's bus bandwidth is g NICs' worth, capped by the intra-host links
    cost = collective_time("allreduce", 2**34, topo, algorithm="ring", model="alpha-beta")
    assert cost.busbw_GBps == pytest.approx(min(g * 25.0, 300.0 / (g - 1) * g), rel=0.02)
