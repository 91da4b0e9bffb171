"""Raft's flow control (seedance.models.protocols.raft.flow): loss and duplication never leave the leader's window
full or open it wider; each scenario is also run against :class:`raft_mutants.CountingWindowRaft` (the counting
window Raft had before issue R), which must fail it — these are the tests that would have caught that bug."""

from __future__ import annotations

import numpy as np
import pytest

from raft_harness import Cluster, fuzz
from raft_mutants import CountingWindowRaft
from seedance.models.protocols.contract import Outcome, Send
from seedance.models.protocols.raft import RaftNode, Role
from seedance.models.protocols.raft.messages import AppendEntries, AppendEntriesReply


def _entries_to(c: Cluster, dst: int) -> int:
    return sum(1 for _, d, m in c.queue if d == dst and isinstance(m, AppendEntries) and m.entries)


def lost_entries_then_heartbeats(node_class) -> Cluster:
    """Leader 0 sends a write to nodes 1 and 2 and beats right after; the write's AppendEntries to node 1 is lost
    but node 1 keeps answering heartbeats, for five heartbeat intervals."""
    c = Cluster(3, seed=21, node_class=node_class).start()
    c.elect(0)
    c.fire(0, "heartbeat")
    c.deliver_all()
    c.request(0, "write", "k", 1, client_id=1, request_id=1)
    c.fire(0, "heartbeat")  # queued behind the write
    c.drop(lambda s, d, m: d == 1 and isinstance(m, AppendEntries) and m.entries)
    c.deliver_all()
    assert c.reply_to(1, 1).outcome is Outcome.OK  # nodes 0 and 2 are a majority
    for _ in range(5):
        c.fire(0, "heartbeat")
        c.deliver_all()
    return c


@pytest.mark.parametrize("node_class", [RaftNode, CountingWindowRaft])
def test_a_lost_append_entries_does_not_leave_the_window_full(node_class):
    """After the loss is repaired, a new write goes to every follower at once — no heartbeat needed."""
    c = lost_entries_then_heartbeats(node_class)
    c.request(0, "write", "k", 2, client_id=1, request_id=2)  # the flush fires at once in the harness
    sent_at_once = {dst: _entries_to(c, dst) for dst in (1, 2)}
    c.deliver_all()
    full = sent_at_once[1] == 0 or c.nodes[1].log.last_index != c.nodes[0].log.last_index
    if node_class is RaftNode:
        assert not full, sent_at_once
        assert c.reply_to(1, 2).outcome is Outcome.OK
        assert all(len(w) == 0 for w in c.nodes[0]._window)
    else:  # the counting window: a heartbeat reply per interval keeps the lost message "in flight" forever
        assert full, "the counting-window mutant was expected to strand node 1"


def _settle(c: Cluster) -> RaftNode:
    """Bring every node back, heal the network, let timers run until one leader leads everyone."""
    for node_id in range(c.num_nodes):
        if node_id not in c.nodes:
            c.recover(node_id)
    c.heal()
    c.eager_timers = lambda name: True
    c.run(c.now + 2.0)
    return c.leader()


def _new_writes_reach_everyone_without_a_heartbeat(c: Cluster, first_request: int) -> list[str]:
    leader = _settle(c)
    problems = []
    for r in range(first_request, first_request + 5):
        c.request(leader.node_id, "write", "a", r, client_id=9, request_id=r)
        c.deliver_all()  # no timer fires: only the flush, the write and its durability notice (eager)
        reply = c.reply_to(9, r)
        if reply is None or reply.outcome is not Outcome.OK:
            problems.append(f"write {r}: reply {reply}")
        behind = [n.node_id for n in c.nodes.values() if n.log.last_index != leader.log.last_index]
        if behind:
            problems.append(f"write {r}: nodes {behind} did not get it before a heartbeat")
        too_wide = [p for p in leader.peers if len(leader._window[p]) > leader.config.max_inflight] \
            if hasattr(leader, "_window") else []
        if too_wide:
            problems.append(f"window wider than max_inflight for {too_wide}")
    return problems


@pytest.mark.parametrize("seed", range(40))
def test_after_loss_duplication_and_reordering_the_window_recovers(seed):
    """Random loss, duplication, reordering, crashes (the harness fuzzer), then a healed network: within the settle
    time every follower gets each new entry as soon as the leader flushes it (and Raft stays safe throughout)."""
    c = fuzz(Cluster(3, seed=seed, config={"max_inflight": 1 + seed % 3}).start(), seed, steps=1500)
    problems = _new_writes_reach_everyone_without_a_heartbeat(c, 10_000)
    assert not problems, problems
    assert c.check() == [] and c.durability_errors == []


def test_the_fuzzed_recovery_test_catches_the_counting_window():
    """The same test, run on the pre-issue-R counting window, fails on one of its seeds (it stops at the first)."""
    for seed in range(40):
        c = fuzz(Cluster(3, seed=seed, node_class=CountingWindowRaft, config={"max_inflight": 1 + seed % 3}).start(),
                 seed, steps=1500)
        if _new_writes_reach_everyone_without_a_heartbeat(c, 10_000):
            return
    raise AssertionError("the counting-window mutant passed every seed")


def _append_entries_per_write(node_class, copies: int) -> float:
    """Every message delivered ``copies`` times (the network duplicates everything): AppendEntries the leader sends
    per client write, over 20 writes."""
    c = Cluster(5, seed=3, node_class=node_class, config={"max_inflight": 2}).start()
    c.elect(0)
    c.deliver_all()
    sent = 0
    for r in range(1, 21):
        c.request(0, "write", "k", r, client_id=1, request_id=r)
        while c.queue:
            src, dst, message = c.queue.pop(0)
            sent += src == 0 and isinstance(message, AppendEntries)
            for _ in range(copies):
                if dst in c.nodes:
                    c._execute(dst, type(message).__name__, c.nodes[dst].on_message(src, message, c.now))
        assert c.reply_to(1, r).outcome is Outcome.OK
    return sent / 20


