"""EPaxos safety campaign in the simulator (see tests/paxos_campaign.py for the shape).

Each seed draws 3 or 5 replicas and 1–3 faults of every kind (crashes, partitions, loss, duplication, reordering,
pauses, clock skew, disk faults; the leader-targeted strikes have no leader to aim at in EPaxos and leave the run
fault-free for their window); 0.25 simulated seconds, 3 clients on 3 keys, each talking to its own replica
(``routing="any"``). Every run must be linearizable (kv checker), keep the Consistency / Execution-consistency
monitor clean, and make progress after healing. CI runs ``CAMPAIGN_SEEDS``; ``-m slow`` runs 2,000 more.
"""

from __future__ import annotations

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge, liveness_failure

CAMPAIGN_SEEDS = range(200)
SLOW_SEEDS = range(200, 2200)


def _check_seed(seed: int, request) -> None:
    result, problems = judge(campaign_config(seed, "epaxos", FAST_TIMING))
    assert not problems, explain(result, problems, request.node.nodeid)
    assert result.progress_after_heal, liveness_failure(result, request.node.nodeid)
    assert result.ops_ok > 0


@pytest.mark.parametrize("seed", CAMPAIGN_SEEDS)
def test_campaign(seed, request):
    """≥ 200 seeded runs: zero non-linearizable histories, zero monitor breaches, progress after healing."""
    _check_seed(seed, request)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_campaign_slow(seed, request):
    _check_seed(seed, request)
