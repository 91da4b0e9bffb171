"""How fast the simulator runs (issue B): simulated messages per wall second, and Raft operations per wall second.

Measured in one process, on the same machine, so the ratios are meaningful even on a busy host:

1. Baseline: a bare SimPy ping-pong — two processes bouncing one message through two ``simpy.Store`` objects (a
   ``get`` and a ``put`` per message; no latency, no fabric, nothing recorded). Also the same with a ``Timeout``
   per message for the link latency (the least a latency-modelling SimPy simulation does).
2. The echo protocol in ``seedance.sim``: two nodes bouncing one ping-pong chain through the full runtime (CPU
   model, contended-link network, effect execution), with the trace on (the default) and off. The headline ratio is
   echo messages per wall second / bare Store ping-pong messages per wall second (target >= 0.5).
3. Raft, 5 nodes, closed-loop clients (16 and 64), uniform fabric, no faults: operations acknowledged ``ok`` per
   wall second (target >= 10,000), with the trace on and off, and the simulated events per operation.

Each figure is the median of ``--repeats`` runs; wall time is ``time.perf_counter`` around the whole
``simulate()`` call (set-up and the trace's sha256 included; the linearizability check is not run).
Usage: ``python benchmarks/sim_throughput.py [--out DIR] [--quick] [--profile]``; writes
``DIR/sim_throughput.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import simpy

from seedance.provenance import run_metadata
from seedance.sim import SimConfig, WorkloadConfig, simulate

SEED = 20261129


def store_ping_pong(messages: int, latency_s: float | None = None) -> float:
    """Messages per wall second of a bare two-process SimPy Store ping-pong."""
    env = simpy.Environment()
    inbox = [simpy.Store(env), simpy.Store(env)]
    count = [0]

    def player(me: int):
        mine, other = inbox[me], inbox[1 - me]
        while count[0] < messages:
            message = yield mine.get()
            count[0] += 1
            if latency_s is not None:
                yield env.timeout(latency_s)
            yield other.put(message)

    env.process(player(0))
    env.process(player(1))
    inbox[0].put(0)
    start = time.perf_counter()
    env.run()
    return count[0] / (time.perf_counter() - start)


def echo_rate(duration_s: float, trace: bool, chains: int = 1) -> dict:
    config = SimConfig(protocol="echo", nodes=2, duration_s=duration_s, seed=SEED, trace=trace,
                       protocol_config={"pings": chains, "tick_s": 0.0}, workload=WorkloadConfig(clients=0))
    start = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - start
    delivered = result.stats["messages_delivered"]
    return {"messages": delivered, "wall_s": wall, "messages_per_wall_s": delivered / wall,
            "trace_records": result.stats["trace_records"]}


def raft_rate(duration_s: float, clients: int, trace: bool) -> dict:
    config = SimConfig(protocol="raft", nodes=5, duration_s=duration_s, seed=SEED, trace=trace,
                       workload=WorkloadConfig(clients=clients))
    start = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - start
    events = next(result.runtime.env._eid)
    writes = sum(1 for e in result.history if e.type.value == "ok" and e.f.value != "read")
    return {"clients": clients, "trace": trace, "ops_ok": result.ops_ok, "writes_ok": writes, "wall_s": wall,
            "ops_per_wall_s": result.ops_ok / wall, "simulated_ops_per_s": result.throughput_ops_s,
            "events_per_op": events / max(result.ops_ok, 1), "messages_per_op": result.stats["messages_sent"]
            / max(result.ops_ok, 1), "fsyncs_per_op": result.stats["fsyncs"] / max(result.ops_ok, 1)}


def _median(rows: list[dict], key: str) -> dict:
    ordered = sorted(rows, key=lambda row: row[key])
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="short runs (CI smoke)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (median; default 3, quick 1)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one Raft run to stderr")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    messages = 20_000 if args.quick else 200_000
    echo_s = 0.4 if args.quick else 4.0
    raft_s = 0.2 if args.quick else 1.0

    store = [store_ping_pong(messages) for _ in range(repeats)]
    store_latency = [store_ping_pong(messages, 20e-6) for _ in range(repeats)]
    baseline = statistics.median(store)
    baseline_latency = statistics.median(store_latency)
    print(f"bare SimPy Store ping-pong: {baseline:,.0f} msg/s (with a latency Timeout: {baseline_latency:,.0f})",
          file=sys.stderr)

    echo = {}
    for trace in (True, False):
        rows = [echo_rate(echo_s, trace) for _ in range(repeats)]
        row = _median(rows, "messages_per_wall_s")
        row["ratio_to_store_ping_pong"] = row["messages_per_wall_s"] / baseline
        row["ratio_to_store_ping_pong_with_latency"] = row["messages_per_wall_s"] / baseline_latency
        echo["trace_on" if trace else "trace_off"] = row
        print(f"echo (trace {'on' if trace else 'off'}): {row['messages_per_wall_s']:,.0f} msg/s = "
              f"{row['ratio_to_store_ping_pong']:.2f} x bare Store ping-pong (target >= 0.5), "
              f"{row['ratio_to_store_ping_pong_with_latency']:.2f} x with latency", file=sys.stderr)

    raft = []
    for clients in (16, 64):
        for trace in (False, True):
            rows = [raft_rate(raft_s, clients, trace) for _ in range(repeats)]
            row = _median(rows, "ops_per_wall_s")
            raft.append(row)
            print(f"raft 5 nodes, {clients} clients, trace {'on' if trace else 'off'}: {row['ops_per_wall_s']:,.0f} "
                  f"ops/wall-s (target >= 10,000); {row['simulated_ops_per_s']:,.0f} ops per simulated s; "
                  f"{row['events_per_op']:.1f} events, {row['messages_per_op']:.2f} messages, "
                  f"{row['fsyncs_per_op']:.2f} fsyncs per op", file=sys.stderr)

    if args.profile:
        config = SimConfig(protocol="raft", nodes=5, duration_s=raft_s, seed=SEED, trace=False,
                           workload=WorkloadConfig(clients=16))
        profiler = cProfile.Profile()
        profiler.runcall(simulate, config)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)

    document = {
        "benchmark": "sim_throughput", "quick": args.quick, "repeats": repeats,
        "store_ping_pong_messages_per_wall_s": baseline,
        "store_ping_pong_with_latency_messages_per_wall_s": baseline_latency,
        "echo": echo,
        "echo_ratio_to_store_ping_pong": echo["trace_on"]["ratio_to_store_ping_pong"],
        "echo_ratio_target": 0.5,
        "raft": raft,
        "raft_ops_per_wall_s_16_clients": next(r["ops_per_wall_s"] for r in raft if r["clients"] == 16
                                               and not r["trace"]),
        "raft_ops_target": 10_000,
        "metadata": run_metadata(seed=SEED, spec={"benchmark": "sim_throughput", "quick": args.quick},
                                 argv=sys.argv[1:]),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sim_throughput.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
