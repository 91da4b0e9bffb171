"""The simulator's per-op cost and its memory over long runs (issue W, parts 2 and 3).

Measured:

1. Raft, 5 nodes, 16 closed-loop clients, the default fabric, no faults (``seedance sim run --protocol raft --nodes 5
   --clients 16``): operations acknowledged ``ok`` per CPU-second of the ``simulate()`` call (``process_time``; set-up
   and the trace's sha256 included, the linearizability check not run), with the trace and the invariant monitor on
   (the defaults), both off (``--no-trace --no-monitor``) and the trace alone; CPU µs per delivered message; the
   run's simulated throughput, p50 and p99 (these must not move: an optimisation that keeps the event order keeps
   them exactly). Each configuration runs ``--repeats`` times, interleaved, after a warm-up run; medians.
   Targets: >= 20,000 ops/CPU-s with the defaults, >= 30,000 with both off, <= 15 µs per delivered message.
2. Determinism: the same spec and seed run twice give the same ``trace_sha256``.
3. Memory: peak RSS (``VmHWM``, see :func:`peak_rss_kib`, of a fresh child process running one ``simulate()``) of a
   short and an 8x longer run of the same config (5 and 40 simulated s; trace on, monitor off by default: the
   monitor's memory is its own), with what the run held in memory at the end: history rows and trace records not yet
   spilled to disk, and the protocol's own state (Raft's log and its simulated disk hold the entries since the last
   snapshot: at most about twice ``snapshot_entries``, so they fill and empty in a sawtooth). The long run's peak RSS
   is also sampled at each percent of its simulated time: its rise over the second half says whether anything grows
   with the run (the buffers that fill and empty raise the peak only until they have all been full at once). The same
   pair for the echo protocol (3 nodes, 16 clients on its single-copy store of the workload's keys): its state does
   not grow, so its peak RSS shows what the recording itself holds.

Usage: ``python benchmarks/sim_recording.py [--out DIR] [--quick] [--repeats N] [--rss S,L]``; prints figures and
writes ``DIR/sim_recording.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any
from _timing import peak_rss_kib, write_json

SEED = 20261204
TARGETS = {"ops_per_cpu_s_defaults": 20_000, "ops_per_cpu_s_bare": 30_000, "cpu_us_per_message": 15.0}
CONFIGS = {"defaults": (True, True), "bare": (False, False), "trace_only": (True, False)}


def _config(duration_s: float, trace: bool, monitor: bool, nodes: int = 5, clients: int = 16,
            protocol: str = "raft") -> Any:
    from seedance.sim import SimConfig, WorkloadConfig

    return SimConfig(protocol=protocol, nodes=nodes, duration_s=duration_s, seed=SEED, trace=trace, monitor=monitor,
                     workload=WorkloadConfig(clients=clients))


def raft_cost(duration_s: float, trace: bool, monitor: bool) -> dict[str, Any]:
    """One run: ops per CPU-second, CPU µs per delivered message, and the run's own figures."""
    from seedance.sim import simulate

    config = _config(duration_s, trace, monitor)
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(config, liveness=False)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    delivered = result.stats["messages_delivered"]
    return {"trace": trace, "monitor": monitor, "ops_ok": result.ops_ok, "cpu_s": cpu, "wall_s": wall,
            "ops_per_cpu_s": result.ops_ok / cpu, "cpu_us_per_message": cpu / max(delivered, 1) * 1e6,
            "messages_delivered": delivered, "throughput_ops_s": result.throughput_ops_s,
            "latency_ms_p50": result.latency_ms_p50, "latency_ms_p99": result.latency_ms_p99,
            "trace_sha256": result.trace_sha256}


