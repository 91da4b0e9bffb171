"""Routing rule: two GPUs of one server never route through the network, however fast it is (NCCL: P2P/SHM)."""

from __future__ import annotations

from seedance.models.topology import load


def test_intra_server_pairs_stay_inside_even_when_the_network_is_wider():
    doc = {
        "name": "slow-inside",
        "devices": [{"id": f"g{i}", "host": h} for i, h in enumerate([0, 0, 1, 1])],
        "switches": [{"id": "pcie0", "kind": "pcie_switch"}, {"id": "pcie1", "kind": "pcie_switch"},
                     {"id": "nic0", "kind": "nic"}, {"id": "nic1", "kind": "nic"}, {"id": "ib", "kind": "ib_switch"}],
        "links": [
            {"ends": ["g0", "pcie0"], "kind": "pcie", "bandwidth_GBps": 5},
            {"ends": ["g1", "pcie0"], "kind": "pcie", "bandwidth_GBps": 5},
            {"ends": ["g2", "pcie1"], "kind": "pcie", "bandwidth_GBps": 5},
            {"ends": ["g3", "pcie1"], "kind": "pcie", "bandwidth_GBps": 5},
            {"ends": ["g0", "nic0"], "kind": "pcie", "bandwidth_GBps": 30},
            {"ends": ["g1", "nic1"], "kind": "pcie", "bandwidth_GBps": 30},
            {"ends": ["nic0", "ib"], "kind": "infiniband", "bandwidth_GBps": 25},
            {"ends": ["nic1", "ib"], "kind": "infiniband", "bandwidth_GBps": 25},
            {"ends": ["g2", "ib"], "kind": "infiniband", "bandwidth_GBps": 25},
            {"ends": ["g3", "ib"], "kind": "infiniband", "bandwidth_GBps": 25},
        ],
    }
    topology = load(doc)
    assert topology.bandwidth_GBps[0, 1] == 5.0  # inside the server, not 25 through the switch
    assert [kind for kind in ("infiniband",) if any(
        topology.graph.edges[u, v]["kind"] == kind for u, v in topology.route(0, 1))] == []
    assert topology.bandwidth_GBps[0, 2] == 25.0  # across servers the network is used


def test_presets_one_server_of_many_matches_one_alone():
    for name in ("pcie-8gpu", "dgx-a100"):
        one, three = load(name), load(name, nodes=3)
        assert (one.bandwidth_GBps == three.bandwidth_GBps[8:16, 8:16]).all()
        assert (one.latency_us == three.latency_us[8:16, 8:16]).all()
