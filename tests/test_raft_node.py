"""Raft elections and log replication, driven by the in-memory harness (Ongaro & Ousterhout 2014)."""

from __future__ import annotations

import pytest

from raft_harness import Cluster
from seedance.errors import SpecError
from seedance.models.protocols.contract import Outcome, Reply, Send
from seedance.models.protocols.raft import SPEC, RaftConfig, Role
from seedance.models.protocols.raft.messages import AppendEntries, AppendEntriesReply, RequestVote
from seedance.models.protocols.registry import get


def _is(kind):
    return lambda src, dst, m: isinstance(m, kind)


def test_registry_builds_raft_nodes():
    spec = get("raft")
    assert spec is SPEC and AppendEntries in spec.message_types
    import numpy as np
    node = spec.factory(0, 3, np.random.default_rng(0), {"reads": "log"})
    assert node.config.reads == "log" and node.role is Role.FOLLOWER


@pytest.mark.parametrize("bad", [{"reads": "lease"}, {"heartbeat_s": 0}, {"max_batch_entries": 0},
                                 {"election_timeout_s_min": 0.4, "election_timeout_s_max": 0.3},
                                 {"election_timeout_s_min": 0.01}, {"bogus": 1}])
def test_bad_config_is_a_spec_error(bad):
    with pytest.raises(SpecError):
        RaftConfig.from_mapping(bad)


@pytest.mark.parametrize("seed", range(8))
def test_election_elects_one_leader_and_commits_its_noop(seed):
    """§5.2: randomized timeouts elect a single leader; §8: it commits a no-op of its term."""
    c = Cluster(5, seed=seed).start()
    c.run(2.0)
    leaders = c.leaders()
    assert len(leaders) == 1
    leader = leaders[0]
    assert {n.current_term for n in c.nodes.values()} == {leader.current_term}
    assert leader.log.entry(leader.commit_index).term == leader.current_term
    assert all(n.leader_id == leader.node_id for n in c.nodes.values())
    assert c.check() == [] and c.durability_errors == []


def test_election_timeouts_are_randomized_from_the_injected_rng():
    """§5.2: each server draws its timeout from [min, max]; different servers draw different ones."""
    c = Cluster(5, seed=3).start()
    delays = [c.timers[i]["election"] - c.now for i in range(5)]
    assert all(0.15 <= d <= 0.30 for d in delays) and len(set(delays)) == 5


def test_split_vote_resolves():
    """§5.2: two candidates at once may split the vote; a later randomized timeout elects someone."""
    c = Cluster(4, seed=0).start()
    for i in (0, 1):
        c.fire(i, "election")  # both stand in term 1
    c.deliver_all()
    c.run(c.now + 3.0)
    assert len(c.leaders()) == 1 and c.check() == []


def test_non_leader_answers_not_leader_with_hint():
    c = Cluster(3, seed=1).start()
    c.elect(0)
    c.request(1, "write", "k", 1)
    reply = c.reply_to(1, 1)
    assert reply.outcome is Outcome.FAIL and reply.error == "not-leader" and reply.leader_hint == 0
    assert all(n.log.last_index == 1 for n in c.nodes.values())  # nothing appended: a definite failure


def test_replication_commits_and_applies_everywhere():
    """§5.3: the leader replicates, commits once a majority stores, followers apply after learning the commit."""
    c = Cluster(5, seed=2).start()
    leader = c.elect(0)
    for r in range(1, 21):
        c.request(0, "write", f"k{r % 3}", r, client_id=7, request_id=r)
        c.deliver_all()
    assert all(c.reply_to(7, r).outcome is Outcome.OK for r in range(1, 21))
    c.fire(0, "heartbeat")
    c.deliver_all()
    logs = {tuple(n.log) for n in c.nodes.values()}
    assert len(logs) == 1 and leader.log.last_index == 21
    assert {n.commit_index for n in c.nodes.values()} == {21}
    assert all(n.kv == leader.kv for n in c.nodes.values()) and leader.kv.read("k2") == 20
    assert c.check() == [] and c.durability_errors == []


def test_batching_caps_entries_per_append_entries():
    c = Cluster(3, seed=0, config={"max_batch_entries": 2}).start()
    c.elect(0)
    c.isolate(2)
    for r in range(1, 8):
        c.request(0, "write", "k", r, request_id=r)
        c.deliver_all()
    c.heal()
    sizes = []
    for _ in range(6):
        c.fire(0, "heartbeat")
        while c.queue:
            src, dst, m = c.queue[0]
            if isinstance(m, AppendEntries) and dst == 2:
                sizes.append(len(m.entries))
            c.deliver()
    assert max(sizes) == 2 and c.nodes[2].log.last_index == 8 and c.nodes[2].commit_index == 8


