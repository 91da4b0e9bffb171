"""The real backend's collective engine on its own: a one-member gloo group on a real TCPStore (127.0.0.1).

Each started collective reaches the node exactly once — the worker's result, or the timeout when the worker is late —
and the engine keeps nothing per collective once both parties are done: a soak commits ~100 collectives a second for
hours (`seedance real soak`), and an engine-wide record of them grew, or churned the allocator, in earlier versions.
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import numpy as np
import pytest

from seedance.engine import collectives as rules
from seedance.models.protocols.contract import StartCollective
from seedance.real.collectives import CollectiveEngine

dist = pytest.importorskip("torch.distributed")


class _Timers:
    """``call_later`` whose timers fire when the test says (the runtime uses its asyncio loop's clock)."""

    def __init__(self) -> None:
        self.pending: list = []

    def call_later(self, delay: float, fn) -> None:
        self.pending.append(fn)

    def fire_all(self) -> None:
        pending, self.pending = self.pending, []
        for fn in pending:
            fn()


def _engine(delivered: list, timers: _Timers) -> CollectiveEngine:
    store = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=30))
    return CollectiveEngine(rank=0, store_factory=lambda: store, deliver=delivered.append,
                            call_later=timers.call_later, bind_host="127.0.0.1", backend="gloo")


def _start(engine: CollectiveEngine, cid: int, timeout_s: float) -> None:
    payload = np.full(4, float(cid), dtype=np.float32)
    meta, error = rules.check_start(0, "allreduce", (0,), None, payload)
    assert error is None
    engine.start(StartCollective(collective_id=cid, op="allreduce", group=(0,), payload=payload,
                                 nominal_size_bytes=16, timeout_s=timeout_s), meta, payload)


def _wait_for(delivered: list, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(delivered) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def _state_size(engine: CollectiveEngine) -> int:
    """Entries in every container the engine holds (its per-membership process groups included)."""
    return sum(len(v) for v in vars(engine).values() if isinstance(v, (set, dict, list, tuple)))


def test_each_collective_is_delivered_once_and_leaves_nothing_behind():
    delivered: list = []
    timers = _Timers()
    engine = _engine(delivered, timers)
    try:
        for cid in range(10):
            _start(engine, cid, timeout_s=5.0)
        _wait_for(delivered, 10)
        timers.fire_all()  # the second party of each collective comes and goes
        assert sorted(d.collective_id for d in delivered) == list(range(10))
        assert all(d.ok for d in delivered), [d.error for d in delivered if not d.ok]
        np.testing.assert_array_equal(delivered[3].result, np.full(4, 3.0, dtype=np.float32))
        size_after_10 = _state_size(engine)

        for cid in range(10, 210):
            _start(engine, cid, timeout_s=5.0)
        _wait_for(delivered, 210)
        # Delivered by the worker, their timeouts still pending (as for the last ~5 s of collectives in a run):
        # the engine itself holds nothing for them.
        assert _state_size(engine) == size_after_10
        timers.fire_all()
        assert sorted(d.collective_id for d in delivered) == list(range(210))  # once each, no duplicate
        assert engine.completed == 210
        assert _state_size(engine) == size_after_10
    finally:
        engine.close()


def test_a_late_worker_loses_to_the_timeout_and_is_dropped():
    delivered: list = []
    timers = _Timers()
    engine = _engine(delivered, timers)
    release = threading.Event()
    engine._worker.submit(release.wait)  # the worker thread is busy: the collective waits behind it
    try:
        _start(engine, 1, timeout_s=0.05)
        timers.fire_all()
        assert [(d.collective_id, d.ok, d.error) for d in delivered] == [(1, False, "timeout")]
        release.set()
        engine._worker.submit(lambda: None).result(30)  # the late worker has run (and skipped the collective)
        time.sleep(0.05)
        assert len(delivered) == 1
    finally:
        release.set()
        engine.close()
