"""The GPU calibration path (seedance.real.nccl_calibrate): the fit recovers the model's own parameters, and the
torchrun command runs end to end (here on gloo; the CUDA-event path needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from seedance.models.cost import collective_time
from seedance.models.topology import load
from seedance.real.nccl_calibrate import calibrated_topology, fit_nccl


def test_fit_recovers_bandwidth_factor_and_launch_overhead():
    base = load("dgx-a100")
    truth = calibrated_topology(base, 0.8, 12.0)
    rows = [{"collective": c, "size_bytes": s, "median_s": collective_time(c, s, truth).time_s}
            for c in ("allreduce", "allgather", "broadcast") for s in (8, 4096, 1 << 16, 1 << 20, 1 << 24, 1 << 28)]
    fit = fit_nccl(base, rows)
    assert fit["eta"] == pytest.approx(0.8, rel=1e-3)
    assert fit["launch_us"] == pytest.approx(12.0, rel=1e-3)
    assert fit["median_abs_log_error"] < 1e-6


def test_calibrated_topology_keeps_what_the_link_graph_told_the_model():
    topology = calibrated_topology(load("hgx-h100"), 0.9, 5.0)
    assert topology.graph is None and topology.meta["nccl"]["nvls"] is True and topology.meta["nccl"]["arch"] == 2
    assert collective_time("allreduce", 1 << 30, topology).algorithm == "nvls"
    np.testing.assert_allclose(topology.bandwidth_GBps[0, 1], load("hgx-h100").bandwidth_GBps[0, 1] * 0.9)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_torchrun_command_end_to_end(tmp_path):
    spec = tmp_path / "two.yaml"
    spec.write_text("bandwidth_GBps: [[0, 5], [5, 0]]\nlatency_us: 20\n")
    out = tmp_path / "cal.yaml"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
         "seedance.real.nccl_calibrate", "--topology", str(spec), "--sizes", "4KiB:1MiB:16", "--reps", "2",
         "--min-sample-ms", "5", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "cal.yaml.validation.json").read_text())
    assert report["backend"] == "gloo" and load(str(out)).num_devices == 2
    assert {r["heldout"] for r in report["rows"]} == {True, False}
    assert "median_abs_rel_error_heldout" in report and report["fit"]["eta"] > 0
