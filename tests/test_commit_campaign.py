"""Seeded fault campaign of the fixed validate-and-commit protocol in the simulator.

Each run trains 60 steps on 4 ranks (commit every 10) while the nemesis injects its faults in the first 6 s of
virtual time (crashes with restart from the atomic checkpoint, partitions, pauses — whose collectives time out —,
message loss, duplication, delays, clock skew, CPU hogs); the run must finish after the heal (training resumes), with
replicas identical at every commit and nothing committed that not every member of the view agreed on (the invariant
monitor, after every input) and bit-identical replicas at the end. The default run samples 8 seeds; ``-m slow`` runs
the full 200.
"""

from __future__ import annotations

import pytest

from seedance.experiments.training_run import sim_train

MIXES = [("crash", "partition", "pause"), ("crash", "loss", "delay"), ("partition", "duplicate", "reorder"),
         ("pause", "skew", "cpu-hog"), ("crash", "partition", "pause", "loss", "delay", "skew")]


def _check(seed: int) -> dict:
    faults = MIXES[seed % len(MIXES)]
    s = sim_train(world=4, steps=60, commit_every=10, seed=seed, nemesis=faults, max_sim_s=30.0,
                  faulty_fraction=0.2)
    assert s["finished"] and s["steps"] == 60 and s["ranks_finished"] == 4, (seed, faults, s)
    assert s["monitor_breaches"] == 0, (seed, faults, s["violations"])
    assert s["false_convergence"] == 0 and s["param_l2_deviation"] == 0.0, (seed, faults, s)
    assert s["leaked_handles"] == 0, (seed, faults, s)
    return s


@pytest.mark.parametrize("seed", range(8))
def test_fault_campaign_sample(seed: int):
    _check(seed)


@pytest.mark.slow
def test_fault_campaign_200_runs():
    recovered = 0
    for seed in range(200):
        s = _check(1000 + seed)
        recovered += bool(s["rollbacks"])
    assert recovered >= 100  # the faults did bite: most runs had to roll back and resync
