"""``seedance topology`` (list, show, heatmap): JSON contracts and one-line errors with exit status 2."""

from __future__ import annotations

import json

import pytest

from seedance.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json(capsys):
    code, out, err = _run(capsys, "topology", "list", "--json")
    assert code == 0 and json.loads(out) == {"presets": ["dgx-a100", "hgx-h100", "pcie-8gpu", "mixed"]}


def test_list_human(capsys):
    code, out, _ = _run(capsys, "topology", "list")
    assert code == 0 and "hgx-h100" in out and "NVLink4" in out


def test_show_json_preset_with_nodes(capsys):
    code, out, _ = _run(capsys, "topology", "show", "dgx-a100", "--nodes", "2", "--json")
    doc = json.loads(out)
    assert code == 0 and out.count("\n") == 1
    assert doc["name"] == "dgx-a100-2nodes" and doc["num_devices"] == 16 and doc["num_hosts"] == 2
    bandwidth, latency = doc["bandwidth_GBps"], doc["latency_us"]
    assert len(bandwidth) == 16 and all(len(row) == 16 for row in bandwidth)
    assert all(bandwidth[i][i] is None and latency[i][i] == 0 for i in range(16))  # JSON has no Infinity
    assert bandwidth[0][1] > bandwidth[0][8] > 0 and latency[0][8] > latency[0][1] > 0


def test_show_file_human(capsys, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nbandwidth_GBps: [[0, 300, 25], [300, 0, 25], [25, 25, 0]]\nhosts: [0, 0, 1]\n")
    code, out, _ = _run(capsys, "topology", "show", str(path))
    assert code == 0 and "c: 3 devices" in out and "300" in out and "across servers" in out


@pytest.mark.parametrize("argv,needle", [
    (["topology", "show", "dgx-z100"], "dgx-a100"),
    (["topology", "show", "dgx-a100", "--nodes", "0"], "--nodes"),
    (["topology", "show", "dgx-a100", "--nodes", "two"], "--nodes"),
    (["topology", "show", "mixed", "--nodes", "1"], "nodes"),
    (["topology", "heatmap", "nope.yaml", "--out", "x"], "no such file"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


@pytest.mark.parametrize("text,field", [
    ("bandwidth_GBps: [[0, 1, 2], [1, 0]]\n", "bandwidth_GBps[0]"),
    ("bandwidth_GBps: [[0, 1], [-1, 0]]\n", "bandwidth_GBps[1][0]"),
    ("bandwidth_GBps: [[0, 1], [1, 0]]\nlatency_us: [1, 2, 3]\n", "latency_us"),
    ("bandwidth_GBps: [[0, 1], [1, 0\n", "line"),
    ("devices: [{id: a}, {id: b}]\nlinks: []\n", "cannot reach"),
    ("devices: [{id: a}, {id: b}]\nlinks: [{ends: [a, b], kind: wifi, bandwidth_GBps: 1}]\n", "links[0].kind"),
])
def test_bad_files_exit_2_naming_the_field(capsys, tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = _run(capsys, "topology", "show", str(path), "--json")
    assert code == 2 and out == "" and err.count("\n") == 1 and field in err


def test_heatmap_writes_pdf_and_png(capsys, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nbandwidth_GBps: [[0, 300, 25], [300, 0, 25], [12.5, 25, 0]]\nhosts: [0, 0, 1]\n")
    code, out, _ = _run(capsys, "topology", "heatmap", str(path), "--out", str(tmp_path / "fig"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["name"] == "tiny" and len(doc["files"]) == 2
    for name in ("tiny-bandwidth.pdf", "tiny-bandwidth.png"):
        data = (tmp_path / "fig" / name).read_bytes()
        assert data[:4] in (b"%PDF", b"\x89PNG") and len(data) > 1000


def test_help_everywhere(capsys):
    for argv in (["topology", "--help"], ["topology", "show", "--help"], ["topology", "heatmap", "--help"]):
        code, out, _ = _run(capsys, *argv)
        assert code == 0 and "Usage" in out
