"""The pixel-vs-consensus study's measurement on tiny runs (the full study: `seedance experiment pixel-vs-consensus`)."""

from __future__ import annotations

import subprocess
import sys

from seedance.experiments.causal import FRAME_MS, measure_run, pixel_config


def test_measures_causal_convergence_and_raft_write_latency_on_the_same_workload():
    causal, times = measure_run(pixel_config("causal", grid=4, writes_per_frame=2, duration_s=0.1, seed=1,
                                             background=True, clients=4))
    assert causal["metric"] == "convergence" and causal["converged"] and causal["causal_violations"] == 0
    assert causal["samples"] == len(times) > 0 and causal["p99_ms"] >= causal["p50_ms"] > 0
    assert causal["bytes_delta"] < causal["bytes_full_state"]
    raft, raft_times = measure_run(pixel_config("raft", grid=4, writes_per_frame=2, duration_s=0.4, seed=1,
                                                background=False, clients=4))
    assert raft["metric"].startswith("write-latency") and raft["samples"] == len(raft_times) > 0
    assert raft["within_one_frame"] == (raft["p99_ms"] < FRAME_MS)


def test_cli_refuses_an_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = subprocess.run([sys.executable, "-m", "seedance", "experiment", "pixel-vs-consensus", "--quick", "--out",
                          str(blocker / "sub")], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--out" in out.stderr
