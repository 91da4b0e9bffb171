"""A column of float64 values appended one at a time over a run, held on disk in chunks: memory holds about two
chunks, whatever the run's length.

What it is for: the per-operation numbers a run keeps until its end (the time of every ``ok`` completion, for the
liveness assessment; every ``ok`` latency, for the exact p50 and p99). Held as arrays they cost 8 bytes per
operation each, so a run's peak memory grew with its simulated duration (a Raft run at 5 nodes completes about
35,000 operations per simulated second: about 0.3 MB per second for each column).

Rules:

* :meth:`FloatColumn.append` adds a value to an in-memory chunk; once ``chunk`` values wait they go to a temporary
  file in one write (the file exists only once a chunk was written). The first value of every written chunk stays
  in memory (8 bytes per ``chunk`` values). An append only stores the value: whether the values are in order and
  whether a NaN is among them is worked out a run of values at a time (numpy, over the values not looked at yet)
  when a chunk is written or when :attr:`FloatColumn.ordered` or a percentile asks.
* :meth:`FloatColumn.count_below` is ``bisect_left`` over the column, which must be in non-decreasing order
  (:attr:`FloatColumn.ordered` says whether it is): it finds the chunk from the chunks' first values and reads that
  one chunk (the last two read are kept: a sliding window's two ends).
* :meth:`FloatColumn.percentile` is exactly ``numpy.percentile(values, q)`` (the default, linear method), in any
  order: the two order statistics it interpolates are found by a radix selection over the chunks (each pass reads
  the file once and narrows the candidates by 16 bits of the values' order-preserving integer keys), then combined
  as numpy does. A column of at most ``4 * chunk`` values is read whole and handed to numpy.
* :meth:`FloatColumn.chunks` yields the values in order, one chunk at a time.
"""

from __future__ import annotations

import math
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

import numpy as np

CHUNK = 1 << 16  # values per chunk: 512 KiB
_SIGN = np.uint64(1 << 63)
_SELECT_HELD = 1 << 20  # candidates few enough to select among in memory (8 MiB)


