"""Multi-Paxos unit tests against the scripted driver: election, pipelined phase 2, recovery of accepted values,
promises, catch-up, restart — and the two planted bugs of phase 1 and of the acceptor, each on a schedule that
exposes it (the correct node stays clean on the same schedule)."""

from __future__ import annotations

import pytest

from paxos_mutants import MUTANTS
from scripted_driver import Driver, between, to
from seedance.errors import SpecError
from seedance.models.protocols.multipaxos import SPEC, MultiPaxosConfig
from seedance.models.protocols.multipaxos.messages import Accept, Accepted, Prepare, Promise
from seedance.models.protocols.multipaxos.node import ELECTION, FLUSH

FAST = {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016}


def elect(d: Driver, node_id: int, where=None) -> None:
    d.call(node_id, "stand", lambda node, out: out.extend(node._stand(d.now)))
    d.deliver_all(where)


def test_a_leader_serves_reads_writes_and_cas_and_every_replica_applies_them():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    leader = d.nodes[0]
    assert leader.role == "leader" and leader.ballot == 3  # round 1, node 0
    d.request(0, "write", "x", 1, client_id=1, request_id=1)
    d.request(0, "cas", "x", [1, 2], client_id=2, request_id=1)
    d.request(0, "cas", "x", [1, 3], client_id=3, request_id=1)
    d.request(0, "read", "x", client_id=4, request_id=1)
    d.deliver_all()
    assert [d.reply_to(c, 1).outcome.value for c in (1, 2, 3, 4)] == ["ok", "ok", "fail", "ok"]
    assert d.reply_to(4, 1).value == 2
    d.run_timers(until=d.now + 0.01)  # heartbeats carry the commit point to the followers
    assert all(n.executed == 4 and n.kv.read("x") == 2 for n in d.nodes.values())
    assert d.violations == []


def test_phase_two_is_pipelined_one_accept_per_command_unless_batching_is_on():
    for batch, expected in ((1, 3), (8, 1)):
        d = Driver(SPEC, 3, config={**FAST, "max_batch": batch}).start()
        elect(d, 0)
        d.eager = False  # three requests arrive in one turn, before the zero-delay flush
        for c in range(3):
            d.request(0, "write", "x", c, client_id=c)
        d.eager = True
        d.fire(0, FLUSH)  # slots 1..3 go out together, none waiting for another's reply
        accepts = [m for s, dst, m in d.queue if dst == 1 and isinstance(m, Accept) and m.values]
        assert len(accepts) == expected
        d.deliver_all()
        assert d.nodes[0].executed == 3


def test_non_leaders_redirect_clients():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 2)
    d.request(0, "write", "x", 1)
    reply = d.reply_to(1, 1)
    assert reply.error == "not-leader" and reply.leader_hint == 2


def test_a_new_leader_recovers_a_value_accepted_by_a_minority():
    """Slot 1 is accepted by the old leader and one acceptor (chosen, but nobody learned it); the new leader's
    phase 1 sees it and re-proposes it — the highest-ballot accepted value — instead of a new command."""
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    d.request(0, "write", "x", 7, client_id=1)
    d.drop(to(2, Accept))
    d.deliver(between(0, 1, Accept))
    d.drop(between(1, 0, Accepted))  # the old leader never learns
    d.crash(0)
    elect(d, 2)
    assert d.nodes[2].role == "leader"
    d.request(2, "write", "x", 8, client_id=2)
    d.deliver_all()
    assert d.nodes[2].decided[1].value == 7 and d.nodes[2].decided[2].value == 8
    assert d.nodes[2].kv.read("x") == 8
    assert d.violations == []


def test_an_acceptor_refuses_a_ballot_below_its_promise_and_the_old_leader_steps_down():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    elect(d, 1, where=lambda s, dst, m: 0 not in (s, dst))  # node 1 leads ballot 4 with node 2; node 0 unaware
    d.drop(to(0))
    d.request(0, "write", "x", 1, client_id=1)
    d.deliver(between(0, 2, Accept))
    d.deliver(between(2, 0, Accepted))
    assert d.nodes[0].role == "follower"
    assert d.reply_to(1, 1).outcome.value == "info"  # indeterminate: it may still be chosen by the new leader


