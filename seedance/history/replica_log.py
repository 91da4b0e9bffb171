"""A run's replica events on disk as they are recorded: memory holds one chunk of rows, not the run.

A causal run at 1,024 replicas records about a million replica events per simulated second (every replica applies
every write); as :class:`~seedance.history.events.ReplicaEvent` objects in a list that is about 210 MB a simulated
second, and the checks after the run built as much again. This log keeps them as rows and spills them.

Rules:

* A runtime appends its own rows ``(node, f, key, value, time)`` (``value`` hashable: lists as tuples) with
  :meth:`ReplicaLog.add`, which checks ``f`` and ``key`` the way :class:`ReplicaEvent` does (a node's Observe with
  a bad field is refused, naming it). Once ``spill_rows`` rows wait in memory they are sorted by time (stable) and
  packed (msgpack, each row with its position in the log; ``f`` and ``key`` as small codes into the log's own
  tables, so rows read back share one string per key) to a temporary file as one chunk, and the list is emptied in
  place: memory holds at most one chunk of rows, whatever the run's length.
* :meth:`ReplicaLog.by_time` yields every event in time order, ties in the order recorded (the order a stable sort of
  the whole log gives): the chunks are sorted runs, merged as they are read.
* :meth:`ReplicaLog.by_keys` yields the rows of consecutive groups of keys (in ``repr`` order, the convergence
  check's), each group holding at most about ``batch_rows`` applies, in the order recorded; a log that fits one
  group is read once, a larger one twice (one pass writes each group's rows to a file of its own).
  :meth:`ReplicaLog.stats` gives the applies per key, the last time, the largest node and the sums of the observe
  totals, counted as the rows were spilled (no pass over the file).
* Iterating the log gives :class:`ReplicaEvent` objects in time order.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import msgpack

from seedance.history.events import REPLICA_FS, ReplicaEvent, _hashable

__all__ = ["LogStats", "ReplicaLog", "is_apply", "merge_history"]

SPILL_ROWS = 100_000  # rows a log holds in memory before it spills them (about 12 MB)
BATCH_ROWS = 100_000  # applies :meth:`ReplicaLog.by_keys` gathers at most at once (a key with more is held alone)
_SCALARS = frozenset({int, float, str, bool, type(None)})
_F_CODES = {f: code for code, f in enumerate(REPLICA_FS)}
_TIME = itemgetter(4)
_POS = itemgetter(5)
_EVENT_TIME = attrgetter("time")
_READ = 1 << 20


def _tuple(items: list[Any]) -> tuple[Any, ...]:
    return tuple(items)


def _unpacker() -> msgpack.Unpacker:
    """An unpacker of rows as this log packs them (arrays come back as tuples, as the values were recorded)."""
    return msgpack.Unpacker(raw=False, use_list=True, list_hook=_tuple, strict_map_key=False,
                            max_buffer_size=1 << 30)


def is_apply(f: str, key: Any) -> bool:
    """Whether a row counts as an apply for the convergence check: an ``apply``, or a keyed ``observe`` (a
    recovered replica holding a value again)."""
    return f == "apply" or (f == "observe" and key is not None)


@dataclass
class LogStats:
    """A log's totals: the applies per key (:func:`is_apply`), the last time of any event, the largest node id that
    applied anything (-1: none), and the sums of the keyless observe events' ``(delta bytes, full-state bytes)``
    totals."""

    applies_per_key: Counter = field(default_factory=Counter)
    last_time: float | None = None
    max_node: int = -1
    delta_bytes: int = 0
    full_bytes: int = 0


class ReplicaLog:
    """The replica events of one run: a list in memory, spilled to a temporary file in sorted chunks (module
    rules). Rows are ``(node, f, key, value, time)``."""

    __slots__ = ("rows", "spill_rows", "_file", "_chunks", "_count", "_pack", "_spilled_stats", "_key_codes",
                 "_stats")

    def __init__(self, *, spill_rows: int | None = None) -> None:
        self.rows: list[tuple[Any, ...]] = []  # the rows not spilled yet, in the order recorded
        self.spill_rows = spill_rows if spill_rows is not None else SPILL_ROWS
        self._file: Any = None
        self._chunks: list[tuple[int, int]] = []  # (offset, bytes) of each spilled chunk
        self._count = 0  # rows spilled so far
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._spilled_stats = LogStats()  # the spilled rows' (see stats())
        self._key_codes: dict[Any, int] = {}  # key -> its code in the file (codes in order of first use)
        self._stats: tuple[int, LogStats] | None = None  # (len(self), stats()) when stats() was last asked

    def __len__(self) -> int:
        return self._count + len(self.rows)

    def __bool__(self) -> bool:
        return len(self) > 0

    def add(self, node: int, f: str, key: str | None, value: Any, time_s: float) -> None:
        """Record one event (a runtime's own node id and clock; ``f`` and ``key`` checked, ``value`` made
        hashable)."""
        if f not in REPLICA_FS or (key is not None and type(key) is not str):
            ReplicaEvent(node=node, f=f, key=key, value=value, time=time_s)  # raises, naming the field
        if type(value) not in _SCALARS:
            value = _hashable(value)
        self.rows.append((node, f, key, value, float(time_s)))
        if len(self.rows) >= self.spill_rows:
            self.spill()

    def spill(self) -> None:
        """Sort the rows in memory by time (stable), pack them with their positions to the file as one chunk (one
        write), and empty the list in place."""
        if not self.rows:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="seedance-replicas-")
        base, pack = self._count, self._pack
        rows = self.rows
        self._spilled_stats = _tally(rows, self._spilled_stats)
        order = sorted(range(len(rows)), key=[row[4] for row in rows].__getitem__)
        codes, fs = self._key_codes, _F_CODES
        for key in {row[2] for row in rows}.difference(codes):
            codes[key] = len(codes)
        data = b"".join([pack((node, fs[f], codes[key], value, time_s, base + k))
                         for k, (node, f, key, value, time_s) in ((k, rows[k]) for k in order)])
        self._file.seek(0, 2)
        offset = self._file.tell()
        self._file.write(data)
        self._chunks.append((offset, len(data)))
        self._count += len(rows)
        rows.clear()

    # ---------------------------------------------------------------------------------------------- reading
    def _chunk(self, offset: int, size: int) -> Iterator[tuple[Any, ...]]:
        """One spilled chunk's rows ``(node, f, key, value, time, position)``, read with its own offsets (so several
        chunks can be read at once)."""
        self._file.flush()
        fd = self._file.fileno()
        unpacker = _unpacker()
        end = offset + size
        keys, fs = list(self._key_codes), REPLICA_FS
        while offset < end:
            data = os.pread(fd, min(_READ, end - offset), offset)
            if not data:
                raise OSError(f"the replica log's temporary file ends at byte {offset} of {end}")
            offset += len(data)
            unpacker.feed(data)
            for node, f, key, value, time_s, position in unpacker:
                yield node, fs[f], keys[key], value, time_s, position

    def _memory(self) -> list[tuple[Any, ...]]:
        """The rows still in memory with their positions, sorted by time (stable)."""
        base = self._count
        rows = [(*row, base + k) for k, row in enumerate(self.rows)]
        rows.sort(key=_TIME)
        return rows

    def _runs(self) -> list[Iterator[tuple[Any, ...]]]:
        """Every chunk as a run sorted by time, in the order recorded (the rows in memory last)."""
        return [self._chunk(offset, size) for offset, size in self._chunks] + [iter(self._memory())]

    def rows_by_time(self) -> Iterator[tuple[Any, ...]]:
        """Every row ``(node, f, key, value, time, position)`` in time order, ties in the order recorded."""
        runs = self._runs()
        return runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_TIME)

    def by_time(self) -> Iterator[ReplicaEvent]:
        """Every event in time order, ties in the order recorded."""
        trusted = ReplicaEvent.trusted
        for node, f, key, value, time_s, _ in self.rows_by_time():
            yield trusted(node, f, key, value, time_s)

    __iter__ = by_time

    def _all_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every row with its position, chunk by chunk (no order across chunks)."""
        for run in self._runs():
            yield from run

    def stats(self) -> LogStats:
        """The totals of :class:`LogStats` over every row (the spilled rows' were counted as they were spilled).
        The same object until a row is added (a run's checks ask twice, each a pass over the rows in memory
        otherwise): read it, do not change it."""
        count = len(self)
        if self._stats is None or self._stats[0] != count:
            self._stats = (count, _tally(self.rows, self._spilled_stats))
        return self._stats[1]

    def by_keys(self, keys: list[Any], counts: Counter,
                batch_rows: int | None = None) -> Iterator[tuple[list[Any], list[tuple[Any, ...]]]]:
        """``(group, rows)`` for consecutive groups of ``keys`` holding at most about ``batch_rows`` applies
        together (``counts``: applies per key, from :meth:`stats`; a key with more is a group alone); ``rows`` are
        the group's rows (of every kind) ``(node, f, key, value, time, position)`` in the order recorded (rows
        of keys outside ``keys`` may be left out). A log that fits one group is read once; else one pass writes each
        group's rows to a temporary file of its own, read back group by group (memory: one group's rows).
        ``batch_rows`` None: :data:`BATCH_ROWS`."""
        batch_rows = BATCH_ROWS if batch_rows is None else batch_rows
        groups: list[list[Any]] = [[]]
        held = 0
        for key in keys:
            if groups[-1] and held + counts.get(key, 0) > batch_rows:
                groups.append([])
                held = 0
            groups[-1].append(key)
            held += counts.get(key, 0)
        if len(groups) == 1:
            yield groups[0], self._all_in_order()
            return
        group_of = {key: k for k, group in enumerate(groups) for key in group}
        with tempfile.TemporaryFile(prefix="seedance-replica-groups-") as spill:
            parts = self._partition(group_of, len(groups), spill)
            for k, group in enumerate(groups):
                rows = [row for offset, size in parts[k] for row in self._read(spill, offset, size)]
                rows.sort(key=_POS)
                yield group, rows

    def _partition(self, group_of: dict[Any, int], n: int, spill: Any) -> list[list[tuple[int, int]]]:
        """Every row of a key in ``group_of`` packed into ``spill`` by group, in buffers of about 1 MiB; the
        ``(offset, bytes)`` of each group's pieces."""
        pack = msgpack.Packer(use_bin_type=True).pack
        buffers: list[list[bytes]] = [[] for _ in range(n)]
        sizes = [0] * n
        parts: list[list[tuple[int, int]]] = [[] for _ in range(n)]

        def flush(k: int) -> None:
            data = b"".join(buffers[k])
            parts[k].append((spill.tell(), len(data)))
            spill.write(data)
            buffers[k].clear()
            sizes[k] = 0

        for row in self._all_rows():
            k = group_of.get(row[2])
            if k is None:
                continue
            data = pack(row)
            buffers[k].append(data)
            sizes[k] += len(data)
            if sizes[k] >= _READ:
                flush(k)
        for k in range(n):
            if buffers[k]:
                flush(k)
        spill.flush()
        return parts

    @staticmethod
    def _read(spill: Any, offset: int, size: int) -> Iterator[tuple[Any, ...]]:
        """The rows of one piece :meth:`_partition` wrote."""
        unpacker = _unpacker()
        unpacker.feed(os.pread(spill.fileno(), size, offset))
        return unpacker

    def _all_in_order(self) -> list[tuple[Any, ...]]:
        """Every row in the order recorded."""
        chosen = list(self._all_rows())
        chosen.sort(key=_POS)
        return chosen


def _tally(rows: list[tuple[Any, ...]], before: LogStats) -> LogStats:
    """``before``'s totals with those of ``rows`` added (a new object; ``before`` is not changed)."""
    counts = Counter(before.applies_per_key)
    last, top, delta, full = before.last_time, before.max_node, before.delta_bytes, before.full_bytes
    for node, f, key, value, time_s in rows:
        if last is None or time_s > last:
            last = time_s
        if f == "apply" or key is not None:  # is_apply, inline (f is "apply" or "observe")
            counts[key] += 1
            if node > top:
                top = node
        elif type(value) is tuple and len(value) == 2:  # a keyless observe: the replica's byte totals
            delta += int(value[0])
            full += int(value[1])
    return LogStats(counts, last, top, delta, full)


def merge_history(history: Iterable[Any], log: ReplicaLog) -> Iterator[Any]:
    """A history's events and ``log``'s in one time order, ties the history's first, then each one's own order:
    what :func:`~seedance.history.events.merge_by_time` gives for ``(history, events of log)``, read lazily (the
    history is sorted in memory, the log merged from its chunks)."""
    events = sorted(history, key=_EVENT_TIME)
    return heapq.merge(events, log.by_time(), key=_EVENT_TIME)
