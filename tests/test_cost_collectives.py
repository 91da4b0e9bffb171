"""Collective cost under the alpha-beta model (seed §2.4): closed forms, busbw factors (nccl-tests
doc/PERFORMANCE.md), auto = fastest, vectorised = scalar, and the straggler vector τ."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.errors import SpecError
from seedance.models.cost import (
    ALGORITHMS,
    COLLECTIVES,
    best_algorithms,
    bus_bandwidth_factor,
    collective_time,
    collective_times,
)

# These tests pin the alpha-beta model's formulas; the default model is NCCL's (tests/test_cost_nccl.py).
collective_time = functools.partial(collective_time, model="alpha-beta")  # noqa: F811
collective_times = functools.partial(collective_times, model="alpha-beta")  # noqa: F811
best_algorithms = functools.partial(best_algorithms, model="alpha-beta")  # noqa: F811

B_GBPS, ALPHA_US = 100.0, 2.0
b, a = B_GBPS * 1e9, ALPHA_US * 1e-6
S = 2**30


def homogeneous(n: int):
    return (np.full((n, n), B_GBPS), ALPHA_US, np.zeros(n, dtype=np.int64))


def pipeline(hops: int, alpha: float, work: float) -> float:
    m = math.sqrt((hops - 1) * work / alpha)
    return (math.sqrt((hops - 1) * alpha) + math.sqrt(work)) ** 2 if m > 1 else hops * (alpha + work)


def t(collective: str, algorithm: str, n: int, size: int = S, topology=None) -> float:
    return collective_time(collective, size, topology or homogeneous(n), algorithm=algorithm).time_s


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 16])
def test_ring_closed_forms(n):
    # homogeneous ring allreduce = 2(n−1)/n·S/b + 2(n−1)α (issue A); reduce-scatter / all-gather half of it
    assert t("allreduce", "ring", n) == pytest.approx(2 * (n - 1) / n * S / b + 2 * (n - 1) * a, rel=1e-12)
    for collective in ("reducescatter", "allgather"):
        assert t(collective, "ring", n) == pytest.approx((n - 1) / n * S / b + (n - 1) * a, rel=1e-12)
    assert t("sendrecv", "ring", n) == pytest.approx(a + S / b, rel=1e-12)
    assert t("broadcast", "ring", n) == pytest.approx(pipeline(n - 1, a, S / b), rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_recursive_halving_doubling_power_of_two(n):
    q = int(math.log2(n))
    assert t("allreduce", "rhd", n) == pytest.approx(2 * q * a + 2 * (n - 1) / n * S / b, rel=1e-12)
    assert t("reducescatter", "rhd", n) == pytest.approx(q * a + (n - 1) / n * S / b, rel=1e-12)
    assert t("allgather", "rhd", n) == pytest.approx(q * a + (n - 1) / n * S / b, rel=1e-12)


def test_recursive_halving_doubling_folds_extra_devices():
    # n = 6: p = 4; fold (α + S/b), 2 halving + 2 doubling steps on S/2 and S/4, unfold (α + S/b)
    assert t("allreduce", "rhd", 6) == pytest.approx(6 * a + 3.5 * S / b, rel=1e-12)
    # reduce-scatter: fold, 2 halving steps, then each extra device gets its S/6 shard back
    assert t("reducescatter", "rhd", 6) == pytest.approx(4 * a + (1 + 0.75 + 1 / 6) * S / b, rel=1e-12)


@pytest.mark.parametrize("n", [2, 5, 8, 16])
def test_tree_direct_closed_forms(n):
    depth = int(math.floor(math.log2(n)))
    assert t("allreduce", "tree", n) == pytest.approx(pipeline(2 * depth, a, 2 * S / b), rel=1e-12)
    assert t("broadcast", "tree", n) == pytest.approx(pipeline(depth, a, 2 * S / b), rel=1e-12)
    assert t("allreduce", "direct", n) == pytest.approx(2 * a + 2 * (n - 1) / n * S / b, rel=1e-12)
    for collective in ("reducescatter", "allgather", "alltoall"):
        assert t(collective, "direct", n) == pytest.approx(a + (n - 1) / n * S / b, rel=1e-12)
    assert t("broadcast", "direct", n) == pytest.approx(a + (n - 1) * S / b, rel=1e-12)
    assert t("sendrecv", "direct", n) == pytest.approx(a + S / b, rel=1e-12)


def two_level(hosts: int, g: int, b_in=300.0, b_out=25.0, a_in=1.0, a_out=5.0):
    host_of = np.repeat(np.arange(hosts), g)
    same = host_of[:, None] == host_of[None, :]
    return (np.where(same, b_in, b_out), np.where(same, a_in, a_out), host_of)


@pytest.mark.parametrize("hosts, g", [(2, 4), (4, 8), (3, 2)])
def test_hierarchical_closed_form(hosts, g):
    n = hosts * g
    bi, bo, ai, ao = 300e9, 25e9, 1e-6, 5e-6
    intra = (g - 1) * (ai + S / (g * bi))
    inter = (hosts - 1) * (ao + S / (n * bo))
    topo = two_level(hosts, g)
    assert t("allreduce", "hierarchical", n, topology=topo) == pytest.approx(2 * intra + 2 * inter, rel=1e-12)
    assert t("reducescatter", "hierarchical", n, topology=topo) == pytest.approx(intra + inter, rel=1e-12)
    assert t("allgather", "hierarchical", n, topology=topo) == pytest.approx(intra + inter, rel=1e-12)
    # on two levels the hierarchical and channelled ring beat one ring through a single slow inter-host hop
    single_ring = 2 * (n - 1) * (ao + S / (n * bo))
    assert t("allreduce", "hierarchical", n, topology=topo) < single_ring
    assert t("allreduce", "ring", n, topology=topo) < single_ring


def test_hierarchical_needs_equal_hosts_and_auto_skips_it():
    topo = (np.full((5, 5), 50.0), 1.0, np.array([0, 0, 0, 1, 1]))
    with pytest.raises(SpecError) as err:
        collective_time("allreduce", S, topo, algorithm="hierarchical")
    assert err.value.field == "algorithm"
    assert collective_time("allreduce", S, topo).algorithm != "hierarchical"


def test_bus_bandwidth_factors_are_nccl_tests():
    n = 8
    assert bus_bandwidth_factor("allreduce", n) == 2 * 7 / 8
    for collective in ("reducescatter", "allgather", "alltoall"):
        assert bus_bandwidth_factor(collective, n) == 7 / 8
    for collective in ("broadcast", "sendrecv"):
        assert bus_bandwidth_factor(collective, n) == 1.0
    for collective in COLLECTIVES:
        cost = collective_time(collective, S, homogeneous(n))
        assert cost.algbw_GBps == pytest.approx(S / cost.time_s / 1e9, rel=1e-12)
        assert cost.busbw_GBps == pytest.approx(cost.algbw_GBps * bus_bandwidth_factor(collective, n), rel=1e-12)
    # a homogeneous ring allreduce's busbw approaches the link bandwidth at large sizes
    ring = collective_time("allreduce", 2**36, homogeneous(8), algorithm="ring")
    assert ring.busbw_GBps == pytest.approx(B_GBPS, rel=1e-3)


def _heterogeneous(n: int, seed: int):
    rng = np.random.default_rng(seed)
    bw = rng.choice([12.5, 25.0, 100.0, 300.0], size=(n, n))
    lat = rng.uniform(0.5, 8.0, size=(n, n))
    return bw, lat, np.repeat(np.arange(n // 4), 4)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_auto_is_the_minimum_over_algorithms_and_vectorised_equals_scalar(collective):
    topo = _heterogeneous(8, 3)
    sizes = np.array([8, 1024, 65536, 2**20, 2**26, 2**30])
    each = {alg: collective_times(collective, sizes, topo, algorithm=alg) for alg in ALGORITHMS[collective]}
    auto = collective_times(collective, sizes, topo, algorithm="auto")
    np.testing.assert_array_equal(auto, np.min(np.stack(list(each.values())), axis=0))
    winners = best_algorithms(collective, sizes, topo)
    for k, size in enumerate(sizes.tolist()):
        cost = collective_time(collective, size, topo)
        assert cost.time_s == auto[k] and cost.algorithm == winners[k]
        assert each[cost.algorithm][k] == auto[k]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_tau_delays_monotonically_and_nothing_ends_before_the_last_arrival(collective):
    topo = _heterogeneous(8, 4)
    rng = np.random.default_rng(5)
    for algorithm in ALGORITHMS[collective]:
        base = collective_time(collective, 2**24, topo, algorithm=algorithm).time_s
        tau = rng.uniform(0, 1e-3, size=8)
        late = collective_time(collective, 2**24, topo, algorithm=algorithm, tau_s=tau).time_s
        assert late >= base and late >= tau.max()
        for device in range(8):
            more = tau.copy()
            more[device] += 5e-4
            later = collective_time(collective, 2**24, topo, algorithm=algorithm, tau_s=more).time_s
            assert later >= late
        # the same delay everywhere shifts the whole collective
        shifted = collective_time(collective, 2**24, topo, algorithm=algorithm, tau_s=np.full(8, 1e-3)).time_s
        assert shifted == pytest.approx(base + 1e-3, rel=1e-12)


def test_tau_synchronising_vs_broadcast():
    topo = homogeneous(8)
    tau = np.zeros(8)
    tau[5] = 1e-3
    base = t("allreduce", "ring", 8)
    # allreduce: every output needs device 5's input, so the whole collective waits for it
    assert collective_time("allreduce", S, topo, algorithm="ring", tau_s=tau).time_s == pytest.approx(base + 1e-3)
    # broadcast: a late leaf is needed only when data reaches it; a late root delays everything
    bcast = t("broadcast", "ring", 8)
    leaf = collective_time("broadcast", S, topo, algorithm="ring", tau_s=tau).time_s
    root = np.zeros(8)
    root[0] = 1e-3
    assert bcast < leaf < bcast + 1e-3
    assert collective_time("broadcast", S, topo, algorithm="ring", tau_s=root).time_s == pytest.approx(bcast + 1e-3)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: collective_time("allsum", S, homogeneous(4)), "collective"),
        (lambda: collective_time("allreduce", S, homogeneous(4), algorithm="butterfly"), "algorithm"),
        (lambda: collective_time("alltoall", S, homogeneous(4), algorithm="ring"), "algorithm"),
        (lambda: collective_time("allreduce", -1, homogeneous(4)), "size"),
        (lambda: collective_time("allreduce", S, homogeneous(4), tau_s=[0, 1]), "tau"),
        (lambda: collective_time("allreduce", S, homogeneous(4), tau_s=[0, 0, 0, -1]), "tau"),
        (lambda: collective_time("allreduce", S, (np.ones((3, 4)),)), "bandwidth_GBps"),
        (lambda: collective_time("allreduce", S, (np.array([[0, 1], [0, 0]]),)), "bandwidth_GBps"),
        (lambda: collective_times("allreduce", [1, np.nan], homogeneous(4)), "size"),
    ],
)
def test_bad_input_is_a_spec_error(call, field):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field
    if field in ("collective", "algorithm"):
        assert "ring" in str(err.value) or "allreduce" in str(err.value)


def test_one_device_and_presets():
    assert collective_time("allreduce", S, homogeneous(1)).time_s == 0.0
    from seedance.models.topology import load

    topo = load("dgx-a100", nodes=2)
    cost = collective_time("allreduce", S, topo)
    assert cost.num_devices == 16 and 0 < cost.busbw_GBps < 300
    assert collective_time("allreduce", S, topo) == cost  # cached preprocessing gives the same answer


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=9),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    collective=st.sampled_from(COLLECTIVES),
)
def test_random_fabrics_behave(n, seed, collective):
    """Any valid fabric: times finite, non-negative, non-decreasing in size and in τ; auto is the minimum."""
    rng = np.random.default_rng(seed)
    topo = (rng.uniform(1, 300, (n, n)), rng.uniform(0, 10, (n, n)), np.sort(rng.integers(0, 3, n)))
    sizes = np.array([0.0, 1, 8, 4096, 2**20, 2**30, 2**33])
    tau = rng.uniform(0, 1e-3, n)
    times = []
    for algorithm in ALGORITHMS[collective]:
        try:
            plain = collective_times(collective, sizes, topo, algorithm=algorithm)
        except SpecError as err:  # hierarchical on unequal hosts only
            assert algorithm == "hierarchical" and err.field == "algorithm"
            continue
        late = collective_times(collective, sizes, topo, algorithm=algorithm, tau_s=tau)
        assert np.all(np.isfinite(plain)) and np.all(plain >= 0) and np.all(np.diff(plain) >= 0)
        assert np.all(late >= plain) and np.all(late >= (tau.max() if n > 1 else tau[0]) - 1e-15)
        times.append(plain)
    np.testing.assert_array_equal(collective_times(collective, sizes, topo), np.min(times, axis=0))


def test_base_latency_from_topology_meta_is_added_once_per_call():
    import dataclasses

    from seedance.models.topology import load

    preset = load("hgx-h100")
    plain = dataclasses.replace(preset, meta={**preset.meta, "base_latency_us": 0.0})
    tuned = dataclasses.replace(plain, meta={**plain.meta, "base_latency_us": 8.4})  # NCCL baseLat, ring/Simple
    for collective in COLLECTIVES:
        for algorithm in ALGORITHMS[collective]:
            a = collective_time(collective, 4096, plain, algorithm=algorithm).time_s
            b = collective_time(collective, 4096, tuned, algorithm=algorithm).time_s
            assert b == pytest.approx(a + 8.4e-6, rel=1e-12)
    with pytest.raises(SpecError):
        collective_time("allreduce", 8, dataclasses.replace(plain, meta={"base_latency_us": -1}))
