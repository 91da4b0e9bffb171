"""Link-graph form of seedance.models.topology: routing rule, closed forms, validation, brute-force oracle (§2.4)."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seedance
from seedance.errors import SpecError
from seedance.models.topology import LINK_KINDS, from_dict, from_graph, load

EXAMPLES = Path(seedance.__file__).parent / "data" / "topologies"


def _graph(devices, switches, links, directed=False):
    g = nx.DiGraph() if directed else nx.Graph()
    for d in devices:
        g.add_node(d, role="device", kind="gpu")
    for s in switches:
        g.add_node(s, role="switch", kind="nvswitch")
    for u, v, bw, lat, *eff in links:
        g.add_edge(u, v, kind="nvlink", bandwidth_GBps=bw, latency_us=lat, **({"efficiency": eff[0]} if eff else {}))
    return g


def test_star_closed_form():
    # B[i, j] = min(b_i, b_j) · efficiency; latency = l_i + l_j.
    b, lat = [300.0, 100.0, 50.0], [1.0, 2.0, 4.0]
    g = _graph("abc", ["sw"], [(d, "sw", b[k], lat[k], 0.5) for k, d in enumerate("abc")])
    t = from_graph(g)
    for i, j in itertools.permutations(range(3), 2):
        assert t.bandwidth_GBps[i, j] == pytest.approx(min(b[i], b[j]) * 0.5)
        assert t.latency_us[i, j] == pytest.approx(lat[i] + lat[j])
    assert t.route(0, 2) == (("a", "sw"), ("sw", "c"))
    assert t.links[("sw", "c")] == (25.0, 4.0)
    assert t.device_nodes == ("a", "b", "c") and t.graph.nodes["a"]["index"] == 0


def test_widest_path_beats_a_faster_narrow_link():
    g = _graph("ab", ["sw"], [("a", "b", 10.0, 0.1), ("a", "sw", 100.0, 1.0), ("sw", "b", 100.0, 1.0)])
    t = from_graph(g)
    assert t.bandwidth_GBps[0, 1] == 100.0 and t.latency_us[0, 1] == 2.0
    assert t.route(0, 1) == (("a", "sw"), ("sw", "b"))


def test_direct_nvlink_preferred_when_as_wide():
    g = _graph("ab", ["sw"], [("a", "b", 100.0, 0.6), ("a", "sw", 100.0, 1.0), ("sw", "b", 100.0, 1.0)])
    assert from_graph(g).route(0, 1) == (("a", "b"),)


def test_least_latency_among_widest_even_behind_a_wider_prefix():
    # The wide-but-slow prefix s→p1→x would win a greedy widest-path search at x; the bottleneck x→t makes both
    # prefixes equally wide, so the rule must pick the fast one: B = 50, latency 0.5 + 0.5 + 1.
    g = _graph(
        ["s", "t"], ["p1", "p2", "x"],
        [("s", "p1", 100, 5), ("p1", "x", 100, 5), ("s", "p2", 50, 0.5), ("p2", "x", 50, 0.5), ("x", "t", 50, 1)],
    )
    t = from_graph(g)
    assert t.bandwidth_GBps[0, 1] == 50 and t.latency_us[0, 1] == pytest.approx(2.0)
    assert t.route(0, 1) == (("s", "p2"), ("p2", "x"), ("x", "t"))


def test_equal_latency_prefers_fewer_links():
    g = _graph(
        ["a", "b"], ["s1", "s2", "s3"],
        [("a", "s2", 10, 0.5), ("s2", "s3", 10, 1.0), ("s3", "b", 10, 0.5), ("a", "s1", 10, 1.0), ("s1", "b", 10, 1.0)],
    )
    t = from_graph(g)
    assert t.route(0, 1) == (("a", "s1"), ("s1", "b")) and t.latency_us[0, 1] == 2.0


def test_devices_never_relay_and_unreachable_pair_is_named():
    g = _graph("abc", [], [("a", "b", 10, 1), ("b", "c", 10, 1)])
    with pytest.raises(SpecError, match="'a' cannot reach device 'c'") as err:
        from_graph(g)
    assert err.value.field == "links"


def test_directed_links_make_b_asymmetric():
    g = _graph(["a", "b"], ["sw"], [("a", "b", 100, 1), ("b", "sw", 10, 1), ("sw", "a", 10, 1)], directed=True)
    t = from_graph(g)
    assert t.bandwidth_GBps[0, 1] == 100 and t.bandwidth_GBps[1, 0] == 10 and t.latency_us[1, 0] == 2


@pytest.mark.parametrize("attrs,field", [
    ({"kind": "token-ring"}, ".kind"),
    ({"bandwidth_GBps": 0.0}, ".bandwidth_GBps"),
    ({"bandwidth_GBps": float("nan")}, ".bandwidth_GBps"),
    ({"bandwidth_GBps": float("inf")}, ".bandwidth_GBps"),
    ({"latency_us": -1.0}, ".latency_us"),
    ({"efficiency": 1.5}, ".efficiency"),
])
def test_bad_links_name_the_field(attrs, field):
    g = _graph("ab", [], [("a", "b", 10, 1)])
    g.edges["a", "b"].update(attrs)
    with pytest.raises(SpecError) as err:
        from_graph(g)
    assert err.value.field.endswith(field) and err.value.field.startswith("links[")
    if field == ".kind":
        assert all(kind in err.value.valid for kind in LINK_KINDS)


def test_bad_nodes():
    g = _graph("ab", [], [("a", "b", 10, 1)])
    g.add_node("x", role="router")
    with pytest.raises(SpecError, match="role"):
        from_graph(g)
    with pytest.raises(SpecError) as err:
        from_graph(_graph("a", ["s"], [("a", "s", 1, 1)]))
    assert err.value.field == "devices"


def _file_doc(**link_changes):
    link = {"ends": ["g0", "sw"], "kind": "nvswitch", "bandwidth_GBps": 25, "count": 12, "latency_us": 0.3}
    link.update(link_changes)
    return {
        "name": "tiny",
        "devices": [{"id": "g0", "kind": "A100"}, {"id": "g1", "kind": "A100", "host": 0}],
        "switches": [{"id": "sw", "kind": "nvswitch"}],
        "links": [{k: v for k, v in link.items() if v is not ...},
                  {"ends": ["g1", "sw"], "kind": "nvswitch", "bandwidth_GBps": 300}],
    }


def test_graph_file_form():
    t = from_dict(_file_doc())
    assert t.bandwidth_GBps[0, 1] == 300 and t.latency_us[0, 1] == pytest.approx(0.3 + 0.6)  # default nvswitch 0.6
    assert t.name == "tiny" and t.device_kinds == ("A100", "A100")


@pytest.mark.parametrize("changes,field", [
    ({"ends": ["g0", "nowhere"]}, "links[0].ends"),
    ({"ends": ["g0"]}, "links[0].ends"),
    ({"kind": "carrier-pigeon"}, "links[0].kind"),
    ({"count": 0}, "links[0].count"),
    ({"count": True}, "links[0].count"),
    ({"bandwidth_GBps": ...}, "links[0].bandwidth_GBps"),
    ({"bandwidth_GBps": "fast"}, "links[0].bandwidth_GBps"),
    ({"directed": "yes"}, "links[0].directed"),
    ({"speed": 3}, "links[0].speed"),
    ({"ends": ["g1", "sw"]}, "links[1]"),  # links[1] repeats links[0]
])
def test_graph_file_errors_name_the_field(changes, field):
    with pytest.raises(SpecError) as err:
        from_dict(_file_doc(**changes))
    assert err.value.field == field


def test_graph_file_structure_errors():
    doc = _file_doc()
    doc["switches"] = [{"id": "g0", "kind": "nvswitch"}]
    with pytest.raises(SpecError, match="repeats the id"):
        from_dict(doc)
    doc = _file_doc()
    doc["switches"] = [{"id": "sw", "kind": "hub"}]
    with pytest.raises(SpecError) as err:
        from_dict(doc)
    assert err.value.field == "switches[0].kind"
    doc = _file_doc()
    del doc["links"]
    with pytest.raises(SpecError) as err:
        from_dict(doc)
    assert err.value.field == "links"


@pytest.mark.parametrize("path", sorted(EXAMPLES.iterdir()), ids=lambda p: p.name)
def test_bundled_examples_load(path):
    t = load(str(path))
    assert t.num_devices >= 2 and t.name == path.stem


def test_dgx1_example_matches_the_mixed_preset_v100_server():
    # The graph-form example file and the preset's DGX-1 are built from the same figures: identical matrices.
    example = load(str(EXAMPLES / "dgx1-v100-graph.yaml"))
    mixed = load("mixed")
    v100 = np.ix_(mixed.host_of == 1, mixed.host_of == 1)
    np.testing.assert_array_equal(mixed.bandwidth_GBps[v100], example.bandwidth_GBps)
    np.testing.assert_allclose(mixed.latency_us[v100], example.latency_us)


# --- brute-force oracle -----------------------------------------------------------------------------------------


def _brute_force(g: nx.DiGraph, devices, i, j):
    """Max over simple paths (no device in the middle) of the bottleneck; min latency among those."""
    best = None
    for path in nx.all_simple_paths(g, devices[i], devices[j]):
        if any(node in devices for node in path[1:-1]):
            continue
        edges = list(zip(path[:-1], path[1:]))
        width = min(g.edges[e]["bandwidth_GBps"] for e in edges)
        latency = sum(g.edges[e]["latency_us"] for e in edges)
        key = (-width, latency)
        best = key if best is None or key < best else best
    return best


@st.composite
def small_graphs(draw):
    devices = [f"d{k}" for k in range(draw(st.integers(2, 4)))]
    switches = [f"s{k}" for k in range(draw(st.integers(0, 3)))]
    nodes = devices + switches
    g = nx.DiGraph()
    for d in devices:
        g.add_node(d, role="device", kind="gpu")
    for s in switches:
        g.add_node(s, role="switch", kind="pcie_switch")
    pairs = [(u, v) for u in nodes for v in nodes if u != v]
    for u, v in draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=12, unique=True)):
        g.add_edge(u, v, kind="pcie", bandwidth_GBps=float(draw(st.sampled_from([5, 10, 20, 40]))),
                   latency_us=float(draw(st.integers(0, 4))))
    return g, devices


@settings(max_examples=120, deadline=None)
@given(case=small_graphs())
def test_routing_matches_brute_force(case):
    g, devices = case
    oracle = {(i, j): _brute_force(g, devices, i, j)
              for i, j in itertools.permutations(range(len(devices)), 2)}
    if any(v is None for v in oracle.values()):
        with pytest.raises(SpecError, match="cannot reach"):
            from_graph(g)
        return
    t = from_graph(g)
    for (i, j), (negative_width, latency) in oracle.items():
        assert t.bandwidth_GBps[i, j] == -negative_width
        assert t.latency_us[i, j] == pytest.approx(latency)
        route = t.route(i, j)
        assert route[0][0] == devices[i] and route[-1][1] == devices[j]
        assert min(t.links[link][0] for link in route) == -negative_width
        assert sum(t.links[link][1] for link in route) == pytest.approx(latency)
