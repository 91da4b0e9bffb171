"""Raft in real processes under SIGKILL faults: every history linearizable, no acknowledged write lost.

Raft §5.4 (safety) and §5.1 (persist term, vote and log before answering) are what this exercises for real: node
processes are SIGKILLed at Poisson times (``--kill-rate``) and restarted from their fsynced state while 4 clients
run reads, writes and cas. Each run ends with a read of every key with all nodes up, so a lost acknowledged write
would show as a non-linearizable history; the test also checks that directly on the final reads.
"""

from __future__ import annotations

import pytest

from _real_helpers import kill_campaign_run

pytestmark = pytest.mark.multiprocess

DEFAULT_SEEDS = range(20)
SLOW_SEEDS = range(20, 120)


def _campaign_run(seed: int, out, duration_s: float, kill_rate: float) -> dict:
    return kill_campaign_run("raft", seed, out, duration_s, kill_rate)


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_raft_survives_sigkills(seed, tmp_path):
    summary = _campaign_run(seed, tmp_path / "run", duration_s=1.5, kill_rate=2.0)
    # liveness: once the kills stop and every node is back, the cluster serves a read of every key (on a loaded
    # machine 1.5 s of kills can leave no window for a client operation; the healed cluster must still answer)
    assert summary["final_reads"]["read"] == summary["final_reads"]["keys"], summary["reproduce"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_raft_survives_sigkills_long(seed, tmp_path):
    _campaign_run(seed, tmp_path / "run", duration_s=6.0, kill_rate=2.0)
