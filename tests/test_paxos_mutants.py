"""Planted bugs in Multi-Paxos and EPaxos caught by the simulator campaign within 100 seeds, while the correct
protocol stays clean on the same seeds (the campaign of tests/paxos_campaign.py: every fault kind, 3 or 5
replicas). The single-ballot EPaxos rule and the acceptor that accepts below its promise have scripted schedules
too (tests/test_epaxos_recovery.py, tests/test_multipaxos.py)."""

from __future__ import annotations

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge
from paxos_mutants import MUTANTS


def _first_detection(name: str) -> tuple[int | None, list[str]]:
    for seed in range(100):
        _, problems = judge(campaign_config(seed, MUTANTS[name], FAST_TIMING, check_timeout_s=10.0))
        problems = [p for p in problems if "linearizable='unknown'" not in p]  # a checker timeout
        if problems:
            return seed, problems
    return None, []


@pytest.mark.parametrize("name, protocol, signature", [
    ("unchecked-fast-path", "epaxos", ("Execution consistency", "Consistency", "linearizable")),
    ("lowest-ballot", "multipaxos", ("Agreement", "linearizable")),
    ("accept-below-promise", "multipaxos", ("Agreement", "linearizable")),
    ("single-ballot", "epaxos", ("Consistency", "Execution consistency", "linearizable")),
])
def test_planted_bug_is_caught_and_the_correct_protocol_is_clean(name, protocol, signature, request):
    seed, problems = _first_detection(name)
    assert seed is not None, f"{name} survived 100 seeds"
    assert any(s in p for p in problems for s in signature), problems
    for clean_seed in range(seed + 1):
        result, found = judge(campaign_config(clean_seed, protocol, FAST_TIMING))
        assert not found, explain(result, found, request.node.nodeid)