def rss_child(duration_s: float, monitor: bool, protocol: str = "raft") -> dict[str, Any]:
    """Run in a fresh process: one simulate() and the process's peak RSS, with what it held at the end."""
    from seedance.sim import simulate

    before = peak_rss_kib()
    course: list[list[float]] = []  # [simulated s, peak RSS MiB so far] at each percent of the run
    cpu = time.process_time()
    result = simulate(_config(duration_s, True, monitor, nodes=5 if protocol == "raft" else 3, protocol=protocol),
                      liveness=False, progress=lambda at: course.append([round(at, 3), peak_rss_kib() / 1024]))
    cpu = time.process_time() - cpu
    peak_kib = peak_rss_kib()
    clients, trace = result.clients, result.trace
    log = getattr(clients, "log", None)  # the history log (absent in older code, which keeps every row)
    raft_entries = sum(len(getattr(h.node, "log", ())) for h in result.runtime.hosts if h.node is not None)
    disk_entries = sum(len(v) for h in result.runtime.hosts for v in h.storage.logs.values())
    return {"protocol": protocol, "duration_s": duration_s, "monitor": monitor, "ops_ok": result.ops_ok, "cpu_s": cpu,
            "peak_rss_mib": peak_kib / 1024, "rss_after_imports_mib": before / 1024,
            "history_rows": len(log) if log is not None else len(clients.rows),
            "history_rows_in_memory": len(clients.rows),
            "trace_records": len(trace), "trace_records_in_memory": len(trace.records),
            "raft_log_entries_in_memory": raft_entries, "raft_disk_entries_in_memory": disk_entries,
            "trace_sha256": result.trace_sha256, "peak_rss_course_mib": course,
            "peak_rss_second_half_growth_mib": _second_half_growth(course)}