def test_duplicated_messages_do_not_make_the_leader_send_more():
    """Duplicates are answered, but a duplicated reply frees no slot and a duplicated rejection is stale: the
    leader sends as many AppendEntries per write with every message doubled as without."""
    once = _append_entries_per_write(RaftNode, 1)
    assert once == 4.0  # one AppendEntries per follower per write
    assert _append_entries_per_write(RaftNode, 2) == once
    assert _append_entries_per_write(RaftNode, 4) == once


def _messages_per_op(protocol, faults: tuple[str, ...]) -> float:
    from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

    result = simulate(SimConfig(protocol=protocol, nodes=5, duration_s=0.5, seed=1011,
                                workload=WorkloadConfig(clients=4), trace=False, monitor=False,
                                nemesis=NemesisConfig(faults=faults, faulty_fraction=0.6)), liveness=False)
    return result.stats["messages_sent"] / result.ops_ok


def test_the_duplicate_fault_does_not_turn_into_a_storm_of_append_entries():
    """Issue R's seed 1011 under ``duplicate`` (5 nodes, 4 clients, readindex reads): the nodes send about as many
    messages per completed operation as without faults; the counting window sent five times as many."""
    from raft_mutants import MUTANTS

    clean = _messages_per_op("raft", ())
    assert _messages_per_op("raft", ("duplicate",)) <= 1.25 * clean
    assert _messages_per_op(MUTANTS["counting-window"], ("duplicate",)) > 2 * clean


def test_stale_and_duplicated_rejections_are_ignored():
    """A rejection is acted on once: a copy of it (or one at or below the follower's match) moves nothing back."""
    c = Cluster(3, seed=5).start()
    c.elect(0)
    c.deliver_all()
    leader = c.nodes[0]
    for r in range(1, 4):
        c.request(0, "write", "k", r, client_id=1, request_id=r)
        c.deliver_all()
    match = leader._match[1]
    assert match == leader.log.last_index
    stale = AppendEntriesReply(term=leader.current_term, success=False, conflict_index=1, reject_index=match - 1)
    before = (leader._next[1], leader._acked_next[1])
    assert not [e for e in leader.on_message(1, stale, c.now) if isinstance(e, Send)]
    assert (leader._next[1], leader._acked_next[1]) == before  # at or below match: stale
    assert leader.role is Role.LEADER


def test_a_duplicated_rejection_is_acted_on_once():
    """Node 2 missed three writes; the leader's next write is rejected (prev index beyond node 2's log). The
    rejection moves the leader back and resends from node 2's conflict point, once — its copy changes nothing."""
    c = Cluster(3, seed=6, config={"max_inflight": 2}).start()
    c.elect(0)
    c.deliver_all()
    leader = c.nodes[0]
    c.isolate(2)
    for r in range(1, 4):
        c.request(0, "write", "k", r, client_id=1, request_id=r)
        c.deliver_all()
    c.heal()
    leader._window[2].clear()  # the lost sends were presumed lost (rule 4) ...
    leader._next[2] = leader._acked_next[2] = leader.log.last_index + 1  # ... and the probe point was a guess
    c.request(0, "write", "k", 4, client_id=1, request_id=4)
    c.deliver_all(lambda s, d, m: d == 2 and isinstance(m, AppendEntries))
    rejection = next(m for s, d, m in c.queue if d == 0 and s == 2)
    assert isinstance(rejection, AppendEntriesReply) and not rejection.success and rejection.reject_index == 4
    first = leader.on_message(2, rejection, c.now)
    resent = [e.message for e in first if isinstance(e, Send)]
    assert len(resent) == 1 and resent[0].prev_log_index == rejection.conflict_index - 1 and resent[0].entries
    assert [e for e in leader.on_message(2, rejection, c.now) if isinstance(e, Send)] == []


def test_window_is_bounded_by_max_inflight_and_pipelines():
    """With max_inflight = 3 and single-entry batches, three AppendEntries carrying entries go out before any
    acknowledgement, and no more; acknowledging the first opens exactly one slot."""
    c = Cluster(3, seed=8, config={"max_inflight": 3, "max_batch_entries": 1}).start()
    c.elect(0)
    c.deliver_all()
    leader = c.nodes[0]
    c.eager_timers = lambda name: name != "flush"
    for r in range(1, 6):
        c.request(0, "write", "k", r, client_id=1, request_id=r)
        c.fire(0, "flush")
    assert _entries_to(c, 1) == 3 and len(leader._window[1]) == 3
    c.fire(0, "heartbeat")  # a heartbeat while the window is full carries no entries and occupies nothing
    assert _entries_to(c, 1) == 3 and len(leader._window[1]) == 3
    beat = c.queue[-1][2] if c.queue[-1][1] == 2 else c.queue[-2][2]
    assert isinstance(beat, AppendEntries) and beat.entries == ()
    c.deliver(lambda s, d, m: d == 1 and isinstance(m, AppendEntries) and m.entries)
    c.deliver(lambda s, d, m: d == 0 and isinstance(m, AppendEntriesReply))
    assert len(leader._window[1]) == 3 and _entries_to(c, 1) == 3  # one freed, one new


def test_random_schedules_reach_the_same_state_on_the_same_seed():
    """Flow control keeps the node deterministic: the same fuzz seed gives the same trace."""
    def run(seed):
        return repr(fuzz(Cluster(3, seed=seed).start(), seed, steps=400).trace)

    assert run(np.uint8(7).item()) == run(7)
