"""How the simulator's cost grows with the number of nodes (issue W, part 6), per protocol.

For raft, multipaxos and epaxos at N in {8, 32, 64, 128} and the causal protocol at N in {8, 32, 128, 256, 512, 1024}
(up to the ceilings of ``seedance.sim.ceilings``; the points between 32 and the ceiling give the slope below more than
two points to stand on), one seeded run per point, each in its own child process so that its peak
RSS (``VmHWM``) is that point's alone. Reported per point:

* CPU µs per delivered message (the child's ``process_time`` around ``simulate()``, set-up included, over the
  messages the runtime delivered; target <= 15 µs at every N), and the marginal cost per message: the same point
  run for half its duration too, in a child of its own, and the difference of the two runs' CPU over the
  difference of their messages (what a longer run pays per message without the set-up: the topology's routes, N
  nodes' boot, the first election; at 1,024 causal replicas about 2 CPU s of a 0.1 s point). Each child first runs
  the same protocol at 8 nodes for a quick point's duration (``warmup_cpu_s``), so the modules a run imports on
  first use (the topology loader with scipy's graph routines, the fault injector, the checkers: about 0.3 CPU s)
  are not counted against the measured run's messages: at 8 nodes, where a run delivers a few thousand messages,
  they had been most of the figure (the causal protocol at 8 replicas: 116 µs per message cold, 33 warm, on one
  machine);
* operations acknowledged ``ok`` per CPU second;
* wall seconds per simulated second;
* peak RSS, and the memory estimate of ``seedance.sim.ceilings.estimate_memory`` for the same config (the
  estimate should be at or above the measurement).

Then, per protocol, the log-log slope of CPU per operation against N over the points with N >= 32 (least squares;
target <= 1.1: the cost per operation grows no faster than N^1.1 — every replica applies every command, so N^1 is
the floor for the consensus protocols; the causal protocol sends a delta and an ack per peer per write). The slope
is fitted twice: over each run's whole CPU (``cost_per_op_slope``), and over the marginal CPU per operation between
the half-duration run and the full one (``marginal_cost_per_op_slope``: the steady state a long run pays, without
the boot and the first election, which grow with N and weigh most in the short points at 128 nodes).
Since CPU per op is messages per op times CPU per message, its slope is exactly the sum of theirs, and both are
reported: ``messages_per_op_slope`` is the protocol's traffic (the same on any simulator: a leader without batching
sends 2 (N - 1) messages per command, plus heartbeats at a fixed rate shared by fewer operations as N grows), and
``us_per_message_slope`` is what the simulator adds (what this benchmark exists to hold flat).

Workloads: the consensus protocols run closed-loop clients (32; 8 with --quick; uniform keys, the default mix) on
the default fabric; the causal protocol runs 16 frame clients (60 Hz, one write and one read per frame) on a 64×64
grid on ``dgx-a100`` servers (one replica per GPU). Trace on, invariant monitor off by default (``--monitor``:
on; monitors are measured separately), linearizability/convergence checks not run (``sim run`` runs them after the
simulation; the benchmark times the simulation). Consensus runs include their first election (about 0.2
simulated s), so their ops per CPU-second are a little below a steady state's.

With ``--repeats R`` every point and half point runs R times, each in its own child, and keeps the run with the
least CPU (on a shared machine one disturbed run moved a point by up to 50 %; the least of three is the figure least
disturbed); the R runs must give one trace_sha256, or the point reports an error.

With ``--instructions`` every run is a child under valgrind's cachegrind, which counts the instructions the child
executes (``PYTHONHASHSEED=0``, so the same run counts the same): the marginal instructions per message and per
operation (the half-duration run's subtracted, which cancels the warm-up, imports and set-up) and their slopes
against N. A count does not move with the host's load, which CPU time does by up to 50 % on a shared machine; what
it leaves out is the memory hierarchy (a miss costs a hundred instructions' time), so a slope of CPU time above the
slope of instructions is the caches, not more work. Runs are about 50 times slower: the consensus points run 0.6 s
(half: 0.3 s, past the first election), the others their --quick durations; CPU times and RSS in that JSON
(``sim_scale_instructions.json``) are those of runs under cachegrind.

Usage: ``python benchmarks/sim_scale.py [--quick] [--out DIR] [--protocols raft,causal] [--monitor] [--repeats R] [--instructions]``; ``--quick``
runs N in {8, 32} with short durations (under a minute). Writes ``DIR/sim_scale.json``; progress on stderr. The
children import ``seedance`` as installed (or as ``PYTHONPATH`` says), not from the checkout this script sits in:
to measure another tree, run ``PYTHONPATH=TREE python TREE/benchmarks/sim_scale.py``; each point records the
package it imported (``seedance_path``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _timing import peak_rss_kib, write_json

SEED = 20261204
PROTOCOLS = ("raft", "multipaxos", "epaxos", "causal")
NODES = {"raft": (8, 32, 64, 128), "multipaxos": (8, 32, 64, 128), "epaxos": (8, 32, 64, 128),
         "causal": (8, 32, 128, 256, 512, 1024)}
QUICK_NODES = (8, 32)
TARGET_US_PER_MESSAGE = 15.0
TARGET_SLOPE = 1.1


def _config(point: dict):
    from seedance.sim import SimConfig, WorkloadConfig

    if point["protocol"] == "causal":
        return SimConfig(protocol="causal", nodes=point["nodes"], duration_s=point["duration_s"], seed=SEED,
                         topology="dgx-a100", protocol_config={"width": 64, "height": 64},
                         workload=WorkloadConfig(mode="frame", clients=16, keys=64 * 64, frame_rate_hz=60.0,
                                                 writes_per_frame=1),
                         trace=True, monitor=point["monitor"])
    return SimConfig(protocol=point["protocol"], nodes=point["nodes"], duration_s=point["duration_s"], seed=SEED,
                     workload=WorkloadConfig(clients=point["clients"]), trace=True, monitor=point["monitor"])


def measure_point(point: dict) -> dict:
    """One run in this process (a child of main): its costs and peak RSS."""
    import seedance
    from seedance.sim import ceilings, simulate

    warm = {**point, "nodes": min(8, point["nodes"]), "duration_s": _duration(point["protocol"], 8, True)}
    warmup_cpu = time.process_time()
    simulate(_config(warm))  # imports and first-use caches, not this point's cost (see the module docstring)
    warmup_cpu = time.process_time() - warmup_cpu
    wall, cpu = time.perf_counter(), time.process_time()
    config = _config(point)
    result = simulate(config)  # simulate() collects rarely (seedance.sim.collector)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    delivered = int(result.stats["messages_delivered"])
    ops = int(result.ops_ok)
    estimate = ceilings.estimate_memory(config)
    return {**point, "cpu_s": cpu, "wall_s": wall, "warmup_cpu_s": warmup_cpu, "ops_ok": ops, "messages_delivered": delivered,
            "trace_records": int(result.stats.get("trace_records", 0)),
            "us_per_message": cpu / max(delivered, 1) * 1e6, "ops_per_cpu_s": ops / cpu if cpu else 0.0,
            "cpu_us_per_op": cpu / max(ops, 1) * 1e6, "wall_per_sim_s": wall / point["duration_s"],
            "messages_per_op": delivered / max(ops, 1),  # batching lowers it: fewer messages share an op's own cost
            "peak_rss_mb": peak_rss_kib() / 1024,
            "estimate_mb": estimate["total"] / (1 << 20), "trace_sha256": result.trace_sha256,
            "seedance_path": str(Path(seedance.__file__).parent)}  # which checkout the child imported


CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _run_child(point: dict, timeout_s: float) -> dict:
    """One point in a child process of its own; with ``point["instructions"]`` under cachegrind, which counts
    every instruction the child executes (its warm-up and imports too: the marginal of two runs cancels them)."""
    argv = [sys.executable, __file__, "--point", json.dumps(point)]
    env = None
    if point.get("instructions"):
        argv = [*CACHEGRIND, *argv]
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # str hashes fixed: the same count for the same run
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {**point, "error": f"timed out after {timeout_s:g} s"}
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("==")]  # valgrind's own
    if done.returncode != 0:
        return {**point, "error": (lines or ["no output"])[-1]}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if point.get("instructions"):
        found = _I_REFS.search(done.stderr)
        if found is None:
            return {**point, "error": "cachegrind printed no instruction count (I refs)"}
        row["instructions"] = int(found.group(1).replace(",", ""))
    return row


def _least_cpu(point: dict, timeout_s: float, repeats: int) -> dict:
    """The point run ``repeats`` times, each in a child of its own: the run with the least CPU (the least disturbed
    on a shared machine; the runs are the same run, so they must give one trace_sha256), with every run's CPU."""
    runs = [_run_child(point, timeout_s) for _ in range(repeats)]
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    best = min(runs, key=lambda r: r["cpu_s"])
    shas = {r["trace_sha256"] for r in runs}
    if len(shas) != 1:
        return {**point, "error": f"not deterministic: {len(shas)} different trace_sha256 in {repeats} runs"}
    return {**best, "cpu_s_runs": [r["cpu_s"] for r in runs]}