class FloatColumn:
    """float64 values in append order, spilled to a temporary file in chunks (module rules)."""

    __slots__ = ("chunk", "_tail", "_file", "_spilled", "_firsts", "_last", "_ordered", "_nan", "_cached",
                 "_scanned")

    def __init__(self, chunk: int = CHUNK) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.chunk = int(chunk)
        self._tail = array("d")
        self._file: Any = None
        self._spilled = 0  # chunks written to the file
        self._firsts: list[float] = []  # the first value of each written chunk
        # what the values looked at so far say (see _scan): the last one, whether they are in order, any NaN
        self._last = -math.inf
        self._ordered = True  # every value at or above the one before (count_below needs it)
        self._nan = False  # a NaN was appended (numpy's percentile is then NaN)
        self._scanned = 0  # the tail's values looked at so far
        self._cached: dict[int, np.ndarray] = {}  # the written chunks read last (two: a window's two ends)

    def append(self, value: float) -> None:
        """Add ``value`` (a number: stored as a float64, as ``float(value)``). Its order and NaN-ness are looked at
        later, a chunk at a time (:meth:`_scan`): an append is one array append."""
        tail = self._tail
        tail.append(value)
        if len(tail) >= self.chunk:
            self._spill()

    @property
    def ordered(self) -> bool:
        """Whether every value is at or above the one before (no NaN among them)."""
        self._scan()
        return self._ordered

    def _scan(self) -> None:
        """Fold the tail's values not looked at yet into ``_ordered``, ``_nan`` and ``_last``, as if each had been
        compared with the one before it when appended: a NaN makes the column unordered, and so does a value below
        the one before it."""
        start, end = self._scanned, len(self._tail)
        if start >= end:
            return
        values = np.frombuffer(self._tail, dtype=np.float64)[start:end]
        if np.isnan(values).any():
            self._nan = True
            self._ordered = False
        elif self._ordered and (values[0] < self._last or bool((values[1:] < values[:-1]).any())):
            self._ordered = False
        self._last = float(values[-1])
        del values  # the view of the tail goes before the tail grows again
        self._scanned = end

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)

    def __len__(self) -> int:
        return self._spilled * self.chunk + len(self._tail)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _spill(self) -> None:
        self._scan()
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="seedance-column-")
        self._file.seek(0, 2)
        self._tail.tofile(self._file)
        self._firsts.append(self._tail[0])
        self._spilled += 1
        self._tail = array("d")
        self._scanned = 0

    def _read(self, index: int) -> np.ndarray:
        """Written chunk ``index`` as an array (the last two read are kept)."""
        values = self._cached.get(index)
        if values is not None:
            return values
        self._file.flush()
        self._file.seek(index * self.chunk * 8)
        values = np.fromfile(self._file, dtype=np.float64, count=self.chunk)
        if len(self._cached) >= 2:
            del self._cached[next(iter(self._cached))]
        self._cached[index] = values
        return values

    def chunks(self) -> Iterator[np.ndarray]:
        """The values in order, one chunk (an array) at a time."""
        for index in range(self._spilled):
            yield self._read(index)
        if self._tail:
            yield np.frombuffer(self._tail, dtype=np.float64).copy()

    def to_numpy(self) -> np.ndarray:
        """Every value in one array (8 bytes each: for small columns and tests)."""
        parts = list(self.chunks())
        return np.concatenate(parts) if parts else np.zeros(0)

    def count_below(self, at: float) -> int:
        """How many values are below ``at`` (``bisect_left``); the column must be :attr:`ordered`."""
        if not self.ordered:
            raise ValueError("count_below needs a column in non-decreasing order")
        if self._tail and self._tail[0] < at:  # at is past every written chunk: only the tail is searched
            return self._spilled * self.chunk + int(np.searchsorted(np.frombuffer(self._tail), at, side="left"))
        # the last written chunk whose first value is below at holds the boundary (or ends just before it)
        index = bisect_left(self._firsts, at) - 1
        if index < 0:
            return 0
        return index * self.chunk + int(np.searchsorted(self._read(index), at, side="left"))

    def percentile(self, q: float) -> float | None:
        """``numpy.percentile(values, q)`` (linear), exactly, reading the column chunk by chunk; None when empty."""
        n = len(self)
        if n == 0:
            return None
        if n <= 4 * self.chunk:
            return float(np.percentile(self.to_numpy(), q))
        self._scan()
        if self._nan:
            return math.nan  # numpy's answer with a NaN among the values
        virtual = (n - 1) * (q / 100.0)  # numpy's virtual index for the linear method
        below = math.floor(virtual)
        lower = self._select(below)
        upper = self._select(below + 1) if below + 1 < n else lower
        return _lerp(lower, upper, virtual - below)

    def _select(self, rank: int) -> float:
        """The value of order statistic ``rank`` (0-based), by radix selection over the keys' 64 bits."""
        prefix, shift = 0, 64
        while True:
            shift -= 16
            counts = np.zeros(1 << 16, np.int64)
            for part in self.chunks():
                keys = _keys(part)
                if shift < 48:
                    keys = keys[(keys >> np.uint64(shift + 16)) == np.uint64(prefix)]
                counts += np.bincount(((keys >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.int64),
                                      minlength=1 << 16)
            cumulative = np.cumsum(counts)
            digit = int(np.searchsorted(cumulative, rank, side="right"))
            rank -= int(cumulative[digit - 1]) if digit else 0
            prefix = (prefix << 16) | digit
            if int(counts[digit]) <= _SELECT_HELD or shift == 0:
                break
        wanted = []
        for part in self.chunks():
            keys = _keys(part)
            wanted.append(part[(keys >> np.uint64(shift)) == np.uint64(prefix)])
        candidates = np.concatenate(wanted)
        return float(np.partition(candidates, rank)[rank])


def _keys(values: np.ndarray) -> np.ndarray:
    """Order-preserving unsigned keys of float64 values (negatives: every bit flipped; others: the sign bit set)."""
    bits = values.view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's interpolation between neighbouring order statistics (``numpy.percentile``, linear method)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
