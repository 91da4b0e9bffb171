"""``seedance experiment protocols``: one short run per protocol through the study's own code, its outputs, and the
CLI's input validation (exit 2, one line naming the field). The full --quick study takes about 2 minutes here; it
is not part of the default suite."""

from __future__ import annotations

import csv
import json

import pytest
from seedance.experiments import protocols as study
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


def test_batching_rows_say_how_each_protocol_batches():
    cases = study.grid(quick=True)
    assert {c.protocol for c in cases if c.batch} == {"multipaxos", "epaxos"}
    assert study.batching(study.Case("raft", 0.0, 3)).startswith("always")
    assert study.batching(study.Case("epaxos", 0.0, 3)) == "off"
    row = study.run_case(study.Case("epaxos", 0.0, 3, batch=True), seed=0, duration_s=0.05)
    assert row["protocol"] == "epaxos+batch" and row["batching"] == "max_batch=64" and row["linearizable"] is True


@pytest.mark.multiprocess
def test_a_real_run_with_kills_next_to_its_prediction(tmp_path):
    """One row of the --real table: EPaxos on 3 real processes with the crash fault (SIGKILL), and the simulator's
    prediction of the same run on a host profile (a hand-made one here; the CLI measures this machine's)."""
    from seedance.models.host import HostProfile, LogNormal

    profile = HostProfile(cores=2, cpu={"message": LogNormal(30e-6), "client": LogNormal(8e-6)},
                          io_per_input=LogNormal(45e-6), fsync=LogNormal(1.2e-4, 0.3, 1e-3), write_bandwidth_GBps=1.0,
                          loopback=LogNormal(2e-5), client_per_op=LogNormal(1e-4), wake=LogNormal(8e-5),
                          client_wake=LogNormal(1e-4), measured={"config": {"protocol": "raft", "clients": 8}})
    row = study.run_real_case(study.RealCase("epaxos", 3, kills=True), profile=profile, seed=1, duration_s=2.0,
                              out=tmp_path / "run")
    assert row["real_linearizable"] is True, row["reproduce"]
    assert row["kills"] > 0 and row["real_ops_s"] > 0 and row["predicted_ops_s"] > 0
    assert row["ratio_ops"] == pytest.approx(row["real_ops_s"] / row["predicted_ops_s"])
    artifacts = study.save([], tmp_path / "out", provenance={}, real_rows=[row])
    assert "SIGKILL" in (tmp_path / "out" / "protocols_real.tex").read_text()
    with open(artifacts["real_csv"]) as fh:
        assert list(csv.DictReader(fh))[0]["protocol"] == "epaxos"
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["real_rows"][0]["kills"] == row["kills"]


def test_host_profile_without_real_is_refused(tmp_path, capsys):
    assert main(["experiment", "protocols", "--out", str(tmp_path / "o"), "--host-profile", "x.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--host-profile" in err[0]
