"""Presets of seedance.models.topology: shapes, symmetry, and the ordering NVLink > PCIe > InfiniBand (seed §2.4)."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.models.topology import load, preset, preset_names


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
