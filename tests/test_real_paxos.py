"""Multi-Paxos and EPaxos in real processes under SIGKILL: every history linearizable, no acknowledged write lost.

As tests/test_real_campaign.py does for Raft: node processes are SIGKILLed at Poisson times and restarted from
their fsynced state (Multi-Paxos: the promise and the ``acc`` records; EPaxos: the ``inst`` records) while 4
clients run reads, writes and cas — to the leader (Multi-Paxos, ``leader-hint``) or each to its own replica
(EPaxos, ``routing="any"``). Each run ends with a read of every key with all nodes up.
"""

from __future__ import annotations

import pytest

from seedance.analysis.history import read_jsonl
from seedance.real.run import FINAL_READ_PROCESS, run_real

from _real_helpers import wait_gone

pytestmark = pytest.mark.multiprocess

PROTOCOLS = ("multipaxos", "epaxos")
DEFAULT_SEEDS = range(3)
SLOW_SEEDS = range(3, 40)


def _campaign_run(protocol: str, seed: int, out, duration_s: float, kill_rate: float) -> dict:
    summary = run_real(protocol=protocol, nodes=3, clients=4, duration_s=duration_s, seed=seed, out=out,
                       kill_rate=kill_rate, restart_delay_s=0.2)
    reproduce = summary["reproduce"]
    assert summary["linearizable"] is True, f"non-linearizable history; reproduce: {reproduce}"
    events = read_jsonl(out / "history.jsonl")
    acked: dict[str, set] = {}
    for e in events:
        if e.type.value == "ok" and e.f.value in ("write", "cas"):
            acked.setdefault(e.key, set()).add(e.value if e.f.value == "write" else e.value[1])
    finals = {e.key: e.value for e in events if e.process >= FINAL_READ_PROCESS and e.type.value == "ok"}
    for key in acked:
        assert key in finals, f"no final read of {key}; reproduce: {reproduce}"
        assert finals[key] is not None, f"acknowledged writes of {key} lost; reproduce: {reproduce}"
    assert wait_gone(out) == []
    return summary


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
