"""EPaxos recovery: the single-ballot counterexample as a scripted schedule, and the unit behaviour of the paths.

The counterexample (Sutra, "On the correctness of Egalitarian Paxos", IPL 2020, arXiv:1906.10917; TLA+ trace in
github otrack/on-epaxos-correctness, efficient/epaxos issue #20) needs 3 replicas, two conflicting commands and
recoveries that each use one fixed two-replica quorum. Its mechanism: replica A accepted value V1 at ballot b1;
value V2 was accepted at b2 > b1 by a majority and committed; then a Prepare at b3 > b2 reached A — with a single
ballot variable per instance A now reports V1 "at b3", and the next recovery adopts V1, committing the instance a
second time with other dependencies. The published TLA+ step list is written against the TLA+ spec's recovery
rule (⌊N/2⌋ identical replies at the default ballot, changed or not); this implementation counts only replies that
left the leader's attributes unchanged as fast-path evidence, so the schedule below reaches the same state through
the same mechanism with this node's rules. α = instance (0, 1) (replica R0's write of x), γ = (1, 1) (R1's write of
x); every quorum is fixed by which messages the script delivers:

1. R0 proposes α (deps: none). Its PreAccept reaches only R2, which has seen nothing else: R2 pre-accepts α
   unchanged ("agreed"). R2's reply is lost.
2. R1 proposes γ; R2 adds α to γ's deps (changed), so γ takes the slow path with quorum {R1, R2} and R1 commits
   γ. The Commit messages are lost.
3. R2 recovers α at ballot 5 with quorum {R2, R1}: R1 knows nothing, R2 holds the leader's unchanged attributes
   and the leader did not answer, so the fast path may have committed them: Paxos-Accept of V2 = (α, deps none)
   at ballot 5. Only R2 itself accepts (its Accepts are lost).
4. R1 recovers α at ballot 7 with quorum {R1, R0}: R0 (the leader) only pre-accepted, so phase 1 restarts; R1 adds
   γ: V1 = (α, deps {γ}). Slow path with quorum {R1, R0}: V1 is accepted at ballot 7 by R0 and R1, and R1 commits
   it (its Commits are lost).
5. R2 starts a recovery at ballot 8 whose Prepares are all lost: R2 has promised 8, still holding V2 accepted at 5.
6. R0 recovers α at ballot 9 with quorum {R0, R2}. R0 reports V1 voted at 7; R2 reports V2 voted at 5 — or, with
   one ballot variable, V2 "at 8". The fix adopts V1 (7 > 5) and commits what R1 committed; the single-ballot rule
   adopts V2 (8 > 7) and R0 commits α with other dependencies than R1: the monitor's Consistency breach.
"""

from __future__ import annotations

import pytest

from paxos_mutants import MUTANTS
from scripted_driver import Driver, between, to
from seedance.models.protocols.epaxos import SPEC
from seedance.models.protocols.epaxos.deps import dep_of
from seedance.models.protocols.epaxos.messages import (
    Accept, AcceptReply, Commit, PreAccept, PreAcceptReply, Prepare, PrepareReply,
)
from seedance.models.protocols.epaxos.node import ACCEPTED, COMMITTED

ALPHA, GAMMA = (0, 1), (1, 1)


