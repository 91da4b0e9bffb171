"""The trace of a real run, in the simulator's record format, exported by the simulator's own Chrome writer.

Rules (seedance.tracing; Google "Trace Event Format"):

* A record is the simulator's plain tuple ``(time_s, kind, node, *details)`` with the same ``kind`` names and detail
  layout (``send``, ``deliver``, ``timer-set``, ``timer-fire``, ``timer-cancel``, ``persist``, ``annotate``,
  ``crash``, ``restart``, ``invoke``, ``return``, ``collective-start``, ``collective-done``), so
  :meth:`seedance.tracing.Trace.to_chrome` renders both runtimes identically and the two files open side by side
  in Perfetto. ``time_s`` is seconds since the run's start on the monotonic clock (one host).
* Differences that are facts of the real world: a ``send`` record's delivery time is unknown to the sender and equals
  its send time (the receiver's ``deliver`` record says when it arrived); a ``persist`` record's duration is the
  measured fsync time.
* Each process appends its records as JSON Lines (``node-<id>.trace.jsonl``, ``launcher.trace.jsonl``), flushed every
  ``flush_every_s`` (20 ms) so a SIGKILL loses at most the records of its last 20 ms: the crash fault's incarnations
  live 0.2-0.5 s here, and with the 0.5 s this once was a killed incarnation's whole trace was lost; :func:`merge` sorts them by time (stably) into one
  :class:`~seedance.tracing.Trace`, streams ``trace.json`` and returns the sha256 of the canonical records
  (:meth:`seedance.tracing.Trace.sha256`: the records' MessagePack bytes in time order).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from seedance.tracing import Trace, _plain


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # built once: json.dumps with separators builds one a call
_SCALARS = frozenset({str, int, bool, type(None)})


def _is_plain(value: Any) -> bool:
    return type(value) in _SCALARS or (type(value) is float and math.isfinite(value))


FLUSH_EVERY_S = 0.02  # at most 50 writes a second per process, and a kill loses at most this much of its trace


class TraceRecorder:
    """Buffers this process's trace records and appends them to a JSON Lines file (``path=None``: records nothing)."""

    def __init__(self, path: Path | None, t0_monotonic: float, flush_every_s: float = FLUSH_EVERY_S) -> None:
        self.t0 = t0_monotonic
        # records go straight into the file object's own buffer (fixed-size chunks), not a list joined into one
        # string per flush: those joins made big temporaries of ever-changing size on the main heap every 0.5 s
        self._fh: TextIO | None = open(path, "a", buffering=1 << 16) if path else None
        self._last_flush = time.monotonic()
        self.flush_every_s = flush_every_s
        self._rows: list[list[Any]] = []

    @property
    def enabled(self) -> bool:
        return self._fh is not None

    def time_s(self, monotonic: float | None = None) -> float:
        return (time.monotonic() if monotonic is None else monotonic) - self.t0

    def record(self, kind: str, node: int, *details: Any, at: float | None = None) -> None:
        """Record ``(time_s, kind, node, *details)``; ``at`` is a ``time.monotonic()`` value (default: now)."""
        if self._fh is None:
            return
        row = [self.time_s(at), kind, node, *details]
        self._rows.append(row if all(map(_is_plain, details)) else _plain(row))  # the common case as it is
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        """Append the records since the last flush as one line (one JSON array of records: one encoder call for
        all of them, where a line per record cost an encoder call each, the client's largest cost per operation)."""
        if self._fh is not None:
            if self._rows:
                self._fh.write(_ENCODE(self._rows))
                self._fh.write("\n")
                self._rows = []
            self._fh.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_records(path: Path) -> Iterable[tuple[Any, ...]]:
    """Every record of a trace file in order: a line is a batch (a list of records) or one record."""
    with open(path) as fh:
        for line in fh:
            try:
                batch = json.loads(line)
            except json.JSONDecodeError:  # the torn last line of a SIGKILLed process
                continue
            if not isinstance(batch, list) or not batch:
                continue
            for record in batch if isinstance(batch[0], list) else [batch]:
                if isinstance(record, list) and len(record) >= 3:
                    yield tuple(record)


_read_records = read_records


def merge(paths: Iterable[Path], out: Path, num_nodes: int, metadata: Mapping[str, Any] | None = None) -> str:
    """Merge per-process record files into ``out`` (Chrome trace JSON); return the trace's sha256."""
    records: list[tuple[Any, ...]] = []
    for path in sorted(paths):
        records.extend(_read_records(path))
    records.sort(key=lambda r: float(r[0]))
    trace = Trace(num_nodes=num_nodes)
    trace.records.extend(records)
    trace.write_chrome(out, metadata=dict(metadata) if metadata else None)  # streamed, event by event
    return trace.sha256()
