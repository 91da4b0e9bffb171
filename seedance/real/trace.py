"""Chrome trace events of a real run (viewable in Perfetto / chrome://tracing), one file per run.

Rules (Chrome Trace Event Format, "JSON Object Format"): the run's ``trace.json`` is
``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``; ``ts``/``dur`` are microseconds since the
run started; ``pid`` is the node id (clients use ``pid = -1``), ``tid`` names the lane (``node``, ``client <i>``).
Each node process appends its events as JSON Lines to ``node-<id>.trace.jsonl`` (flushed periodically, so a
SIGKILL loses at most the last fraction of a second); the launcher merges and sorts them by ``(ts, pid, tid,
name)`` into ``trace.json``. Event names match the simulator's where both record the same thing (``on_message``,
``on_timer``, ``on_client_request``, annotations by their own name).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from seedance.real.storage import atomic_write


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


class TraceRecorder:
    """Buffers this process's trace events and appends them to a JSON Lines file."""

    def __init__(self, path: Path | None, pid: int, t0_monotonic: float, flush_every_s: float = 0.5) -> None:
        self.pid = pid
        self.t0 = t0_monotonic
        self._fh: TextIO | None = open(path, "a", buffering=1 << 16) if path else None
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()
        self.flush_every_s = flush_every_s

    def _us(self, t: float) -> float:
        return round((t - self.t0) * 1e6, 3)

    def _emit(self, event: dict[str, Any]) -> None:
        if self._fh is None:
            return
        self._buffer.append(json.dumps(event, separators=(",", ":")))
        now = time.monotonic()
        if now - self._last_flush >= self.flush_every_s:
            self.flush()

    def complete(self, name: str, start: float, end: float, tid: str = "node", args: Mapping[str, Any] | None = None,
                 cat: str = "node") -> None:
        event = {"name": name, "cat": cat, "ph": "X", "ts": self._us(start), "dur": round((end - start) * 1e6, 3),
                 "pid": self.pid, "tid": tid}
        if args:
            event["args"] = _plain(args)
        self._emit(event)

    def instant(self, name: str, t: float, tid: str = "node", args: Mapping[str, Any] | None = None,
                cat: str = "annotation") -> None:
        event = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": self._us(t), "pid": self.pid, "tid": tid}
        if args:
            event["args"] = _plain(args)
        self._emit(event)

    def flush(self) -> None:
        if self._fh is not None and self._buffer:
            self._fh.write("\n".join(self._buffer) + "\n")
            self._fh.flush()
            self._buffer.clear()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _read_events(path: Path) -> Iterable[dict[str, Any]]:
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            try:
                yield json.loads(line)
            except json.JSONDecodeError:  # the torn last line of a SIGKILLed process
                continue


def merge(paths: Iterable[Path], out: Path, metadata: Mapping[str, Any]) -> str:
    """Merge per-process event files into one Chrome trace ``out``; return its sha256."""
    events: list[dict[str, Any]] = []
    for path in paths:
        events.extend(_read_events(path))
    events.sort(key=lambda e: (e.get("ts", 0.0), e.get("pid", 0), str(e.get("tid", "")), e.get("name", "")))
    names = sorted({e["pid"] for e in events})
    meta_events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": "node",
                    "args": {"name": f"node {pid}" if pid >= 0 else "clients"}} for pid in names]
    doc = {"traceEvents": meta_events + events, "displayTimeUnit": "ms", "metadata": _plain(metadata)}
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    atomic_write(out, data)
    return hashlib.sha256(data).hexdigest()