def test_lost_messages_are_repaired_by_heartbeats():
    c = Cluster(3, seed=4).start()
    c.elect(0)
    c.request(0, "write", "k", 1)
    c.drop()  # every AppendEntries of the write is lost
    assert c.reply_to(1, 1) is None
    c.fire(0, "heartbeat")
    c.deliver_all()
    c.fire(0, "heartbeat")  # the first beat found no reply outstanding-free; this one retransmits if needed
    c.deliver_all()
    assert c.reply_to(1, 1).outcome is Outcome.OK
    assert all(n.log.last_index == 2 for n in c.nodes.values())


def test_conflicting_suffix_is_truncated_and_its_request_is_indeterminate():
    """§5.3: a follower deletes entries that conflict with the new leader's; the old request gets INFO."""
    c = Cluster(3, seed=5).start()
    c.elect(0)
    c.isolate(0)
    c.request(0, "write", "k", "lost", client_id=1, request_id=1)  # appended at index 2 on node 0 only
    c.drop()
    c.elect(1)
    c.request(1, "write", "k", "kept", client_id=2, request_id=1)
    c.deliver_all()
    assert c.reply_to(2, 1).outcome is Outcome.OK
    c.heal()
    c.fire(1, "heartbeat")
    c.deliver_all()
    old = c.nodes[0]
    assert old.role is Role.FOLLOWER and tuple(old.log) == tuple(c.nodes[1].log)
    assert old.kv.read("k") == "kept"
    reply = c.reply_to(1, 1)  # answered when node 0 stepped down: its entry's fate was unknown then
    assert reply.outcome is Outcome.INFO and reply.error == "leadership-lost"
    assert c.check() == [] and c.durability_errors == []


def test_stale_append_entries_never_truncate_a_matching_log():
    """§5.3: only a *conflicting* entry triggers deletion; a delayed duplicate is a no-op."""
    c = Cluster(3, seed=6).start()
    c.elect(0)
    c.request(0, "write", "a", 1)
    early = next(m for s, d, m in c.queue if d == 1 and isinstance(m, AppendEntries))
    c.deliver_all()
    c.request(0, "write", "b", 2, request_id=2)
    c.deliver_all()
    assert c.nodes[1].log.last_index == 3
    effects = c.nodes[1].on_message(0, early, c.now)
    assert c.nodes[1].log.last_index == 3
    reply = next(e for e in effects if isinstance(e, Send)).message
    assert reply.success and reply.match_index == 2


def test_vote_requires_an_up_to_date_log():
    """§5.4.1: a voter refuses a candidate whose last term is older or whose log is shorter."""
    c = Cluster(3, seed=7).start()
    c.elect(0)
    c.isolate(2)
    c.request(0, "write", "k", 1)
    c.deliver_all()
    c.heal()
    c.crash(0)
    c.elect(2, where=lambda s, d, m: d != 0)  # node 2 lacks the committed write: node 1 refuses it
    assert c.nodes[2].role is Role.CANDIDATE
    c.elect(1)
    assert c.nodes[1].role is Role.LEADER and c.check() == []


def test_message_sizes_grow_with_values():
    """size_bytes = header + each entry's estimated size, so the fabric model charges big values more."""
    c = Cluster(3, seed=8).start()
    c.elect(0)
    def flushed():  # the sends of the group-commit flush that followed the last request
        return [e for _, kind, effs in c.trace if kind == "timer:flush" for e in effs if isinstance(e, Send)][-2:]

    c.request(0, "write", "k", 1)
    small = flushed()
    c.deliver_all()
    c.request(0, "write", "k", "x" * 10_000, request_id=2)
    big = flushed()
    assert len(small) == len(big) == 2
    assert all(64 < e.size_bytes < 200 for e in small)
    assert all(10_000 < e.size_bytes < 10_200 for e in big)


@pytest.mark.parametrize("reads", ["readindex", "log"])
def test_same_seed_same_effects_other_seed_other_effects(reads):
    def trace(seed):
        c = Cluster(5, seed=seed, config={"reads": reads}).start()
        c.run(1.0)
        leader = c.leader().node_id
        for r in range(1, 6):
            c.request(leader, "write" if r % 2 else "read", "k", r, request_id=r)
        c.run(2.0)
        return repr(c.trace)

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


def test_a_candidate_retries_request_vote_to_silent_peers():
    """§5.1: RPCs are retried when no response comes in time, so one lost RequestVote does not cost the election."""
    c = Cluster(3, seed=9).start()
    c.fire(0, "election")
    c.drop()  # both RequestVotes are lost
    assert c.nodes[0].role is Role.CANDIDATE
    c.fire(0, "vote-retry")
    assert sorted(d for _, d, m in c.queue if isinstance(m, RequestVote)) == [1, 2]
    c.deliver(lambda s, d, m: d == 1)
    c.deliver(lambda s, d, m: d == 0)  # node 1's vote: a majority
    assert c.nodes[0].role is Role.LEADER
    c.fire(0, "vote-retry")  # a leader does not re-ask
    assert not any(isinstance(m, RequestVote) for _, _, m in c.queue[-2:])