def _marginal(full: dict, half: dict, per: str = "messages_delivered", of: str = "cpu_s") -> float | None:
    """CPU µs (``of="instructions"``: instructions) per message (or per ``per``: ``ops_ok``) between the
    half-duration run and the full one (None when it cannot be told)."""
    if "error" in half or full[per] <= half[per]:
        return None
    return (full[of] - half[of]) / (full[per] - half[per]) * (1e6 if of == "cpu_s" else 1)


def slope(rows: list[dict], key: str, min_nodes: int = 32) -> float | None:
    """Least-squares slope of log(row[key]) against log(nodes) over rows with nodes >= min_nodes."""
    pts = [(math.log(r["nodes"]), math.log(r[key])) for r in rows
           if "error" not in r and r["nodes"] >= min_nodes and (r.get(key) or 0) > 0]  # None: no marginal
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def _table(rows: list[dict], fits: dict) -> str:
    head = (f"{'protocol':<11}{'N':>5}{'sim s':>7}{'ops ok':>9}{'msgs':>10}{'us/msg':>8}{'marginal':>9}{'ops/cpu-s':>11}"
            f"{'wall/sim-s':>11}{'RSS MB':>8}{'est MB':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['protocol']:<11}{r['nodes']:>5}  error: {r['error']}")
            continue
        lines.append(f"{r['protocol']:<11}{r['nodes']:>5}{r['duration_s']:>7g}{r['ops_ok']:>9}"
                     f"{r['messages_delivered']:>10}{r['us_per_message']:>8.1f}"
                     f"{r.get('us_per_message_marginal') or float('nan'):>9.1f}{r['ops_per_cpu_s']:>11.0f}"
                     f"{r['wall_per_sim_s']:>11.1f}{r['peak_rss_mb']:>8.0f}{r['estimate_mb']:>8.0f}")
    lines.append("")
    for protocol, fit in fits.items():
        s = fit["cost_per_op_slope"]
        m = fit["us_per_message_slope"]
        steady = fit.get("marginal_cost_per_op_slope")
        lines.append(f"{protocol}: CPU per op ~ N^{s:.2f} from {fit['fits_from_nodes']} nodes up (target <= "
                     f"{TARGET_SLOPE} above 32; marginal, set-up left out: "
                     f"{'n/a' if steady is None else f'N^{steady:.2f}'}); "
                     f"= messages per op ~ N^{fit['messages_per_op_slope']:.2f} (the protocol's traffic) "
                     f"x CPU per message ~ N^{m:.2f} (the simulator's cost)" if s is not None and m is not None
                     else f"{protocol}: too few points for a slope")
    return "\n".join(lines)


