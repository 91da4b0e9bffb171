"""The causal protocol's cheaper paths at many replicas, each against what it stands for: the usual delivery checked
and joined by one bytes comparison (PixelGrid.steps_to), a replica's per-peer maps copied from shared ones
(DeltaBuffer(me=...)), a grid's records made zeroed, and the entry a one-pixel join wrote read back without the
record."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.models import clocks
from seedance.models.crdt import _ENTRY, GridDelta, PixelGrid, _grid_fields
from seedance.models.delta_intervals import DeltaBuffer, peers_of
from seedance.models.protocols.causal.messages import Sync
from seedance.models.protocols.causal.node import CausalConfig, CausalNode
from seedance.models.protocols.contract import ClientRequest, Operation, Send

from _causal_harness import run_replicas


def _clock_only(clock: np.ndarray) -> GridDelta:
    return GridDelta(idx=np.zeros(0, np.int64), value=np.zeros(0, np.int64), version=np.zeros(0, np.int64),
                     t=np.zeros(0), node=np.zeros(0, np.int32), seq=np.zeros(0, np.int64), clock=clock)


def test_steps_to_decides_and_joins_as_the_general_rule():
    rng = np.random.default_rng(11)
    for case in range(600):
        node = CausalNode(0, 6, rng, CausalConfig(width=4, height=4))
        have = rng.integers(0, 4, 6)
        node.grid.clock = have
        src = int(rng.integers(1, 6))
        need = have.copy()
        need[src] += 1
        if case % 2:  # not the next write of src alone: an entry more, or fewer
            need[int(rng.integers(0, 6))] += int(rng.integers(-1, 2))
            need = np.maximum(need, 0)
        message = Sync.of(0, 1, 2, _clock_only(need))
        general = clocks.leq(np.where(np.arange(6) == src, 0, need), have)
        assert node._deliverable(src, message) == general
        before = node.grid.clock
        node.grid.join(message.delta())
        assert np.array_equal(node.grid.clock, np.maximum(have, need)) and not node.grid.clock.flags.writeable
        moved = node.grid.moved_since(before)
        expected = (np.maximum(have, need) != have).nonzero()[0].tolist()
        assert (moved.tolist() if moved is not None else expected) == expected
        if general and np.array_equal(need - (np.arange(6) == src), have):
            assert node.grid.clock is message.delta().clock  # the usual case: the delta's clock, shared


def test_steps_to_needs_the_exact_clock():
    grid = PixelGrid(2, 2, 4)
    grid.clock = np.array([1, 2, 0, 5])
    delta = _clock_only(np.array([1, 3, 0, 5]))
    assert grid.steps_to(delta.clock, 1, delta.before(1)) and not delta.clock.flags.writeable
    assert not grid.steps_to(delta.clock, 0, delta.before(0))  # one entry more elsewhere too
    grid.clock = np.array([1, 2, 1, 5])  # this grid holds a write the delta's sender had not seen
    assert not grid.steps_to(delta.clock, 1, delta.before(1))


@pytest.mark.parametrize("seed", range(3))
def test_replicas_do_the_same_with_and_without_steps_to(seed, monkeypatch):
    assert run_replicas(5, 60, seed, monkeypatch) == run_replicas(5, 60, seed, monkeypatch, steps_to=False)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_replica_buffers_match_buffers_built_key_by_key(n):
    for me in range(n):
        peers = [p for p in range(n) if p != me]
        assert peers_of(me, n) == peers
        fast, slow = DeltaBuffer(peers_of(me, n), me=me), DeltaBuffer(peers)
        assert list(fast.acked.items()) == list(slow.acked.items()) and fast.lagging == slow.lagging
        held, plain = DeltaBuffer(peers_of(me, n), me=me), DeltaBuffer(peers)
        held.add_held(GridDelta.empty(n))
        plain.add(GridDelta.empty(n))
        plain.assume_held(1)
        for a, b in ((held, plain), (fast, slow)):
            assert list(a.acked.items()) == list(b.acked.items()) and a.lagging == b.lagging
            assert (a.base, a.counter, sorted(a.groups)) == (b.base, b.counter, sorted(b.groups))
        fast.add(GridDelta.empty(n))
        slow.add(GridDelta.empty(n))
        fast.assume_held(0)
        slow.assume_held(0)
        assert list(fast.acked.items()) == list(slow.acked.items()) and fast.lagging == slow.lagging


def test_grid_records_start_unwritten():
    records, fields = _grid_fields(10)
    assert np.array_equal(records, np.full(10, np.array((0, 0.0, -1, 0, 0), _ENTRY), _ENTRY))
    assert all(np.shares_memory(records, view) for view in fields.values())


def test_entry_of_the_pixel_just_joined_follows_every_later_write():
    grid = PixelGrid(4, 4, 3)
    delta = grid.write_delta(1, 0, 7, node=0, t=0.5)
    changed = grid.join(delta)
    assert changed.tolist() == [1] and not changed.flags.writeable and changed is delta.pixels()
    assert grid.entry(1) == (7, 1, 0.5, 0, 1) == tuple(x.item() for x in (grid.f[n][1] for n in
                                                                            ("value", "version", "t", "node", "seq")))
    grid.overwrite(1, value=9)
    assert grid.entry(1)[0] == 9
    grid.join(grid.write_delta(1, 0, 8, node=1, t=0.6))
    both = GridDelta(idx=np.array([1, 2]), value=np.array([3, 4]), version=np.array([9, 9]), t=np.array([1.0, 1.0]),
                     node=np.array([2, 2], np.int32), seq=np.array([1, 2]), clock=np.array([1, 1, 2]))
    grid.join(both)
    assert grid.entry(1) == (3, 9, 1.0, 2, 1) and grid.entry(2) == (4, 9, 1.0, 2, 2)


def test_receivers_of_one_write_share_one_persist_step_equal_to_the_general_one():
    nodes = [CausalNode(i, 4, np.random.default_rng(i), CausalConfig(width=4, height=4)) for i in range(4)]
    for node in nodes:
        node.on_start(0.0)
    effects = nodes[0].on_client_request(ClientRequest(client_id=1, request_id=1, op=Operation.WRITE, key="k3",
                                                       value=5), 0.001)
    sends = [e for e in effects if type(e) is Send]
    steps = [nodes[s.dst].on_message(0, s.message, 0.002)[0] for s in sends]
    assert all(step is steps[0] for step in steps) and steps[0].handed_over
    entry = nodes[1].grid.entry(3)
    assert dict(steps[0].put) == {"p3": entry, "c0": 1} and steps[0].size_bytes == 40 + 12


class _CollectEveryAck(DeltaBuffer):
    def ack(self, peer: int, upto: int) -> None:
        super().ack(peer, upto)
        self._collect()


@pytest.mark.parametrize("seed", range(4))
def test_an_ack_that_cannot_raise_the_smallest_acknowledgement_collects_nothing(seed):
    rng = np.random.default_rng(seed)
    peers = [1, 2, 3, 4, 5]
    max_groups = int(rng.integers(2, 12))
    fast, every = DeltaBuffer(peers, max_groups=max_groups), _CollectEveryAck(peers, max_groups=max_groups)
    for step in range(1500):
        roll = rng.random()
        if roll < 0.25:
            for buf in (fast, every):
                buf.add(GridDelta.empty(6))
        elif roll < 0.27:
            upto = int(rng.integers(fast.counter + 1))
            for buf in (fast, every):
                buf.assume_held(upto)
        else:
            peer = int(rng.choice(peers))
            low = fast.counter if rng.random() < 0.8 else 0
            upto = int(rng.integers(min(low, (fast.acked[peer] or 0)), fast.counter + 1))
            for buf in (fast, every):
                buf.ack(peer, upto)
        assert (fast.base, sorted(fast.groups), fast.acked, fast.lagging) == \
            (every.base, sorted(every.groups), every.acked, every.lagging)