def test_messages_round_trip_through_the_wire_codec():
    """Every Raft message is plain data the real backend can encode without pickle."""
    from seedance.models.protocols.raft.messages import AppendEntriesReply, Entry, RequestVoteReply, command_entry
    from seedance.models.wire import codec_for

    codec = codec_for(SPEC.message_types)
    entries = (Entry(term=3), command_entry(3, 1, 7, "cas", "k", [1, 2]))
    for message in (AppendEntries(term=3, leader_id=0, prev_log_index=4, prev_log_term=2, entries=entries,
                                  leader_commit=4, read_seq=9),
                    AppendEntriesReply(term=3, success=False, conflict_index=2, read_seq=9),
                    RequestVote(term=3, candidate_id=1, last_log_index=4, last_log_term=2),
                    RequestVoteReply(term=3, vote_granted=True)):
        assert codec.unpack(codec.pack(message)) == message


def test_group_commit_sends_before_the_leaders_own_write_and_counts_itself_once_durable():
    """Requests handled before the leader's zero-delay flush timer share one flush; the flush sends them before the
    leader's own write (Ongaro's thesis §10.2.1: the leader writes in parallel with replication), the write is one
    PersistLog followed by a timer the runtime arms only once it is durable, and only that timer lets the leader
    count its own copy toward the commit majority."""
    from seedance.models.protocols.contract import ClientRequest, Operation, PersistLog, SetTimer

    c = Cluster(3, seed=10).start()
    c.elect(0)
    leader = c.nodes[0]
    first = leader.on_client_request(ClientRequest(client_id=1, request_id=1, op=Operation.WRITE, key="a", value=1),
                                     c.now)
    second = leader.on_client_request(ClientRequest(client_id=2, request_id=1, op=Operation.WRITE, key="b", value=2),
                                      c.now)
    assert first == [SetTimer(name="flush", delay_s=0.0)] and second == []
    assert leader._match[0] == 1  # only the no-op is durable yet
    assert leader._sendable_last() == 1  # buffered entries stay home until the flush
    flush = leader.on_timer("flush", c.now)
    assert [len(e.message.entries) for e in flush if isinstance(e, Send)] == [2, 2]  # sent before any write
    assert flush[-1] == SetTimer(name="write", delay_s=0.0) and not any(isinstance(e, PersistLog) for e in flush)
    # a follower's acknowledgement alone commits nothing: the leader's own copy is not durable yet
    ack = AppendEntriesReply(term=leader.current_term, success=True, match_index=3, read_seq=flush[0].message.read_seq)
    assert not any(isinstance(e, Reply) for e in leader.on_message(1, ack, c.now))
    assert leader.commit_index == 1 and leader._match[0] == 1
    write = leader.on_timer("write", c.now)
    assert isinstance(write[0], PersistLog) and write[0].start == 1 and len(write[0].entries) == 2
    assert write[0].notify == ("log", leader.current_term, 3) and write[1:] == []  # told once durable
    assert leader._match[0] == 1
    durable = leader.on_persisted(("log", leader.current_term, 3), c.now)
    assert leader._match[0] == 3 and leader.commit_index == 3
    assert sorted(r.client_id for r in durable if isinstance(r, Reply)) == [1, 2]


def test_a_leader_crashing_before_its_write_loses_nothing_committed():
    """§10.2.1: entries a majority of followers stored survive the leader losing its unwritten copy."""
    c = Cluster(3, seed=12).start()
    c.eager_timers = lambda name: name != "write"  # the leader's write never happens before the crash
    c.elect(0)
    c.fire(0, "write")  # the no-op is written; now the client entry stays unwritten on the leader
    c.deliver_all()
    c.request(0, "write", "k", "v")
    c.deliver_all()
    assert c.reply_to(1, 1) is None and c.nodes[1].log.last_index == 2  # followers hold it, leader did not commit
    c.crash(0)
    assert len(c.durable[0]["logs"]["log"]) == 1
    c.eager_timers = lambda name: True
    c.elect(1)
    c.fire(1, "heartbeat")
    c.deliver_all()
    assert c.nodes[1].log.entry(2).value == "v" and c.nodes[1].kv.read("k") == "v"
    c.recover(0)
    c.fire(1, "heartbeat")
    c.deliver_all()
    assert c.nodes[0].log.entry(2).value == "v" and c.check() == [] and c.durability_errors == []
