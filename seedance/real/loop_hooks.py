"""A node loop's profile hooks (``SEEDANCE_CPU_PROFILE``): its busy periods and the interpreter's collections, read
by ``seedance real profile`` for the host model's amortisation and pauses."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from seedance.models.host import ITEM_KINDS


class BusyPeriods:
    """``SEEDANCE_CPU_PROFILE`` hook: the loop thread's busy periods (amortisation of the host model).

    A busy period runs from a wake-up (the loop's ``select`` returning after it could block: nothing was ready) to
    the next such ``select``. Per period it records the loop thread's CPU outside the timed handlers (frame I/O,
    task steps, select, sends after a fsync), the number of items handled in it (inputs, fsync completions or, in
    the client process, replies) and of frames received and sent, so ``seedance real profile`` can fit
    CPU = per-wake-up + per-item * items + per-frame costs. Each period also carries its items by kind (``kinds``:
    the input kinds MESSAGE .. WORK, then ``SYNCED`` for fsync completions and ``SYNC_STARTS`` for fsyncs handed to
    the storage thread), so the profile can fit a cost per kind beside the pooled one.
    """

    LIMIT = 50_000
    # positions in ``kinds``: the host model's item kinds, whose first six are the input kinds in the engine's order
    SYNCED, SYNC_STARTS = ITEM_KINDS.index("fsync_done"), ITEM_KINDS.index("fsync_start")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.items = 0
        self.frames_in = 0
        self.frames_out = 0
        self.excluded_ns = 0  # CPU already sampled elsewhere (the handlers), not the period's overhead
        self.kinds = [0] * len(ITEM_KINDS)  # items by kind (see the class docstring)
        # (overhead ns, items, frames in, frames out, items by kind): ints and a tuple of ints only, which the
        # collector stops tracking; a list in each record made 50,000 records 100,000 tracked objects, and every
        # full collection of a profiled node then traversed them (~6 ms more per 50,000 records, measured): a
        # 14-22 ms stall of all clients that the profile recorded as the nodes' own and unprofiled runs never had
        self.periods: list[tuple[int, int, int, int, tuple[int, ...]]] = []
        self._start: tuple[int, ...] | None = None
        selector = getattr(loop, "_selector", None)
        if selector is None:
            return  # not a selector loop: no periods (the profile falls back to CPU per input)
        original = selector.select

        def select(timeout: float | None = None) -> Any:
            if timeout is not None and timeout <= 0:
                return original(timeout)
            self._close()
            events = original(timeout)
            self._start = (time.thread_time_ns(), self.items, self.excluded_ns, self.frames_in, self.frames_out,
                           tuple(self.kinds))
            return events

        selector.select = select

    def _close(self) -> None:
        if self._start is None or len(self.periods) >= self.LIMIT:
            return
        cpu0, items0, excluded0, in0, out0, kinds0 = self._start
        self._start = None
        items = self.items - items0
        if items:
            self.periods.append((time.thread_time_ns() - cpu0 - (self.excluded_ns - excluded0), items,
                                 self.frames_in - in0, self.frames_out - out0,
                                 tuple([a - b for a, b in zip(self.kinds, kinds0)])))


class GcPauses:
    """``SEEDANCE_CPU_PROFILE`` hook: the interpreter's garbage collections (``gc.callbacks``), each one's wall time
    and generation. Young collections (generation 0) are frequent and short, and already inside the per-item costs;
    the older generations' are rare, last up to milliseconds and stall every operation that waits on the process
    meanwhile: what sets much of a CPU-bound run's tail, recorded so the host model can draw them."""

    LIMIT = 20_000

    def __init__(self) -> None:
        import gc

        self.young = 0
        # (generation, wall ns, its start on perf_counter_ns: the host-wide monotonic clock) of collections of
        # generation >= 1; the start lets the profile tell which of its fsyncs' hand-overs a collection held
        self.pauses: list[tuple[int, int, int]] = []
        self._began = 0
        self._gc = gc
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter_ns()
        elif info.get("generation", 0) == 0:
            self.young += 1
        elif len(self.pauses) < self.LIMIT:
            self.pauses.append((int(info["generation"]), time.perf_counter_ns() - self._began, self._began))

    def close(self) -> dict[str, Any]:
        if self._callback in self._gc.callbacks:
            self._gc.callbacks.remove(self._callback)
        return {"young": self.young, "pauses": self.pauses}