def counterexample(spec) -> Driver:
    d = Driver(spec, 3).start()
    # 1. R0 proposes alpha; only R2 pre-accepts it (unchanged); R2's reply is lost
    d.request(0, "write", "x", 1, client_id=10)
    d.drop(between(0, 1))
    d.deliver(between(0, 2, PreAccept))
    d.drop(between(2, 0, PreAcceptReply))
    assert d.nodes[2].instances[ALPHA].agreed
    # 2. R1 proposes gamma; slow path with {R1, R2}; R1 commits; the Commits are lost
    d.request(1, "write", "x", 2, client_id=11)
    d.drop(between(1, 0))
    d.deliver(between(1, 2, PreAccept))
    d.deliver(between(2, 1, PreAcceptReply))
    d.deliver(between(1, 2, Accept))
    d.deliver(between(2, 1, AcceptReply))
    assert d.nodes[1].instances[GAMMA].status == COMMITTED
    d.drop(lambda s, dst, m: isinstance(m, Commit))
    # 3. R2 recovers alpha at ballot 5 with {R2, R1}: Paxos-Accept of the leader's attributes; only R2 accepts
    d.call(2, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    d.drop(to(0, Prepare))
    d.deliver(between(2, 1, Prepare))
    d.deliver(between(1, 2, PrepareReply))
    assert d.nodes[2].instances[ALPHA].status == ACCEPTED and d.nodes[2].instances[ALPHA].vbal == 5
    d.drop(lambda s, dst, m: isinstance(m, Accept))
    # 4. R1 recovers alpha at ballot 7 with {R1, R0}: phase 1 again (adds gamma), slow path, R1 commits
    d.call(1, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    d.drop(to(2, Prepare))
    d.deliver(between(1, 0, Prepare))
    d.deliver(between(0, 1, PrepareReply))
    d.drop(to(2, PreAccept))
    d.deliver(between(1, 0, PreAccept))
    d.deliver(between(0, 1, PreAcceptReply))
    d.drop(to(2, Accept))
    d.deliver(between(1, 0, Accept))
    d.deliver(between(0, 1, AcceptReply))
    assert d.nodes[1].instances[ALPHA].status == COMMITTED
    committed_by_r1 = (d.nodes[1].instances[ALPHA].seq, d.nodes[1].instances[ALPHA].deps)
    assert committed_by_r1[1][1] == 1, "R1 committed alpha with gamma among its dependencies"
    d.drop(lambda s, dst, m: isinstance(m, Commit))
    # 5. R2 starts a recovery at ballot 8 that reaches no one
    d.call(2, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    assert d.nodes[2].instances[ALPHA].bal == 8
    d.drop(lambda s, dst, m: isinstance(m, Prepare))
    # 6. R0 recovers alpha at ballot 9 with {R0, R2}
    d.call(0, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    d.drop(to(1, Prepare))
    d.deliver(between(0, 2, Prepare))
    d.deliver(between(2, 0, PrepareReply))
    d.drop(to(1))
    d.deliver_all(lambda s, dst, m: {s, dst} == {0, 2})
    assert d.nodes[0].instances[ALPHA].status == COMMITTED
    return d


def test_the_counterexample_passes_with_separate_promised_and_voted_ballots():
    d = counterexample(SPEC)
    assert d.violations == [], d.story()
    r0, r1 = d.nodes[0].instances[ALPHA], d.nodes[1].instances[ALPHA]
    assert (r0.seq, r0.deps) == (r1.seq, r1.deps)
    d.deliver_all()  # and once every message flows, all three replicas agree and execute alike
    d.run_timers(until=d.now + 1.0)
    assert d.violations == [], d.story()
    assert all(n.instances[ALPHA].status == COMMITTED for n in d.nodes.values())
    assert len({(n.instances[ALPHA].seq, n.instances[ALPHA].deps) for n in d.nodes.values()}) == 1
    assert len({n.kv.read("x") for n in d.nodes.values()}) == 1


def test_the_counterexample_breaks_the_single_ballot_rule():
    d = counterexample(MUTANTS["single-ballot"])
    assert any(v.startswith("Consistency: instance (0, 1)") for v in d.violations), (d.violations, d.story())


# ------------------------------------------------------------------------------------------- unit behaviour
def test_fast_path_commits_when_the_replies_agree():
    d = Driver(SPEC, 3).start()
    d.request(0, "write", "x", 1)
    d.deliver_all()
    node = d.nodes[0]
    assert node.fast_commits == 1 and node.slow_commits == 0
    assert d.reply_to(1, 1).outcome.value == "ok"
    assert all(n.kv.read("x") == 1 for n in d.nodes.values())


def test_slow_path_when_a_reply_adds_a_dependency():
    d = Driver(SPEC, 3).start()
    d.request(1, "write", "x", 1, client_id=2)
    d.drop(between(1, 0))  # R0 never hears of R1's command before its own
    d.deliver_all(between(1, 2))
    d.deliver_all(between(2, 1))
    d.request(0, "write", "x", 2, client_id=3)
    d.drop(between(0, 1))
    d.deliver_all()  # R2 adds R1's instance: changed -> Paxos-Accept
    assert d.nodes[0].slow_commits == 1 and d.nodes[0].fast_commits == 0
    assert dep_of(d.nodes[0].instances[(0, 1)].deps, 1) == 1
    d.run_timers(until=1.0)
    assert d.violations == []
    assert len({n.kv.read("x") for n in d.nodes.values()}) == 1


def test_unchecked_fast_path_commits_without_the_dependency():
    """The mutant takes the fast path on the same schedule and commits without R1's instance in its deps."""
    d = Driver(MUTANTS["unchecked-fast-path"], 3).start()
    d.request(1, "write", "x", 1, client_id=2)
    d.drop(between(1, 0))
    d.deliver_all(between(1, 2))
    d.deliver_all(between(2, 1))
    d.request(0, "write", "x", 2, client_id=3)
    d.drop(between(0, 1))
    d.deliver_all()
    assert d.nodes[0].fast_commits == 1
    assert dep_of(d.nodes[0].instances[(0, 1)].deps, 1) == 0


@pytest.mark.parametrize("crash_before_commit", [True, False])
def test_a_crashed_leaders_instance_is_recovered_by_a_blocked_replica(crash_before_commit):
    """R0 proposes and crashes; R1's own command depends on R0's instance, so R1 cannot execute, asks its peers
    (Fetch), then recovers the instance (explicit prepare) and executes both, in the same order as R2."""
    d = Driver(SPEC, 3, config={"heartbeat_s": 0.002, "election_timeout_s_min": 0.008,
                                "election_timeout_s_max": 0.016}).start()
    d.request(0, "write", "x", 1, client_id=2)
    if crash_before_commit:
        d.deliver(between(0, 1, PreAccept))
        d.deliver(between(0, 2, PreAccept))
        d.crash(0)
    else:
        d.deliver_all()
        d.crash(0)
    d.request(1, "write", "x", 2, client_id=3)
    d.run_timers(until=0.5)
    assert d.violations == [], d.story()
    for node in (d.nodes[1], d.nodes[2]):
        assert node.instances[(0, 1)].status == COMMITTED
        assert [iid for _, iid in node.exec_log] == [iid for _, iid in d.nodes[1].exec_log]
    assert d.reply_to(3, 1).outcome.value == "ok"
    assert d.nodes[1].kv.read("x") == d.nodes[2].kv.read("x") == 2


def test_execution_orders_a_dependency_cycle_by_sequence_number():
    """Two concurrent conflicting commands that each see the other: a cycle, broken by (seq, replica, instance)
    identically on every replica (SOSP'13 §4.4)."""
    d = Driver(SPEC, 3).start()
    d.request(0, "write", "x", 1, client_id=2)
    d.request(1, "write", "x", 2, client_id=3)
    d.deliver_all()
    d.run_timers(until=1.0)
    assert d.violations == []
    orders = {tuple(iid for _, iid in n.exec_log) for n in d.nodes.values()}
    assert len(orders) == 1 and len(next(iter(orders))) == 2
    assert len({n.kv.read("x") for n in d.nodes.values()}) == 1


def test_a_restarted_replica_re_executes_its_committed_instances():
    d = Driver(SPEC, 3).start()
    for k in range(5):
        d.request(k % 3, "write", f"k{k % 2}", k, client_id=k, request_id=1)
        d.deliver_all()
    before = dict(d.nodes[2].kv.snapshot()["data"])
    d.crash(2)
    node = d.recover(2)
    assert dict(node.kv.snapshot()["data"]) == before
    assert d.violations == []


# ------------------------------------------------ the optimized fast quorum at N >= 5 and its TryPreAccept recovery
FAST = {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016}
OPTIMIZED = {**FAST, "fast_quorum": "optimized"}
SIMPLE = {**FAST, "fast_quorum": "simple"}
GAMMA_5 = (4, 1)


def five_replica_schedule(spec, config) -> Driver:
    """N = 5. R0 proposes α; only R1 pre-accepts it (unchanged), then R0 crashes. R4 commits the conflicting γ with
    R2 and R3, who never saw α (no dependency on α). R1 recovers α with R2 and R3: R1 is the one witness of the
    leader's attributes. With the optimized quorum (3 of 5) that one witness may be all that is left of a fast
    commit; recovery that accepts α's attributes as they are commits α without γ — two interfering commands with
    no dependency between them, executed in different orders. TryPreAccept asks R2 and R3 to pre-accept α's
    attributes; they know the committed γ (not among α's dependencies, not depending on α), which proves the fast
    path did not commit them, so phase 1 restarts and α gets γ as a dependency. With the 2F quorum one witness is
    not enough evidence and phase 1 restarts at once."""
    d = Driver(spec, 5, config=config).start()
    d.request(0, "write", "x", 1, client_id=10)
    d.deliver(between(0, 1, PreAccept))
    d.drop(lambda s, dst, m: s == 0 or dst == 0)
    d.crash(0)
    d.request(4, "write", "x", 2, client_id=11)
    group = {2, 3, 4}
    for _ in range(20):
        d.drop(lambda s, dst, m: dst in (0, 1) or s in (0, 1))
        d.deliver_all(lambda s, dst, m: {s, dst} <= group)
        if d.nodes[4].instances[GAMMA_5].status == COMMITTED:
            break
        d.fire(4, "tick")
    assert d.nodes[2].instances[GAMMA_5].status == COMMITTED
    d.call(1, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    d.drop(lambda s, dst, m: dst in (0, 4))
    d.deliver_all(lambda s, dst, m: {s, dst} <= {1, 2, 3})
    d.deliver_all()
    d.run_timers(until=d.now + 0.2)
    return d


def _consistent(d: Driver) -> None:
    assert d.violations == [], d.story()
    assert dep_of(d.nodes[1].instances[ALPHA].deps, 4) == 1  # α depends on γ
    orders = {tuple(iid for _, iid in n.exec_log) for n in d.nodes.values()}
    assert len(orders) == 1, orders


def test_the_optimized_quorum_recovers_with_try_pre_accept_on_the_five_replica_schedule():
    d = five_replica_schedule(SPEC, OPTIMIZED)
    assert d.nodes[1].fast_quorum == 3 and d.nodes[1].try_preaccepts >= 1
    _consistent(d)


def test_the_optimized_quorum_is_the_default():
    assert Driver(SPEC, 5).start().nodes[0].fast_quorum == 3
    assert Driver(SPEC, 7).start().nodes[0].fast_quorum == 5


def test_without_try_pre_accept_the_optimized_quorum_breaks_execution_order():
    d = five_replica_schedule(MUTANTS["no-try-pre-accept"], OPTIMIZED)
    assert any("Execution consistency" in v for v in d.violations), (d.violations, d.story())


def test_the_two_f_quorum_is_safe_on_the_same_schedule():
    d = five_replica_schedule(SPEC, SIMPLE)
    assert d.nodes[1].fast_quorum == 4 and d.nodes[1].try_preaccepts == 0
    _consistent(d)


def test_try_pre_accept_keeps_the_witnessed_attributes_when_nothing_conflicts():
    """R0 proposes α, only R1 pre-accepts it, R0 crashes; R1 recovers with R2, R3, which never heard of α:
    TryPreAccept succeeds (R2, R3 know no conflicting command) and α commits with its leader's attributes."""
    d = Driver(SPEC, 5, config=OPTIMIZED).start()
    d.request(0, "write", "x", 1, client_id=10)
    proposed = d.nodes[0].instances[ALPHA].deps
    d.deliver(between(0, 1, PreAccept))
    d.drop()
    d.crash(0)
    d.call(1, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    d.drop(lambda s, dst, m: dst in (0, 4))
    d.deliver_all(lambda s, dst, m: {s, dst} <= {1, 2, 3})
    assert d.nodes[1].try_preaccepts == 1
    assert all(d.nodes[k].instances[ALPHA].status == COMMITTED for k in (1, 2, 3)), d.story()
    assert d.nodes[2].instances[ALPHA].deps == proposed and d.violations == []


def test_try_pre_accept_defers_rather_than_overturn_a_possible_fast_commit():
    """R0 commits α on the fast path with R1 and R2 (3 of 5); its Commits are lost and it crashes; R2 is cut off.
    R4 proposes the conflicting δ, pre-accepted by R3 only (neither knew α), and is then cut off too. R3 recovers α
    with R1 and R4: one witness (R1); TryPreAccept meets δ at R3 and R4 — a conflict, but not a committed one, and
    two non-witnesses are not enough to rule out the fast commit, so recovery must neither accept nor restart: it
    defers. δ then commits with α among its dependencies (R4's retransmitted PreAccept reaches R1, which knows α),
    and a later recovery of α commits exactly what R0 committed."""
    d = Driver(SPEC, 5, config=OPTIMIZED).start()
    d.request(0, "write", "x", 1, client_id=10)
    d.deliver(between(0, 1, PreAccept))
    d.deliver(between(0, 2, PreAccept))
    d.drop(lambda s, dst, m: dst in (3, 4) and type(m) is PreAccept)
    d.deliver(between(1, 0, PreAcceptReply))
    d.deliver(between(2, 0, PreAcceptReply))
    assert d.nodes[0].fast_commits == 1 and d.nodes[0].instances[ALPHA].status == COMMITTED
    committed = (d.nodes[0].instances[ALPHA].seq, d.nodes[0].instances[ALPHA].deps)
    d.drop()
    d.crash(0)
    delta = (4, 1)
    d.request(4, "write", "x", 2, client_id=11)
    d.deliver(between(4, 3, PreAccept))
    d.drop()
    d.call(3, "recover alpha", lambda node, out: node._start_recovery(ALPHA, d.now, out))
    cut = {0, 2}
    reachable = lambda s, dst, m: s not in cut and dst not in cut  # noqa: E731
    d.deliver_all(reachable)
    coordinator = d.nodes[3]
    assert coordinator.try_preaccepts == 1, d.story()
    assert ALPHA in coordinator.coords and coordinator.coords[ALPHA].phase == "trypreaccept"
    for _ in range(60):  # timeouts: R3 defers and retries while R0 and R2 stay cut off
        d.drop(lambda s, dst, m: not reachable(s, dst, m))
        due = min((t, i, n) for i, ts in d.timers.items() for n, t in ts.items() if i in d.nodes and i != 2)
        d.fire(due[1], due[2])
        d.deliver_all(reachable)
    assert ALPHA not in coordinator.coords or coordinator.coords[ALPHA].ballot > 8  # deferred
    assert d.violations == [], d.story()
    d.drop(lambda s, dst, m: not reachable(s, dst, m))
    cut.discard(2)  # R2 comes back
    d.run_timers(until=d.now + 0.3)
    assert d.violations == [], d.story()
    for k in (1, 3, 4):
        inst = d.nodes[k].instances[ALPHA]
        assert inst.status == COMMITTED and (inst.seq, inst.deps) == committed, (k, d.story())
        assert d.nodes[k].instances[delta].status == COMMITTED
        assert dep_of(d.nodes[k].instances[delta].deps, 0) == 1  # δ depends on α


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_recovery_timeout_draws_what_uniform_draws(seed):
    """The recovery timeout is lo + (hi - lo) * rng.random(): bit for bit what rng.uniform(lo, hi) gives from the same
    generator state (and the generator ends in the same state), so the cheaper call changes no run."""
    import numpy as np

    from seedance.models.protocols.epaxos import EPaxosNode

    node = EPaxosNode(0, 3, np.random.default_rng(seed), {"election_timeout_s_min": 0.15,
                                                           "election_timeout_s_max": 0.3})
    reference = np.random.default_rng(seed)
    for _ in range(2000):
        drawn = node._recovery_timeout()
        assert drawn == float(reference.uniform(0.15, 0.3))
        assert 0.15 <= drawn < 0.3
    assert node.rng.random() == reference.random()