def _full_and_half(point: dict, args: argparse.Namespace) -> dict:
    """The point, then the same point for half its duration (in a process of its own): the marginal cost."""
    row = _least_cpu(point, args.timeout, args.repeats)
    if "error" in row:
        return row
    half = _least_cpu({**point, "duration_s": point["duration_s"] / 2}, args.timeout, args.repeats)
    row["half"] = {k: half.get(k) for k in ("cpu_s", "messages_delivered", "ops_ok", "instructions", "error")
                   if k in half}
    row["us_per_message_marginal"] = _marginal(row, half)
    row["cpu_us_per_op_marginal"] = _marginal(row, half, "ops_ok")
    if "instructions" in row:
        row["instructions_per_message_marginal"] = _marginal(row, half, of="instructions")
        row["instructions_per_op_marginal"] = _marginal(row, half, "ops_ok", of="instructions")
    return row


def _fits(rows: list[dict], low: int) -> dict:
    """One protocol's log-log slopes against N over its points from ``low`` nodes up."""
    fit = {"cost_per_op_slope": slope(rows, "cpu_us_per_op", low),
           "marginal_cost_per_op_slope": slope(rows, "cpu_us_per_op_marginal", low),
           "us_per_message_slope": slope(rows, "us_per_message", low),
           "messages_per_op_slope": slope(rows, "messages_per_op", low),
           "fits_from_nodes": low}
    if any("instructions" in r for r in rows):
        fit["marginal_instructions_per_op_slope"] = slope(rows, "instructions_per_op_marginal", low)
        fit["marginal_instructions_per_message_slope"] = slope(rows, "instructions_per_message_marginal", low)
    return fit


