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

The baseline and echo runs are interleaved in ``--repeats`` rounds and each ratio is the median of the per-round
ratios, so a busy host skews both sides of a ratio alike. Time is measured around the whole ``simulate()`` call
(set-up and the trace's sha256 included; the linearizability check is not run), as wall time (``perf_counter``)
and as the process's CPU time (``process_time``, steadier on a shared host).
Usage: ``python benchmarks/sim_throughput.py [--out DIR] [--quick] [--profile]``; writes
``DIR/sim_throughput.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time

import simpy

from seedance.provenance import run_metadata
from seedance.sim import SimConfig, WorkloadConfig, simulate
from _timing import write_json

SEED = 20261129


class _Clock:
    """Wall (``perf_counter``) and CPU (``process_time``) seconds of a block: on a shared host the CPU time is the
    steadier of the two, since it does not count time spent waiting for a core."""

    def __enter__(self) -> _Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._wall
        self.cpu_s = time.process_time() - self._cpu


def store_ping_pong(messages: int, latency_s: float | None = None) -> dict:
    """A bare two-process SimPy Store ping-pong: messages per wall / CPU second."""
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
    with _Clock() as clock:
        env.run()
    return {"messages": count[0], "wall_s": clock.wall_s, "cpu_s": clock.cpu_s,
            "per_wall_s": count[0] / clock.wall_s, "per_cpu_s": count[0] / clock.cpu_s}


def echo_rate(duration_s: float, trace: bool, chains: int = 1) -> dict:
    """The echo protocol through the whole runtime: messages delivered per wall / CPU second."""
    config = SimConfig(protocol="echo", nodes=2, duration_s=duration_s, seed=SEED, trace=trace,
                       protocol_config={"pings": chains, "tick_s": 0.0}, workload=WorkloadConfig(clients=0))
    with _Clock() as clock:
        result = simulate(config)
    delivered = result.stats["messages_delivered"]
    return {"messages": delivered, "wall_s": clock.wall_s, "cpu_s": clock.cpu_s, "per_wall_s": delivered / clock.wall_s,
            "per_cpu_s": delivered / clock.cpu_s, "trace_records": result.stats["trace_records"]}


def raft_rate(duration_s: float, clients: int, trace: bool) -> dict:
    """Raft, 5 nodes, no faults: operations acknowledged ok per wall / CPU second."""
    config = SimConfig(protocol="raft", nodes=5, duration_s=duration_s, seed=SEED, trace=trace,
                       workload=WorkloadConfig(clients=clients))
    with _Clock() as clock:
        result = simulate(config)
    events = next(result.runtime.env._eid)
    ok = max(result.ops_ok, 1)
    writes = sum(1 for e in result.history if e.type.value == "ok" and e.f.value != "read")
    return {"clients": clients, "trace": trace, "ops_ok": result.ops_ok, "writes_ok": writes,
            "wall_s": clock.wall_s, "cpu_s": clock.cpu_s, "per_wall_s": result.ops_ok / clock.wall_s,
            "per_cpu_s": result.ops_ok / clock.cpu_s, "simulated_ops_per_s": result.throughput_ops_s,
            "events_per_op": events / ok, "messages_per_op": result.stats["messages_sent"] / ok,
            "fsyncs_per_op": result.stats["fsyncs"] / ok}


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="short runs (CI smoke)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (medians; default 5, quick 1)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one Raft run to stderr")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    messages = 20_000 if args.quick else 100_000
    echo_s = 0.4 if args.quick else 2.0
    raft_s = 0.3 if args.quick else 1.0

    # Interleaved rounds: each ratio compares runs made moments apart, so a busy host skews both sides alike.
    rounds = []
    for _ in range(repeats):
        row = {"store": store_ping_pong(messages), "store_latency": store_ping_pong(messages, 20e-6),
               "echo_trace_on": echo_rate(echo_s, True), "echo_trace_off": echo_rate(echo_s, False)}
        rounds.append(row)
    summary: dict = {}
    for name in ("store", "store_latency", "echo_trace_on", "echo_trace_off"):
        summary[name] = {unit: _median([r[name][unit] for r in rounds]) for unit in ("per_wall_s", "per_cpu_s")}
    for name in ("echo_trace_on", "echo_trace_off"):
        for base in ("store", "store_latency"):
            for unit in ("per_wall_s", "per_cpu_s"):
                summary[name][f"ratio_to_{base}_{unit}"] = _median([r[name][unit] / r[base][unit] for r in rounds])
    print(f"bare SimPy Store ping-pong: {summary['store']['per_wall_s']:,.0f} msg/wall-s "
          f"({summary['store']['per_cpu_s']:,.0f} msg/cpu-s); with a latency Timeout: "
          f"{summary['store_latency']['per_wall_s']:,.0f} msg/wall-s", file=sys.stderr)
    for name in ("echo_trace_on", "echo_trace_off"):
        row = summary[name]
        print(f"{name}: {row['per_wall_s']:,.0f} msg/wall-s = {row['ratio_to_store_per_wall_s']:.2f} x bare Store "
              f"ping-pong (target >= 0.5; CPU-time ratio {row['ratio_to_store_per_cpu_s']:.2f}; vs latency "
              f"ping-pong {row['ratio_to_store_latency_per_wall_s']:.2f})", file=sys.stderr)

    raft = []
    for clients in (16, 64):
        for trace in (False, True):
            runs = [raft_rate(raft_s, clients, trace) for _ in range(max(1, repeats // 2 + 1))]
            row = dict(runs[0])
            row["per_wall_s"] = _median([r["per_wall_s"] for r in runs])
            row["per_cpu_s"] = _median([r["per_cpu_s"] for r in runs])
            raft.append(row)
            print(f"raft 5 nodes, {clients} clients, trace {'on' if trace else 'off'}: {row['per_wall_s']:,.0f} "
                  f"ops/wall-s, {row['per_cpu_s']:,.0f} ops/cpu-s (target >= 10,000); "
                  f"{row['simulated_ops_per_s']:,.0f} ops per simulated s; {row['events_per_op']:.1f} events, "
                  f"{row['messages_per_op']:.2f} messages, {row['fsyncs_per_op']:.2f} fsyncs per op", file=sys.stderr)

    if args.profile:
        config = SimConfig(protocol="raft", nodes=5, duration_s=raft_s, seed=SEED, trace=False,
                           workload=WorkloadConfig(clients=16))
        profiler = cProfile.Profile()
        profiler.runcall(simulate, config)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)

    document = {
        "benchmark": "sim_throughput", "quick": args.quick, "repeats": repeats, "rounds": rounds,
        "summary": summary,
        "echo_ratio_to_store_ping_pong": summary["echo_trace_on"]["ratio_to_store_per_wall_s"],
        "echo_ratio_target": 0.5,
        "raft": raft,
        "raft_ops_per_wall_s_16_clients": next(r["per_wall_s"] for r in raft if r["clients"] == 16 and not r["trace"]),
        "raft_ops_target": 10_000,
        "metadata": run_metadata(seed=SEED, spec={"benchmark": "sim_throughput", "quick": args.quick},
                                 argv=sys.argv[1:]),
    }
    write_json(args.out, "sim_throughput", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
