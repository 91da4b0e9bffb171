"""``seedance experiment protocols``: one short run per protocol through the study's own code, its outputs, and the
CLI's input validation (exit 2, one line naming the field). The full --quick study takes about 2 minutes here; it
is not part of the default suite."""

from __future__ import annotations

import csv
import json

import pytest
from seedance.analysis import protocols as study
from seedance.cli import main


@pytest.fixture(scope="module")
def rows():
    return [study.run_case(study.Case(p, c, 3), seed=0, duration_s=0.05)
            for p in study.PROTOCOLS for c in (0.0, 1.0)]


def test_every_protocol_is_linearizable_and_measured(rows):
    for row in rows:
        assert row["linearizable"] is True, row["reproduce"]
        assert row["throughput_ops_s"] > 0 and row["latency_ms_p99"] > 0
        assert row["messages_per_op"] > 0 and row["bytes_per_op"] > 0
    epaxos = {r["conflict_rate"]: r for r in rows if r["protocol"] == "epaxos"}
    # EPaxos commits before it executes; without conflicts nearly every command takes the fast path, with every
    # command on one key nearly none does
    assert epaxos[0.0]["fast_path_fraction"] > 0.8 > 0.2 > epaxos[1.0]["fast_path_fraction"]
    assert epaxos[1.0]["execution_latency_ms_p99"] > 0


def test_outputs_are_written(rows, tmp_path):
    artifacts = study.save(rows, tmp_path, provenance={"seed": 0})
    assert set(artifacts) == {"csv", "latex", "pdf", "png", "summary"}
    with open(artifacts["csv"]) as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    assert r"\begin{tabular}" in (tmp_path / "protocols.tex").read_text()
    assert len(json.loads((tmp_path / "summary.json").read_text())["rows"]) == len(rows)


@pytest.mark.parametrize("args, field", [(["--duration", "0"], "--duration"), (["--seed", "-1"], "--seed")])
def test_bad_input_exits_2_naming_the_field(args, field, tmp_path, capsys):
    assert main(["experiment", "protocols", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
