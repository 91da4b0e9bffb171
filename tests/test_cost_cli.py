"""``seedance cost``: the JSON shape of issue A, nccl-tests-shaped tables, and exit 2 on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seedance.cli import main
from seedance.cli.cost import element_count, parse_tau
from seedance.errors import SpecError

KEYS = {"collective", "algorithm", "protocol", "channels", "model", "size_bytes", "num_devices", "time_s",
        "algbw_GBps", "busbw_GBps"}


def run(capsys, *argv):
    capsys.readouterr()
    code = main(["cost", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_has_exactly_the_issue_fields(capsys):
    code, out, _ = run(capsys, "allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == KEYS
    assert doc["size_bytes"] == 2**30 and doc["num_devices"] == 8 and doc["collective"] == "allreduce"
    assert doc["busbw_GBps"] == pytest.approx(doc["algbw_GBps"] * 2 * 7 / 8)
    assert doc["algbw_GBps"] == pytest.approx(2**30 / doc["time_s"] / 1e9)


def test_range_json_and_table(capsys):
    code, out, _ = run(capsys, "allgather", "--topology", "hgx-h100", "--size", "8B:1MiB:4", "--json",
                       "--algorithm", "ring")
    doc = json.loads(out)
    assert code == 0 and doc["num_devices"] == 8 and doc["algorithm"] == "ring"
    assert [r["size_bytes"] for r in doc["rows"]] == [8 * 4**k for k in range(9) if 8 * 4**k <= 2**20]
    assert all(set(r) == KEYS and r["algorithm"] == "ring" for r in doc["rows"])
    code, out, _ = run(capsys, "allgather", "--topology", "hgx-h100", "--size", "8B:1MiB:4")
    lines = out.splitlines()
    assert code == 0 and "algbw" in lines[2] and "busbw" in lines[2] and "(elements)" in lines[3]
    first = lines[4].split()
    assert first[0] == "8" and first[1] == "0" and first[2] == "float"  # per-rank count, as nccl-tests
    assert len(lines) == 4 + len(doc["rows"])


def test_model_flag_and_nccl_columns(capsys):
    code, out, _ = run(capsys, "allreduce", "--topology", "hgx-h100", "--size", "8B:1GiB:1024", "--json")
    rows = json.loads(out)["rows"]
    assert code == 0 and [r["model"] for r in rows] == ["nccl"] * 3
    assert rows[0]["protocol"] == "LL" and rows[-1]["algorithm"] == "nvls" and rows[-1]["protocol"] == "Simple"
    code, out, _ = run(capsys, "allreduce", "--topology", "hgx-h100", "--size", "1GiB", "--json", "--model",
                       "alpha-beta")
    doc = json.loads(out)
    assert code == 0 and doc["model"] == "alpha-beta" and doc["protocol"] is None and doc["channels"] is None
    code, out, _ = run(capsys, "allreduce", "--topology", "dgx-a100", "--size", "64MiB", "--protocol", "LL")
    assert code == 0 and " LL " in out.splitlines()[-1] and "nccl model" in out.splitlines()[0]


def test_tau_changes_the_prediction(capsys):
    _, plain, _ = run(capsys, "allreduce", "--topology", "dgx-a100", "--size", "64MiB", "--json")
    _, late, _ = run(capsys, "allreduce", "--topology", "dgx-a100", "--size", "64MiB", "--json", "--tau", "3=2ms")
    assert json.loads(late)["time_s"] == pytest.approx(json.loads(plain)["time_s"] + 2e-3)


def test_parse_tau_forms():
    np.testing.assert_array_equal(parse_tau("1ms", 3), [1e-3] * 3)
    np.testing.assert_allclose(parse_tau("0,5us,0.5", 3), [0, 5e-6, 0.5], rtol=1e-15)
    np.testing.assert_array_equal(parse_tau("2=1s", 3), [0, 0, 1])
    for bad in ["", "x", "1,2", "-1", "3=1", "1=x", "0=1,2", "nan", "1,,2"]:
        with pytest.raises(SpecError):
            parse_tau(bad, 3)


def test_element_count_follows_nccl_tests():
    assert element_count("allreduce", 1024, 8) == 256
    assert element_count("allgather", 1024, 8) == 32


@pytest.mark.parametrize(
    "argv",
    [
        ["allsum", "--topology", "dgx-a100", "--size", "1GiB"],
        ["allreduce", "--topology", "nope", "--size", "1GiB"],
        ["allreduce", "--topology", "dgx-a100", "--size", "lots"],
        ["allreduce", "--topology", "dgx-a100", "--size", "0"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--nodes", "0"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--nodes", "x"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--algorithm", "magic"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--tau", "1,2"],
        ["alltoall", "--topology", "dgx-a100", "--size", "1GiB", "--algorithm", "tree"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--model", "gamma"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--protocol", "LL256"],
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--algorithm", "nvls"],  # A100: no NVLink SHARP
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--algorithm", "rhd"],  # alpha-beta only
        ["allreduce", "--topology", "dgx-a100", "--size", "1GiB", "--model", "alpha-beta", "--protocol", "LL"],
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and err.startswith("seedance: error:")
