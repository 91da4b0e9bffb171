"""Calibration and validation (seed §2.4: "B must be calibrated from measurements")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seedance.real.calibrate import (
    _predict,
    correction_factor,
    fit_corrections,
    fit_efficiency,
    fit_pair,
    median_ci,
    pooled,
    split_sizes,
)
from seedance.real.microbench import iters_for, iters_for_duration, schedule


def test_theil_sen_recovers_alpha_beta_despite_an_outlier():
    sizes = np.array([4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20])
    alpha_s, beta_Bps = 50e-6, 2e9
    times = alpha_s + sizes / beta_Bps
    times[2] *= 8  # a scheduler hiccup
    fit = fit_pair(sizes, times)
    assert fit["bandwidth_GBps"] == pytest.approx(2.0, rel=1e-6)
    assert fit["latency_us"] == pytest.approx(50.0, rel=1e-6)
    low, high = fit["bandwidth_GBps_ci"]
    assert low <= fit["bandwidth_GBps"] <= high


def test_median_ci_brackets_the_median():
    rng = np.random.default_rng(0)
    samples = rng.lognormal(mean=-7, sigma=0.3, size=30)
    median, low, high = median_ci(samples)
    assert low <= median <= high and median == pytest.approx(np.median(samples))
    assert median_ci([1.0]) == (1.0, 1.0, 1.0)


def test_collective_efficiency_and_algorithm_are_recovered_from_their_own_predictions():
    n = 4
    bandwidth = np.full((n, n), 3.0)
    latency = np.full((n, n), 100.0)
    sizes = [1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24]
    rows = [{"collective": "allreduce", "size_bytes": s,
             "median_s": _predict("allreduce", s, bandwidth * 0.4, np.full((n, n), 300.0), "ring")} for s in sizes]
    fit = fit_efficiency(rows, bandwidth, latency)["allreduce"]
    assert fit["eta"] == pytest.approx(0.4, rel=1e-3)
    assert fit["median_abs_log_error"] < 1e-6
    # ring (6 latency steps at n=4) and recursive halving-doubling (4 steps, same bytes) explain these times
    # equally well; whichever wins, its per-step latency reproduces them
    steps = {"ring": 6, "rhd": 4}[fit["algorithm"]]
    assert fit["kappa_us"] * steps == pytest.approx(300.0 * 6, rel=1e-3)


def test_schedule_is_a_fresh_permutation_per_round_and_the_same_on_every_rank():
    rounds = schedule(24, 10, seed=7)
    assert all(sorted(order) == list(range(24)) for order in rounds)
    assert len({tuple(order) for order in rounds}) == 10  # a different order each round
    assert schedule(24, 10, seed=7) == rounds  # every rank computes the same schedule from the plan's seed
    assert schedule(24, 10, seed=8) != rounds  # validate (another seed) samples in another order


def test_small_messages_are_timed_in_loops_big_ones_alone():
    assert iters_for(4096) == 32 and iters_for(256 << 10) == 4
    assert iters_for(1 << 20) == 1 and iters_for(64 << 20) == 1


def test_samples_are_loops_lasting_the_minimum_duration():
    assert iters_for_duration(1e-6, 0.1) == 100_000  # 1 us operations: 100 ms of them
    assert iters_for_duration(0.3, 0.1) == 1  # a slow operation is one sample by itself
    assert iters_for_duration(0.0, 0.1) == iters_for_duration(-1.0, 0.1) > 1  # unmeasurably fast: the cap


def test_held_out_sizes_lie_strictly_between_calibration_sizes():
    calibration, held = split_sizes([4096, 16384, 65536, 1 << 20, 16 << 20], world_size=4)
    assert calibration == [4096, 16384, 65536, 1 << 20, 16 << 20]
    assert len(held) == 4 and all(a < h < b for a, h, b in zip(calibration, held, calibration[1:]))
    assert all(h % 16 == 0 for h in held)  # whole float32 elements for each of 4 ranks' allgather share
    assert held[0] == 8192 and held[-1] == 4 << 20  # geometric midpoints
    assert not set(held) & set(calibration)


def test_repeats_pool_samples_per_item():
    raws = [{"collectives": [{"collective": "allreduce", "size_bytes": 8, "iters": 5, "samples_s": [1.0, 2.0]}]},
            {"collectives": [{"collective": "allreduce", "size_bytes": 8, "iters": 9, "samples_s": [3.0]},
                             {"collective": "broadcast", "size_bytes": 8, "iters": 9, "samples_s": [4.0]}]}]
    rows = pooled(raws, "collectives")
    assert [(r["collective"], r["samples_s"]) for r in rows] == [("allreduce", [1.0, 2.0, 3.0]),
                                                                   ("broadcast", [4.0])]


def test_residual_correction_is_one_for_the_model_itself_and_interpolates_log_log():
    n = 2
    bandwidth, latency = np.full((n, n), 2.0), np.full((n, n), 50.0)
    sizes = [1 << 20, 1 << 22, 1 << 24]
    fit = {"algorithm": "ring", "eta": 0.5, "kappa_us": 200.0}
    model = {s: _predict("allreduce", s, bandwidth * 0.5, np.full((n, n), 200.0), "ring") for s in sizes}
    slow = {1 << 20: 1.0, 1 << 22: 1.0, 1 << 24: 4.0}  # out of cache at the largest size
    rows = [{"collective": "allreduce", "size_bytes": s, "median_s": model[s] * slow[s]} for s in sizes]
    fits = {"allreduce": dict(fit)}
    fit_corrections(rows, fits, bandwidth, latency)
    assert fits["allreduce"]["correction"]["factors"] == pytest.approx([1.0, 1.0, 4.0])
    assert correction_factor(fits["allreduce"], 1 << 22) == pytest.approx(1.0)
    assert correction_factor(fits["allreduce"], 1 << 23) == pytest.approx(2.0)  # halfway in log size and log factor
    assert correction_factor(fits["allreduce"], 1 << 26) == pytest.approx(4.0)  # the end value beyond the range
    assert correction_factor(fits["allreduce"], 1 << 10) == pytest.approx(1.0)
    assert correction_factor(fit, 1 << 23) == 1.0  # a calibration without a table


@pytest.mark.multiprocess
@pytest.mark.slow
def test_calibrate_then_validate_end_to_end(tmp_path, capsys):
    from seedance.cli import main
    from seedance.models.topology import load

    topo = tmp_path / "cal.yaml"
    assert main(["real", "calibrate", "--world-size", "2", "--sizes", "4KiB:256KiB:4", "--reps", "2",
                 "--repeats", "2", "--min-sample-ms", "10", "--out", str(topo), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert load(str(topo)).num_devices == 2 and cal["backend"] == "gloo"
    assert set(cal["fits"]) == {"allreduce", "allgather", "broadcast"}
    assert main(["real", "validate", "--world-size", "2", "--topology", str(topo),
                 "--figure", str(tmp_path / "fig"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {r["collective"] for r in result["rows"]} == {"allreduce", "allgather", "broadcast"}
    for row in result["rows"]:
        assert row["measured_s"] > 0 and row["predicted_s"] > 0
        assert row["rel_error"] == pytest.approx((row["predicted_s"] - row["measured_s"]) / row["measured_s"])
    assert (tmp_path / "fig.pdf").exists() and (tmp_path / "fig.png").exists()
    assert "median_abs_rel_error_ge_1MiB" in result and "median_abs_model_rel_error_ge_1MiB" in result
    assert "median_abs_rel_error_heldout" in result and "repeat_halfwidth_pp" in result
    assert result["repeats"] == 2 and {r["repeat"] for r in result["rows"]} == {0, 1}  # the calibration's schedule
    assert {r["size_bytes"] for r in result["rows"] if r["heldout"]} == {8192, 32768, 131072}
    for row in result["rows"]:
        assert row["predicted_s"] == pytest.approx(row["model_s"] * row["correction"])