def accept_below_promise_schedule(spec) -> Driver:
    """Node 0 leads ballot 3; node 1 wins ballot 4 with node 2's promise (no accepted values yet) while node 0 is
    cut off. Node 0, still believing it leads, sends slot 1 = write 1 to node 2 — which promised 4. Node 1 puts its
    own client's write 2 in slot 1 and node 2 accepts it. Only an acceptor that accepts below its promise lets both
    be chosen."""
    d = Driver(spec, 3, config=FAST).start()
    elect(d, 0)
    elect(d, 1, where=lambda s, dst, m: 0 not in (s, dst))
    d.drop(to(0))
    d.request(0, "write", "x", 1, client_id=1)
    d.drop(to(1))
    d.deliver(between(0, 2, Accept))
    d.deliver(between(2, 0, Accepted))
    d.request(1, "write", "x", 2, client_id=2)
    d.drop(to(0))
    d.deliver_all(lambda s, dst, m: {s, dst} == {1, 2})
    return d


def test_accept_below_promise_is_caught_and_the_correct_acceptor_is_clean():
    clean = accept_below_promise_schedule(SPEC)
    assert clean.violations == []
    assert clean.nodes[1].decided[1].value == 2 and 1 not in clean.nodes[0].decided
    broken = accept_below_promise_schedule(MUTANTS["accept-below-promise"])
    assert any(v.startswith("Agreement: slot 1") for v in broken.violations), broken.story()


def test_a_restarted_replica_keeps_its_promise_and_accepted_values_and_catches_up():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    for c in range(5):
        d.request(0, "write", f"k{c % 2}", c, client_id=c)
    d.deliver_all()
    d.crash(1)
    node = d.recover(1)
    assert node.promised == 3 and len(node.accepted) == 5 and node.executed == 0
    d.run_timers(until=d.now + 0.01)  # a heartbeat reply reports executed=0: the leader sends Decide
    assert node.executed == 5 and node.kv.read("k0") == 4
    assert d.violations == []


def test_a_lost_accept_is_resent_on_the_next_heartbeat():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    d.request(0, "write", "x", 1)
    d.drop(lambda s, dst, m: isinstance(m, Accept))
    assert d.reply_to(1, 1) is None
    d.run_timers(until=d.now + 0.003)
    assert d.reply_to(1, 1).outcome.value == "ok"


def test_election_timer_only_fires_a_candidacy_after_silence():
    d = Driver(SPEC, 3, config=FAST).start()
    d.fire(0, ELECTION)
    assert d.nodes[0].role == "candidate"
    assert sum(isinstance(m, Prepare) for _, _, m in d.queue) == 2
    d.deliver_all()
    assert d.nodes[0].role == "leader"
    assert not any(isinstance(m, (Prepare, Promise)) for _, _, m in d.queue)


@pytest.mark.parametrize("bad", [{"max_batch": 0}, {"heartbeat_s": -1}, {"election_timeout_s_min": 0.01},
                                 {"nope": 1}])
def test_bad_configuration_names_the_field(bad):
    with pytest.raises(SpecError) as err:
        MultiPaxosConfig.from_mapping(bad)
    assert "multipaxos." in str(err.value)


def test_values_bytes_of_a_remembered_tuple_is_its_own():
    from seedance.models.protocols.multipaxos.messages import Command, SlotValue, values_bytes

    one = (SlotValue(slot=1, ballot=3, command=Command(client_id=1, request_id=1, op="write", key="k", value=7)),)
    two = (SlotValue(slot=1, ballot=3, command=Command(client_id=1, request_id=1, op="write", key="key", value="x")),)
    assert values_bytes(one) == values_bytes(one) == 64 + 16 + 32 + 6 + 9
    assert values_bytes(two) == 64 + 16 + 32 + 8 + 6  # an equal-length tuple measured after it: its own size
    assert values_bytes(one) == 64 + 16 + 32 + 6 + 9 and values_bytes(()) == 64
