"""A run's history on disk as it is recorded: memory holds one chunk of rows, not the run.

Rules:

* A runtime appends its own rows ``(process, type, f, key, value, time)`` (the fields of
  :class:`~seedance.history.events.Event`, ``type`` and ``f`` as the enums) to :attr:`HistoryLog.rows`, a plain
  list, and calls :meth:`HistoryLog.maybe_spill` now and then. Once ``spill_rows`` rows wait in memory they are
  packed (msgpack, one array per row; numpy values as their Python values) to a temporary file in one write and
  the list is emptied in place, so memory holds at most one chunk of rows, whatever the run's length.
* Reading back: :meth:`HistoryLog.events` yields every event in order (the spilled ones, then the rest) as trusted
  :class:`~seedance.history.events.Event` objects (the runtime's rows are not validated again); the tuples a row's
  value held come back as tuples. :meth:`HistoryLog.by_key` yields each key's events with their line numbers in the
  whole history, one key at a time (keys read in batches of about 200,000 events per pass over the file; a larger
  key is read again each time its events are iterated), for the per-key linearizability check
  (:func:`seedance.history.linearizability.check_keys`).
* :func:`summarize_stream` computes :func:`seedance.history.events.summarize`'s keys in one pass, holding only the
  open operations and a chunk of the ok latencies (the rest on disk: :mod:`seedance.history.column`; the exact p50 / p99).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgpack
import numpy as np

from seedance.history.column import FloatColumn
from seedance.history.events import Event, EventType, Operation
from seedance.tracing import pack_each

__all__ = ["HistoryLog", "summarize_stream"]

BY_KEY_ROWS = 200_000  # events :meth:`HistoryLog.by_key` holds at most at once (about 40 MB)

_TYPES = {t.value: t for t in EventType}
_INVOKE, _OK = EventType.INVOKE, EventType.OK
_FS = {f.value: f for f in Operation}


def _numpy_plain(value: Any) -> Any:
    """What msgpack cannot pack itself: numpy scalars and arrays as their Python values (equal, same hash)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a history value must be plain data (numbers, strings, lists), got {type(value).__name__}")


