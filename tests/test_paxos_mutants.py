"""Planted bugs in Multi-Paxos and EPaxos caught by the simulator campaign within 100 seeds (the campaign of
tests/paxos_campaign.py: every fault kind, 3 or 5 replicas), by the protocol's invariant monitor alone (the scan
skips the linearizability checker to stay cheap). The correct protocols run the very same simulations on seeds
0..199 in tests/test_multipaxos_campaign.py and tests/test_epaxos_campaign.py (checker included) and stay clean, so
they are not re-run here. First detections: unchecked-fast-path seed 0, lowest-ballot seed 1, accept-below-promise
seed 28, single-ballot seed 22. The single-ballot EPaxos rule and the acceptor that accepts below its promise have
scripted schedules too (tests/test_epaxos_recovery.py, tests/test_multipaxos.py)."""

from __future__ import annotations

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, judge
from paxos_mutants import MUTANTS


def _first_detection(name: str) -> tuple[int | None, list[str]]:
    for seed in range(100):
        _, problems = judge(campaign_config(seed, MUTANTS[name], FAST_TIMING, check=False))
        problems = [p for p in problems if not p.startswith("linearizable=None")]  # not checked
        if problems:
            return seed, problems
    return None, []


@pytest.mark.parametrize("name, protocol, signature", [
    ("unchecked-fast-path", "epaxos", ("Execution consistency", "Consistency")),
    ("lowest-ballot", "multipaxos", ("Agreement",)),
    ("accept-below-promise", "multipaxos", ("Agreement",)),
    ("single-ballot", "epaxos", ("Consistency", "Execution consistency")),
])
def test_planted_bug_is_caught(name, protocol, signature):
    seed, problems = _first_detection(name)
    assert seed is not None, f"{name} survived 100 seeds"
    assert any(s in p for p in problems for s in signature), problems
