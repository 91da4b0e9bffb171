"""``seedance experiment pixel-vs-consensus``: the field report's §2.1 table measured in the simulator.

The report claims pixel-level (CRDT) state sync converges within one frame (< 16 ms) where traditional consensus
needs ≥ 100 ms. Here both run the same frame-rate workload on the same modelled fabric (dgx-a100: 8 GPUs of one
NVSwitch server, one node per GPU), with and without training traffic on the same links
(``allreduce:1GiB@0.2``: a 1 GiB allreduce every 200 ms):

* ``causal`` — the Seedance causal protocol; its *convergence* of a write is measured from the replica events: the
  time the last replica applied it (or a write after it) minus its invoke time (:mod:`seedance.history.causal`);
* ``raft`` — every write through Raft; a write's latency (invoke to ok: committed on a majority and applied at the
  leader) is a lower bound of its convergence, since the other replicas apply it only after they learn the commit.
  Writes invoked before the first acknowledged one (the first election) are left out.

Then the causal protocol alone over a sweep of grid sizes (16², 64², 256²) and writes per frame (1, 8, 32; 16
clients at 60 Hz, 0.5 simulated s each), to show where one frame (16.7 ms) stops holding, and the bytes its delta sync moved against full-state sync on the same schedule.
Outputs in DIR: ``rows.csv``, ``summary.json`` (rows, headline, provenance) and ``latency_cdf.{pdf,png}``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FRAME_MS = 1000.0 / 60.0
BACKGROUND = "allreduce:1GiB@0.2"


def pixel_config(protocol: str, *, grid: int, writes_per_frame: int, duration_s: float, seed: int,
                 background: bool, clients: int = 16) -> Any:
    """The simulated run of one point of the study (8 nodes on one dgx-a100 server, 60 Hz frames)."""
    from seedance.sim import SimConfig, WorkloadConfig

    protocol_config = {"width": grid, "height": grid} if protocol == "causal" else {}
    return SimConfig(protocol=protocol, nodes=8, duration_s=duration_s, seed=seed, topology="dgx-a100",
                     protocol_config=protocol_config,
                     workload=WorkloadConfig(mode="frame", clients=clients, keys=grid * grid, frame_rate_hz=60.0,
                                             writes_per_frame=writes_per_frame),
                     background=(BACKGROUND,) if background else (), trace=False)


def measure_run(config: Any) -> tuple[dict[str, Any], list[float]]:
    """Simulate ``config``: the study's row and the per-write times (convergence, or Raft's write latency)."""
    from seedance.history.anomalies import operations
    from seedance.history.convergence import check_convergence
    from seedance.sim import simulate

    result = simulate(config, liveness=False)
    summary = result.summary()
    row = {"protocol": config.protocol_name, "grid": int(np.sqrt(config.workload.keys)),
           "writes_per_frame": config.workload.writes_per_frame, "background": bool(config.background),
           "ops_ok": summary["ops_ok"], "wall_s": summary["wall_s"]}
    if config.protocol_name == "causal":
        ops, _ = operations(result.history)
        conv = check_convergence(ops, result.replicas, config.nodes, times=True)
        times = conv["times_ms"]
        row.update(metric="convergence", converged=summary["converged"],
                   causal_violations=summary["causal_violations"], bytes_delta=summary["bytes_delta"],
                   bytes_full_state=summary["bytes_full_state"])
    else:
        events = result.history
        first_ok = min((e.time for e in events if e.type.value == "ok"), default=0.0)
        start: dict[int, float] = {}
        times = []
        for e in events:
            if e.f.value != "write":
                continue
            if e.type.value == "invoke":
                start[e.process] = e.time
            elif e.type.value == "ok" and start.get(e.process, -1.0) >= first_ok:
                times.append((e.time - start[e.process]) * 1e3)
        row.update(metric="write-latency (lower bound of convergence)", converged=None, causal_violations=None,
                   bytes_delta=None, bytes_full_state=None)
    arr = np.asarray(times)
    row.update(samples=int(arr.size), p50_ms=float(np.percentile(arr, 50)) if arr.size else None,
               p99_ms=float(np.percentile(arr, 99)) if arr.size else None,
               max_ms=float(arr.max()) if arr.size else None)
    row["within_one_frame"] = row["p99_ms"] is not None and row["p99_ms"] < FRAME_MS
    return row, times


def run(out_dir: str | Path, *, quick: bool = False, seed: int = 1,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the study, write its files into ``out_dir`` and return the summary."""
    from seedance.provenance import run_metadata

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    duration = 0.4 if quick else 2.0
    grid = 16 if quick else 64
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {}
    for protocol in ("causal", "raft"):
        for background in (False, True):
            if progress:
                progress(f"{protocol}, {'with' if background else 'without'} training traffic")
            row, times = measure_run(pixel_config(protocol, grid=grid, writes_per_frame=4, duration_s=duration,
                                                  seed=seed, background=background))
            row["study"] = "headline"
            rows.append(row)
            curves[f"{protocol}{' + ' + BACKGROUND if background else ''}"] = times
    grids = (8, 16, 64) if quick else (16, 64, 256)
    bursts = (1, 16) if quick else (1, 8, 32)
    sweep_s = duration if quick else 0.5  # a sweep point is many more writes than the headline
    for g in grids:
        for w in bursts:
            if progress:
                progress(f"causal sweep: {g}x{g} grid, {w} writes per frame")
            row, _ = measure_run(pixel_config("causal", grid=g, writes_per_frame=w, duration_s=sweep_s, seed=seed,
                                              background=False))
            row["study"] = "sweep"
            rows.append(row)
    causal_rows = [r for r in rows if r["protocol"] == "causal" and r["bytes_full_state"]]
    delta = sum(r["bytes_delta"] for r in causal_rows)
    full = sum(r["bytes_full_state"] for r in causal_rows)
    headline = {r["protocol"] + (" + background" if r["background"] else ""): {
        "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "within_one_frame": r["within_one_frame"], "metric": r["metric"]}
        for r in rows if r["study"] == "headline"}
    summary = {"rows": rows, "headline": headline, "frame_ms": FRAME_MS,
               "bytes": {"delta": delta, "full_state": full, "ratio": delta / full if full else None},
               "sweep_first_over_one_frame": next((
                   {"grid": r["grid"], "writes_per_frame": r["writes_per_frame"], "p99_ms": r["p99_ms"]}
                   for r in rows if r["study"] == "sweep" and not r["within_one_frame"]), None),
               "provenance": run_metadata(seed=seed, spec={"quick": quick, "duration_s": duration, "grid": grid})}
    with open(out / "rows.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _figure(curves, out / "latency_cdf")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    summary["artifacts"] = {"rows": str(out / "rows.csv"), "summary": str(out / "summary.json"),
                            "figure": str(out / "latency_cdf.png")}
    return summary


def _figure(curves: dict[str, list[float]], stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seedance.analysis import style

    style.apply()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, times in curves.items():
        if not times:
            continue
        x = np.sort(np.asarray(times))
        ax.step(np.maximum(x, 1e-3), np.arange(1, x.size + 1) / x.size, where="post", label=label,
                color=style.color(label), linestyle=style.line_style(label))
    ax.axvline(FRAME_MS, color="grey", linestyle="--", linewidth=1, label="one frame (16.7 ms)")
    ax.set_xscale("log")
    ax.set_xlabel("ms (causal: convergence to every replica; raft: write latency)")
    ax.set_ylabel("fraction of writes")
    ax.set_title("dgx-a100, 8 nodes, 16 clients at 60 Hz")
    ax.legend(fontsize=7)
    fig.tight_layout()
    style.save(fig, stem)
    plt.close(fig)
