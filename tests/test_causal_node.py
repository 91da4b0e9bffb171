"""The causal pixel-grid node under a scripted driver (tests/causal_harness.py): coordination, causal delivery,
persistence and recovery, anti-entropy over lost messages, and the planted bugs each check must catch."""

from __future__ import annotations

import numpy as np

from causal_harness import Cluster
from seedance.models.protocols.causal import Ack, Sync
from seedance.models.protocols.causal.node import CausalNode
from seedance.models.protocols.contract import Outcome


class AcceptsStaleWrites(CausalNode):
    """Planted bug: the coordinator never checks the client's clock."""

    def _admit(self, context):
        return None


class DeliversEagerly(CausalNode):
    """Planted bug: delivery does not wait for an interval's causal predecessors."""

    def _deliverable(self, src, message, provided=None):
        return True


def test_write_is_persisted_observed_acknowledged_and_replicated():
    c = Cluster(3)
    c.deliver_all()
    reply = c.request(0, "write", "k5", 42)
    assert reply.outcome is Outcome.OK and reply.context == [1, 0, 0]
    assert c.records[0]["grid"]["p5"][0] == 42 and c.records[0]["grid"]["c0"] == 1  # clock entry 0 (record c{j})
    assert [(e.node, e.key, e.value) for e in c.observed] == [(0, "k5", 42)]
    assert not c.order_errors
    c.deliver_all()
    assert sorted((e.node, e.value) for e in c.observed) == [(0, 42), (1, 42), (2, 42)]
    for i in (1, 2):
        read = c.request(i, "read", "k5", context=reply.context)
        assert read.outcome is Outcome.OK and read.value == 42
    assert c.request(1, "read", "k6").value is None
    assert not c.breaches()


def test_bad_requests_fail_with_a_reason():
    c = Cluster(2)
    assert c.request(0, "write", "k99", 1).error.startswith("bad-key")
    assert c.request(0, "write", "k1", "red").error.startswith("bad-value")
    assert c.request(0, "write", "k1", 1, context=["x"]).error.startswith("bad-context")
    assert c.request(0, "cas", "k1", [None, 1]).outcome is Outcome.FAIL


def test_coordinator_rejects_a_causally_stale_write_and_the_planted_bug_accepts_it():
    for node_class, accepted in ((CausalNode, False), (AcceptsStaleWrites, True)):
        c = Cluster(3, node_class=node_class)
        c.deliver_all()
        seen = c.request(1, "write", "k0", 7)  # the client observed node 1's write...
        c.drop(lambda src, dst, msg: src == 1)  # ...which node 0 has not received
        reply = c.request(0, "write", "k0", 8, context=seen.context)
        assert (reply.outcome is Outcome.OK) is accepted
        if not accepted:
            assert reply.error.startswith("causal-order") and "node 1: 1..1" in reply.error
            assert c.nodes[0].rejected_writes == 1
            read = c.request(0, "read", "k0", context=seen.context)  # reads are refused as well: they'd go back
            assert read.outcome is Outcome.FAIL and read.error.startswith("causal-order")
        else:
            # the accepted write is stamped [1, 0, 0]: concurrent with 7's [0, 1, 0], not after it; once the
            # replicas converge the write the client made *after* seeing 7 can lose to 7 — a causal anomaly the
            # history checker reports (tests/test_causal_check.py)
            assert reply.context == [1, 0, 0]


def _dependent_writes(node_class):
    """w1 at node 0; a client reads it at node 1 and writes w2 there; node 2 receives w2's interval first."""
    c = Cluster(3, node_class=node_class)
    c.deliver_all()
    w1 = c.request(0, "write", "k1", 1)
    held_for_2 = [m for m in c.queue if m[0] == 0 and m[1] == 2]
    c.queue = [m for m in c.queue if not (m[0] == 0 and m[1] == 2)]
    c.deliver_all()  # node 1 has w1
    read = c.request(1, "read", "k1", context=w1.context)
    w2 = c.request(1, "write", "k2", 2, context=read.context)
    assert w2.outcome is Outcome.OK and w2.context == [1, 1, 0]
    to_2 = [k for k, m in enumerate(c.queue) if m[1] == 2 and isinstance(m[2], Sync)]
    c.deliver(to_2[0])  # w2's interval reaches node 2 before w1's
    return c, held_for_2


