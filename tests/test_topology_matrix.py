"""The seed's matrix form of seedance.models.topology (seed §2.4): loading, validation, round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seedance.errors import SpecError
from seedance.models.topology import from_dict, from_matrix, load, to_dict

B3 = [[0, 300, 25], [300, 0, 25], [12.5, 25, 0]]


def test_matrix_form_fields_and_routes():
    t = from_matrix(B3, [[0, 1, 2], [1, 0, 2], [3, 2, 0]], name="three", hosts=["a", "a", "b"],
                    device_kinds=["A100", "A100", "V100"])
    assert t.num_devices == 3 and t.num_hosts == 2 and list(t.host_of) == [0, 0, 1]
    assert t.bandwidth_GBps[2, 0] == 12.5 and t.bandwidth_GBps[0, 2] == 25  # asymmetric is allowed
    assert np.all(np.isinf(np.diag(t.bandwidth_GBps))) and np.all(np.diag(t.latency_us) == 0)
    assert t.latency_us[2, 0] == 3
    assert t.route(2, 0) == ((2, 0),) and t.links[(2, 0)] == (12.5, 3.0)
    assert len(t.routes) == len(t.links) == 6
    assert set(t.routes) == {(i, j) for i in range(3) for j in range(3) if i != j}
    with pytest.raises(KeyError):
        t.route(1, 1)
    assert t.device_kinds == ("A100", "A100", "V100") and t.graph is None
    with pytest.raises(ValueError):
        t.bandwidth_GBps[0, 1] = 1.0  # read-only


def test_defaults_latency_zero_one_host_gpu_kind():
    t = from_dict({"bandwidth_GBps": [[None, 10], [10, None]]})
    assert t.latency_us[0, 1] == 0.0 and list(t.host_of) == [0, 0] and t.device_kinds == ("gpu", "gpu")
    assert t.name == "matrix"


def _doc(**changes):
    doc = {"name": "c", "bandwidth_GBps": [[0, 1, 2], [3, 0, 4], [5, 6, 0]], "latency_us": 1.0}
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


BAD_INPUTS = [
    ("not a matrix", _doc(bandwidth_GBps=5), "bandwidth_GBps"),
    ("ragged", _doc(bandwidth_GBps=[[0, 1, 2], [3, 0], [5, 6, 0]]), "bandwidth_GBps[1]"),
    ("non-square", _doc(bandwidth_GBps=[[0, 1, 2], [3, 0, 4]]), "bandwidth_GBps[0]"),
    ("one device", _doc(bandwidth_GBps=[[0]], latency_us=...), "bandwidth_GBps"),
    ("empty", _doc(bandwidth_GBps=[], latency_us=...), "bandwidth_GBps"),
    ("row not a list", _doc(bandwidth_GBps=[[0, 1, 2], "abc", [5, 6, 0]]), "bandwidth_GBps[1]"),
    ("zero", _doc(bandwidth_GBps=[[0, 1, 2], [3, 0, 4], [5, 0.0, 0]]), "bandwidth_GBps[2][1]"),
    ("negative", _doc(bandwidth_GBps=[[0, -1, 2], [3, 0, 4], [5, 6, 0]]), "bandwidth_GBps[0][1]"),
    ("nan", _doc(bandwidth_GBps=[[0, 1, 2], [3, 0, math.nan], [5, 6, 0]]), "bandwidth_GBps[1][2]"),
    ("inf", _doc(bandwidth_GBps=[[0, 1, math.inf], [3, 0, 4], [5, 6, 0]]), "bandwidth_GBps[0][2]"),
    ("string", _doc(bandwidth_GBps=[[0, 1, 2], [3, 0, 4], ["5", 6, 0]]), "bandwidth_GBps[2][0]"),
    ("bool", _doc(bandwidth_GBps=[[0, True, 2], [3, 0, 4], [5, 6, 0]]), "bandwidth_GBps[0][1]"),
    ("null off-diagonal", _doc(bandwidth_GBps=[[0, 1, 2], [None, 0, 4], [5, 6, 0]]), "bandwidth_GBps[1][0]"),
    ("string on diagonal", _doc(bandwidth_GBps=[[0, 1, 2], [3, "x", 4], [5, 6, 0]]), "bandwidth_GBps[1][1]"),
    ("negative latency", _doc(latency_us=-1.0), "latency_us"),
    ("nan latency", _doc(latency_us=math.nan), "latency_us"),
    ("latency string", _doc(latency_us="2us"), "latency_us"),
    ("latency wrong shape", _doc(latency_us=[[0, 1], [1, 0]]), "latency_us"),
    ("latency bad entry", _doc(latency_us=[[0, 1, 1], [1, 0, -2], [1, 1, 0]]), "latency_us[1][2]"),
    ("hosts length", _doc(hosts=[0, 1]), "hosts"),
    ("hosts float", _doc(hosts=[0, 1.5, 1]), "hosts[1]"),
    ("hosts bool", _doc(hosts=[0, True, 1]), "hosts[1]"),
    ("hosts not list", _doc(hosts=3), "hosts"),
    ("kinds wrong", _doc(device_kinds=["A100", 3, "A100"]), "device_kinds[1]"),
    ("kinds length", _doc(device_kinds=["A100"]), "device_kinds"),
    ("name", _doc(name=""), "name"),
    ("name type", _doc(name=7), "name"),
    ("unknown field", _doc(bandwdith=3), "bandwdith"),
    ("missing matrix", {"name": "x", "latency_us": 1.0}, "bandwidth_GBps"),
    ("not a mapping", [1, 2], "topology"),
]


@pytest.mark.parametrize("label,doc,field", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_matrix_input_names_its_field(label, doc, field):
    with pytest.raises(SpecError) as err:
        from_dict(doc)
    assert err.value.field == field
    assert err.value.valid  # says what is valid
    assert "\n" not in str(err.value)


def test_numpy_input_and_errors():
    t = from_matrix(np.array([[0.0, 2.0], [3.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert t.bandwidth_GBps[1, 0] == 3.0
    with pytest.raises(SpecError) as err:
        from_matrix(np.array([[0.0, 2.0], [np.nan, 0.0]]))
    assert err.value.field == "bandwidth_GBps[1][0]"
    with pytest.raises(SpecError) as err:
        from_matrix(np.ones((2, 3)))
    assert err.value.field == "bandwidth_GBps"


def test_yaml_and_json_files(tmp_path):
    (tmp_path / "c.yaml").write_text("name: c\nbandwidth_GBps: [[0, 300], [300, 0]]\nlatency_us: 2.0\nhosts: [0, 1]\n")
    (tmp_path / "d.json").write_text(json.dumps({"bandwidth_GBps": [[0, 7], [8, 0]]}))
    c = load(str(tmp_path / "c.yaml"))
    assert c.name == "c" and c.latency_us[0, 1] == 2.0 and c.num_hosts == 2 and c.source.endswith("c.yaml")
    d = load(tmp_path / "d.json")
    assert d.name == "d" and d.bandwidth_GBps[1, 0] == 8


@pytest.mark.parametrize("suffix,text,where", [
    (".yaml", "name: c\nbandwidth_GBps: [[0, 1], [1, 0]\n", "line"),
    (".json", '{"bandwidth_GBps": [[0, 1], [1, 0]]', "line 1"),
    (".yaml", "- just\n- a list\n", "mapping"),
])
def test_syntax_errors_are_spec_errors(tmp_path, suffix, text, where):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load(str(path))
    assert str(path) in str(err.value) and where in str(err.value)


def test_unknown_name_lists_presets_and_nodes_only_for_presets(tmp_path):
    with pytest.raises(SpecError) as err:
        load("no-such-cluster.yaml")
    assert "dgx-a100" in str(err.value) and "no such file" in str(err.value)
    (tmp_path / "c.yaml").write_text("bandwidth_GBps: [[0, 1], [1, 0]]\n")
    with pytest.raises(SpecError) as err:
        load(str(tmp_path / "c.yaml"), nodes=2)
    assert err.value.field == "nodes"


def test_to_dict_of_a_preset_round_trips():
    original = load("mixed")
    copy = load(to_dict(original))
    np.testing.assert_array_equal(copy.bandwidth_GBps, original.bandwidth_GBps)
    np.testing.assert_array_equal(copy.latency_us, original.latency_us)
    np.testing.assert_array_equal(copy.host_of, original.host_of)
    assert copy.device_kinds == original.device_kinds and copy.name == original.name


# --- properties -------------------------------------------------------------------------------------------------

positive = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
non_negative = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def matrix_docs(draw):
    n = draw(st.integers(2, 6))
    bandwidth = [[0.0 if i == j else draw(positive) for j in range(n)] for i in range(n)]
    doc = {"name": draw(st.text(min_size=1, max_size=8).filter(str.strip)), "bandwidth_GBps": bandwidth}
    if draw(st.booleans()):
        doc["latency_us"] = (
            draw(non_negative) if draw(st.booleans())
            else [[0.0 if i == j else draw(non_negative) for j in range(n)] for i in range(n)]
        )
    if draw(st.booleans()):
        doc["hosts"] = draw(st.lists(st.sampled_from([0, 1, 2, "x", "y"]), min_size=n, max_size=n))
    return doc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=matrix_docs(), as_json=st.booleans())
def test_valid_matrices_round_trip_through_files(doc, as_json):
    first = from_dict(doc)
    text = json.dumps(to_dict(first)) if as_json else yaml.safe_dump(to_dict(first))
    second = load(json.loads(text) if as_json else yaml.safe_load(text))
    np.testing.assert_array_equal(second.bandwidth_GBps, first.bandwidth_GBps)
    np.testing.assert_array_equal(second.latency_us, first.latency_us)
    np.testing.assert_array_equal(second.host_of, first.host_of)
    assert second.name == first.name
    n = first.num_devices
    assert sorted(set(first.host_of.tolist())) == list(range(first.num_hosts)) and first.host_of.shape == (n,)


bad_values = st.sampled_from([0, -1.0, math.nan, math.inf, -math.inf, None, "1", True, [1.0], {"a": 1}])


@settings(max_examples=80, deadline=None)
@given(doc=matrix_docs(), data=st.data())
def test_corrupted_matrices_raise_spec_error(doc, data):
    bandwidth = doc["bandwidth_GBps"]
    n = len(bandwidth)
    how = data.draw(st.sampled_from(["entry", "drop", "extra-row", "latency", "hosts"]))
    if how == "entry":
        i = data.draw(st.integers(0, n - 1))
        j = data.draw(st.integers(0, n - 1).filter(lambda j: j != i))
        bandwidth[i][j] = data.draw(bad_values)
    elif how == "drop":
        bandwidth[data.draw(st.integers(0, n - 1))].pop()
    elif how == "extra-row":
        bandwidth.append([1.0] * n)
    elif how == "latency":
        doc["latency_us"] = data.draw(st.sampled_from([-0.5, math.nan, "slow", [[0.0]], [1.0] * n]))
    else:
        doc["hosts"] = data.draw(st.sampled_from([[0] * (n + 1), [0.5] * n, [None] * n, "ab"]))
    with pytest.raises(SpecError):
        from_dict(doc)


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["name", "bandwidth_GBps", "latency_us", "hosts", "device_kinds",
                                            "devices", "links", "switches", "extra"]), json_values, max_size=5))
def test_arbitrary_documents_give_a_topology_or_a_spec_error(doc):
    try:
        topology = from_dict(doc)
    except SpecError:
        return
    assert topology.num_devices >= 2
