"""Seeded fault campaigns of the causal protocol in the simulator, and the planted bugs they catch.

Each seed draws its own cluster (3 or 5 nodes) and one to three fault kinds (partitions of every shape, crashes,
pauses, loss, duplication, reordering, delay, clock skew); faults occupy the first 60 % of the run, then everything
heals. Clients render at a frame rate (300 Hz here, a burst of two writes and a read per frame) on a 4×2 grid (hot
pixels: concurrent writes to one pixel are the rule), each burst on a replica drawn at random, so clients carry
their vector clocks across replicas and the coordinator's check is exercised. A run passes when the history has no
causal anomaly (Bouajjani et al. bad patterns), every acknowledged write reached every replica by the end and the
replicas agree (convergence after heal), the clock-honesty monitor saw no breach during the run or at its end, and
operations completed after the heal.

Seeds: 200 in the default suite (``CI_SEEDS``, about 0.4 s each here, in chunks of 25), 2,000 more under
``@pytest.mark.slow`` (``make test-slow``). The planted bugs of :mod:`causal_mutants` must each be caught within
60 seeds.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import causal_mutants
from seedance.models.protocols.causal import invariants
from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

FAULTS = ["partition", "crash", "pause", "loss", "duplicate", "reorder", "skew", "delay"]
CI_SEEDS = range(200)
# Open protocol bugs the campaign has found, by seed: the breach each seed must still show (a seed listed here that
# passes fails the campaign, so a fix removes its line). None is open. The last ones (seed 29 here; 283, 617, 1115,
# 1243, 1341, 1367, 1637, 1683, 1685, 1706 and 1886 of the slow seeds) were one bug: after a rejection with held=0 a
# restarted replica resent its delta-groups from group 0, whose later groups' clocks covered writes delivered after
# its boot that no group carried (tests/test_causal_node.py).
KNOWN_BREACHES: dict[int, str] = {}
SLOW_SEEDS = range(200, 2200)
CHUNK = 25


def campaign_config(seed: int, protocol: object = "causal") -> SimConfig:
    rng = np.random.default_rng([seed, 0xCA5A])
    faults = tuple(str(f) for f in rng.choice(FAULTS, size=int(rng.integers(1, 4)), replace=False))
    return SimConfig(
        protocol=protocol, nodes=int(rng.choice([3, 5])), duration_s=0.15, seed=seed,
        protocol_config={"width": 4, "height": 2, "sync_interval_s": 0.002},
        workload=WorkloadConfig(mode="frame", clients=3, keys=8, frame_rate_hz=300.0, writes_per_frame=2,
                                op_timeout_s=0.02, roam=True),
        nemesis=NemesisConfig(faults=faults), trace=False)


def judge(config: SimConfig) -> tuple[dict, list[str]]:
    result = simulate(config, liveness=False)
    summary = result.summary()
    problems = [f"t={t:.6f} {text}" for t, text in result.violations]
    problems += invariants.check([host.node for host in result.runtime.hosts if host.up])
    causal = summary["causal"]
    if summary["causal_violations"]:
        problems.append(f"causal anomalies {causal['counts']}: {causal['anomalies'][:2]}")
    if not summary["converged"]:
        problems.append(f"not converged {causal['convergence']['counts']}: {causal['convergence_anomalies'][:2]}")
    if summary["ops_ok_healed"] == 0:
        problems.append("no operation completed after the heal")
    return summary, problems


def _run_seeds(seeds) -> dict:
    totals = {"runs": 0, "rejected_writes": 0, "writes_measured": 0}
    for seed in seeds:
        config = campaign_config(seed)
        summary, problems = judge(config)
        if seed in KNOWN_BREACHES:
            assert problems and KNOWN_BREACHES[seed] in problems[0], (
                f"seed {seed} no longer shows its known breach ({KNOWN_BREACHES[seed]!r}): remove it from "
                f"KNOWN_BREACHES; problems now: {problems[:2]}")
            continue
        assert not problems, (f"seed {seed} ({', '.join(config.nemesis.faults)}): {problems[:3]}\n"
                              f"reproduce: {summary['reproduce']}")
        totals["runs"] += 1
        totals["rejected_writes"] += summary["rejected_writes"]
        totals["writes_measured"] += summary["causal"]["convergence"]["writes_measured"]
    return totals


@pytest.mark.parametrize("first", range(CI_SEEDS.start, CI_SEEDS.stop, CHUNK))
def test_campaign(first):
    totals = _run_seeds(range(first, min(first + CHUNK, CI_SEEDS.stop)))
    assert totals["writes_measured"] > 0


def test_campaign_exercises_the_coordinator_check():
    """Roaming clients under faults do reach replicas behind their clocks: the coordinator rejects, with a reason."""
    totals = _run_seeds(range(5))
    assert totals["rejected_writes"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("first", range(SLOW_SEEDS.start, SLOW_SEEDS.stop, 100))
def test_campaign_slow(first):
    _run_seeds(range(first, first + 100))


@pytest.mark.parametrize("name", sorted(causal_mutants.MUTANTS))
def test_planted_bug_is_caught(name):
    spec = causal_mutants.spec(name)
    for seed in range(60):
        config = dataclasses.replace(campaign_config(seed), protocol=spec)
        _summary, problems = judge(config)
        if problems:
            return
    pytest.fail(f"planted bug {name!r} survived 60 seeds")


def test_campaign_is_reproducible():
    a, _ = judge(dataclasses.replace(campaign_config(7), trace=True))
    b, _ = judge(dataclasses.replace(campaign_config(7), trace=True))
    assert a["trace_sha256"] == b["trace_sha256"] and a["convergence_ms_p99"] == b["convergence_ms_p99"]
