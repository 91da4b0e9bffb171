"""Runners of the paper's sweeps that the built-in ones do not cover: ``fn(params, seed) -> dict[str, scalar]``.

Specs name them ``paper-pixel``, ``paper-convergence``, ``paper-nccl``, ``paper-sim-vs-real`` and ``paper-memory``
(listed in :mod:`seedance.sweep.registry`, which imports this module only when one of them is validated or run), or
``seedance.paper.runners:NAME``.
Each checks its parameters first (``validate_NAME``; an unknown or bad one is a one-line
:class:`~seedance.errors.SpecError` naming ``params.X``) and returns flat metrics.

* :func:`pixel` — one run of the pixel-vs-consensus study (seed §2.1): the causal protocol's convergence time of a
  write (last replica applied it), or a Raft write's latency (a lower bound of its convergence), on dgx-a100 with a
  60 Hz frame workload, with or without training traffic. Metrics p50/p99/max in ms, bytes of delta vs full-state
  sync (causal only), ``within_one_frame``.
* :func:`convergence` — one seed of compressed SGD (common step-size schedule, K workers with error feedback for
  biased compressors) and its time to accuracy on one fabric (seed §2.4): iterations to the target gap × (compute +
  the compressor's collective on that fabric).
* :func:`nccl` — one row of a published nccl-tests curve (``tests/data/nccl``) against the cost model's prediction:
  measured and predicted time and busbw, their ratio; ``present: false`` when the curve has no row at that size.
* :func:`memory` — one memory soak of the commit protocol on real processes (seed §4.4): RSS per period, drift,
  slope with its CI, growth of live handles, fds and threads.
* :func:`sim_vs_real` — the same protocol, clients and duration on real processes and in the simulator on a
  measured host profile: both throughputs and latencies and the relative errors. A held-out point is predicted
  with its CPU level anchored on a real run of the profile's configuration just before it (``anchor``, as the
  experiment anchors each round); ``unanchored_sim_*`` beside it.
"""

from __future__ import annotations

import fcntl
import functools
import math
from pathlib import Path
from typing import Any

from seedance.errors import SpecError
from seedance.sweep.runners import current_point_dir, known