def _instruction_table(rows: list[dict], fits: dict) -> str:
    lines = ["", f"{'protocol':<11}{'N':>5}{'instr/msg':>12}{'instr/op':>14}  (marginal: full run minus half run)"]
    for r in rows:
        if "error" not in r and r.get("instructions_per_message_marginal") is not None:
            lines.append(f"{r['protocol']:<11}{r['nodes']:>5}{r['instructions_per_message_marginal']:>12,.0f}"
                         f"{r['instructions_per_op_marginal'] or float('nan'):>14,.0f}")
    for protocol, fit in fits.items():
        per_op, per_msg = fit.get("marginal_instructions_per_op_slope"), fit.get("marginal_instructions_per_message_slope")
        if per_op is not None and per_msg is not None:
            lines.append(f"{protocol}: instructions per op ~ N^{per_op:.2f}, per message ~ N^{per_msg:.2f} "
                         f"from {fit['fits_from_nodes']} nodes up")
    return "\n".join(lines)


def _duration(protocol: str, nodes: int, quick: bool, instructions: bool = False) -> float:
    """Simulated seconds of a point: Raft and Multi-Paxos need about 0.2 s for their first election; EPaxos (no
    leader) exchanges about 5 N messages per command, the causal protocol about 2 N per write. Counting
    instructions, the consensus points run 0.6 s, so that the half point (0.3 s) is past the election too and the
    difference of the two is steady state only; the others run as --quick (cachegrind runs about 50 times slower)."""
    if instructions:
        return 0.6 if protocol in ("raft", "multipaxos") else _duration(protocol, nodes, True)
    if protocol in ("raft", "multipaxos"):
        return 0.25 if quick else 0.4
    if protocol == "epaxos":
        return 0.05 if quick else 0.1
    return 0.05 if quick else (0.1 if nodes >= 512 else 0.2)


