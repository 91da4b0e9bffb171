"""The causal protocol's one-step delivery and the grid's record memory, each against what it stands for: the usual
delivery in one step (CausalNode._next, PixelGrid.join_next, IntervalReceiver.extends) against the general path,
records read and written as bytes against numpy's structured records, and the lists of shared arrays (listed) against
tolist."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.models.crdt import _ENTRY, GridDelta, PixelGrid, listed
from seedance.models.delta_intervals import IntervalReceiver
from seedance.models.protocols.causal.node import CausalConfig, CausalNode
from seedance.models.protocols.contract import SetTimer

from _causal_harness import run_replicas


@pytest.mark.parametrize("seed", range(4))
def test_replicas_do_the_same_with_and_without_the_one_step_delivery(seed, monkeypatch):
    fast = run_replicas(5, 80, seed, monkeypatch)
    assert fast == run_replicas(5, 80, seed, monkeypatch, one_step=False) \
        == run_replicas(5, 80, seed, monkeypatch, one_step=False, steps_to=False)


def test_join_next_joins_as_join_and_only_the_next_write():
    writer, fast, slow = PixelGrid(4, 4, 3), PixelGrid(4, 4, 3), PixelGrid(4, 4, 3)
    for k in range(6):
        delta = writer.write_delta(k % 4, 0, 10 + k, node=1, t=float(k))
        assert fast.join_next(delta, 0, fast.clock) is None  # not its write
        assert fast.join_next(delta, 2, fast.clock) is None
        before = fast.clock
        if k in (0, 3):  # the general path: steps_to compares, then join takes the delta's clock
            assert fast.steps_to(delta.clock, 1, delta.before(1))
            changed = listed(fast.join(delta))
        else:  # fast's clock is the writer's very clock (the writer's join took it too): no comparison
            assert before is writer.clock
            changed = fast.join_next(delta, 1, before)
        writer.join(delta)
        assert changed == slow.join(delta).tolist() == [k % 4]
        assert fast.clock is delta.clock and fast.moved_since(before).tolist() == [1]
        assert fast.same_as(slow) and fast.entry(k % 4) == slow.entry(k % 4) == (10 + k, k + 1, float(k), 1, k + 1)
        assert fast.join_next(delta, 1, fast.clock) is None  # delivered: the grid's clock is the delta's now
    other = PixelGrid(4, 4, 3)
    other.clock = fast.clock  # an equal clock, another array: the general path decides (steps_to compares)
    assert other.join_next(writer.write_delta(0, 1, 5, node=1, t=9.0), 1, other.clock) is None


def test_records_are_read_and_written_as_numpy_records():
    rng = np.random.default_rng(3)
    grid, reference = PixelGrid(3, 3, 4), np.zeros(9, _ENTRY)
    reference["node"] = -1
    for k in range(40):
        i = int(rng.integers(9))
        delta = GridDelta(idx=np.array([i]), value=np.array([int(rng.integers(-5, 5))]),
                          version=np.array([int(rng.integers(1, 6))]), t=np.array([float(rng.integers(3))]),
                          node=np.array([int(rng.integers(4))], np.int32), seq=np.array([k]),
                          clock=np.zeros(4, np.int64))
        key = tuple(x.item() for x in (delta.version[0], delta.t[0], delta.node[0], delta.seq[0], delta.value[0]))
        wins = key > reference.item(i)
        if wins:
            reference[i] = key
        assert grid.join(delta).tolist() == ([i] if wins else [])
        assert grid._records.tolist() == reference.tolist()
        assert all(grid.entry(j) == (r[4], *r[:4]) for j, r in enumerate(reference.tolist()))
    assert grid.written_count == int(np.count_nonzero(reference["version"] > 0))


def test_extends_is_acceptable_of_an_interval_from_beyond_zero():
    rng = np.random.default_rng(5)
    for first in ((-1, 0), (0, 1)):
        receiver = IntervalReceiver(first)
        for _ in range(400):
            sender, epoch, end = int(rng.integers(4)), int(rng.integers(-1, 3)), int(rng.integers(0, 9))
            start = None if rng.random() < 0.1 else int(rng.integers(0, end + 1))
            if start:
                assert receiver.extends(sender, epoch, start) == receiver.acceptable(sender, epoch, start)
            if rng.random() < 0.5:
                receiver.joined(sender, epoch, start, end)


def test_listed_gives_tolist_and_shared_arrays_stay_read_only():
    grid = PixelGrid(2, 2, 2)
    delta = grid.write_delta(1, 1, 4, node=0, t=0.0)
    changed = grid.join(delta)
    assert listed(changed) == changed.tolist() == [3] and listed(changed) is listed(changed)
    assert not changed.flags.writeable and not delta.clock.flags.writeable
    fresh = np.array([2, 5])
    assert listed(fresh) == [2, 5] and listed(fresh) is not listed(fresh)


def test_timers_are_one_shared_set_timer_per_name_and_delay():
    node = CausalNode(0, 3, np.random.default_rng(0), CausalConfig(width=2, height=2, sync_interval_s=0.002))
    node.on_start(0.0)
    first, again = node.on_timer("sync", 0.0)[0], node.on_timer("sync", 0.002)[0]
    assert first is again and first == SetTimer(name="sync", delay_s=0.002)
    assert node.on_timer("stats", 0.0)[0] == SetTimer(name="stats", delay_s=node.config.stats_interval_s)