def _choice(field: str, value: Any, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise SpecError(f"params.{field}", f"unknown value {value!r}", f"valid: {', '.join(valid)}")
    return value


def _bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"params.{field}", f"expected true or false, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------------- pixel
PIXEL_PARAMS: dict[str, Any] = {"protocol": "causal", "grid": 16, "writes_per_frame": 4, "background": False,
                                "duration_s": 0.4, "clients": 16}


def _pixel_setup(params: dict[str, Any]) -> dict[str, Any]:
    from seedance import validation as V

    p = known("paper-pixel", params, PIXEL_PARAMS)
    _choice("protocol", p["protocol"], ("causal", "raft"))
    V.integer("params.grid", p["grid"], lo=2, hi=1024)
    V.integer("params.writes_per_frame", p["writes_per_frame"], lo=1, hi=1024)
    V.integer("params.clients", p["clients"], lo=1, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
    V.number("params.duration_s", p["duration_s"], lo=0, hi=V.MAX_SIM_DURATION_S, lo_open=True,
             why=V.WHY_SIM_DURATION)
    _bool("background", p["background"])
    return p


def validate_pixel(params: dict[str, Any]) -> None:
    _pixel_setup(params)


def pixel(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from seedance.experiments.causal import measure_run, pixel_config

    p = _pixel_setup(params)
    config = pixel_config(p["protocol"], grid=p["grid"], writes_per_frame=p["writes_per_frame"],
                     duration_s=float(p["duration_s"]), seed=seed, background=p["background"], clients=p["clients"])
    row, _ = measure_run(config)
    keep = ("ops_ok", "samples", "p50_ms", "p99_ms", "max_ms", "within_one_frame", "converged", "causal_violations",
            "bytes_delta", "bytes_full_state", "metric")
    return {k: row.get(k) for k in keep}


# ----------------------------------------------------------------------------------------------- convergence
CONVERGENCE_PARAMS: dict[str, Any] = {"compressor": "identity", "fabric": "nvlink-node (dgx-a100)",
                                      "problem": "logistic", "iterations": 400, "workers_K": 4, "batch": 8,
                                      "target_factor": 0.005}


def _convergence_setup(params: dict[str, Any]) -> dict[str, Any]:
    from seedance import validation as V
    from seedance.analysis.convergence.time_to_accuracy import FABRICS
    from seedance.models.compression import parse_compressor

    p = known("paper-convergence", params, CONVERGENCE_PARAMS)
    _choice("fabric", p["fabric"], tuple(FABRICS))
    _choice("problem", p["problem"], ("logistic", "mlp"))
    V.integer("params.iterations", p["iterations"], lo=10, hi=1_000_000)
    V.integer("params.workers_K", p["workers_K"], lo=1, hi=1024)
    V.integer("params.batch", p["batch"], lo=1, hi=100_000)
    V.number("params.target_factor", p["target_factor"], lo=0, hi=1, lo_open=True)
    try:
        compressor = parse_compressor(p["compressor"])
    except SpecError as err:
        raise SpecError("params.compressor", err.problem, err.valid) from None
    return {**p, "compressor_obj": compressor}


def validate_convergence(params: dict[str, Any]) -> None:
    _convergence_setup(params)


@functools.lru_cache(maxsize=4)
def _problem(name: str) -> Any:
    from seedance.experiments.convergence import ExperimentConfig
    from seedance.analysis.convergence.problems import make_logistic, make_mlp

    config = ExperimentConfig()  # the study's problem sizes; the data set's seed is fixed (0): seeds vary the runs
    if name == "logistic":
        return make_logistic(samples=config.logistic_samples, dim=config.logistic_dim, l2=config.logistic_l2, seed=0)
    return make_mlp(samples=config.mlp_samples, seed=0)


def convergence(params: dict[str, Any], seed: int) -> dict[str, Any]:
    import dataclasses

    import torch

    from seedance.experiments.convergence import ExperimentConfig, common_run
    from seedance.analysis.convergence.problems import LogisticProblem
    from seedance.analysis.convergence.time_to_accuracy import load_fabric, time_to_accuracy
    from seedance.analysis.convergence.training import iterations_to_target

    p = _convergence_setup(params)
    problem = _problem(p["problem"])
    base = ExperimentConfig.quick(seeds=1, root_seed=seed)
    config = dataclasses.replace(base, common_iterations=p["iterations"], mlp_iterations=p["iterations"],
                                 workers_K=p["workers_K"], batch=p["batch"], seeds=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = common_run(problem, p["compressor_obj"], config, None)
    finally:
        torch.set_num_threads(threads)
    curve = (result.gap_average if isinstance(problem, LogisticProblem) else result.gap_last)[0]
    gap_initial = float(result.gap_last[0, 0])
    iterations = iterations_to_target(result.horizons, curve, p["target_factor"] * gap_initial)
    timing = time_to_accuracy(iterations, p["compressor_obj"], load_fabric(p["fabric"]), config.compute)
    return {"final_gap": float(curve[-1]), "gap_initial": gap_initial, "iterations_to_target": iterations,
            "reached": iterations is not None, "iterations_run": int(result.horizons[-1]), **timing}


# ------------------------------------------------------------------------------------------------------ nccl
NCCL_PARAMS: dict[str, Any] = {"curve": "a100-1x8-allreduce", "model": "nccl", "size": 8}


@functools.lru_cache(maxsize=1)
def _curves() -> dict[str, Any]:
    from seedance.models.cost import published

    return {curve.id: curve for curve in published.curves()}


def _nccl_setup(params: dict[str, Any]) -> dict[str, Any]:
    from seedance import validation as V
    from seedance.models.units import parse_size

    p = known("paper-nccl", params, NCCL_PARAMS)
    _choice("curve", p["curve"], tuple(_curves()))
    _choice("model", p["model"], ("nccl", "alpha-beta"))
    size = p["size"]
    size_bytes = int(parse_size(size, field="params.size")) if isinstance(size, str) else \
        V.integer("params.size", size, lo=1, hi=1 << 50)
    return {**p, "size_bytes": size_bytes}


def validate_nccl(params: dict[str, Any]) -> None:
    _nccl_setup(params)


def nccl(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """Deterministic: the seed is recorded, not used."""
    from seedance.models.cost import bus_bandwidth_factor, collective_time

    p = _nccl_setup(params)
    curve = _curves()[p["curve"]]
    rows = curve.rows[curve.rows["size_bytes"] == p["size_bytes"]]
    out: dict[str, Any] = {"collective": curve.collective, "hardware": curve.hardware, "targets": curve.targets,
                           "num_devices": curve.topology.num_devices, "size_bytes": p["size_bytes"]}
    if rows.empty:
        return {**out, "present": False, "measured_us": None, "predicted_us": None, "ratio": None,
                "measured_busbw_GBps": None, "predicted_busbw_GBps": None, "algorithm_used": None}
    measured_us = float(rows["oop_time_us"].iloc[0])
    cost = collective_time(curve.collective, p["size_bytes"], curve.topology, model=p["model"])
    predicted_us = cost.time_s * 1e6
    factor = bus_bandwidth_factor(curve.collective, curve.topology.num_devices)
    return {**out, "present": True, "measured_us": measured_us, "predicted_us": predicted_us,
            "ratio": predicted_us / measured_us,
            "measured_busbw_GBps": p["size_bytes"] / (measured_us * 1e3) * factor,
            "predicted_busbw_GBps": p["size_bytes"] / (predicted_us * 1e3) * factor,
            "algorithm_used": cost.algorithm}


# ----------------------------------------------------------------------------------------------- sim vs real
SIM_VS_REAL_PARAMS: dict[str, Any] = {"protocol": "raft", "nodes": 3, "clients": 8, "value_size": 0,
                                      "read_fraction": 0.0, "fsync": True, "crash": False, "duration_s": 2.0,
                                      "host_profile": None, "profile_clients": 8, "profile_duration_s": 2.0,
                                      "profile_runs": 3, "anchor": True}


def _sim_vs_real_setup(params: dict[str, Any]) -> dict[str, Any]:
    from seedance import validation as V
    from seedance.real.node import resolve_protocol

    p = known("paper-sim-vs-real", params, SIM_VS_REAL_PARAMS)
    resolve_protocol(p["protocol"])
    V.integer("params.nodes", p["nodes"], lo=1, hi=V.max_real_nodes(), why=V.why_real_nodes())
    V.integer("params.clients", p["clients"], lo=1, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
    V.integer("params.value_size", p["value_size"], lo=0, hi=V.MAX_VALUE_BYTES, why=V.WHY_VALUE_BYTES)
    V.number("params.read_fraction", p["read_fraction"], lo=0, hi=1, hi_open=True)
    for flag in ("fsync", "crash", "anchor"):
        if not isinstance(p[flag], bool):
            raise SpecError(f"params.{flag}", f"must be true or false, got {p[flag]!r}")
    V.number("params.duration_s", p["duration_s"], lo=0, hi=V.MAX_REAL_DURATION_S, lo_open=True)
    V.integer("params.profile_clients", p["profile_clients"], lo=1, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
    V.number("params.profile_duration_s", p["profile_duration_s"], lo=0.5, hi=60)
    V.integer("params.profile_runs", p["profile_runs"], lo=1, hi=20)
    if p["host_profile"] is not None and not Path(str(p["host_profile"])).is_file():
        raise SpecError("params.host_profile", f"{p['host_profile']} is not a file",
                        "a profile from `seedance real profile`, or null (measured once per sweep)")
    return p


def validate_sim_vs_real(params: dict[str, Any]) -> None:
    _sim_vs_real_setup(params)


def _sweep_profile(p: dict[str, Any]) -> tuple[Any, str]:
    """The host profile: the given file, or one measured once per sweep and profile setting (nodes, clients,
    duration, runs) into ``DIR/host.yaml`` (``DIR/host-<setting>.yaml`` for any setting but the first; under a lock,
    so concurrent runs measure it once). It is fitted on ``profile_clients`` writing clients whichever point measures
    it (the sweep's first point used to fit it on its own clients: 2 in the suite's order, the workload the
    simulator predicts worst, with 8 then held out)."""
    from seedance.models.host import load_profile

    if p["host_profile"] is not None:
        return load_profile(p["host_profile"]), str(p["host_profile"])
    sweep_dir = current_point_dir().parent.parent  # DIR/runs/<key> -> DIR
    setting = {"nodes": p["nodes"], "clients": p["profile_clients"], "duration_s": float(p["profile_duration_s"]),
               "runs": int(p["profile_runs"])}
    with open(sweep_dir / ".host.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = sweep_dir / "host.yaml"
        if path.is_file() and _profile_setting(load_profile(path)) != setting:
            tag = "-".join(f"{k}{v:g}" for k, v in setting.items())
            path = sweep_dir / f"host-{tag}.yaml"
        if not path.is_file():
            from seedance.experiments.host_profile import profile_host
            from seedance.files import atomic_write

            profile = profile_host(path.with_name(path.stem.replace("host", "profile-work", 1)), nodes=setting["nodes"],
                                   clients=setting["clients"], duration_s=setting["duration_s"],
                                   runs=setting["runs"])
            atomic_write(path, profile.to_yaml().encode())
    return load_profile(path), str(path)


def _profile_setting(profile: Any) -> dict[str, Any]:
    config = (profile.measured or {}).get("config", {})
    return {"nodes": config.get("nodes"), "clients": config.get("clients"),
            "duration_s": float(config.get("duration_s", 0.0)), "runs": config.get("runs")}


def _rel(predicted: Any, measured: Any) -> float | None:
    if predicted is None or measured is None or not measured or not math.isfinite(float(measured)):
        return None
    return float(predicted) / float(measured) - 1.0


def sim_vs_real(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from seedance.experiments.sim_vs_real import (Config, anchor_cpu, at_run, is_fitted, measure_real, predict,
                                               speed_factor)

    p = _sim_vs_real_setup(params)
    profile, profile_path = _sweep_profile(p)
    config = Config(p["clients"], p["value_size"], float(p["read_fraction"]), p["fsync"], p["crash"])
    duration_s = float(p["duration_s"])
    fitted = (profile.measured or {}).get("config", {})
    held_out = not is_fitted(config, fitted, p["protocol"])
    point = current_point_dir()
    anchor = None
    if held_out and p["anchor"]:
        # the experiment's per-round anchor, per point: a real run of the fitted configuration just before this
        # one sets the CPU level the simulator predicts this point at (the machine drifts from minute to minute:
        # a profile's run at 1,555 ops/s, the points after it at 2,298-2,457); the point itself is never seen
        reference = Config(int(fitted.get("clients", p["profile_clients"])))
        ref = measure_real(p["protocol"], p["nodes"], reference, duration_s, seed + 1, point / "anchor-real")
        anchor = anchor_cpu([{"config": reference.name, "held_out": False, "round": seed,
                              "real_ops_s": ref["throughput_ops_s"], "real_tenant_cores": ref["tenant_cores"],
                              "real_cpu_speed": speed_factor(profile, ref.get("cpu_chunk_s")),
                              "sim_ops_s": float("nan")}],
                            profile, protocol=p["protocol"], nodes=p["nodes"], configs=[reference],
                            duration_s=duration_s, steps=6)
    real = measure_real(p["protocol"], p["nodes"], config, duration_s, seed + 1, point / "real")
    # the simulator sees the other tenants' CPU and the cores' speed metered during this very real run, as the
    # experiment does
    speed = speed_factor(profile, real.get("cpu_chunk_s"))
    unanchored = predict(p["protocol"], p["nodes"], config, duration_s, seed + 1,
                         at_run(profile, real["tenant_cores"], speed))
    sim = unanchored if anchor is None else predict(p["protocol"], p["nodes"], config, duration_s, seed + 1,
                                                    at_run(profile.scaled_cpu(anchor["factor"]),
                                                           real["tenant_cores"], speed))
    out: dict[str, Any] = {"host_profile": profile_path, "config": config.name, "held_out": held_out,
                           "loadavg_1min": real["loadavg_1min"], "tenant_cores": real["tenant_cores"],
                           "cpu_speed": speed, "anchor_factor": None if anchor is None else anchor["factor"],
                           "anchor_real_ops_s": None if anchor is None else anchor["real_ops_s"]}
    for key in ("throughput_ops_s", "latency_ms_p50", "latency_ms_p99"):
        out[f"real_{key}"] = real.get(key)
        out[f"sim_{key}"] = sim.get(key)
        out[f"rel_error_{key}"] = _rel(sim.get(key), real.get(key))
        out[f"unanchored_sim_{key}"] = unanchored.get(key)
    return out


# ---------------------------------------------------------------------------------------------------- memory
MEMORY_PARAMS: dict[str, Any] = {"ranks": 2, "duration_s": 60.0, "scenario": "none", "variant": "fixed",
                                 "commit_every": 1, "interval_s": 1.0, "drift_threshold_pct": 1.0}


def _memory_setup(params: dict[str, Any]) -> dict[str, Any]:
    from seedance import validation as V
    from seedance.experiments import consensus_check as C

    p = known("paper-memory", params, MEMORY_PARAMS)
    limit, why = C.max_ranks()
    V.integer("params.ranks", p["ranks"], lo=1, hi=limit, why=why)
    V.number("params.duration_s", p["duration_s"], lo=5, hi=C.MAX_DURATION_S)
    _choice("scenario", p["scenario"], ("none", *C.SCENARIO_NAMES))
    _choice("variant", p["variant"], ("buggy", "fixed"))
    V.integer("params.commit_every", p["commit_every"], lo=1, hi=10_000)
    V.number("params.interval_s", p["interval_s"], lo=0.05, hi=60)
    V.number("params.drift_threshold_pct", p["drift_threshold_pct"], lo=0, hi=100, lo_open=True)
    return p


def validate_memory(params: dict[str, Any]) -> None:
    _memory_setup(params)


def memory(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One memory soak (``seedance real soak``: a fault-free or F-scenario commit-protocol training run on real
    processes, every rank sampled): rank 0's RSS per period (the seed's §4.4 table: three periods), its fluctuation
    and drift, the slope with its CI, and the largest growth of live handles, fds and threads over the ranks."""
    from seedance.experiments.consensus_check import run_soak

    p = _memory_setup(params)
    report = run_soak(ranks=p["ranks"], duration_s=float(p["duration_s"]),
                      scenario="" if p["scenario"] == "none" else p["scenario"], variant=p["variant"], seed=seed,
                      commit_every=p["commit_every"], interval_s=float(p["interval_s"]),
                      drift_threshold_pct=float(p["drift_threshold_pct"]), out=current_point_dir())
    mem = report["memory"]
    out: dict[str, Any] = {"leak": not report["passed"], "leaks": len(mem["leaks"]),
                           "max_fluctuation_pct": mem["max_fluctuation_pct"], "max_drift_pct": mem["max_drift_pct"],
                           "commits": report["commits"] if not isinstance(report["commits"], (list, dict)) else None,
                           "cause": "; ".join(report["causes"])[:500] or None}
    rss = mem["ranks"].get("0", {}).get("rss")
    if rss:
        out["rss_mib"] = rss["mean"] / 2**20
        out["rss_slope_kib_s"] = rss["fit"]["slope"] / 1024
        out["rss_slope_lo_kib_s"], out["rss_slope_hi_kib_s"] = (c / 1024 for c in rss["fit"]["ci"])
        out["rss_drift_pct"] = rss["fit"]["drift_pct"]
        for row in rss["table"]:
            out[f"rss_p{row['period']}_mib"] = row["mean"] / 2**20
            out[f"fluctuation_p{row['period']}_pct"] = row["fluctuation_pct"]
    for kind in ("handles", "fds", "threads"):
        growth = [c[kind]["leaked"] for c in report["counts"].values() if kind in c]
        out[f"{kind}_growth"] = max(growth) if growth else None
    return out