def _second_half_growth(course: list[list[float]]) -> float | None:
    """How much the peak RSS rose over the simulation's second half (MiB): a structure that grows with the run keeps
    raising it; buffers that fill and empty (trace and history chunks, the log between snapshots) stop raising it once
    they have all been full at the same time."""
    if len(course) < 2:
        return None
    middle = course[len(course) // 2 - 1][1]
    return course[-1][1] - middle


def _child(duration_s: float, monitor: bool, protocol: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child-rss", repr(duration_s), "--protocol", protocol] + \
        ([] if not monitor else ["--monitor"])
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def speed(duration_s: float, repeats: int) -> dict[str, Any]:
    raft_cost(min(duration_s, 0.2), False, False)  # warm-up: imports, first-call caches
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for round_ in range(repeats):
        for name, (trace, monitor) in CONFIGS.items():
            runs[name].append(raft_cost(duration_s, trace, monitor))
            row = runs[name][-1]
            print(f"  round {round_ + 1}/{repeats} {name}: {row['ops_per_cpu_s']:,.0f} ops/CPU-s, "
                  f"{row['cpu_us_per_message']:.1f} us/message", file=sys.stderr)
    out: dict[str, Any] = {}
    for name, rows in runs.items():
        out[name] = {"ops_per_cpu_s": _median(rows, "ops_per_cpu_s"),
                     "cpu_us_per_message": _median(rows, "cpu_us_per_message"),
                     "ops_per_cpu_s_all": [r["ops_per_cpu_s"] for r in rows],
                     **{k: rows[0][k] for k in ("ops_ok", "messages_delivered", "throughput_ops_s", "latency_ms_p50",
                                                "latency_ms_p99", "trace_sha256")},
                     "same_trace_every_run": len({r["trace_sha256"] for r in rows}) == 1}
    return out


def rss_pair(protocol: str, short: float, long_: float, monitor: bool) -> list[dict[str, Any]]:
    """Peak RSS of a short and a long run of ``protocol`` (Raft: its log grows; echo: a single-copy store of the
    workload's keys, whose state does not), each in a fresh process."""
    rows = []
    for seconds in (short, long_):
        print(f"peak RSS: {protocol}, a {seconds} s run in a child process...", file=sys.stderr)
        row = _child(seconds, monitor, protocol)
        rows.append(row)
        print(f"  {seconds} s: {row['ops_ok']:,} ops, peak RSS {row['peak_rss_mib']:.0f} MiB (after imports "
              f"{row['rss_after_imports_mib']:.0f}); in memory at the end: {row['history_rows_in_memory']:,} of "
              f"{row['history_rows']:,} history rows, {row['trace_records_in_memory']:,} of {row['trace_records']:,} "
              f"trace records; log entries {row['raft_log_entries_in_memory']:,} in the nodes, "
              f"{row['raft_disk_entries_in_memory']:,} on their simulated disks", file=sys.stderr)
    growth = rows[1]["peak_rss_mib"] - rows[0]["peak_rss_mib"]
    entries = sum(rows[1][k] - rows[0][k] for k in ("raft_log_entries_in_memory", "raft_disk_entries_in_memory"))
    per_entry = f"; {growth * 2**20 / entries:.0f} bytes per extra log entry the protocol holds" if entries else ""
    half = rows[1]["peak_rss_second_half_growth_mib"]
    print(f"{protocol}: peak RSS {rows[0]['peak_rss_mib']:.0f} -> {rows[1]['peak_rss_mib']:.0f} MiB for {short} -> "
          f"{long_} simulated s ({growth:+.0f} MiB{per_entry}); over the {long_} s run's second half the peak rose "
          f"{half:+.1f} MiB (before the end-of-run summary)", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="short runs (0.5 s; RSS of 1 s vs 4 s)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds per configuration (default 3, quick 1)")
    parser.add_argument("--duration", type=float, default=None, help="simulated seconds per speed run (default 1)")
    parser.add_argument("--rss", default=None, help="the two RSS runs' simulated seconds, SHORT,LONG (default 5,40)")
    parser.add_argument("--monitor", action="store_true", help="RSS runs with the invariant monitor on")
    parser.add_argument("--child-rss", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--protocol", default="raft", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_rss is not None:
        print(json.dumps(rss_child(args.child_rss, args.monitor, args.protocol)))
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    duration = args.duration or (0.5 if args.quick else 1.0)
    short, long_ = (float(x) for x in (args.rss or ("1,4" if args.quick else "5,40")).split(","))

    print(f"Raft 5 nodes, 16 clients, {duration} simulated s, {repeats} round(s):", file=sys.stderr)
    cost = speed(duration, repeats)
    for name, row in cost.items():
        print(f"{name:>10}: {row['ops_per_cpu_s']:,.0f} ops/CPU-s, {row['cpu_us_per_message']:.1f} CPU us per "
              f"delivered message; {row['throughput_ops_s']:,.0f} ops/simulated s, p50 {row['latency_ms_p50']:.3f} ms, "
              f"p99 {row['latency_ms_p99']:.3f} ms", file=sys.stderr)
    print(f"targets: defaults >= {TARGETS['ops_per_cpu_s_defaults']:,}, bare >= {TARGETS['ops_per_cpu_s_bare']:,} "
          f"ops/CPU-s, <= {TARGETS['cpu_us_per_message']} us per message", file=sys.stderr)
    twice = [raft_cost(min(duration, 0.5), True, False)["trace_sha256"] for _ in range(2)]
    print(f"same spec and seed twice: trace_sha256 {'equal' if twice[0] == twice[1] else 'DIFFERENT'} "
          f"({twice[0][:16]})", file=sys.stderr)

    memory = {protocol: rss_pair(protocol, short, long_, args.monitor) for protocol in ("raft", "echo")}
    growth = {protocol: rows[1]["peak_rss_mib"] - rows[0]["peak_rss_mib"] for protocol, rows in memory.items()}
    second_half = {protocol: rows[1]["peak_rss_second_half_growth_mib"] for protocol, rows in memory.items()}

    from seedance.provenance import run_metadata

    document = {"benchmark": "sim_recording", "quick": args.quick, "repeats": repeats, "duration_s": duration,
                "targets": TARGETS, "cost": cost, "trace_sha256_twice": twice,
                "deterministic": twice[0] == twice[1], "memory": memory, "rss_growth_mib": growth,
                "rss_second_half_growth_mib": second_half,
                "metadata": run_metadata(seed=SEED, spec={"benchmark": "sim_recording", "quick": args.quick},
                                         argv=sys.argv[1:] if argv is None else argv)}
    write_json(args.out, "sim_recording", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
