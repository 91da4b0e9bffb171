"""Shared pieces of the Multi-Paxos and EPaxos simulator campaigns (the Raft campaign's shape, protocol-agnostic).

Every run is a pure function of its seed: the seed picks the cluster size and 1–3 faults of every kind the
simulator knows; the simulator draws the schedule from the same seed. The protocol's own invariant monitor
(``ProtocolSpec.monitor``) runs after every input, the kv checker judges the history, and the healed phase must
make progress. A failure prints the ``seedance sim run`` command that reproduces it.
"""

from __future__ import annotations

import numpy as np

from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate
from seedance.sim.nemesis import FAULTS

FAST_TIMING = {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016}


def campaign_config(seed: int, protocol: object, protocol_config: dict, **overrides: object) -> SimConfig:
    rng = np.random.default_rng([seed, 0x5EED])
    faults = tuple(str(f) for f in rng.choice(FAULTS, size=int(rng.integers(1, 4)), replace=False))
    settings = dict(
        protocol=protocol, nodes=int(rng.choice([3, 5])), duration_s=0.25, seed=seed,
        protocol_config=dict(protocol_config),
        workload=WorkloadConfig(clients=3, keys=3, op_timeout_s=0.02),
        nemesis=NemesisConfig(faults=faults, faulty_fraction=0.6),
        trace=False, check=True, check_timeout_s=20.0,
    )
    settings.update(overrides)
    return SimConfig(**settings)


def judge(config: SimConfig) -> tuple[object, list[str]]:
    """Simulate (the protocol's own monitor runs after every input, ``SimConfig.monitor``); the result and every
    problem (empty: clean). A checker timeout ("unknown") counts as a problem too."""
    result = simulate(config)
    problems = [f"t={t:.6f}s {v}" for t, v in result.violations]
    if result.linearizable is not True:
        problems.append(f"linearizable={result.linearizable!r} first_violation="
                        f"{(result.check or {}).get('first_violation')!r}")
    return result, problems


def explain(result, problems: list[str], nodeid: str) -> str:
    return (f"{len(problems)} problem(s): {problems[:3]}\n  faults: {[w.name for w in result.faults]}\n"
            f"  reproduce: {result.reproduce}\n  or: pytest '{nodeid}'")


def liveness_failure(result, nodeid: str) -> str:
    r = result.liveness
    return explain(result, [f"no recovery to {r.fraction:.0%} of the fault-free {r.baseline_throughput_ops_s:.0f} "
                            f"ops/s within {r.bound_s} s of the heal at {r.healed_at_s} s: recovery_s="
                            f"{r.recovery_s}, post-heal {r.throughput_healed_ops_s:.0f} ops/s"], nodeid)
