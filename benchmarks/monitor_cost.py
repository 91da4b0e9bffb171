"""What the invariant monitors cost per handled input, and how that grows with the number of nodes (issue W).

For every protocol with a monitor and N in {5, 32, 128}: one short fault-free run with the monitor on and the same
run (same seed, same events: the monitor does not change the simulation) with it off, in the same process. Reported:

* ``monitor_us_per_input``: the CPU time spent inside the monitor hook (timed around each call), per handled input;
* ``cpu_us_per_input_on`` / ``_off``: the process CPU time of the whole ``simulate()`` call per handled input;
* ``overhead``: ``monitor_us_per_input / cpu_us_per_input_off``, the monitor's cost per input as a share of the
  run without it (a ratio, so a busy host skews both sides alike); ``overhead_whole_run``: ``cpu_on / cpu_off - 1``
  (noisier: it is the difference of two whole runs). Medians of ``--repeats`` rounds, after one warm-up run.

The target is a monitor cost per input roughly constant in N (the monitor examines only the node that handled the
input). The end-of-run full check (``finish``) is timed separately (``finish_ms``).
Usage: ``python benchmarks/monitor_cost.py [--out DIR] [--quick] [--repeats R] [--protocols raft,...]``; writes
``DIR/monitor_cost.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from seedance.models.protocols import registry
from seedance.provenance import run_metadata
from seedance.sim import SimConfig, WorkloadConfig, simulate

SEED = 20261204
SIZES = (5, 32, 128)
# per protocol: simulated seconds at each size (short: the cost per input is what matters) and its workload
RUNS: dict[str, dict[str, Any]] = {
    "raft": {"duration_s": 0.2, "workload": WorkloadConfig(clients=16)},
    "multipaxos": {"duration_s": 0.2, "workload": WorkloadConfig(clients=16)},
    "epaxos": {"duration_s": 0.1, "workload": WorkloadConfig(clients=16)},
    "causal": {"duration_s": 0.05, "workload": WorkloadConfig(mode="frame", clients=16, keys=64),
               "protocol_config": {"width": 8, "height": 8}},
    "commit": {"duration_s": 0.5, "workload": WorkloadConfig(clients=0)},
}


class _Timed:
    """Wraps a monitor: sums the seconds spent in its hooks (the end-of-run ``finish`` apart)."""

    def __init__(self, inner: Any, clock: dict[str, float]) -> None:
        self.inner, self.clock = inner, clock
        if hasattr(inner, "observe_node"):
            self.observe_node = self._timed(inner.observe_node, "hook_s")
            self.forget = inner.forget
        self.observe = self._timed(inner.observe, "hook_s")
        if hasattr(inner, "finish"):
            self.finish = self._timed(inner.finish, "finish_s")

    def _timed(self, fn: Any, slot: str) -> Any:
        clock = self.clock

        def timed(*args: Any) -> Any:
            start = time.process_time()  # CPU time: on a shared host a wall clock also counts preemptions
            try:
                return fn(*args)
            finally:
                clock[slot] += time.process_time() - start

        return timed


def _config(protocol: str, nodes: int, monitor: bool, clock: dict[str, float]) -> SimConfig:
    spec = registry.get(protocol)
    factory = spec.monitor
    spec = dataclasses.replace(spec, monitor=lambda: _Timed(factory(), clock))
    run = RUNS[protocol]
    return SimConfig(protocol=spec, nodes=nodes, duration_s=run["duration_s"], seed=SEED, trace=False, check=False,
                     monitor=monitor, workload=run["workload"], protocol_config=dict(run.get("protocol_config", {})))


def measure(protocol: str, nodes: int) -> dict[str, float]:
    """One round: the run with the monitor, then without; CPU per input and the monitor's own time."""
    out: dict[str, float] = {}
    for monitor in (False, True):
        clock = {"hook_s": 0.0, "finish_s": 0.0}
        config = _config(protocol, nodes, monitor, clock)
        cpu = time.process_time()
        result = simulate(config, liveness=False)
        cpu = time.process_time() - cpu
        inputs = max(result.stats["inputs_handled"], 1)
        tag = "on" if monitor else "off"
        out[f"cpu_us_per_input_{tag}"] = cpu / inputs * 1e6
        out[f"inputs_{tag}"] = inputs
        if monitor:
            out["monitor_us_per_input"] = clock["hook_s"] / inputs * 1e6
            out["finish_ms"] = clock["finish_s"] * 1e3
            out["violations"] = len(result.violations)
    out["overhead"] = out["monitor_us_per_input"] / out["cpu_us_per_input_off"]
    out["overhead_whole_run"] = out["cpu_us_per_input_on"] / out["cpu_us_per_input_off"] - 1.0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="N in {5, 32} only, one round")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (medians; default 3, quick 1)")
    parser.add_argument("--protocols", default=",".join(RUNS), help="comma-separated (default: all)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    sizes = SIZES[:2] if args.quick else SIZES
    rows = []
    for protocol in args.protocols.split(","):
        if protocol not in RUNS:
            print(f"error: --protocols: unknown {protocol!r}; valid: {', '.join(RUNS)}", file=sys.stderr)
            return 2
        measure(protocol, 5)  # warm-up: imports, caches
        for nodes in sizes:
            rounds = [measure(protocol, nodes) for _ in range(repeats)]
            row = {"protocol": protocol, "nodes": nodes,
                   **{key: float(statistics.median(r[key] for r in rounds)) for key in rounds[0]}}
            rows.append(row)
            print(f"{protocol:10s} N={nodes:4d}  monitor {row['monitor_us_per_input']:7.2f} us/input  "
                  f"cpu/input on {row['cpu_us_per_input_on']:8.1f} off {row['cpu_us_per_input_off']:8.1f} us  "
                  f"overhead {row['overhead']:6.1%} (whole run {row['overhead_whole_run']:+6.1%})  finish {row['finish_ms']:8.1f} ms  "
                  f"violations {int(row['violations'])}", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": "monitor_cost", "seed": SEED, "repeats": repeats, "rows": rows,
               "metadata": run_metadata(seed=SEED, spec={"sizes": list(sizes), "runs": {
                   name: {"duration_s": run["duration_s"], "protocol_config": run.get("protocol_config", {})}
                   for name, run in RUNS.items()}})}
    (out / "monitor_cost.json").write_text(json.dumps(payload, indent=2, default=str))
    print(json.dumps({"rows": [{k: r[k] for k in ("protocol", "nodes", "monitor_us_per_input", "overhead")}
                               for r in rows]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
