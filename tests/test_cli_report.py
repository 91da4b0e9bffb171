"""``seedance report`` (the main job): sections, files, summary.json with provenance, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from click.testing import CliRunner

from seedance.cli import cli, main

SMALL = """
cost:
  presets: [[dgx-a100, 1], [dgx-a100, 2]]
  collectives: [allreduce, allgather]
  table_sizes: [4KiB, 1GiB]
  curve_sizes: 1KiB:1GiB:32
  heatmap_presets: [[dgx-a100, 1]]
paper:
  items: [fabrics]
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    spec = root / "small.yaml"
    spec.write_text(SMALL)
    out = root / "out"
    result = CliRunner().invoke(cli, ["report", "--out", str(out), "--spec", str(spec)])
    return spec, out, result.exit_code, result.output.splitlines()


def test_report_writes_tables_figures_and_provenance(report):
    spec, out, code, lines = report
    assert code == 0
    text = "\n".join(lines)  # the human summary says where files went
    assert str(out / "cost.csv") in text and str(out / "summary.json") in text and "busbw" in text
    frame = pd.read_csv(out / "cost.csv")
    assert len(frame) == 2 * 2 * 2
    assert set(frame["topology"]) == {"dgx-a100 1n", "dgx-a100 2n"}
    assert (frame["busbw_GBps"] > 0).all() and (frame["time_s"] > 0).all()
    assert r"\toprule" in (out / "cost.tex").read_text()
    for stem in ("busbw_allreduce", "bandwidth_dgx-a100_1n"):
        for suffix in (".pdf", ".png"):
            assert (out / "figures" / (stem + suffix)).stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["spec"]["cost"]["presets"] == [["dgx-a100", 1], ["dgx-a100", 2]]
    assert [s["name"] for s in summary["sections"]] == ["cost", "paper"]
    paper = summary["sections"][1]["summary"]
    assert paper["suite"] == "quick" and [i["name"] for i in paper["items"]] == ["fabrics"]
    assert paper["items"][0]["points_failed"] == 0 and paper["items"][0]["error"] is None
    for suffix in (".pdf", ".png"):
        assert (out / "figures" / ("fabrics" + suffix)).stat().st_size > 1000
    assert r"\toprule" in (out / "tables" / "fabrics.tex").read_text()
    assert (out / "fabrics" / "results.parquet").is_file()
    page = (out / "report.html").read_text()
    assert "src='figures/fabrics.png'" in page and "Provenance" in page and "allreduce busbw" in page
    assert str(out / "report.html") in text
    metadata = summary["metadata"]
    assert {"seed", "spec_sha256", "git_commit", "versions", "reproduce"} <= set(metadata)
    assert metadata["reproduce"].startswith("seedance report")


def test_report_json_is_one_object(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("cost: {presets: [[hgx-h100, 1]], collectives: [broadcast], table_sizes: [1MiB],"
                    " curve_sizes: 1MiB, heatmap_presets: []}\npaper: {items: []}")
    capsys.readouterr()
    assert main(["report", "--out", str(tmp_path / "o"), "--spec", str(spec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sections"][0]["name"] == "cost" and doc["summary"].endswith("summary.json")
    assert any(f.endswith("cost.csv") for f in doc["sections"][0]["files"])


@pytest.mark.parametrize(
    "doc, field",
    [
        ("cost: {presets: [[nope, 1]]}", "cost.presets"),
        ("cost: {presets: [dgx-a100]}", "cost.presets"),
        ("cost: {presets: []}", "cost.presets"),
        ("cost: {presets: [[mixed, 2], [mixed, 2]]}", "cost.presets"),
        ("cost: {table_sizes: []}", "cost.table_sizes"),
        ("cost: {table_sizes: [1.5B]}", "cost.table_sizes"),
        ("cost: {curve_sizes: 8B:1x}", "cost.curve_sizes"),
        ("cost: {collectives: []}", "cost.collectives"),
        ("cost: {table_sizes: [8B]}\ncost: {table_sizes: [8B]}", "spec"),
        ("cost: {colour: red}", "spec.cost"),
        ("simulation: {}", "spec"),
        ("- 1", "spec"),
        ("paper: {items: [nope]}", "paper.items"),
        ("paper: {items: [nccl, nccl]}", "paper.items"),
        ("paper: {suite: huge}", "paper.suite"),
        ("paper: {workers: 0}", "paper.workers"),
    ],
)
def test_bad_spec_is_one_line_and_exit_2(tmp_path, capsys, doc, field):
    spec = tmp_path / "bad.yaml"
    spec.write_text(doc)
    assert main(["report", "--out", str(tmp_path / "o"), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"error: {field}" in err
    assert not (tmp_path / "o").exists()  # checked before any work: nothing written
