"""What the host model's parts cost the simulator (issue V): Raft, 3 nodes, 8 closed-loop clients on a host
profile, simulated operations per CPU second, with the host's slow spells and the measured hand-back against the
same profile without them.

Measured in one process, the variants interleaved in ``--repeats`` rounds; each ratio is the median of the
per-round ratios (variant / plain profile), so a busy machine moves both sides alike. CPU time
(``process_time``) around the whole ``simulate()`` call, trace off, no checker.
Usage: ``python benchmarks/host_model_speed.py [--out DIR] [--quick]``; writes ``DIR/host_model_speed.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from seedance.models.host import Empirical, HostProfile, LogNormal, SpellProfile
from seedance.provenance import run_metadata
from seedance.sim import SimConfig, WorkloadConfig, simulate

SEED = 20261202


def plain_profile() -> HostProfile:
    """A profile shaped like this machine's (2 cores; costs of the order `real profile` measures here)."""
    return HostProfile(
        cores=2, cpu={"message": LogNormal(18e-6, 0.7, 1.6e-4), "timer": LogNormal(7e-6, 0.6, 8e-5),
                      "client": LogNormal(5e-6, 0.5, 6e-5), "persisted": LogNormal(6e-6, 0.9, 1.5e-4)},
        io_per_input=LogNormal(30e-6), fsync=LogNormal(2.4e-4, 0.4, 7e-4), write_bandwidth_GBps=1.5,
        loopback=LogNormal(26e-6, 0.14, 4e-5), client_per_op=LogNormal(63e-6), wake=LogNormal(2e-6),
        client_wake=LogNormal(57e-6), handoff=LogNormal(30e-6, 0.2, 1e-4), sync_cpu=LogNormal(28e-6),
        measured={"config": {"protocol": "raft", "clients": 8}})


VARIANTS = {
    "plain": lambda p: p,
    "spells": lambda p: dataclasses.replace(p, spell=SpellProfile(0.25, 0.05)),
    "spells+handback": lambda p: dataclasses.replace(
        p, spell=SpellProfile(0.25, 0.05),
        handback=Empirical.fit([35e-6, 45e-6, 56e-6, 70e-6, 90e-6, 143e-6, 200e-6, 360e-6])),
}


def one(profile: HostProfile, duration_s: float) -> tuple[float, int]:
    start = time.process_time()
    result = simulate(SimConfig(protocol="raft", nodes=3, duration_s=duration_s, seed=SEED, trace=False,
                                check=False, workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0)),
                                host_profile=profile), liveness=False)
    return time.process_time() - start, result.ops_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/bench")
    parser.add_argument("--quick", action="store_true", help="1 s runs, 3 rounds")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    duration, repeats = (1.0, 3) if args.quick else (3.0, 5)
    repeats = args.repeats or repeats
    base = plain_profile()
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(repeats):
        for name, make in VARIANTS.items():
            cpu_s, ops = one(make(base), duration)
            rates[name].append(ops / cpu_s)
    ratios = {name: statistics.median(r / p for r, p in zip(rates[name], rates["plain"])) for name in VARIANTS}
    out = {"benchmark": "host_model_speed", "duration_s": duration, "repeats": repeats,
           "ops_per_cpu_s": {name: statistics.median(v) for name, v in rates.items()},
           "ratio_to_plain": ratios, "provenance": run_metadata(seed=SEED, spec={"duration_s": duration})}
    for name in VARIANTS:
        print(f"{name:>16}: {out['ops_per_cpu_s'][name]:,.0f} simulated ops per CPU second "
              f"({ratios[name]:.2f} x the plain profile)")
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "host_model_speed.json").write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {path / 'host_model_speed.json'}")


if __name__ == "__main__":
    main()
