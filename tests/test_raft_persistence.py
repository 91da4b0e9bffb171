"""Persistence and recovery (Figure 2: persistent state is on stable storage before responding to RPCs)."""

from __future__ import annotations

import pytest

from raft_harness import Cluster, fuzz
from seedance.models.protocols.contract import Outcome, Persist, PersistLog, Reply, Send
from seedance.models.protocols.raft import Role
from seedance.models.protocols.raft.messages import RequestVote


def _sends_before_persist(trace) -> list[str]:
    """Generic scan: in each effects list, every Persist/PersistLog precedes every Send and Reply."""
    bad = []
    for node_id, kind, effects in trace:
        durable_at = [k for k, e in enumerate(effects) if isinstance(e, (Persist, PersistLog))]
        speech_at = [k for k, e in enumerate(effects) if isinstance(e, (Send, Reply))]
        if durable_at and speech_at and min(speech_at) < max(durable_at):
            bad.append(f"node {node_id} on {kind}: {effects}")
    return bad


@pytest.mark.parametrize("seed", range(6))
def test_every_send_follows_its_persist_under_random_interleavings(seed):
    c = fuzz(Cluster(5, seed=seed).start(), seed, steps=1500, crash_rate=0.01)
    assert _sends_before_persist(c.trace) == []
    assert c.durability_errors == []  # term, vote and log were durable whenever the node spoke
    assert c.check() == []
    assert len(c.trace) > 500 and any(isinstance(e, PersistLog) for _, _, effs in c.trace for e in effs)


def test_recovery_restores_term_vote_and_log_and_reapplies_on_commit():
    c = Cluster(3, seed=1).start()
    c.elect(0)
    for r in range(1, 6):
        c.request(0, "write", "k", r, request_id=r)
        c.deliver_all()
    follower = c.nodes[1]
    term, vote, log = follower.current_term, follower.voted_for, tuple(follower.log)
    c.crash(1)
    back = c.recover(1)
    assert (back.current_term, back.voted_for, tuple(back.log)) == (term, vote, log)
    assert back.commit_index == 0 and back.last_applied == 0 and back.kv.read("k") is None  # volatile
    c.fire(0, "heartbeat")
    c.deliver_all()
    assert back.commit_index == 6 and back.kv.read("k") == 5 and back.kv == c.nodes[0].kv


def test_a_recovered_voter_does_not_vote_twice_in_a_term():
    """§5.2: at most one vote per term, even across a crash (votedFor is persistent)."""
    c = Cluster(3, seed=2).start()
    c.fire(0, "election")
    c.drop(lambda s, d, m: d == 1)
    c.deliver(lambda s, d, m: d == 2)  # node 2 votes for node 0 in term 1
    assert c.nodes[2].voted_for == 0
    c.crash(2)
    c.recover(2)
    c.fire(1, "election")  # node 1 stands in term 1 too
    c.deliver_all()
    assert len(c.leaders()) == 1 and c.leader().node_id == 0 and c.check() == []


def test_whole_cluster_restart_keeps_committed_writes():
    c = Cluster(3, seed=3).start()
    c.elect(0)
    c.request(0, "write", "k", "v")
    c.deliver_all()
    assert c.reply_to(1, 1).outcome is Outcome.OK
    for i in range(3):
        c.crash(i)
    for i in range(3):
        c.recover(i)
    c.run(c.now + 2.0)
    leader = c.leader()
    c.request(leader.node_id, "read", "k", request_id=2)
    c.run(c.now + 0.5)
    assert c.reply_to(1, 2).value == "v" and c.check() == []


def test_a_recovered_leader_comes_back_as_follower():
    c = Cluster(3, seed=4).start()
    c.elect(0)
    c.crash(0)
    back = c.recover(0)
    assert back.role is Role.FOLLOWER and back.current_term == 1 and back.voted_for == 0
    assert not any(isinstance(m, RequestVote) for _, _, m in c.queue)
