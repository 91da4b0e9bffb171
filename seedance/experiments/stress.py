"""The seed's 72 h stress test in the simulator (chapter 1 and §4.4): ``seedance experiment stress``.

What runs:

* 8 dgx-a100 servers, 64 ranks, validate-and-commit training (:mod:`seedance.models.protocols.commit`, the fixed
  variant under test) of a :data:`MODEL_PARAMS`-parameter model: :data:`TOKENS_PER_STEP` tokens per rank per step,
  so one step is about a second of A100 compute (6·N·D FLOPs, Kaplan et al. 2020) plus the gradient allreduce
  (2 bytes per parameter) on the fabric, as the seed's run (one step per second on 64 ranks).
* The run is cut into segments of :data:`SEGMENT_S` simulated seconds (each ends at its first commit after that,
  so the run is a little longer than asked: the times reported are the segments' actual ones, end to end). Each segment injects one of F1–F8, drawn
  from the seed at the rates of :data:`RATES_PER_HOUR` (a segment with no draw runs clean); the injection repeats
  every ``inject_period`` steps inside the segment (the protocol's ``inject_period``), so faults bite throughout
  the run. A segment is one continuous simulated run whose ranks stop together at the first commit after its end
  (the protocol's ``deadline_s``); the next segment starts from fresh ranks with its own seed (a restart of the job).
* Memory, the seed's §4.4 table: every :data:`SAMPLE_S` simulated seconds each rank's device memory is read from
  its engine's live buffers. The simulated arrays are scaled stand-ins (``dim`` elements stand for the model's
  parameters), so a buffer counts ``nbytes · params / dim``: w, g, gsum, stage (fp32) and g16 (fp16) make
  18 bytes per parameter; temporaries (resync buffers, partial gradients, leaked events) add to it while they live.
  :func:`seedance.monitor.memory.period_table` cuts the series into 24 h windows (or thirds of a shorter run).
* Violations: the commit monitor's breaches, false convergences, false alarms, replica deviation at the end of a
  segment, leaked handles. Recoveries: rollbacks and global resyncs, with their recovery times.

Heartbeats are every :data:`HEARTBEAT_S` (2 s, phi's acceptable pause 6 s, collective timeout 30 s) to
:data:`HEARTBEAT_FANOUT` ring successors (the protocol's ``heartbeat_fanout``; verdicts are told to every rank)
rather than the protocol's defaults (every peer every 50 ms): those are 80,640 messages per simulated second on 64
ranks, which no run of hours could afford here; these are 64 (as many as the training's own inputs per second).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

SERVERS = 8
RANKS = 64
TOPOLOGY = "dgx-a100"
MODEL_PARAMS = 1e9
TOKENS_PER_STEP = 32_768
BYTES_PER_PARAM = 2
SEGMENT_S = 600.0
SAMPLE_S = 10.0
HEARTBEAT_S = 2.0
HEARTBEAT_FANOUT = 2
COMMIT_EVERY = 50
SCENARIOS = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8")
RATES_PER_HOUR = dict.fromkeys(SCENARIOS, 0.75)  # six injections an hour in all
PERSISTENT_BYTES_PER_PARAM = 18


def plan(hours: float, seed: int, segment_s: float = SEGMENT_S) -> list[dict[str, Any]]:
    """The segments of a ``hours`` run: start, length, scenario (or None) and injections, drawn from ``seed``."""
    total = hours * 3600.0
    count = max(1, math.ceil(total / segment_s - 1e-9))
    rng = np.random.default_rng([seed, 0x57E5])
    rates = np.array([RATES_PER_HOUR[s] for s in SCENARIOS], dtype=float)
    segments = []
    for k in range(count):
        start = k * segment_s
        length = min(segment_s, total - start)
        draws = rng.poisson(rates * length / 3600.0)
        chosen = None
        if draws.sum() > 0:  # one scenario per segment (the protocol injects one kind per run): the most drawn
            chosen = SCENARIOS[int(rng.choice(len(SCENARIOS), p=draws / draws.sum()))]
        segments.append({"index": k, "start_s": start, "length_s": length, "scenario": chosen,
                         "injections": int(draws.sum()), "seed": int(rng.integers(0, 2**31 - 1))})
    return segments


def _settings(length_s: float, injections: int) -> dict[str, Any]:
    from seedance.experiments.training_run import model_settings

    steps = max(2 * COMMIT_EVERY, int(length_s))  # about a step per second
    period = math.lcm(COMMIT_EVERY, 15)
    if injections > 0:
        period = max(period, (steps // max(injections, 1)) // period * period)
    return model_settings(MODEL_PARAMS, TOKENS_PER_STEP, BYTES_PER_PARAM, {
        "heartbeat_s": HEARTBEAT_S, "heartbeat_fanout": HEARTBEAT_FANOUT, "phi_acceptable_pause_s": 3 * HEARTBEAT_S,
        "collective_timeout_s": 30.0,
        "deadline_s": length_s, "lr_cycle": 4, "inject_period": period, "observe_params": False})


def _sampler(rows: list[tuple[float, float, float, float, int]], offset_s: float,
             scale: float) -> Callable[[Any], None]:
    """Every SAMPLE_S: (time, mean, min, max MiB over the live ranks, temporaries in all): one row per sample, not
    per rank, so 72 h of 64 ranks keep 26k rows."""
    from seedance.models.protocols.commit.node import PERSISTENT
    from seedance.sim.kernel import call_at

    persistent = len(PERSISTENT)

    def sample(runtime: Any) -> None:
        now = runtime.env.now
        mib, temps = [], 0
        for host in runtime.hosts:
            if not host.up or host.engine is None:
                continue
            arrays = host.engine.buffers.arrays
            mib.append(sum(int(getattr(a, "nbytes", 0)) for a in arrays.values()) * scale / 2**20)
            temps += len(arrays) - persistent
        if mib:
            rows.append((offset_s + now, sum(mib) / len(mib), min(mib), max(mib), temps))
        call_at(runtime.env, now + SAMPLE_S, lambda _e: sample(runtime))

    return sample


def run(*, hours: float, seed: int = 0, out: str | Path, progress: Callable[[str], None] | None = None,
        segment_s: float = SEGMENT_S, ranks: int = RANKS, workers: int = 1) -> dict[str, Any]:
    """Run the stress test; write rows.csv, memory.csv, summary.json and the figure into ``out``; the result.
    ``ranks`` below 64 (eight per server) is for tests of the machinery; the experiment is 64. ``workers`` > 1 runs
    the segments in that many processes: each segment is its own seeded run, so the result (rows, memory series,
    trace_sha256) is the same as with one."""
    from seedance.models.protocols.commit import CommitConfig
    from seedance.monitor.memory import period_table

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wall = time.perf_counter()
    scale = MODEL_PARAMS / CommitConfig().dim
    memory: list[tuple[float, float, float, float, int]] = []
    rows: list[dict[str, Any]] = []
    digest = hashlib.sha256()
    segments = plan(hours, seed, segment_s)
    clock = 0.0  # a segment ends at the first commit after its length: the next starts when it actually ended
    with _segment_runner(min(workers, len(segments))) as run_each:
        for seg, (summary, samples) in zip(segments, run_each(_segment, segments, [ranks] * len(segments),
                                                                [scale] * len(segments))):
            seg = {**seg, "start_s": clock}
            memory.extend((t + clock, *rest) for t, *rest in samples)
            clock += summary["sim_time_s"] if summary["sim_time_s"] is not None else seg["length_s"] + 300.0
            digest.update(summary["trace_sha256"].encode())
            rows.append(_row(seg, summary))
            if progress is not None:
                progress(f"segment {seg['index'] + 1}/{len(segments)} ({seg['scenario'] or 'clean'}): "
                         f"{summary['steps']} steps, {summary['rollbacks']} rollbacks, "
                         f"{time.perf_counter() - wall:.0f} s wall")
    # 24 h windows (thirds of a run shorter than a day) of the mean over ranks
    table = period_table([m[0] for m in memory], [m[1] for m in memory],
                         periods=max(1, round(hours / 24)) if hours >= 24 else 3)
    result = {"rows": rows, "memory_table": table,
              "summary": _totals(rows, hours, seed, time.perf_counter() - wall, digest.hexdigest(), ranks)}
    result["summary"]["workers"] = workers
    result["artifacts"] = _write(out, rows, memory, result)
    return result


@contextlib.contextmanager
def _segment_runner(workers: int) -> Iterator[Callable[..., Iterator[Any]]]:
    """``map`` in this process (one worker), or over a pool of ``workers`` fresh (spawned) processes, in order."""
    if workers <= 1:
        yield map
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from seedance.real.node_env import set_parent_death_signal

    # each worker dies with this process (a killed run left its workers computing their segments)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=set_parent_death_signal) as pool:
        yield pool.map


def _segment(seg: dict[str, Any], ranks: int, scale: float) -> tuple[dict[str, Any], list[tuple]]:
    """One segment's run from fresh ranks: its summary and its memory samples, timed from the segment's start."""
    from seedance.experiments.training_run import sim_train

    samples: list[tuple[float, float, float, float, int]] = []
    summary = sim_train(world=ranks, steps=10**9, commit_every=COMMIT_EVERY, scenario=seg["scenario"] or "",
                        variant="fixed", seed=seg["seed"], settings=_settings(seg["length_s"], seg["injections"]),
                        topology=TOPOLOGY, max_sim_s=seg["length_s"] + 300.0,
                        actions=((0.0, _sampler(samples, 0.0, scale)),))
    # The finished run (runtime, hosts, engines and their arrays) is cyclic garbage, and its arrays are not counted
    # by the collector's thresholds: left to them, a worker of a 72 h run kept about 40 MB per 600 s segment
    # (1.5 GB after 3.7 min). Collected here, a worker stays at its first segment's size.
    gc.collect()
    return summary, samples


def _row(seg: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    violations = (s["monitor_breaches"] + s["false_convergence"] + s["false_alarms"] + s["leaked_handles"]
                  + int(s["param_l2_deviation"] > 1e-6))
    return {"segment": seg["index"], "start_h": seg["start_s"] / 3600.0, "scenario": seg["scenario"] or "none",
            "injections": seg["injections"], "steps": s["steps"], "commits": s["commits"],
            "rollbacks": s["rollbacks"], "recoveries": int(s["global_resync"]) and s["rollbacks"],
            "recovery_s_mean": s["recovery_s_mean"], "alarms": s["alarms"], "false_alarms": s["false_alarms"],
            "false_offline": s["false_offline"], "false_convergence": s["false_convergence"],
            "monitor_breaches": s["monitor_breaches"], "leaked_handles": s["leaked_handles"],
            "param_l2_deviation": s["param_l2_deviation"], "violations": violations,
            "finished": s["finished"], "sim_time_s": s["sim_time_s"], "trace_sha256": s["trace_sha256"]}


def _totals(rows: list[dict[str, Any]], hours: float, seed: int, wall_s: float, sha: str,
            ranks: int) -> dict[str, Any]:
    steps = sum(r["steps"] for r in rows)
    return {"hours": hours, "seed": seed, "servers": -(-ranks // 8), "ranks": ranks, "topology": TOPOLOGY,
            "model_params": MODEL_PARAMS, "segments": len(rows), "steps": steps,
            "injections": sum(r["injections"] for r in rows), "rollbacks": sum(r["rollbacks"] for r in rows),
            "recoveries": sum(r["recoveries"] for r in rows), "violations": sum(r["violations"] for r in rows),
            "all_finished": all(r["finished"] for r in rows), "trace_sha256": sha, "wall_s": wall_s,
            "wall_s_per_simulated_hour": wall_s / hours if hours else None,
            "wall_us_per_rank_step": 1e6 * wall_s / max(1, steps * ranks)}


def _write(out: Path, rows: list[dict[str, Any]], memory: list[tuple[float, float, float, float, int]],
           result: dict[str, Any]) -> dict[str, str]:
    import csv
    import json

    from seedance.provenance import run_metadata

    with (out / "rows.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with (out / "memory.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["t_s", "mean_mib", "min_mib", "max_mib", "temporaries"])
        writer.writerows(memory)
    summary = result["summary"]
    summary["provenance"] = run_metadata(seed=summary["seed"], spec={"hours": summary["hours"], "ranks": summary["ranks"],
                                                                     "model_params": MODEL_PARAMS,
                                                                     "segment_s": SEGMENT_S})
    stems = _figure(rows, memory, result["memory_table"], out / "stress")
    (out / "summary.json").write_text(json.dumps({**result, "artifacts": None}, indent=2, default=float) + "\n",
                                      encoding="utf-8")
    return {"rows": str(out / "rows.csv"), "memory": str(out / "memory.csv"), "summary": str(out / "summary.json"),
            **{p.suffix[1:]: str(p) for p in stems}}


def _figure(rows: list[dict[str, Any]], memory: list[tuple[float, float, float, float, int]],
            table: list[dict[str, Any]],
            stem: Path) -> list[Path]:
    from seedance.analysis import style

    style.apply()
    fig, axes = style.new_figure(ncols=2, width="full", aspect=0.62)
    ax_mem, ax_rec = axes[0]
    hours = [m[0] / 3600.0 for m in memory]
    ax_mem.plot(hours, [m[1] for m in memory], color=style.color("commit"), lw=0.8, label="mean over ranks")
    ax_mem.plot(hours, [m[3] for m in memory], color=style.color("buggy"), lw=0.6, ls=":", label="largest rank")
    for row in rows:
        if row["scenario"] != "none":
            ax_mem.axvline(row["start_h"], color="0.8", lw=0.5)
    for k, window in enumerate(table):
        ax_mem.hlines(window["mean"], window["from_s"] / 3600, window["to_s"] / 3600, color="k", lw=1.2,
                      label="window mean" if k == 0 else None)
    ax_mem.set_xlabel("simulated time (h)")
    ax_mem.set_ylabel("device memory per rank (MiB)")
    ax_mem.legend(fontsize=7)
    starts = [r["start_h"] for r in rows]
    ax_rec.step(starts, np.cumsum([r["rollbacks"] for r in rows]), where="post", label="rollbacks",
                color=style.color("fixed"))
    ax_rec.step(starts, np.cumsum([r["violations"] for r in rows]), where="post", label="violations",
                color=style.color("buggy"))
    ax_rec.set_xlabel("simulated time (h)")
    ax_rec.set_ylabel("count (cumulative)")
    ax_rec.legend(fontsize=7)
    return style.save(fig, stem)
