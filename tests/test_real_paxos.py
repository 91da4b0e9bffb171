"""Multi-Paxos and EPaxos in real processes under SIGKILL: every history linearizable, no acknowledged write lost.

As tests/test_real_campaign.py does for Raft: node processes are SIGKILLed at Poisson times and restarted from
their fsynced state (Multi-Paxos: the promise and the ``acc`` records; EPaxos: the ``inst`` records) while 4
clients run reads, writes and cas — to the leader (Multi-Paxos, ``leader-hint``) or each to its own replica
(EPaxos, ``routing="any"``). Each run ends with a read of every key with all nodes up.
"""

from __future__ import annotations

import pytest

from _real_helpers import kill_campaign_run

pytestmark = pytest.mark.multiprocess

PROTOCOLS = ("multipaxos", "epaxos")
DEFAULT_SEEDS = range(3)
SLOW_SEEDS = range(3, 40)


_campaign_run = kill_campaign_run


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_survives_sigkills(protocol, seed, tmp_path):
    summary = _campaign_run(protocol, seed, tmp_path / "run", duration_s=2.0, kill_rate=2.0)
    assert summary["ops_ok"] > 0 and summary["kills"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_survives_sigkills_long(protocol, seed, tmp_path):
    _campaign_run(protocol, seed, tmp_path / "run", duration_s=6.0, kill_rate=2.0)
