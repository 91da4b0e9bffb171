"""The delta-state CRDT pixel grid (seedance.models.crdt; Almeida, Shoker & Baquero, JPDC 2018).

Join laws by Hypothesis (commutative, associative, idempotent, on dense states and on sparse delta-groups), the
delta-mutator law m(X) = X ⊔ m^δ(X), the documented rule for concurrent writes to one pixel, delta-intervals with
causal merging, and anti-entropy over a lossy, duplicating, reordering channel converging to the join of all writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.models import clocks
from seedance.models.crdt import GridDelta, PixelGrid, join_deltas, join_states
from seedance.models.delta_intervals import DeltaBuffer, IntervalReceiver

W, H, N = 4, 3, 3

# a write: (writer, x, y, value, t); states are built by replaying writes on a replica that has seen some others
write_st = st.tuples(st.integers(0, N - 1), st.integers(0, W - 1), st.integers(0, H - 1), st.integers(0, 9),
                     st.sampled_from([0.0, 1.0, 2.0]))


def state_from(writes) -> PixelGrid:
    grid = PixelGrid(W, H, N)
    for node, x, y, value, t in writes:
        grid.write(x, y, value, node=node, t=t)
    return grid


states = st.lists(write_st, max_size=12).map(state_from)


@settings(max_examples=200, deadline=None)
@given(states, states, states)
def test_join_is_commutative_associative_idempotent(a, b, c):
    assert join_states(a, b).same_as(join_states(b, a))
    assert join_states(join_states(a, b), c).same_as(join_states(a, join_states(b, c)))
    assert join_states(a, a).same_as(a)
    ab = join_states(a, b)
    assert ab.contains(a.full_delta()) and ab.contains(b.full_delta())  # an upper bound
    assert join_states(ab, b).same_as(ab)  # absorbing what is already in


@settings(max_examples=200, deadline=None)
@given(states, states, states)
def test_delta_groups_join_like_states(a, b, c):
    da, db, dc = a.full_delta(), b.full_delta(), c.full_delta()
    assert join_deltas(da, db).same_as(join_deltas(db, da))
    assert join_deltas(join_deltas(da, db), dc).same_as(join_deltas(da, join_deltas(db, dc)))
    assert join_deltas(da, da).same_as(da)
    # joining a delta-group into a state = joining its parts one by one
    one = a.copy()
    one.join(join_deltas(db, dc))
    two = a.copy()
    two.join(db)
    two.join(dc)
    assert one.same_as(two)


entry_st = st.tuples(st.integers(0, 3), st.sampled_from([0.0, 1.0, float("nan")]), st.integers(-1, 2),
                     st.integers(0, 3), st.integers(-(1 << 63), (1 << 63) - 1))


@settings(max_examples=300, deadline=None)
@given(entry_st, entry_st)
def test_a_one_pixel_join_takes_the_vectorised_rule(mine, theirs):
    """The one-write shortcut of PixelGrid.join decides as the elementwise (version, t, node, seq, value) rule does,
    NaN times and 64-bit extremes included."""
    def delta(entry, pixels):
        version, t, node, seq, value = entry
        return GridDelta(idx=np.array(pixels, np.int64), value=np.array([value] * len(pixels), np.int64),
                         version=np.array([version] * len(pixels), np.int64), t=np.array([t] * len(pixels)),
                         node=np.array([node] * len(pixels), np.int32), seq=np.array([seq] * len(pixels), np.int64),
                         clock=clocks.zeros(N))
    one, two = PixelGrid(W, H, N), PixelGrid(W, H, N)
    one.join(delta(mine, [5]))
    two.join(delta(mine, [5, 6]))  # two pixels: the vectorised path
    changed_one = one.join(delta(theirs, [5]))
    changed_two = two.join(delta(theirs, [5, 6]))
    assert changed_one.tolist() == [p for p in changed_two.tolist() if p == 5]
    for name in ("value", "version", "node", "seq"):
        assert one.f[name][5] == two.f[name][5]
    assert np.array_equal(one.f["t"][5:6], two.f["t"][5:6], equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(states, write_st)
def test_delta_mutator_law(x, w):
    node, px, py, value, t = w
    delta = x.write_delta(px, py, value, node=node, t=t)
    applied = x.copy()
    applied.write(px, py, value, node=node, t=t)
    joined = x.copy()
    joined.join(delta)
    assert applied.same_as(joined)
    assert applied.get(px, py) == value  # a write always wins at the replica that makes it (its version is maximal)
    assert len(delta) == 1 and delta.size_bytes < x.full_state_bytes


def test_concurrent_writes_resolve_by_version_then_time_then_writer():
    a, b = PixelGrid(2, 1, 2), PixelGrid(2, 1, 2)
    da = a.write(0, 0, 10, node=0, t=5.0)  # clock [1, 0], version 1
    db = b.write(0, 0, 20, node=1, t=1.0)  # clock [0, 1], version 1: concurrent, equal version
    assert clocks.is_concurrent(da.clock, db.clock)
    a.join(db)
    b.join(da)
    assert a.get(0, 0) == b.get(0, 0) == 10  # the later writer clock t wins
    c = PixelGrid(2, 1, 2)
    c.write(0, 0, 30, node=1, t=9.0)  # same version 1, t 9 > 5
    a.join(c.full_delta())
    assert a.get(0, 0) == 30
    # causality beats clock skew: a write that saw 30 wins even with a smaller t
    follow = a.write(0, 0, 40, node=0, t=0.0)
    assert follow.version[0] > 1
    c.join(follow)
    assert c.get(0, 0) == 40
    # equal version and t: the larger writer id
    d, e = PixelGrid(1, 1, 2), PixelGrid(1, 1, 2)
    d.write(0, 0, 1, node=0, t=1.0)
    e.write(0, 0, 2, node=1, t=1.0)
    assert join_states(d, e).get(0, 0) == join_states(e, d).get(0, 0) == 2


def test_interval_receiver_joins_only_extensions_of_the_prefix():
    r = IntervalReceiver()
    assert not r.acceptable(0, epoch=0, start=3)  # nothing held of sender 0: an interval from 3 has a gap
    assert r.acceptable(0, epoch=0, start=0) and r.acceptable(0, epoch=0, start=None)
    assert r.joined(0, 0, 0, 3) == 3
    assert r.acceptable(0, epoch=0, start=2) and r.acceptable(0, epoch=0, start=3)
    assert not r.acceptable(0, epoch=0, start=4)
    assert r.joined(0, 0, 2, 5) == 5
    assert not r.acceptable(0, epoch=1, start=5)  # the sender restarted: its old prefix means nothing
    assert r.joined(0, 0, 3, 4) == 5  # a late, older interval never moves the prefix back
    assert r.joined(0, 1, None, 2) == 2  # a full state of the new incarnation starts a new prefix
    assert not r.acceptable(0, epoch=0, start=5)  # the old incarnation is gone
    assert r.held_for(0, 0) == 0


def test_delta_buffer_intervals_acks_and_collection():
    grid = PixelGrid(W, H, N)
    buf = DeltaBuffer([1, 2], max_groups=3)
    buf.add(grid.full_delta())
    for v in range(4):
        buf.add(grid.write(v % W, 0, v, node=0, t=float(v)))
    assert buf.interval(1) is None  # no acknowledgement yet: full state
    assert buf.base == 2  # at most 3 groups kept
    buf.ack(1, 3)
    start, span = buf.interval(1)
    assert start == 3 and sorted(span.idx.tolist()) == [2, 3]
    assert buf.base == 3  # collected below the only known acknowledgement: peer 2 (unknown) gets the full state
    buf.ack(2, 5)
    buf.ack(1, 5)
    assert buf.base == 5 and not buf.groups and not buf.pending(1)
    with pytest.raises(ValueError, match="collected"):
        buf.span(4)


def _anti_entropy(seed: int, loss: float, dup: float) -> tuple[list[PixelGrid], PixelGrid]:
    """Three replicas write, then exchange delta-intervals over a channel that loses, duplicates and reorders."""
    rng = np.random.default_rng(seed)
    grids = [PixelGrid(W, H, N) for _ in range(N)]
    bufs = [DeltaBuffer([p for p in range(N) if p != i]) for i in range(N)]
    recv = [IntervalReceiver() for _ in range(N)]
    reference = PixelGrid(W, H, N)  # the join of every write
    for i in range(N):
        bufs[i].add(grids[i].full_delta())
    channel: list[tuple] = []
    for step in range(400):
        i = int(rng.integers(N))
        if step < 150 and rng.random() < 0.5:
            d = grids[i].write(int(rng.integers(W)), int(rng.integers(H)), int(rng.integers(100)), node=i, t=step)
            bufs[i].add(d)
            reference.join(d)
        for j in range(N):
            if j == i:
                continue
            got = bufs[i].interval(j)
            start, delta = (None, grids[i].full_delta()) if got is None else got
            if rng.random() >= loss:
                channel.append(("sync", i, j, start, bufs[i].counter, delta))
        rng.shuffle(channel)
        keep = []
        for msg in channel:
            if rng.random() < 0.5:
                keep.append(msg)
                continue
            if rng.random() < dup:
                keep.append(msg)
            if msg[0] == "sync":
                _, src, dst, start, end, delta = msg
                if recv[dst].acceptable(src, 0, start):
                    grids[dst].join(delta)
                    held = recv[dst].joined(src, 0, start, end)
                    if rng.random() >= loss:
                        keep.append(("ack", dst, src, held))
            else:
                _, src, dst, held = msg
                bufs[dst].ack(src, max(held, bufs[dst].acked[src] or 0))
        channel = keep
    return grids, reference


@pytest.mark.parametrize("seed", range(5))
def test_anti_entropy_converges_to_the_join_of_all_writes(seed):
    grids, reference = _anti_entropy(seed, loss=0.3, dup=0.3)
    for g in grids:
        assert g.same_as(grids[0])
        assert np.array_equal(g.values(), reference.values())


def test_sparse_delta_round_trips_through_the_wire_form():
    grid = state_from([(0, 1, 1, 7, 1.0), (2, 3, 2, 9, 0.0)])
    delta = grid.full_delta()
    assert GridDelta.from_wire(delta.to_wire()).same_as(delta)
    assert delta.size_bytes == 2 * 40 + 8 * N
    # arrays of the delta's own types are taken as they are; anything else (lists, other dtypes) is converted
    assert all(a is b for a, b in zip(GridDelta.from_wire(delta.to_wire()).to_wire(), delta.to_wire()))
    listed = GridDelta.from_wire([a.tolist() for a in delta.to_wire()])
    assert listed.same_as(delta) and listed.node.dtype == np.int32 and listed.t.dtype == np.float64
    narrow = GridDelta.from_wire([a.astype(np.int32) for a in delta.to_wire()])
    assert narrow.idx.dtype == np.int64 and narrow.same_as(GridDelta.from_wire(
        [a.astype(np.int32) for a in delta.to_wire()]))


def test_the_grids_arrays_are_read_only_and_every_write_is_noted_for_each_watcher():
    grid = PixelGrid(4, 2, 3)
    with pytest.raises(ValueError, match="read-only"):
        grid.f["value"][0] = 1
    with pytest.raises(TypeError):
        grid.f["value"] = np.zeros(8, np.int64)
    grid.watch(1)
    grid.watch(2)
    grid.write(1, 0, 5, node=0, t=0.0)  # one pixel: the tuple path
    peer = PixelGrid(4, 2, 3)
    peer.write(2, 1, 9, node=1, t=0.0)
    peer.write(3, 1, 4, node=1, t=0.0)
    grid.join(peer.full_delta())  # two pixels: the vectorised path
    assert len(grid.join(peer.full_delta())) == 0  # nothing changes: nothing noted
    grid.overwrite(3, value=7)
    with pytest.raises(KeyError, match="valid: value, version"):
        grid.overwrite(3, colour=7)

    def flat(noted):
        return [int(p) for item in noted for p in np.atleast_1d(item)]

    assert grid.written_count == len(grid.written()) == 3
    assert flat(grid.drain(1)) == [1, 6, 7, 3] and grid.drain(1) == []
    assert flat(grid.drain(2)) == [1, 6, 7, 3]
    assert grid.f["value"][3] == 7 and grid.entry(6) == (9, 1, 0.0, 1, 1)
    grid.unwatch(2)
    grid.write(0, 0, 1, node=0, t=1.0)
    assert not grid.watched_by(2) and flat(grid.drain(1)) == [0]
    copy = grid.copy()  # an independent grid: the same state, no watchers, its own arrays
    assert copy.same_as(grid) and not copy.watched_by(1) and copy.written_count == len(grid.written()) == 4
    grid.overwrite(0, version=0)
    assert grid.written_count == len(grid.written()) == 3
    copy.write(0, 1, 2, node=2, t=2.0)
    assert grid.get(0, 1) is None and flat(grid.drain(1)) == [0]  # the overwrite only: not the copy's write


def test_the_clock_is_read_only_and_replaced_when_it_changes():
    grid = PixelGrid(2, 1, 3)
    before = grid.clock
    with pytest.raises(ValueError, match="read-only"):
        grid.clock[0] = 1
    delta = grid.write_delta(0, 0, 5, node=1, t=0.0)
    assert grid.clock is before and before.tolist() == [0, 0, 0]  # a delta mutator leaves the grid alone
    grid.join(delta)
    assert grid.clock is not before and grid.clock.tolist() == [0, 1, 0] and before.tolist() == [0, 0, 0]
    mine = np.array([4, 4, 4])
    grid.clock = mine  # the setter copies: writing the caller's array later does not reach the grid
    mine[0] = 9
    assert grid.clock.tolist() == [4, 4, 4] and not grid.clock.flags.writeable
    grid.join(GridDelta.empty(3))  # a join that moves nothing keeps it; one that does never takes the delta's array
    empty = GridDelta.empty(3)
    grid.join(empty)
    assert grid.clock is not empty.clock and grid.copy().clock is not grid.clock


@settings(max_examples=200, deadline=None)
@given(states, states)
def test_a_join_says_where_it_moved_the_clock(mine, theirs):
    """What the node persists and the monitor compares after a join: the entries :meth:`PixelGrid.moved_since`
    reports are exactly those where the new clock differs from the one it replaced; a join that moves nothing keeps
    the same clock object; any other change (the setter, two joins since) answers None (compare instead)."""
    before = mine.clock
    expected = (np.maximum(before, theirs.clock) != before).nonzero()[0]
    assert mine.ahead(theirs.clock).tolist() == expected.tolist()
    mine.join(theirs.full_delta())
    if expected.size:
        assert mine.clock is not before and mine.moved_since(before).tolist() == expected.tolist()
    else:
        assert mine.clock is before
    assert mine.clock.tolist() == np.maximum(before, theirs.clock).tolist() and not mine.clock.flags.writeable
    assert mine.moved_since(mine.clock) is None and mine.moved_since(None) is None
    ahead = mine.clock.copy()
    ahead[0] += 1
    middle = mine.clock
    mine.join(GridDelta(idx=np.zeros(0, np.int64), value=np.zeros(0, np.int64), version=np.zeros(0, np.int64),
                        t=np.zeros(0), node=np.zeros(0, np.int32), seq=np.zeros(0, np.int64), clock=ahead))
    assert mine.moved_since(middle).tolist() == [0]
    assert middle is before or mine.moved_since(before) is None  # one change ago only
    mine.clock = mine.clock + 1
    assert mine.moved_since(ahead) is None and mine.moved_since(middle) is None


@pytest.mark.parametrize("seed", range(4))
def test_delta_buffer_collects_below_the_smallest_known_acknowledgement_as_acks_go_up_and_down(seed):
    """The smallest acknowledgement is kept incrementally (counts per acknowledged value): the groups collected are
    those a scan of every peer's acknowledgement would collect, with acks that go down (a restarted peer) too."""
    rng = np.random.default_rng(seed)
    peers = [1, 2, 3, 4]
    buf = DeltaBuffer(peers, max_groups=int(rng.integers(3, 9)))
    grid = PixelGrid(W, H, N)
    base = 0
    for step in range(200):
        roll = rng.random()
        if roll < 0.3:
            buf.add(grid.write(int(rng.integers(W)), 0, step, node=0, t=float(step)))
        elif roll < 0.33:
            buf.assume_held(int(rng.integers(buf.counter + 1)))
        else:
            buf.ack(int(rng.choice(peers)), int(rng.integers(buf.counter + 1)))
        known = [a for a in buf.acked.values() if a is not None]
        base = max(base, min(known) if known else base, buf.counter - buf.max_groups)
        assert buf.base == base and sorted(buf.groups) == list(range(base, buf.counter))
