"""The NCCL-faithful cost model: against every published nccl-tests row in tests/data/nccl, and its NCCL rules."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.models.cost import collective_time, nccl, published
from seedance.models.topology import from_matrix, load

CURVES = {curve.id: curve for curve in published.curves()}
# Issue targets, per curve: median |error| over all sizes, no size off by more than this ratio, and the error at
# sizes >= 256 MiB.
MEDIAN, RATIO, LARGE = 0.15, 1.5, 0.05
# What the model reaches today where it misses a target (measured, see docs in tests/data/nccl/README.md): held as
# regression bounds so the miss is visible and cannot grow. Keys: (curve, figure).
KNOWN_MISSES = {
    ("a100-1x8-allreduce", "large"): 0.06,  # 256 MiB: -5.1 % (the published ring ramps slower than NCCL's model)
    ("a100-p4de-2x8-allreduce", "ratio"): 1.95,  # EFA: 4-16 MiB about 1.9x too fast
    ("a100-p4de-2x8-allreduce", "large"): 0.08,
    ("h100-p5-2x8-allreduce", "ratio"): 1.9,  # EFA: 32-64 MiB about 1.8x too fast
    ("h100-p5-2x8-allreduce", "large"): 0.25,  # 256 MiB: -21.5 % (EFA ramp)
}


# Curves reported but not held to the targets (curves.yaml: targets false): (median |error|, max ratio) as today.
REPORTED = {
    "a100-1x8-allreduce-g8": (0.08, 1.4),
    "a100-1x8-sendrecv-g8": (0.17, 2.0),  # NCCL p2p reaches ~195 GB/s, the model 229; first size 2x slow
}


def _bound(curve_id: str, figure: str, target: float) -> float:
    return KNOWN_MISSES.get((curve_id, figure), target)


@pytest.mark.parametrize("curve_id", sorted(CURVES))
def test_model_against_every_published_row(curve_id):
    curve = CURVES[curve_id]
    table = published.compare(curve)
    assert len(table) == len(curve.rows) and (table["predicted_us"] > 0).all()
    figures = published.summary(table)
    if not curve.targets:  # reported only (see curves.yaml), but must stay as good as today
        median, ratio = REPORTED[curve_id]
        assert figures["median_abs_rel_error"] <= median and figures["max_ratio"] <= ratio
        return
    assert figures["median_abs_rel_error"] <= MEDIAN
    assert figures["max_ratio"] <= _bound(curve_id, "ratio", RATIO)
    if not math.isnan(figures["max_abs_rel_error_ge_256MiB"]):
        assert figures["max_abs_rel_error_ge_256MiB"] <= _bound(curve_id, "large", LARGE)


def test_nccl_model_beats_alpha_beta_on_every_curve():
    for curve in (c for c in CURVES.values() if c.collective != "sendrecv"):  # p2p: both are the direct model
        new = published.summary(published.compare(curve))["median_abs_rel_error"]
        old = published.summary(published.compare(curve, model="alpha-beta"))["median_abs_rel_error"]
        assert new < old / 4, curve.id


def test_auto_picks_only_what_nccl_runs():
    for name, nodes in [("dgx-a100", 1), ("dgx-a100", 2), ("hgx-h100", 1), ("hgx-h100", 4), ("pcie-8gpu", 2)]:
        topology = load(name, nodes=nodes)
        for collective in ("allreduce", "reducescatter", "allgather", "broadcast", "alltoall", "sendrecv"):
            for size in (8, 2**16, 2**24, 2**32):
                cost = collective_time(collective, size, topology)
                assert cost.algorithm in nccl.ALGORITHMS_NCCL[collective]
                assert cost.protocol in nccl.PROTOCOLS and 1 <= cost.channels <= nccl.MAX_CHANNELS
                assert cost.model == "nccl"


def test_protocols_follow_size_as_in_nccl():
    topology = load("dgx-a100")
    protocols = [collective_time("allreduce", 2**k, topology).protocol for k in range(3, 33)]
    # LL for small messages, then LL128, then Simple for large ones; never back
    order = {"LL": 0, "LL128": 1, "Simple": 2}
    ranks = [order[p] for p in protocols]
    assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == 2
    assert collective_time("allreduce", 8, topology).channels == 1  # NCCL drops channels for tiny messages
    assert collective_time("allreduce", 2**30, topology).channels == nccl.view_of(topology).channels


def test_nvls_only_on_hopper_with_nvswitch():
    assert nccl.view_of(load("hgx-h100")).nvls and not nccl.view_of(load("dgx-a100")).nvls
    h100 = collective_time("allreduce", 8 * 2**30, load("hgx-h100"))
    # "On 8 GPUs, you should reach a peak busBw of ~480GB/s" (S. Jeaugey, github.com/NVIDIA/nccl-tests/issues/212)
    assert h100.algorithm == "nvls" and 460 <= h100.busbw_GBps <= 490
    assert collective_time("allreduce", 8 * 2**30, load("hgx-h100", nodes=2)).algorithm == "nvls_tree"
    with pytest.raises(SpecError, match="algorithm"):
        collective_time("allreduce", 2**20, load("dgx-a100"), algorithm="nvls")


def test_forced_algorithm_and_protocol():
    topology = load("dgx-a100", nodes=2)
    auto = collective_time("allreduce", 2**26, topology)
    for algorithm in ("ring", "tree"):
        for protocol in ("LL", "LL128", "Simple"):
            forced = collective_time("allreduce", 2**26, topology, algorithm=algorithm, protocol=protocol)
            assert (forced.algorithm, forced.protocol) == (algorithm, protocol)
            assert forced.time_s >= auto.time_s  # auto is the tuner's minimum


def test_broadcast_is_a_pipelined_ring_not_a_chain():
    # issue: 2 x DGX A100 at 1 GiB gave 22 GB/s broadcast against 186 for allgather
    topology = load("dgx-a100", nodes=2)
    broadcast = collective_time("broadcast", 2**30, topology).busbw_GBps
    allgather = collective_time("allgather", 2**30, topology).busbw_GBps
    assert broadcast > 0.9 * allgather


def test_one_server_alone_and_one_of_many_agree():
    for name in ("pcie-8gpu", "dgx-a100", "hgx-h100"):
        one, four = load(name), load(name, nodes=4)
        np.testing.assert_array_equal(one.bandwidth_GBps, four.bandwidth_GBps[:8, :8])
        assert collective_time("allreduce", 2**30, four).busbw_GBps <= collective_time(
            "allreduce", 2**30, one).busbw_GBps * 1.001


def test_tau_delays_by_the_last_arrival():
    topology = load("dgx-a100")
    base = collective_time("allreduce", 2**24, topology).time_s
    tau = np.zeros(8)
    tau[3] = 2e-3
    assert collective_time("allreduce", 2**24, topology, tau_s=tau).time_s == pytest.approx(base + 2e-3)


def test_matrix_topologies_and_overrides():
    b = np.full((4, 4), 20.0)
    plain = from_matrix(b, 1.0, hosts=[0, 0, 1, 1])
    view = nccl.view_of(plain)
    assert (view.ranks, view.nodes, view.ppn, view.arch, view.intra) == (4, 2, 2, 1, "pci")
    slow = dataclasses.replace(plain, meta={"nccl": {"net_latency_us": 50, "launch_us": 0}})
    assert collective_time("allreduce", 8, slow).time_s > collective_time("allreduce", 8, plain).time_s
    single = from_matrix(np.full((2, 2), 300.0), hosts=[0, 0], device_kinds="H100")
    assert nccl.view_of(single).intra == "nvlink" and nccl.view_of(single).arch == 2
    assert collective_time("allreduce", 2**20, (b,)).model == "nccl"  # plain arrays work too
    assert collective_time("allreduce", 2**20, load("dgx-a100", nodes=1)).time_s > 0
    assert collective_time("allreduce", 64, (np.full((1, 1), 1.0),)).time_s == 0.0


@pytest.mark.parametrize("meta, field", [
    ({"nccl": {"launch_us": -1}}, "nccl.launch_us"),
    ({"nccl": {"net_latency_us": "x"}}, "nccl.net_latency_us"),
    ({"nccl": {"arch": 7}}, "nccl.arch"),
    ({"nccl": {"intra": "pcie5"}}, "nccl.intra"),
])
def test_bad_overrides_name_the_field(meta, field):
    topology = dataclasses.replace(from_matrix(np.full((2, 2), 10.0)), meta=meta)
    with pytest.raises(SpecError) as err:
        collective_time("allreduce", 8, topology)
    assert err.value.field == field


def test_bad_model_and_protocol():
    with pytest.raises(SpecError, match="model"):
        collective_time("allreduce", 8, load("dgx-a100"), model="gamma")
    with pytest.raises(SpecError, match="protocol"):
        collective_time("allreduce", 8, load("dgx-a100"), protocol="LL64")


def test_figure_validation_command(tmp_path, capsys):
    import json

    from seedance.cli import main

    assert main(["figure", "validation", "--out", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c["curve"] for c in doc["curves"]} == set(CURVES)
    for curve in CURVES:
        assert (tmp_path / f"validation_{curve}.png").exists() and (tmp_path / f"validation_{curve}.pdf").exists()
    assert json.loads((tmp_path / "validation.json").read_text())["curves"][0]["nccl"]["rows"] > 0
    assert main(["figure", "validation", "--out", str(tmp_path), "--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seedance: error: data") and err.strip().count("\n") == 0


def test_alpha_beta_ring_latency_is_the_sum_of_its_hops():
    # four devices on two servers: NVLink-like hops of 1 us inside, 20 us across; tiny message = latency only
    n = 4
    hosts = np.array([0, 0, 1, 1])
    latency = np.where(hosts[:, None] == hosts[None, :], 1.0, 20.0)
    np.fill_diagonal(latency, 0.0)
    b = np.full((n, n), 100.0)
    t = collective_time("allreduce", 0, (b, latency, hosts), algorithm="ring", model="alpha-beta").time_s
    hops = [1.0, 20.0, 1.0, 20.0]  # the ring 0-1-2-3-0 crosses servers twice
    assert t == pytest.approx(2 * (n - 1) * np.mean(hops) * 1e-6)  # not 2(n-1) x the slowest hop


def test_ll128_only_over_nvlink():
    pcie = {collective_time("allreduce", 2**k, load("pcie-8gpu")).protocol for k in range(3, 32)}
    assert "LL128" not in pcie and {"LL", "Simple"} <= pcie
    assert "LL128" in {collective_time("allreduce", 2**k, load("dgx-a100")).protocol for k in range(3, 32)}
