"""Calibrate the fabric model from measurements: a matrix-form topology file fitted to torch.distributed timings.

Rules (seed §2.4 "B must be calibrated from measurements"; Hockney's alpha-beta model; Sen 1968 / Theil 1950
robust slopes; Hoefler & Belli SC'15 on medians and confidence intervals):

1. :mod:`.microbench` measures half ping-pong times for every ordered pair, then (a separate phase) collective
   times (allreduce, allgather, broadcast), after a warm-up pass, in ``reps`` randomly ordered rounds with one
   thread per rank, each sample a loop of back-to-back operations lasting >= ``min_sample_s`` (0.1 s), as
   nccl-tests times loops. ``--sizes`` are the *calibration* sizes; the geometric midpoints between consecutive
   ones are *held-out* sizes (:func:`split_sizes`), measured in the same schedule but never fitted. The whole
   measurement is repeated ``repeats`` (>= 3) times in fresh processes and the samples pooled. ``validate`` runs the
   identical schedule (same items, phases, buffers, loop rule; another seed) from the sidecar's plan. Each (pair or
   collective, size) is summarised by its median with a 95 % bootstrap confidence interval.
2. Per ordered pair, ``t(S) = alpha + S / beta`` is fitted to the medians by Theil–Sen (``scipy.stats.theilslopes``,
   robust to the outliers a shared machine produces): ``latency_us = alpha`` (clipped at 0) and
   ``bandwidth_GBps = beta``, with the slope's 95 % interval recorded.
3. Collectives are not sums of isolated transfers: gloo reduces on the CPU, concurrent transfers share memory
   bandwidth and cores. Two global factors are therefore fitted to the *collective* medians by
   ``scipy.optimize.least_squares(loss="soft_l1")`` on log-ratios, *per collective*: an efficiency ``eta``
   scaling every pair's bandwidth and a per-message latency ``kappa`` (µs) replacing the ping-pong latency (a
   ping-pong on a shared CPU pays two scheduler wake-ups per message that a collective's pipelined steps do not),
   for the cost-model algorithm
   (:data:`seedance.models.cost.ALGORITHMS`) that fits best (gloo's own choice, seen from outside). On this kind of
   machine they differ a lot between collectives (gloo's allgather copies through extra buffers, its broadcast
   does not reduce), which is why one pair of factors cannot serve all.
   The file holds allreduce's *effective* matrices ``eta * B`` and ``kappa`` (the collective training
   and commit protocols use most), so ``--topology FILE`` needs nothing else; the sidecar ``FILE.calibration.json``
   keeps the raw medians and intervals, the pair fits and every collective's ``eta``, ``kappa_us`` and algorithm,
   which ``validate`` uses. Nothing is tuned per test: the same procedure runs for every world size and machine.
4. What two parameters cannot express is kept, not hidden: per collective, the residual ``measured / model`` at
   every calibrated size (:func:`fit_corrections`; on a 2-core EPYC with a 32 MiB L3, gloo's 64 MiB allgather
   takes ~2x what the alpha-beta fit of smaller sizes predicts). :func:`correction_factor` interpolates it in
   log-log between calibrated sizes; ``validate`` reports the error with and without it, because at a calibrated
   size the corrected prediction is the calibration's own median, so its error there measures reproducibility
   (run-to-run noise), while the model-only error measures the cost model.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seedance.errors import SpecError

DEFAULT_SIZES = "4KiB:16MiB:4"
DEFAULT_REPEATS = 3
DEFAULT_MIN_SAMPLE_S = 0.1
DEFAULT_REPS = 3


def split_sizes(sizes: Sequence[int], world_size: int) -> tuple[list[int], list[int]]:
    """(calibration sizes, held-out sizes): the held-out ones are the geometric midpoints of consecutive calibration
    sizes, rounded to a multiple of 4·world_size bytes (whole float32 elements for every rank's allgather share)."""
    calibration = sorted({int(s) for s in sizes})
    unit = 4 * max(1, int(world_size))
    held = []
    for low, high in zip(calibration, calibration[1:]):
        mid = int(round(math.sqrt(low * high) / unit)) * unit
        if low < mid < high:
            held.append(mid)
    return calibration, held


# ------------------------------------------------------------------------------------------------ statistics
def median_ci(samples: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Median and a bootstrap (percentile) confidence interval; a single sample gives a zero-width interval."""
    data = np.asarray(samples, dtype=float)
    median = float(np.median(data))
    if data.size < 3:
        return median, float(data.min()), float(data.max())
    from scipy.stats import bootstrap

    res = bootstrap((data,), np.median, confidence_level=confidence, n_resamples=999, method="percentile",
                    random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return median, min(low, median), max(high, median)


def fit_pair(sizes: Sequence[int], times_s: Sequence[float]) -> dict[str, float]:
    """Theil–Sen fit of ``t = alpha + S / beta``; bandwidth in GB/s, latency in µs, with the slope's 95 % CI."""
    from scipy.stats import theilslopes

    x = np.asarray(sizes, dtype=float)
    y = np.asarray(times_s, dtype=float)
    slope, intercept, low, high = theilslopes(y, x, alpha=0.95, method="joint")
    if not slope > 0:  # flat or inverted (noise dominated): fall back to the largest message's rate
        k = int(np.argmax(x))
        slope, low, high = y[k] / x[k], y[k] / x[k], y[k] / x[k]
        intercept = 0.0
    return {"bandwidth_GBps": 1.0 / slope / 1e9, "latency_us": max(0.0, float(intercept)) * 1e6,
            "bandwidth_GBps_ci": [1.0 / max(high, 1e-30) / 1e9, 1.0 / max(low, 1e-30) / 1e9]}


# ---------------------------------------------------------------------------------------------- measurement
def measure(world_size: int, sizes: Sequence[int], *, p2p: bool, collectives: Sequence[str], reps: int = 20,
            warmups: int = 2, seed: int = 0, work_dir: Path | None = None,
            timeout_s: float = 3600.0, p2p_sizes: Sequence[int] | None = None,
            min_sample_s: float = 0.0) -> dict[str, Any]:
    """Run :mod:`.microbench` on ``world_size`` local ranks and return its raw results."""
    from seedance.real.launcher import run_workers

    if world_size < 2:
        raise SpecError("--world-size", f"{world_size}", "at least 2 ranks")
    with tempfile.TemporaryDirectory(prefix="seedance-bench-") as tmp:
        run_dir = Path(work_dir) if work_dir else Path(tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        out = run_dir / "bench.json"
        plan = {"p2p": p2p, "collectives": list(collectives), "sizes": [int(s) for s in sizes], "reps": reps,
                "warmups": warmups, "seed": seed, "out": str(out), "min_sample_s": float(min_sample_s),
                "p2p_sizes": [int(s) for s in (p2p_sizes if p2p_sizes is not None else sizes)]}
        (run_dir / "plan.json").write_text(json.dumps(plan))
        run_workers("seedance.real.microbench", [str(run_dir / "plan.json")], world_size, run_dir,
                    timeout_s=timeout_s, extra_env={"OMP_NUM_THREADS": "1"})
        return json.loads(out.read_text())


COLLECTIVES = ("allreduce", "allgather", "broadcast")


def measure_plan(world_size: int, plan: dict[str, Any], *, seed: int, work_dir: Path | None = None
                 ) -> list[dict[str, Any]]:
    """The schedule both ``calibrate`` and ``validate`` run: ``plan["repeats"]`` full measurements in fresh
    processes (ping-pong phase on the calibration sizes, then collectives on calibration and held-out sizes), each
    with its own seed; returns their raw results."""
    sizes = sorted(set(plan["sizes_bytes"]) | set(plan["heldout_bytes"]))
    out = []
    for r in range(int(plan["repeats"])):
        sub = None if work_dir is None else Path(work_dir) / f"repeat{r}"
        out.append(measure(world_size, sizes, p2p=True, collectives=plan["collectives"], reps=int(plan["reps"]),
                           warmups=int(plan["warmups"]), seed=seed + 101 * r, work_dir=sub,
                           p2p_sizes=plan["sizes_bytes"], min_sample_s=float(plan["min_sample_s"])))
    return out


def pooled(raws: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Rows of every repeat merged per item (their samples concatenated), in first-seen order."""
    merged: dict[tuple, dict[str, Any]] = {}
    for raw in raws:
        for row in raw[key]:
            ident = tuple(sorted((k, v) for k, v in row.items() if k not in ("samples_s", "iters")))
            if ident not in merged:
                merged[ident] = {**row, "samples_s": list(row["samples_s"])}
            else:
                merged[ident]["samples_s"] += list(row["samples_s"])
    return list(merged.values())


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        median, low, high = median_ci(row["samples_s"])
        out.append({**{k: v for k, v in row.items() if k != "samples_s"}, "median_s": median, "ci_low_s": low,
                    "ci_high_s": high, "samples": len(row["samples_s"])})
    return out


# ---------------------------------------------------------------------------------------------------- fitting
def _predict(collective: str, size: int, bandwidth: np.ndarray, latency: np.ndarray, algorithm: str) -> float:
    from seedance.models.cost import collective_time
    from seedance.models.topology import from_matrix

    topology = from_matrix(bandwidth, latency)
    # gloo on CPU processes is not NCCL: its calibration fits the alpha-beta model
    return collective_time(collective, int(size), topology, algorithm=algorithm, model="alpha-beta").time_s


def fit_efficiency(rows: list[dict[str, Any]], bandwidth: np.ndarray, latency: np.ndarray) -> dict[str, Any]:
    """Per collective: efficiency ``eta`` (bandwidth factor), software latency ``kappa_us`` and the best algorithm.

    For each algorithm the cost model offers, ``(log eta, log kappa)`` is fitted by ``least_squares`` with a
    ``soft_l1`` loss on ``log(predicted / measured)`` over that collective's sizes; the algorithm with the smallest
    median absolute log error wins.
    """
    from scipy.optimize import least_squares

    from seedance.models.cost import ALGORITHMS

    fits: dict[str, dict[str, Any]] = {}
    for c in sorted({r["collective"] for r in rows}):
        mine = [r for r in rows if r["collective"] == c]
        meas = np.array([r["median_s"] for r in mine])
        best: dict[str, Any] | None = None
        for algorithm in (a for a in ALGORITHMS[c] if a != "hierarchical"):
            def residuals(params: np.ndarray, algorithm: str = algorithm) -> np.ndarray:
                eta, kappa = np.exp(params)
                pred = np.array([_predict(c, r["size_bytes"], bandwidth * eta, np.full_like(latency, kappa),
                                          algorithm) for r in mine])
                return np.log(pred / meas)

            x = least_squares(residuals, np.array([0.0, np.log(20.0)]), loss="soft_l1", f_scale=0.1).x
            error = float(np.median(np.abs(residuals(x))))
            if best is None or error < best["median_abs_log_error"]:
                best = {"algorithm": algorithm, "eta": float(np.exp(x[0])), "kappa_us": float(np.exp(x[1])),
                        "median_abs_log_error": error}
        assert best is not None
        fits[c] = best
    return fits


def fit_corrections(rows: list[dict[str, Any]], fits: dict[str, Any], bandwidth: np.ndarray,
                    latency: np.ndarray) -> None:
    """Per collective, the alpha-beta model's residual ``measured / predicted`` at every calibrated size, stored in
    ``fits[c]["correction"]`` (what the two-parameter model cannot express: gloo's allgather stages through a
    temporary and falls out of the last-level cache at the largest sizes). :func:`correction_factor` interpolates it."""
    for c, fit in fits.items():
        mine = sorted((r for r in rows if r["collective"] == c), key=lambda r: r["size_bytes"])
        model = [_predict(c, r["size_bytes"], bandwidth * fit["eta"], np.full_like(latency, fit["kappa_us"]),
                          fit["algorithm"]) for r in mine]
        fit["correction"] = {"sizes_bytes": [int(r["size_bytes"]) for r in mine],
                             "factors": [float(r["median_s"] / m) for r, m in zip(mine, model)]}


def correction_factor(fit: dict[str, Any], size_bytes: int) -> float:
    """The calibrated residual factor at ``size_bytes``: linear in (log size, log factor) between calibrated sizes,
    the end value beyond them; 1 when the calibration has none."""
    table = fit.get("correction")
    if not table:
        return 1.0
    x = np.log2(np.asarray(table["sizes_bytes"], dtype=float))
    y = np.log(np.asarray(table["factors"], dtype=float))
    return float(np.exp(np.interp(np.log2(float(size_bytes)), x, y)))


def topology_for(collective: str, calibration: dict[str, Any]):
    """The topology a collective is predicted on: the pair fits with that collective's (eta, kappa)."""
    from seedance.models.topology import from_matrix

    n = int(calibration["world_size"])
    bandwidth, latency = np.ones((n, n)), np.zeros((n, n))
    for p in calibration["pairs"]:
        bandwidth[p["src"], p["dst"]], latency[p["src"], p["dst"]] = p["bandwidth_GBps"], p["latency_us"]
    fit = calibration["fits"][collective]
    return from_matrix(bandwidth * fit["eta"], np.full((n, n), fit["kappa_us"]), name=f"calibrated-{collective}",
                       hosts=[0] * n)


def calibrate(world_size: int, sizes: Sequence[int], out: Path, *, reps: int = DEFAULT_REPS, warmups: int = 2,
              name: str | None = None, work_dir: Path | None = None, repeats: int = DEFAULT_REPEATS,
              min_sample_s: float = DEFAULT_MIN_SAMPLE_S, seed: int = 0) -> dict[str, Any]:
    """Measure, fit and write the topology file ``out`` (YAML or JSON by suffix) and ``out.calibration.json``."""
    from seedance.models.topology import from_matrix, load, to_dict

    if len(set(int(s) for s in sizes)) < 2:
        raise SpecError("--sizes", f"{len(sizes)} size(s)", "at least two sizes to fit latency and bandwidth")
    if repeats < 1:
        raise SpecError("--repeats", f"is {repeats}", "at least 1 (3 or more for an interval)")
    if not min_sample_s >= 0:
        raise SpecError("--min-sample-ms", f"is {min_sample_s * 1e3}", "milliseconds >= 0")
    calibration_sizes, heldout = split_sizes(sizes, world_size)
    plan = {"sizes_bytes": calibration_sizes, "heldout_bytes": heldout, "collectives": list(COLLECTIVES),
            "reps": int(reps), "warmups": int(warmups), "repeats": int(repeats), "min_sample_s": float(min_sample_s)}
    raws = measure_plan(world_size, plan, seed=seed, work_dir=work_dir)
    raw = {"backend": raws[0].get("backend", "gloo")}
    p2p = summarise(pooled(raws, "p2p"))
    every = summarise(pooled(raws, "collectives"))
    collectives = [r for r in every if int(r["size_bytes"]) in set(calibration_sizes)]  # fit: calibration sizes
    n = world_size
    bandwidth = np.zeros((n, n))
    latency = np.zeros((n, n))
    pairs = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            mine = sorted((r for r in p2p if r["src"] == i and r["dst"] == j), key=lambda r: r["size_bytes"])
            fit = fit_pair([r["size_bytes"] for r in mine], [r["median_s"] for r in mine])
            bandwidth[i, j], latency[i, j] = fit["bandwidth_GBps"], fit["latency_us"]
            pairs.append({"src": i, "dst": j, **fit})
    fits = fit_efficiency(collectives, bandwidth, latency)  # pair latencies stay in the sidecar
    fit_corrections(collectives, fits, bandwidth, latency)
    main = fits.get("allreduce") or next(iter(fits.values()))
    effective_bw = bandwidth * main["eta"]
    effective_lat = np.full_like(latency, main["kappa_us"])
    np.fill_diagonal(effective_bw, 1.0)  # ignored by the matrix form
    backend = raw.get("backend", "gloo")
    topo_name = name or f"calibrated-{backend}-{n}"
    topology = from_matrix(effective_bw, effective_lat, name=topo_name, hosts=[0] * n,
                           device_kinds=f"cpu-{backend}" if backend == "gloo" else "gpu")
    document = to_dict(topology)
    document["description"] = (
        f"seedance real calibrate: {backend}, world size {n}; per-pair Theil-Sen alpha-beta fits of half ping-pong "
        f"medians; bandwidth scaled by allreduce's fitted efficiency eta={main['eta']:.4g}, latency its "
        f"fitted per-message latency kappa={main['kappa_us']:.4g} us; per-collective eta, kappa and "
        f"algorithm in {Path(out).name}.calibration.json")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix in (".yaml", ".yml"):
        from seedance.validation import dumps_yaml

        out.write_text(dumps_yaml(document))
    else:
        out.write_text(json.dumps(document, indent=2) + "\n")
    load(str(out))  # what we wrote must load everywhere --topology is accepted
    sidecar = {"world_size": n, "backend": backend, "sizes_bytes": calibration_sizes, "heldout_bytes": heldout,
               "reps": reps, "warmups": warmups, "repeats": repeats, "min_sample_s": min_sample_s, "seed": seed,
               "plan": plan, "pairs": pairs, "p2p": p2p, "collectives": collectives,
               "heldout_collectives": [r for r in every if int(r["size_bytes"]) not in set(calibration_sizes)],
               "fits": fits, "topology": str(out)}
    Path(str(out) + ".calibration.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    return sidecar
