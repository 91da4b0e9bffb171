"""EPaxos safety campaign in the simulator (see tests/paxos_campaign.py for the shape).

Each seed draws 3 or 5 replicas and 1–3 faults of every kind (crashes, partitions, loss, duplication, reordering,
pauses, clock skew, disk faults; the leader-targeted strikes have no leader to aim at in EPaxos and leave the run
fault-free for their window); 0.25 simulated seconds, 3 clients on 3 keys, each talking to its own replica
(``routing="any"``). Every run must be linearizable (kv checker), keep the Consistency / Execution-consistency
monitor clean, and make progress after healing. CI runs ``CAMPAIGN_SEEDS`` and the first 100 ``FIVE_SEEDS``;
``-m slow`` runs 2,100 more. Batching has its own campaign in tests/test_epaxos_batching.py.
"""

from __future__ import annotations

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge, liveness_failure

CAMPAIGN_SEEDS = range(200)
SLOW_SEEDS = range(200, 2200)
FIVE_SEEDS = range(200)  # every run at N = 5, where the optimized fast quorum needs TryPreAccept in recovery


def _check_seed(seed: int, request, **overrides) -> None:
    result, problems = judge(campaign_config(seed, "epaxos", FAST_TIMING, **overrides))
    assert not problems, explain(result, problems, request.node.nodeid)
    assert result.progress_after_heal, liveness_failure(result, request.node.nodeid)
    assert result.ops_ok > 0


@pytest.mark.parametrize("seed", CAMPAIGN_SEEDS)
def test_campaign(seed, request):
    """≥ 200 seeded runs: zero non-linearizable histories, zero monitor breaches, progress after healing."""
    _check_seed(seed, request)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.campaign if s < 100 else pytest.mark.slow)
                                  for s in FIVE_SEEDS])
def test_campaign_five_replicas(seed, request):
    """The same draws with five replicas each (fast quorum 3 of 5): seeds 0–99 in CI, 100–199 under ``-m slow``."""
    _check_seed(seed, request, nodes=5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_campaign_slow(seed, request):
    _check_seed(seed, request)