def test_delivery_waits_for_causal_predecessors():
    c, held = _dependent_writes(CausalNode)
    assert [e.value for e in c.observed if e.node == 2] == []  # w2 waits
    assert c.nodes[2].grid.clock.tolist() == [0, 0, 0] and not c.breaches()
    c.queue.extend(held)
    c.deliver_all()
    assert [e.value for e in c.observed if e.node == 2] == [1, 2]  # in causal order
    assert not c.breaches()


def test_planted_bug_eager_delivery_is_caught_by_the_monitor():
    c, _held = _dependent_writes(DeliversEagerly)
    assert [e.value for e in c.observed if e.node == 2] == [2]  # w2 applied without w1
    breaches = c.breaches()
    assert breaches and "covers write (node 0, dot 1)" in breaches[0]


def test_crash_recovery_restores_grid_and_clock_and_resyncs():
    c = Cluster(3)
    c.deliver_all()
    c.request(0, "write", "k3", 30)
    c.request(0, "write", "k4", 40)
    c.deliver_all()
    c.crash(1)
    c.request(2, "write", "k3", 33)
    c.recover(1)
    node = c.nodes[1]
    assert node.epoch == 1 and node.grid.clock.tolist() == [2, 0, 0]
    assert node.grid.get(3, 0) == 30 and node.grid.get(0, 1) == 40
    c.settle()
    assert all(n.grid.get(3, 0) == 33 for n in c.nodes.values())
    assert all(n.grid.same_as(c.nodes[0].grid) for n in c.nodes.values())
    assert not c.breaches()
    applied = [(e.node, e.key, e.value) for e in c.observed if e.f == "apply"]
    assert len(applied) == len(set(applied))  # nothing applied twice, across the crash


def test_anti_entropy_repairs_lost_and_reordered_messages():
    rng = np.random.default_rng(3)
    c = Cluster(3)
    written = {}
    for step in range(60):
        node = int(rng.integers(3))
        key = f"k{int(rng.integers(16))}"
        reply = c.request(node, "write", key, step)
        assert reply.outcome is Outcome.OK
        written[key] = step
        c.drop(lambda src, dst, msg: rng.random() < 0.4)  # lose 40 %
        if c.queue:
            rng.shuffle(c.queue)
            for _ in range(int(rng.integers(len(c.queue) + 1))):
                c.deliver(int(rng.integers(len(c.queue))))
        if step % 7 == 0:
            c.tick()
    c.settle(40)
    grids = [n.grid for n in c.nodes.values()]
    assert all(g.same_as(grids[0]) for g in grids)
    assert not c.breaches()
    assert len({(e.node, e.key, e.value) for e in c.observed}) == len([e for e in c.observed if e.f == "apply"])


def test_the_full_checks_fast_pass_agrees_with_the_pairwise_search():
    """The full check's first pass (each distinct entry of a pixel once, gathered a few holders at a time) finds a
    breach exactly when the pairwise search over every (holder, replica) pair does, on random states with and
    without dishonest clocks."""
    from types import SimpleNamespace

    from seedance.models.protocols.causal import full_check as invariants

    def pairwise(nodes):
        live = list(nodes)
        width = max(n.grid.clock.size for n in live)
        clock = np.stack([np.pad(n.grid.clock, (0, width - n.grid.clock.size)) for n in live])
        fields = {k: np.stack([n.grid.f[k] for n in live]) for k in ("version", "t", "node", "seq", "value")}
        return invariants._any_breach(clock, fields)

    rng = np.random.default_rng(5)
    outcomes = set()
    for trial in range(300):
        n, pixels = int(rng.integers(1, 6)), int(rng.integers(1, 7))
        writes = [(int(rng.integers(0, n)), s + 1) for s in range(int(rng.integers(0, 6)))]  # (writer, dot)
        nodes = []
        for node_id in range(n):
            f = {"value": np.zeros(pixels, np.int64), "version": np.zeros(pixels, np.int64),
                 "t": np.zeros(pixels), "node": np.full(pixels, -1, np.int32), "seq": np.zeros(pixels, np.int64)}
            clock = rng.integers(0, 4, n).astype(np.int64)
            for p in range(pixels):
                if writes and rng.random() < 0.6:
                    writer, seq = writes[int(rng.integers(0, len(writes)))]
                    f["node"][p], f["seq"][p] = writer, seq
                    f["version"][p], f["t"][p] = seq + writer, float(rng.integers(0, 2))
                    f["value"][p] = int(rng.integers(0, 2))
            nodes.append(SimpleNamespace(node_id=node_id, grid=SimpleNamespace(clock=clock, f=f)))
        slow = _slow_check(nodes)
        assert pairwise(nodes) == bool(slow), trial
        assert invariants.check(nodes) == slow
        outcomes.add(bool(slow))
        fields = {k: np.stack([node.grid.f[k] for node in nodes]) for k in invariants._ORDER}
        written = fields["version"] > 0
        if written.any():  # the distinct entries gathered two holders at a time are those of all holders at once
            holder, pixel = np.nonzero(written)
            whole = np.column_stack([pixel] + [fields[k][holder, pixel].astype(float) for k in invariants._ORDER])
            assert np.array_equal(invariants._distinct_entries(fields, written, holders=2),
                                  np.unique(whole, axis=0))
    assert outcomes == {True, False}