class HistoryLog:
    """The rows of one run's history: a list in memory, spilled to a temporary file in chunks (module rules)."""

    __slots__ = ("rows", "spill_rows", "_spill", "_spilled", "_pack")

    def __init__(self, *, spill_rows: int = 100_000) -> None:
        self.rows: list[tuple[Any, ...]] = []  # the rows not spilled yet (this list object is never replaced)
        self.spill_rows = spill_rows
        self._spill: Any = None
        self._spilled = 0
        self._pack = msgpack.Packer(default=_numpy_plain, use_bin_type=True).pack

    def __len__(self) -> int:
        return self._spilled + len(self.rows)

    @property
    def spilled(self) -> int:
        """How many rows went to the file so far."""
        return self._spilled

    def maybe_spill(self) -> None:
        if len(self.rows) >= self.spill_rows:
            self.spill()

    def spill(self) -> None:
        """Pack the rows in memory to the file (one write) and empty the list in place."""
        if not self.rows:
            return
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="seedance-history-")
        # one call of the packer for the whole chunk: the type and operation are str enums, which msgpack packs as
        # their values (the same bytes as packing each row with .value, one call per row)
        self._spill.write(pack_each(self._pack, self.rows))
        self._spilled += len(self.rows)
        self.rows.clear()

    def close(self) -> None:
        """Drop the file (the rows spilled to it are gone)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None
            self._spilled = 0

    def _raw(self) -> Iterator[tuple[Any, ...]]:
        """Every row in order: spilled ones as (process, type name, f name, key, value, time), then the rest."""
        if self._spill is not None and self._spilled:
            self._spill.flush()
            self._spill.seek(0)
            unpacker = msgpack.Unpacker(self._spill, raw=False, use_list=False,  # every array as a tuple
                                        strict_map_key=False, max_buffer_size=1 << 30)
            try:
                for _, row in zip(range(self._spilled), unpacker):
                    yield row
            finally:
                self._spill.seek(0, 2)
        yield from list(self.rows)

    def events(self, keep: Callable[[Any], bool] | None = None) -> Iterator[tuple[int, Event]]:
        """``(line, event)`` for every event in order (lines from 1); with ``keep(key)``, only the events whose
        key it accepts (their lines stay those of the whole history)."""
        trusted = Event.trusted
        types, fs = _TYPES, _FS
        for line, (process, kind, f, key, value, time_s) in enumerate(self._raw(), start=1):
            if keep is not None and not keep(key):
                continue
            if type(kind) is str:
                kind, f = types[kind], fs[f]
            yield line, trusted(process, kind, f, key, value, time_s)

    def __iter__(self) -> Iterator[Event]:
        return (event for _, event in self.events())

    def keys(self) -> list[str | None]:
        """The keys the history touches, in the linearizability checker's order (None first, then by name)."""
        found = {row[3] for row in self._raw()}
        return sorted(found, key=lambda key: (key is not None, key or ""))

    def by_key(self, batch_rows: int = BY_KEY_ROWS) -> Iterator[tuple[str | None, Iterable[tuple[int, Event]]]]:
        """Each key with its ``(line, event)`` pairs, in :meth:`keys` order. One pass counts each key's rows; then
        each pass over the history collects the rows of as many consecutive keys as hold at most ``batch_rows``
        rows together (a key with more is streamed alone), so memory holds at most about ``batch_rows`` events and
        a history of K keys is read about ``rows / batch_rows + 2`` times, not K + 1. Each key's events can be
        iterated more than once (a key streamed alone is read from the history again each time)."""
        counts = Counter(row[3] for row in self._raw())
        batch: list[str | None] = []
        held = 0
        for key in sorted(counts, key=lambda key: (key is not None, key or "")):
            if batch and held + counts[key] > batch_rows:
                yield from self._batch(batch)
                batch, held = [], 0
            batch.append(key)
            held += counts[key]
        if batch:
            yield from self._batch(batch)

    def _batch(self, keys: list[str | None]) -> Iterator[tuple[str | None, Iterable[tuple[int, Event]]]]:
        """``keys``' events from one pass over the history (one key: streamed as it is read, each time it is
        iterated)."""
        if len(keys) == 1:
            yield keys[0], _KeyEvents(self, keys[0])
            return
        groups: dict[str | None, list[tuple[int, Event]]] = {key: [] for key in keys}
        for line, event in self.events(groups.__contains__):
            groups[event.key].append((line, event))
        for key in keys:
            yield key, groups.pop(key)


class _KeyEvents:
    """One key's ``(line, event)`` pairs, read from the history again by each iteration (one pass each)."""

    __slots__ = ("_log", "_key")

    def __init__(self, log: HistoryLog, key: str | None) -> None:
        self._log, self._key = log, key

    def __iter__(self) -> Iterator[tuple[int, Event]]:
        key = self._key
        return self._log.events(lambda k: k == key)


def summarize_stream(events: Iterable[Event] | HistoryLog, duration_s: float) -> dict[str, Any]:
    """:func:`seedance.history.events.summarize`'s keys in one pass (module rules); the same numbers. A
    :class:`HistoryLog` is read as its rows, without building an event per row."""
    if isinstance(events, HistoryLog):
        rows: Iterable[tuple[Any, ...]] = events._raw()
    else:
        rows = ((e.process, e.type, e.f, e.key, e.value, e.time) for e in events)
    counts = {"ok": 0, "fail": 0, "info": 0}
    pending: dict[int, float] = {}
    latencies = FloatColumn()  # on disk in chunks: a long run's summary holds one chunk of them
    append, pop = latencies.append, pending.pop
    for process, kind, _f, _key, _value, time_s in rows:
        # EventType is a str enum: the rows in memory (enum members: the identity test first) and those read back
        # (strings) compare alike
        if kind is _INVOKE or kind == "invoke":
            pending[process] = time_s
            continue
        start = pop(process, None)
        counts[kind] += 1
        if (kind is _OK or kind == "ok") and start is not None:
            append(time_s - start)

    def percentile_ms(q: float) -> float | None:
        value = latencies.percentile(q)
        return None if value is None else float(value * 1e3)

    done = counts["ok"]
    return {"ops_ok": done, "ops_failed": counts["fail"], "ops_info": counts["info"],
            "throughput_ops_s": done / duration_s if duration_s > 0 else 0.0,
            "latency_ms_p50": percentile_ms(50), "latency_ms_p99": percentile_ms(99)}
