"""Linearizable reads (§6.4 ReadIndex, or through the log) and client request deduplication (§8)."""

from __future__ import annotations

from raft_harness import Cluster
from seedance.models.protocols.contract import Outcome, Send
from seedance.models.protocols.raft import Role
from seedance.models.protocols.raft.messages import AppendEntries, AppendEntriesReply


def _leader_cluster(**config) -> Cluster:
    c = Cluster(3, seed=0, config=config).start()
    c.elect(0)
    c.request(0, "write", "k", "v1", client_id=1, request_id=1)
    c.deliver_all()
    return c


def test_readindex_answers_after_a_heartbeat_round_without_touching_the_log():
    """§6.4: read index = commit index; a majority acknowledging a later heartbeat confirms leadership."""
    c = _leader_cluster()
    length = c.nodes[0].log.last_index
    effects = c.request(0, "read", "k", client_id=2, request_id=1)
    assert c.reply_to(2, 1) is None  # not before confirmation
    beats = [e.message for e in effects if isinstance(e, Send)]
    assert len(beats) == 2 and all(isinstance(m, AppendEntries) and m.read_seq == 1 for m in beats)
    c.deliver(lambda s, d, m: d == 1)  # one follower's ack + the leader itself = a majority of 3
    c.deliver(lambda s, d, m: isinstance(m, AppendEntriesReply))
    assert c.reply_to(2, 1).value == "v1" and c.reply_to(2, 1).outcome is Outcome.OK
    assert c.nodes[0].log.last_index == length


def test_readindex_batches_reads_that_arrive_during_a_round():
    c = _leader_cluster()
    c.request(0, "read", "k", client_id=2, request_id=1)
    c.request(0, "read", "k", client_id=3, request_id=1)  # joins the next round
    c.request(0, "read", "k", client_id=4, request_id=1)
    assert sum(isinstance(m, AppendEntries) for _, _, m in c.queue) == 2  # one round in flight
    c.deliver_all()
    assert all(c.reply_to(cl, 1).value == "v1" for cl in (2, 3, 4))


def test_readindex_waits_for_an_entry_of_the_leaders_term():
    """§6.4 step 1 / §8: until its no-op commits, a new leader's commit index may be stale: reads wait."""
    c = Cluster(3, seed=1).start()
    c.fire(0, "election")
    c.deliver_all(where=lambda s, d, m: not isinstance(m, AppendEntries))
    assert c.nodes[0].role is Role.LEADER and c.nodes[0].commit_index == 0
    c.request(0, "read", "k", client_id=2, request_id=1)
    assert c.reply_to(2, 1) is None and not c.nodes[0]._reads
    c.deliver_all()
    assert c.reply_to(2, 1).outcome is Outcome.OK


def test_a_deposed_leader_never_serves_a_stale_read():
    """An isolated old leader cannot confirm leadership, so it cannot answer with the value it still holds."""
    c = _leader_cluster()
    c.isolate(0)
    c.request(0, "read", "k", client_id=9, request_id=1)  # heartbeats of this round are lost
    c.elect(1)
    c.request(1, "write", "k", "v2", client_id=1, request_id=2)
    c.deliver_all()
    assert c.reply_to(1, 2).outcome is Outcome.OK
    for _ in range(3):
        c.fire(0, "heartbeat")
    assert c.reply_to(9, 1) is None
    c.heal()
    c.fire(1, "heartbeat")
    c.deliver_all()
    reply = c.reply_to(9, 1)
    assert c.nodes[0].role is Role.FOLLOWER
    assert reply.outcome is Outcome.FAIL and reply.error == "not-leader" and reply.leader_hint == 1


def test_reads_through_the_log():
    c = _leader_cluster(reads="log")
    length = c.nodes[0].log.last_index
    c.request(0, "read", "k", client_id=2, request_id=1)
    c.deliver_all()
    assert c.reply_to(2, 1).value == "v1" and c.nodes[0].log.last_index == length + 1
    assert c.nodes[0].log.entry(length + 1).op == "read"


def test_single_node_cluster_serves_everything_alone():
    c = Cluster(1, seed=0).start()
    c.fire(0, "election")
    assert c.nodes[0].role is Role.LEADER
    c.request(0, "write", "k", 1)
    c.request(0, "read", "k", client_id=2)
    assert c.reply_to(1, 1).outcome is Outcome.OK and c.reply_to(2, 1).value == 1


def test_a_retried_write_is_applied_once():
    """§8: the state machine remembers each client's last request; a retry returns the first result."""
    c = _leader_cluster()
    c.request(0, "cas", "k", ["v1", "v2"], client_id=5, request_id=1)
    c.deliver_all()
    applied = c.nodes[0].kv.applied_count
    c.replies.clear()
    c.request(0, "cas", "k", ["v1", "v2"], client_id=5, request_id=1)  # retry after an applied cas
    assert c.reply_to(5, 1).outcome is Outcome.OK  # answered from the dedup table, not a cas-mismatch
    assert c.nodes[0].kv.applied_count == applied


def test_a_retry_to_a_new_leader_of_an_uncommitted_write_applies_once():
    c = _leader_cluster()
    c.request(0, "write", "n", 1, client_id=5, request_id=7)
    c.deliver_all(where=lambda s, d, m: d == 1 and isinstance(m, AppendEntries))  # on nodes 0, 1: not yet acked
    c.drop()
    c.crash(0)
    c.elect(1, where=lambda s, d, m: not isinstance(m, AppendEntries))
    assert c.nodes[1].role is Role.LEADER
    c.request(1, "write", "n", 1, client_id=5, request_id=7)  # the client retries at the new leader
    c.deliver_all()
    c.fire(1, "heartbeat")
    c.deliver_all()
    leader = c.nodes[1]
    ops = [e for e in leader.log if e.client_id == 5]
    assert len(ops) == 2  # the old entry (committed by the new term) and the retry's
    assert leader.kv.read("n") == 1 and c.reply_to(5, 7).outcome is Outcome.OK
    assert leader.kv.cached(5, 7) is not None and leader.kv.applied_count == 2  # the two writes, once each


def test_a_retry_of_an_applied_write_is_answered_from_the_dedup_table():
    c = _leader_cluster()
    c.request(0, "write", "n", 1, client_id=5, request_id=7)
    c.deliver_all(where=lambda s, d, m: d == 1 and isinstance(m, AppendEntries))
    c.drop()
    c.crash(0)
    c.elect(1)  # the new leader's no-op commits the old write indirectly (§5.4.2)
    length = c.nodes[1].log.last_index
    c.request(1, "write", "n", 1, client_id=5, request_id=7)
    assert c.reply_to(5, 7).outcome is Outcome.OK and c.nodes[1].log.last_index == length


def test_failed_cas_is_a_definite_failure_and_bad_requests_are_refused():
    c = _leader_cluster()
    c.request(0, "cas", "k", ["nope", "x"], client_id=6, request_id=1)
    c.deliver_all()
    assert (c.reply_to(6, 1).outcome, c.reply_to(6, 1).error) == (Outcome.FAIL, "cas-mismatch")
    length = c.nodes[0].log.last_index
    c.request(0, "cas", "k", "not-a-pair", client_id=6, request_id=2)
    assert c.reply_to(6, 2).outcome is Outcome.FAIL and c.nodes[0].log.last_index == length
