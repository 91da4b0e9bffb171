"""Presets of seedance.models.topology: shapes, symmetry, and the ordering NVLink > PCIe > InfiniBand (seed §2.4)."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.models.topology import load, preset, preset_names
from seedance.models.topology._presets import PUBLISHED_BUSBW_GBps


@pytest.mark.parametrize("name", preset_names())
def test_single_server_presets_are_valid(name):
    t = load(name)
    n = t.num_devices
    assert t.bandwidth_GBps.shape == (n, n) == t.latency_us.shape
    off = ~np.eye(n, dtype=bool)
    assert np.all(np.isfinite(t.bandwidth_GBps[off])) and np.all(t.bandwidth_GBps[off] > 0)
    assert np.all(np.isinf(np.diag(t.bandwidth_GBps))) and np.all(np.diag(t.latency_us) == 0)
    assert np.all(t.latency_us[off] > 0)
    # Every preset is built from undirected links, so its matrices are symmetric.
    np.testing.assert_array_equal(t.bandwidth_GBps, t.bandwidth_GBps.T)
    np.testing.assert_allclose(t.latency_us, t.latency_us.T)
    assert t.source == f"preset:{name}"


@pytest.mark.parametrize("name,nodes,gpus", [("dgx-a100", 2, 16), ("hgx-h100", 3, 24), ("pcie-8gpu", 2, 16),
                                             ("mixed", 2, 16), ("mixed", 3, 24)])
def test_multi_node_presets(name, nodes, gpus):
    t = load(name, nodes=nodes)
    assert t.num_devices == gpus and t.num_hosts == nodes
    assert list(t.host_of) == [k for k in range(nodes) for _ in range(8)]


def test_nvlink_beats_pcie_beats_infiniband():
    nvlink = load("dgx-a100", nodes=2)
    pcie = load("pcie-8gpu", nodes=2)
    intra_nvlink = nvlink.bandwidth_GBps[0, 1]
    intra_pcie = pcie.bandwidth_GBps[0, 1]
    inter = nvlink.bandwidth_GBps[0, 8]
    assert intra_nvlink > intra_pcie > inter
    assert nvlink.latency_us[0, 1] < pcie.latency_us[0, 1] < nvlink.latency_us[0, 8]


def test_unknown_preset_and_bad_nodes():
    with pytest.raises(SpecError, match="dgx-a100"):
        preset("dgx-z100")
    with pytest.raises(SpecError) as err:
        preset("dgx-a100", nodes=0)
    assert err.value.field == "nodes"
    with pytest.raises(SpecError) as err:
        load("mixed", nodes=1)
    assert err.value.field == "nodes"


def test_presets_are_cached_and_immutable():
    a, b = load("dgx-a100", nodes=2), load("dgx-a100", nodes=2)
    assert a is b
    with pytest.raises(Exception):
        a.graph.add_edge("x", "y")
    with pytest.raises(TypeError):
        a.meta["nodes"] = 3  # type: ignore[index]
    assert a.meta["nodes"] == 2 and a.meta["preset"] == "dgx-a100"


def test_multi_node_routes_use_the_gpus_own_rail():
    t = load("hgx-h100", nodes=2)
    route = t.route(3, 11)  # GPU 3 of server 0 to GPU 3 of server 1: rail 3, one leaf switch
    assert route == (("n0.gpu3", "n0.nic3"), ("n0.nic3", "ib.leaf3"), ("ib.leaf3", "n1.nic3"), ("n1.nic3", "n1.gpu3"))
    assert t.bandwidth_GBps[3, 11] == pytest.approx(50.0 * 0.94)
    assert t.latency_us[3, 11] == pytest.approx(2.7)  # NCCL's LL per-step NET latency, by construction
    assert t.latency_us[3, 12] > t.latency_us[3, 11]  # cross-rail goes through the spine


@pytest.mark.parametrize("key", sorted(PUBLISHED_BUSBW_GBps))
def test_cost_model_reproduces_published_allreduce_busbw(key):
    """Calibration check: the ring allreduce busbw the cost model predicts for 8 GiB on each preset lies in the
    range published for that machine (sources in seedance.models.topology._presets)."""
    cost = pytest.importorskip("seedance.models.cost")
    name, nodes = key
    low, high, _source = PUBLISHED_BUSBW_GBps[key]
    predicted = cost.collective_time("allreduce", 8 * 2**30, load(name, nodes=nodes), algorithm="ring").busbw_GBps
    assert low <= predicted <= high, f"{name} x{nodes}: {predicted:.1f} GB/s not in [{low}, {high}]"
