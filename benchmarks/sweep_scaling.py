"""Sweep scaling (issue H evidence): runs per second with 2 workers against 1, on the local pool and on a Dask
LocalCluster (target: >= 1.8x for both).

The spec is CPU-bound: ``--runs`` simulator runs (Raft, 3 nodes, 16 closed-loop clients, ``--duration`` simulated
seconds each, no linearizability check, so nearly all the time is the simulator's Python), each about half a second
to a second of CPU on an idle core. Each measurement runs the whole sweep into a fresh directory and times
:func:`seedance.sweep.run_sweep` end to end: starting the worker processes (and their imports), every run, writing
the point files and the Parquet dataset. The driver's own imports are paid once before any clock; a Dask cluster
(``n_workers`` worker processes, one thread each, on 127.0.0.1) is started before the clock and closed after it, as
a cluster would already be running.

Worker start-up (a Python process importing the simulator, about half a second of CPU) is paid once per worker,
so with 2 workers it is paid twice: over 24 runs of ~0.35 s that alone caps the ideal ratio near 1.7x, which is
why the sweep has 48 runs by default (measured on this 2-core machine, quiet: 24 runs gave 1.58x local / 1.65x
Dask, 48 runs 1.93x / 1.81x against a ceiling of 1.95x). It also measures the pool's own cost per run (:func:`pool_overhead`). The four measurements (local 1, local 2, Dask
1, Dask 2) are interleaved in ``--repeats`` rounds; each speed-up is the median of the per-round ratios, so load
from other processes skews both sides alike. The host's load average and CPU count are recorded beside the figures:
on a machine with fewer than 2 idle cores no pool reaches 2x. So each measurement also reports the runs' mean
CPU time and the cores the sweep obtained (the runs' CPU seconds over the wall time): with 2 workers on 2 idle
cores it approaches 2; when it stays near 1, the host, not the pool, capped the speed-up. Last, the machine's own
ceiling: the same runs done directly (no sweep engine) by one process, then split over two processes started
together; the pools' ratios are also reported as a fraction of that ceiling.

``--item NAME [--size quick|full]`` measures a paper item's own sweep instead (``paper/specs/NAME.yaml``: e.g.
``--item protocols --size quick --modes dask``, the issue's "protocols item with 1 vs 2 Dask workers"); the
ceiling is measured for simulator items only.

Usage: ``python benchmarks/sweep_scaling.py [--out DIR] [--quick] [--repeats N] [--runs N] [--duration S]
[--item NAME [--size SIZE]] [--modes local,dask]``; prints the figures and writes ``DIR/sweep_scaling.json``
(``DIR/sweep_scaling-NAME-SIZE.json`` with ``--item``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _timing import scheduler_for

from seedance.provenance import run_metadata
from seedance.sweep import load_results, load_spec, run_sweep

TARGET = 1.8


def spec(runs: int, duration: float) -> dict:
    return {"name": "sweep-scaling", "runner": "sim",
            "fixed": {"protocol": "raft", "nodes": 3, "clients": 16, "keys": 64, "duration": duration, "check": False,
                      "set": {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008,
                              "election_timeout_s_max": 0.016}},
            "repetitions": runs, "timeout_s": 600}


def measure(doc: dict, workers: int, dask: bool) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="sweep-scaling-"))
    try:
        with scheduler_for(workers, dask) as scheduler:
            load = os.getloadavg()[0]
            start = time.perf_counter()
            summary = run_sweep(doc, scratch, workers=1 if dask else workers, scheduler=scheduler, progress=False)
            wall = time.perf_counter() - start  # the cluster's closing is not the sweep's
        if summary.points_failed or summary.points_run != summary.points_total:
            raise RuntimeError(f"sweep did not complete: {summary}")
        df = load_results(summary.results)
        return {"mode": "dask" if dask else "local", "workers": workers, "runs": summary.points_run, "wall_s": wall,
                "runs_per_s": summary.points_run / wall, "mean_run_wall_s": float(df["wall_s"].mean()),
                "mean_run_cpu_s": float(df["cpu_s"].mean()), "cores_obtained": float(df["cpu_s"].sum()) / wall,
                "load_avg_1min_before": load}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pool_overhead(runs: int = 40) -> dict:
    """What the pool adds per run: a sweep of near-instant cost-model runs on 1 worker (IPC, the point file's
    fsync'd write, the worker's start-up spread over the runs), minus the runs' own time."""
    doc = {"name": "overhead", "runner": "cost", "axes": {"grid": {"size": [1 << k for k in range(10, 10 + runs)]}},
           "timeout_s": 60}
    scratch = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    try:
        start = time.perf_counter()
        summary = run_sweep(doc, scratch, workers=1, progress=False)
        wall = time.perf_counter() - start
        mean_run = float(load_results(summary.results)["wall_s"].mean())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"runs": runs, "wall_s": wall, "mean_run_ms": 1e3 * mean_run, "per_run_ms": 1e3 * (wall / runs - mean_run)}


