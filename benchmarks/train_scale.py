"""Training traffic at scale: ``sim train`` wall cost per rank-step against world size, the flow model's cost per
collective, and the stress experiment's cost per simulated hour, in one invocation.

* ``sim train`` on dgx-a100 servers (the default model, and optionally ``--model-size``) at each ``--worlds`` size
  for ``--steps`` steps: wall seconds, µs per rank-step, simulated seconds, peak RSS growth; the target run
  (1,024 ranks x 1,000 steps, issue W) is extrapolated from the largest size measured unless ``--target`` runs it.
* The flow model alone: concurrent ring allreduces over 1,024 devices started and finished (µs per phase).
* ``experiment stress`` for ``--stress-hours`` simulated hours (64 ranks): wall seconds per simulated hour and the
  72 h projection.

Prints the figures and writes ``train_scale.json`` to ``--out`` (default out/benchmarks).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_row(world: int, steps: int, model_size: float | None) -> dict:
    from seedance.experiments.training_run import model_settings, sim_train

    settings = model_settings(model_size, 4096, 2, None)
    start, cpu = time.perf_counter(), time.process_time()
    summary = sim_train(world=world, steps=steps, commit_every=10, topology="dgx-a100", settings=settings,
                        max_sim_s=1e6)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"world": world, "steps": summary["steps"], "model_params": model_size, "wall_s": wall, "cpu_s": cpu,
            "us_per_rank_step": 1e6 * wall / (world * steps), "cpu_us_per_rank_step": 1e6 * cpu / (world * steps),
            "sim_time_s": summary["sim_time_s"],
            "finished": summary["finished"], "heartbeat_fanout": summary["heartbeat_fanout"],
            "peak_rss_mib": _rss_mib()}


def flow_row(devices: int = 1024, phases: int = 200) -> dict:
    import numpy as np
    import simpy

    from seedance.models.topology import load
    from seedance.sim.flows import FlowModel
    from seedance.sim.network import Network

    topology = load("dgx-a100", nodes=devices // 8)
    env = simpy.Environment()
    network = Network(topology, devices, np.random.default_rng(0))
    flows = FlowModel(env, network)
    links, counts = flows.ring_links(tuple(range(devices)))
    start = time.perf_counter()
    ended = []
    for k in range(phases):  # four in flight at a time, staggered
        if k:
            env.run(until=k * 0.01)
        flows.start(links, counts, 1e8, on_done=ended.append)
    env.run()
    wall = time.perf_counter() - start
    return {"devices": devices, "phases": phases, "ended": len(ended), "recomputes": flows.recomputes,
            "us_per_phase": 1e6 * wall / phases}


def stress_row(hours: float) -> dict:
    from seedance.experiments.stress import run

    with tempfile.TemporaryDirectory(prefix="seedance-stress-bench-") as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        result = run(hours=hours, seed=0, out=tmp)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    s = result["summary"]
    return {"hours": hours, "wall_s": wall, "cpu_s": cpu, "steps": s["steps"], "wall_s_per_simulated_hour": wall / hours,
            "cpu_s_per_simulated_hour": cpu / hours, "projected_72h_cpu_min": cpu / hours * 72 / 60,
            "projected_72h_wall_min": wall / hours * 72 / 60, "us_per_rank_step": s["wall_us_per_rank_step"],
            "violations": s["violations"], "rollbacks": s["rollbacks"], "peak_rss_mib": _rss_mib()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--worlds", default="8,64,256")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model-size", type=float, default=None)
    parser.add_argument("--target", action="store_true", help="run 1,024 ranks x 1,000 steps itself")
    parser.add_argument("--stress-hours", type=float, default=0.05)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"train": [], "flows": None, "stress": None}
    train_row(2, 2, None)  # imports and first-call caches out of the first measured row
    for world in (int(w) for w in args.worlds.split(",")):
        row = train_row(world, args.steps, args.model_size)
        doc["train"].append(row)
        print(f"sim train {world:5d} ranks x {row['steps']} steps: {row['wall_s']:7.2f} wall s, {row['cpu_s']:7.2f} CPU s, "
              f"{row['cpu_us_per_rank_step']:7.0f} CPU us per rank-step, fan-out {row['heartbeat_fanout']}, "
              f"peak RSS {row['peak_rss_mib']:.0f} MiB", flush=True)
    largest = doc["train"][-1]
    doc["target_projection_cpu_s"] = largest["cpu_us_per_rank_step"] * 1e-6 * 1024 * 1000
    print(f"1,024 ranks x 1,000 steps projected at {largest['world']} ranks' cost: "
          f"{doc['target_projection_cpu_s']:.0f} CPU s (target <= 120 wall s)")
    if args.target:
        doc["target"] = train_row(1024, 1000, args.model_size)
        print(f"1,024 x 1,000 measured: {doc['target']['wall_s']:.0f} wall s")
    doc["flows"] = flow_row()
    print(f"flow model: {doc['flows']['us_per_phase']:.0f} us per 1,024-device ring phase "
          f"({doc['flows']['recomputes']} rate recomputations)")
    if args.stress_hours > 0:
        doc["stress"] = stress_row(args.stress_hours)
        st = doc["stress"]
        print(f"stress {st['hours']} h: {st['wall_s']:.0f} wall s, {st['cpu_s']:.0f} CPU s; 72 h projected "
              f"{st['projected_72h_cpu_min']:.0f} CPU min (target <= 15 wall min)")
    (out / "train_scale.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