def _slow_check(nodes):
    """The full check without its fast pass (the pairwise search alone)."""
    from seedance.models.protocols.causal import full_check as invariants

    saved = invariants._any_breach
    invariants._any_breach = lambda clock, fields: True
    try:
        return invariants.check(nodes)
    finally:
        invariants._any_breach = saved


def _resend_from_boot(c: Cluster) -> None:
    """Node 1 restarts, receives node 0's write after its boot, writes on top of it, and node 2 (which never got
    node 1's boot state) answers with held=0, so node 1 sends again from its group 0."""
    c.deliver_all()
    c.crash(1)
    c.recover(1)
    c.drop(lambda src, dst, msg: src == 1)  # node 1's boot state is lost on the way
    w0 = c.request(0, "write", "k1", 10)
    c.queue = [m for m in c.queue if m[1] == 1]  # node 0's write reaches node 1 only
    c.deliver_all()
    w1 = c.request(1, "write", "k2", 11, context=w0.context)
    assert w1.outcome is Outcome.OK and w1.context[0] == 1  # node 1's write saw node 0's
    c.drop(lambda src, dst, msg: True)
    c._run(1, c.nodes[1].on_message(2, Ack(epoch=1, held=0, rejected=True), c.now))


def test_a_resend_from_group_0_carries_what_was_delivered_after_boot():
    # group 0 is node 1's state at boot; its later group (the write) has a clock covering node 0's write, which
    # arrived after boot and is in none of node 1's groups: the interval [0, 2) would claim it without carrying
    # it (causal campaign seeds 29, 283, 617, ...), so the resend is the full state
    c = Cluster(3)
    _resend_from_boot(c)
    (src, dst, message), = c.queue
    assert (src, dst, message.start) == (1, 2, None)
    c.deliver_all()
    node2 = c.nodes[2]
    assert node2.grid.get(1, 0) == 10 and node2.grid.get(2, 0) == 11 and node2.grid.clock.tolist()[:2] == [1, 1]
    assert not c.breaches()


def test_an_interval_from_group_0_beyond_it_waits_for_its_predecessors():
    c = Cluster(3)
    _resend_from_boot(c)
    full = c.queue[0][2]
    node1 = c.nodes[1]
    span = Sync.of(node1.epoch, 0, node1.buffer.counter, node1.buffer.span(0))  # what the resend used to be
    assert span.end > 1 and span.clock[0] == 1 and 1 not in span.idx.tolist()  # claims node 0's write, lacks it
    assert not c.nodes[2]._deliverable(1, span)
    boot_only = Sync.of(node1.epoch, 0, 1, node1.buffer.groups[0])
    assert c.nodes[2]._deliverable(1, boot_only) and c.nodes[2]._deliverable(1, full)


def test_the_receivers_of_a_write_acknowledge_it_with_one_message():
    """Equal acknowledgements are one object (every receiver of a write acks the same prefix to the writer)."""
    c = Cluster(3)
    c.deliver_all()
    c.request(0, "write", "k5", 42)
    syncs = [(dst, msg) for src, dst, msg in c.queue if src == 0 and type(msg) is Sync]
    assert [dst for dst, _ in syncs] == [1, 2]
    acks = [[e for e in c.nodes[dst].on_message(0, msg, c.now) if type(getattr(e, "message", None)) is Ack]
            for dst, msg in syncs]
    assert [e.message for e in acks[0]] == [Ack(epoch=0, held=2)] and acks[0][0] is acks[1][0]
