"""The built-in runners through whole sweeps: train (simulated) by default; real processes and a whole experiment
study under the slow marker (tens of seconds each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seedance.sweep import aggregate, load_results, run_sweep


def test_train_runner_sweep(tmp_path):
    doc = {"name": "train", "runner": "train", "fixed": {"ranks": 3, "steps": 20, "commit_every": 5},
           "axes": {"grid": {"scenario": ["none", "F2"]}}, "seeds": [0, 1], "timeout_s": 120}
    summary = run_sweep(doc, tmp_path, progress=False)
    assert (summary.points_total, summary.points_failed) == (4, 0)
    df = load_results(tmp_path)
    assert set(df["finished"]) == {True} and (df["steps"] == 20).all() and (df["commits"] > 0).all()
    assert df["final_loss"].notna().all() and "trace_sha256" in df.columns
    table = aggregate(df, by=["scenario"], metrics=["final_loss", "commits"], n_resamples=500)
    assert list(table["n"]) == [2, 2]


def test_sim_runner_metrics_are_the_comparisons(tmp_path):
    """EPaxos's commit/execution split and fast-path fraction come from the protocol comparison's own function."""
    doc = {"name": "ep", "runner": "sim", "fixed": {"protocol": "epaxos", "nodes": 3, "clients": 4, "duration": 0.1,
                                                     "key_distribution": "conflict", "conflict_rate": 0.0,
                                                     "read_fraction": 0.2, "cas_fraction": 0.1,
                                                     "set": {"heartbeat_s": 0.002}}, "timeout_s": 120}
    run_sweep(doc, tmp_path, progress=False)
    row = load_results(tmp_path).iloc[0]
    assert row["status"] == "ok" and row["ops_ok"] > 0 and row["linearizable"] in (True, "true")
    assert "mix" not in row.index  # read_fraction, not mix, was given
    assert 0 <= row["fast_path_fraction"] <= 1 and row["commit_latency_ms_p99"] > 0
    assert row["command"].startswith("seedance sim run --protocol epaxos") and "--mix 0.2,0.7" in row["command"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_real_runner_sweep(tmp_path):
    doc = {"name": "real", "runner": "real", "fixed": {"nodes": 3, "clients": 2, "duration": 1.0},
           "timeout_s": 180}
    summary = run_sweep(doc, tmp_path, progress=False)
    row = load_results(summary.results).iloc[0]
    assert row["status"] == "ok", row["error"]
    assert row["ops_ok"] > 0 and row["linearizable"] in (True, "true")
    assert Path(row["out_dir"]).is_relative_to(tmp_path / "runs") and (Path(row["out_dir"]) / "summary.json").exists()


@pytest.mark.slow
def test_experiment_runner_sweep(tmp_path):
    doc = {"name": "exp", "runner": "experiment",
           "fixed": {"name": "protocols", "quick": True, "options": {"duration": 0.05}}, "timeout_s": 600}
    summary = run_sweep(doc, tmp_path, progress=False)
    row = load_results(summary.results).iloc[0]
    assert row["status"] == "ok", row["error"]
    assert row["rows"] > 10 and Path(row["artifacts.csv"]).exists()
    assert "--quick" in row["command"] and "--seed 0" in row["command"]