def worker_startup(target: str = "seedance.sweep.runners:run_sim", repeats: int = 3) -> dict:
    """Seconds from starting a worker process to its having imported the runner: what a process-per-run design
    (instead of long-lived workers) would add to every run."""
    from seedance.sweep.execute import Child

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        child = Child()
        reply, usable = child._call({"load": target}, 120.0, "starting the worker")
        times.append(time.perf_counter() - start)
        child.close()
        if not usable or reply["status"] != "ok":
            raise RuntimeError(f"worker did not start: {reply}")
    return {"target": target, "median_s": statistics.median(times), "all_s": times}


_CONTROL = """
import json, sys, time
from seedance.sweep import load_spec
from seedance.sweep.expand import runs
from seedance.sweep.runners import run_sim
todo = runs(load_spec(json.loads(sys.argv[1])))[int(sys.argv[2])::int(sys.argv[3])]
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
for run in todo:
    run_sim(dict(run.params), run.seed)
"""


def machine_ceiling(doc: dict) -> dict:
    """What this host allows without any sweep engine: the same runs done by 1 process, then split over 2
    processes started together (imports paid before the clock). Their ratio is the ceiling for the pools' ratio."""
    import subprocess

    def timed(parts: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _CONTROL, json.dumps(doc), str(i), str(parts)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(parts)]
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            proc.stdin.close()
            if proc.wait() != 0:
                raise RuntimeError("the ceiling's control process failed")
        return time.perf_counter() - start

    one, two = timed(1), timed(2)
    return {"one_process_s": one, "two_processes_s": two, "ratio": one / two}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="short runs (CI smoke): 4 runs of 0.05 s, 1 round")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (medians; default 2, quick 1)")
    parser.add_argument("--runs", type=int, default=None, help="runs in the sweep (default 48, quick 4)")
    parser.add_argument("--duration", type=float, default=None, help="simulated s per run (default 0.15)")
    parser.add_argument("--item", default=None, help="a paper item's sweep instead (paper/specs/ITEM.yaml)")
    parser.add_argument("--size", default="quick", choices=("quick", "full"), help="with --item (default quick)")
    parser.add_argument("--modes", default="local,dask", help="comma-separated: local, dask (default both)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 2)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"local", "dask"}:
        parser.error(f"--modes: expected local and/or dask, got {args.modes!r}")
    if args.item is not None:
        from seedance.paper.suite import load_item_spec

        doc = load_item_spec(args.item, args.size).sweep.to_dict()
        runs, duration = None, None
    else:
        runs = args.runs or (4 if args.quick else 48)
        duration = args.duration or (0.05 if args.quick else 0.15)
        doc = spec(runs, duration)
    load_spec(doc)  # the driver's own imports (validation builds a SimConfig), paid once, before any clock
    __import__("pyarrow.parquet")  # the dataset writer's, likewise

    rounds = []
    for k in range(repeats):
        row = {}
        for mode, workers in [(m, w) for m in modes for w in (1, 2)]:
            result = measure(doc, workers, mode == "dask")
            row[f"{mode}_{workers}"] = result
            print(f"round {k + 1}: {mode} {workers} worker(s): {result['runs']} runs in {result['wall_s']:.2f} s = "
                  f"{result['runs_per_s']:.2f} runs/s (mean run {result['mean_run_wall_s']:.2f} s wall, "
                  f"{result['mean_run_cpu_s']:.2f} s CPU; cores obtained {result['cores_obtained']:.2f}; load "
                  f"{result['load_avg_1min_before']:.2f})", file=sys.stderr)
        rounds.append(row)
    if args.item is not None:
        return _item_report(args, doc, modes, rounds)
    overhead = pool_overhead()
    print(f"pool overhead: {overhead['per_run_ms']:.1f} ms per run beyond the run itself (1 worker, "
          f"{overhead['runs']} cost-model runs of {overhead['mean_run_ms']:.2f} ms; worker start-up included)",
          file=sys.stderr)
    startup = worker_startup()
    print(f"worker start-up with the simulator imported: {startup['median_s']:.2f} s (median of 3) - what a process "
          f"per run would add to each run", file=sys.stderr)
    ceiling = machine_ceiling(doc)
    print(f"machine ceiling: the same runs in 1 process {ceiling['one_process_s']:.2f} s, split over 2 processes "
          f"{ceiling['two_processes_s']:.2f} s = {ceiling['ratio']:.2f}x (no sweep engine)", file=sys.stderr)
    speedup = {mode: statistics.median(r[f"{mode}_2"]["runs_per_s"] / r[f"{mode}_1"]["runs_per_s"] for r in rounds)
               for mode in ("local", "dask")}
    load = os.getloadavg()
    document = {
        "benchmark": "sweep_scaling", "target_speedup": TARGET, "runs": runs, "duration_s": duration,
        "repeats": repeats, "cpu_count": os.cpu_count(), "load_avg_after": list(load),
        "speedup_2_vs_1": speedup, "machine_ceiling": ceiling,
        "efficiency_vs_ceiling": {m: v / ceiling["ratio"] for m, v in speedup.items()}, "pool_overhead": overhead, "worker_startup": startup,
        "meets_target": {m: s >= TARGET for m, s in speedup.items()}, "rounds": rounds,
        "metadata": run_metadata(seed=0, spec={"benchmark": "sweep_scaling", "runs": runs, "duration_s": duration,
                                               "repeats": repeats}),
    }
    for mode, value in speedup.items():
        print(f"{mode}: 2 workers = {value:.2f}x the runs/s of 1 worker (target {TARGET}x: "
              f"{'met' if value >= TARGET else 'NOT met'}); {value / ceiling['ratio']:.0%} of the machine's own "
              f"{ceiling['ratio']:.2f}x; {os.cpu_count()} CPUs, load average {load[0]:.2f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sweep_scaling.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


def _item_report(args: argparse.Namespace, doc: dict, modes: list[str], rounds: list[dict]) -> int:
    """The figures of a paper item's sweep (``--item``): speed-ups, cores obtained, load, the ceiling (sim only)."""
    ceiling = machine_ceiling(doc) if doc["runner"] == "sim" else None
    if ceiling is not None:
        print(f"machine ceiling: the same runs in 1 process {ceiling['one_process_s']:.2f} s, split over 2 "
              f"processes {ceiling['two_processes_s']:.2f} s = {ceiling['ratio']:.2f}x (no sweep engine)",
              file=sys.stderr)
    speedup = {m: statistics.median(r[f"{m}_2"]["runs_per_s"] / r[f"{m}_1"]["runs_per_s"] for r in rounds)
               for m in modes}
    load = os.getloadavg()
    document = {"benchmark": "sweep_scaling", "item": args.item, "size": args.size, "target_speedup": TARGET,
                "runs": rounds[0][f"{modes[0]}_1"]["runs"], "repeats": len(rounds), "cpu_count": os.cpu_count(),
                "load_avg_after": list(load), "speedup_2_vs_1": speedup, "machine_ceiling": ceiling,
                "efficiency_vs_ceiling": {m: v / ceiling["ratio"] for m, v in speedup.items()} if ceiling else None,
                "meets_target": {m: v >= TARGET for m, v in speedup.items()}, "rounds": rounds,
                "metadata": run_metadata(seed=0, spec={"benchmark": "sweep_scaling", "item": args.item,
                                                       "size": args.size, "repeats": len(rounds)})}
    for mode, value in speedup.items():
        share = f"; {value / ceiling['ratio']:.0%} of the machine's own {ceiling['ratio']:.2f}x" if ceiling else ""
        print(f"{args.item} ({args.size}), {mode}: 2 workers = {value:.2f}x the runs/s of 1 worker (target "
              f"{TARGET}x: {'met' if value >= TARGET else 'NOT met'}){share}; {os.cpu_count()} CPUs, load average "
              f"{load[0]:.2f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"sweep_scaling-{args.item}-{args.size}.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
