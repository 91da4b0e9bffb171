"""`make gpu-check`: the parts that need no CUDA, run for real on gloo with two CPU processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seedance.experiments.gpu_check import collective_phase, run_gpu_check
from seedance.real.collective_curves import base_topology, bus_factor, fit_sizes


def test_bus_factors_are_nccl_tests():
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == pytest.approx(0.875)
    assert bus_factor("reducescatter", 4) == pytest.approx(0.75)
    assert bus_factor("allreduce", 1) == 0.0


def test_three_fit_sizes_spread_over_the_range():
    sizes = [1 << k for k in range(10, 31, 2)]
    chosen = fit_sizes(sizes)
    assert len(chosen) == 3 and chosen[0] > sizes[0] and chosen[-1] < sizes[-1]
    assert base_topology(2, "NVIDIA H200").num_devices == 2


def _check_curves(result, sizes):
    assert result["backend"] == "gloo"
    rows = result["rows"]
    assert {(r["collective"], r["size_bytes"]) for r in rows} == {
        (c, s) for c in ("allreduce", "allgather", "reducescatter") for s in sizes}
    for r in rows:
        assert r["median_s"] > 0
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["median_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * bus_factor(r["collective"], 2))
    model = result["model"]
    assert len(model["fit_sizes"]) == 3
    held = [r for r in model["rows"] if r["heldout"]]
    assert len(held) == 3 * (len(sizes) - 3) and all(r["size_bytes"] not in model["fit_sizes"] for r in held)
    assert model["median_abs_rel_error_heldout"] >= 0 and model["eta"] > 0
    assert set(model["by_collective"]) == {"allreduce", "allgather", "reducescatter"}
    json.dumps(result)


@pytest.mark.multiprocess
def test_collective_curves_and_the_three_size_fit_on_gloo(tmp_path):
    sizes = [4096, 32768, 262144, 1 << 20]
    _check_curves(collective_phase(tmp_path, 2, sizes=sizes, reps=2, min_sample_ms=1.0, timeout_s=120, draw=False),
                  sizes)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_gpu_check_figures_on_gloo(tmp_path):
    sizes = [4096, 16384, 65536, 262144, 1 << 20]
    result = collective_phase(tmp_path, 2, sizes=sizes, reps=2, min_sample_ms=2.0, timeout_s=120)
    _check_curves(result, sizes)
    for stem in ("collectives", "model"):
        assert (tmp_path / f"{stem}.pdf").stat().st_size > 0 and (tmp_path / f"{stem}.png").stat().st_size > 0
    assert len(result["figures"]) == 4


def test_without_cuda_one_line_and_exit_0(tmp_path, capsys):
    assert run_gpu_check(tmp_path / "out") is None
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "no CUDA device" in printed[0]
    assert not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "seedance.cli", "real", "gpu-check", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.count("\n") == 1 and "no CUDA device" in done.stdout


def test_the_compute_model_beside_measured_gemms_and_copies_on_a_cpu(tmp_path):
    """The roofline step run for real on the CPU: every size timed, priced by the model for the same FLOPs and
    bytes (the CPU's spec, since no GPU is named), the ratio and the held-out error derived from them, and both
    figures written."""
    from seedance.experiments.gpu_check import roofline_phase
    from seedance.models.compute import work_time_s
    from seedance.real.roofline import device_kind

    result = roofline_phase(tmp_path, "cpu", gemm_sides=(32, 64), copy_bytes=(4096, 1 << 16), reps=2,
                            min_batch_s=0.002)
    assert result["kind"] == "CPU" and result["dtype"] == "float32"
    assert [(r["op"], r["size"]) for r in result["rows"]] == [("gemm", 32), ("gemm", 64), ("copy", 4096),
                                                              ("copy", 1 << 16)]
    for r in result["rows"]:
        assert r["measured_s"] > 0 and r["model_s"] == work_time_s("CPU", r["flops"], r["bytes"])
        assert r["model_over_measured"] == pytest.approx(r["model_s"] / r["measured_s"])
    assert result["rows"][0]["flops"] == 2 * 32 ** 3 and result["rows"][2]["bytes"] == 2 * 4096
    assert set(result["by_op"]) == {"gemm", "copy"} and result["median_abs_rel_error"] >= 0
    assert all((tmp_path / f"roofline{s}").stat().st_size > 0 for s in (".pdf", ".png"))
    assert device_kind("NVIDIA H200") == "H200" and device_kind("NVIDIA A100-SXM4-80GB") == "A100"
    assert device_kind("Tesla V100-SXM2-16GB") == "V100" and device_kind(None) == "CPU"
    json.dumps(result)