def _node_counts(text: str) -> tuple[int, ...]:
    valid = sorted(set(QUICK_NODES).union(*NODES.values()))
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(n not in valid for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of node counts; valid: a comma-separated subset "
                                         f"of {', '.join(map(str, valid))}")
    return counts


def _points(args: argparse.Namespace) -> list[dict]:
    points = []
    for protocol in args.protocols.split(","):
        if protocol not in NODES:
            raise SystemExit(f"--protocols: unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
        for n in (QUICK_NODES if args.quick else NODES[protocol]):
            if args.nodes and n not in args.nodes:
                continue
            points.append({"protocol": protocol, "nodes": n, "monitor": args.monitor,
                           "duration_s": _duration(protocol, n, args.quick, args.instructions),
                           "clients": 8 if args.quick else 32, **({"instructions": True} if args.instructions else {})})
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="N in {8, 32}, short runs (under a minute)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated subset")
    parser.add_argument("--nodes", type=_node_counts, default=None,
                        help="comma-separated subset of the N to run (default: every N of each protocol)")
    parser.add_argument("--monitor", action="store_true", help="run the invariant monitors too")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per point (default 900)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per point (and per half point), each in its own child; the least CPU is kept "
                             "(default 1; 3 on a shared machine)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each run's instructions with valgrind's cachegrind (about 50x slower, "
                             "immune to the host's load): the marginal instructions per message and per op, and "
                             "their slope; writes sim_scale_instructions.json")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # internal: measure one point, print its JSON
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: {args.repeats} is not a count of runs; valid: 1 or more")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions: valgrind is not on PATH (it counts the instructions); install valgrind, "
                     "or measure CPU time without --instructions")
    if args.instructions and args.repeats != 1:
        parser.error("--instructions: instruction counts do not vary with the load; valid: --repeats 1")
    if args.point:
        print(json.dumps(measure_point(json.loads(args.point))))
        return 0
    from tqdm import tqdm

    from seedance.provenance import run_metadata

    points = _points(args)
    rows = []
    bar = tqdm(total=len(points), desc="sim_scale", unit="point", file=sys.stderr)
    for point in points:
        bar.set_postfix_str(f"{point['protocol']} N={point['nodes']}")
        rows.append(_full_and_half(point, args))
        bar.update(1)
    bar.close()
    low = 8 if args.quick else 32  # --quick has no point above 32: its slope spans 8..32 (fits_from says so)
    fits = {p: _fits([r for r in rows if r["protocol"] == p], low) for p in dict.fromkeys(r["protocol"] for r in rows)}
    print(_table(rows, fits))
    if args.instructions:
        print(_instruction_table(rows, fits))
    ok = [r for r in rows if "error" not in r]
    document = {
        "benchmark": "sim_scale", "quick": args.quick, "seed": SEED, "monitor": args.monitor, "repeats": args.repeats,
        "instructions": args.instructions,  # when true, CPU times and RSS are those of runs under cachegrind
        "points": rows,
        "fits": fits, "targets": {"us_per_message": TARGET_US_PER_MESSAGE, "cost_per_op_slope": TARGET_SLOPE},
        "max_us_per_message": max((r["us_per_message"] for r in ok), default=None),
        "max_us_per_message_marginal": max((r["us_per_message_marginal"] for r in ok
                                            if r.get("us_per_message_marginal") is not None), default=None),
        "estimate_at_or_above_rss": None if args.instructions else all(r["estimate_mb"] >= r["peak_rss_mb"] for r in ok),
        # the children import seedance as installed or as PYTHONPATH says, not from this script's checkout
        "seedance_paths": sorted({r["seedance_path"] for r in ok}),
        "metadata": run_metadata(seed=SEED, spec={"benchmark": "sim_scale", "quick": args.quick,
                                                  "protocols": args.protocols, "monitor": args.monitor},
                                 argv=sys.argv[1:] if argv is None else argv),
    }
    write_json(args.out, "sim_scale_instructions" if args.instructions else "sim_scale", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
