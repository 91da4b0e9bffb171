"""Lanes for the Chrome trace's duration (``X``) events: each span gets a thread id such that spans on one
(pid, tid) never overlap, so a viewer draws every message flight, fsync and fault (:mod:`seedance.tracing` writes
the events; this module only places them).

A lane's tid is its category's base (:data:`LANE_TID_BASE`) plus 1,000 per lane; a new lane is announced by a
``thread_name`` metadata event.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

LANE_TID_BASE = {"net": 100, "storage": 3, "nemesis": 1, "commit": 7, "rollback": 8}


class Lanes:
    """Give each X event a tid so that events on one (pid, tid) never overlap (greedy interval colouring).

    Works on a stream: a span goes to the first lane (of its pid and category) whose last span ended by its start,
    else to a new lane (announced by a ``thread_name`` event). Spans on a lane never overlap in any arrival order.
    While a (pid, category)'s spans arrive in start order (a trace's sends do), the free lanes are kept in a heap:
    O(log lanes) a span instead of a scan (a node broadcasting to 1,023 peers has a thousand lanes in flight); a
    span that starts earlier than the one before it is placed by the scan, and the heaps are rebuilt.
    """

    def __init__(self) -> None:
        self.lanes: dict[tuple[int, str], list[float]] = {}  # (pid, category) -> end time of each lane's last span
        # (pid, category) -> [start of the last span placed, free lanes (indices), busy lanes (end, index)]
        self._heaps: dict[tuple[int, str], list[Any]] = {}

    def _lane(self, key: tuple[int, str], ts: float) -> int:
        """The first lane of ``key`` whose last span ended by ``ts`` (its number of lanes: none has)."""
        ends = self.lanes.setdefault(key, [])
        state = self._heaps.get(key)
        if state is None or ts < state[0]:  # out of start order: the scan (exact in any order), heaps rebuilt
            lane = next((k for k, end in enumerate(ends) if end <= ts), len(ends))
            free = [k for k, end in enumerate(ends) if end <= ts and k != lane]
            busy = [(end, k) for k, end in enumerate(ends) if end > ts]
            heapq.heapify(free)
            heapq.heapify(busy)
            self._heaps[key] = [ts, free, busy]
            return lane
        state[0] = ts
        _, free, busy = state
        while busy and busy[0][0] <= ts:
            heapq.heappush(free, heapq.heappop(busy)[1])
        return heapq.heappop(free) if free else len(ends)

    def place(self, span: dict[str, Any]) -> Iterator[dict[str, Any]]:
        tid, named = self.assign(span["pid"], span["cat"], span["ts"], span["dur"])
        if named is not None:
            yield named
        span["tid"] = tid
        yield span

    def assign(self, pid: int, category: str, ts: float, dur: float) -> tuple[int, dict[str, Any] | None]:
        """The tid of a span of ``category`` on ``pid`` from ``ts`` for ``dur``, and the ``thread_name`` event that
        announces its lane when the lane is new (else None)."""
        key = (pid, category)
        lane = self._lane(key, ts)
        ends = self.lanes[key]
        base = LANE_TID_BASE[category]
        named = None
        if lane == len(ends):
            ends.append(0.0)
            named = {"name": "thread_name", "ph": "M", "pid": pid, "tid": base + 1000 * lane,
                     "args": {"name": category + (f" {lane}" if lane else "")}}
        end = ends[lane] = ts + dur
        heapq.heappush(self._heaps[key][2], (end, lane))
        return base + 1000 * lane, named
