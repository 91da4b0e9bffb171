"""The simulation trace: every event of a run, compact in memory, hashed and exportable to Perfetto.

Rules:

* A record is a plain tuple ``(time_s, kind, node, *details)``; ``kind`` is one of :data:`KINDS`; ``node`` is the
  node id (clients and the nemesis use ``-1``). Details are plain data (ints, floats, strings, tuples, mappings).
* The canonical serialisation is the MessagePack encoding of each record, in the order recorded and concatenated:
  floats as IEEE-754 doubles (no decimal formatting), tuples as arrays, mappings in their insertion order (the
  runtime records mappings with sorted keys), anything else as its ``repr``. :meth:`Trace.sha256` hashes exactly
  those bytes, so the same configuration and seed give the same hash, byte for byte (TigerBeetle VOPR's "one seed
  reproduces a run"). :meth:`Trace.canonical_lines` gives the same records as JSON lines for reading.
* Message contents are not recorded (only their type name and size): a trace shows *what happened when*, the
  history and the node objects show values.
* :meth:`Trace.to_chrome` writes the Trace Event Format (Google, "Trace Event Format", 2016): ``X`` (complete)
  events for message flights, fsyncs, faults and client operations, ``i`` (instant) events for the rest, with
  ``pid`` = node (clients: one process after the nodes, nemesis: the next), ``tid`` = category, ``ts``/``dur`` in µs
  of virtual time. It opens in https://ui.perfetto.dev and chrome://tracing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

KINDS = (
    "send", "deliver", "drop", "duplicate", "timer-set", "timer-fire", "timer-cancel", "persist", "durable",
    "crash", "restart", "pause", "resume", "fault-start", "fault-end", "heal", "invoke", "return",
    "collective-start", "collective-done", "annotate", "cpu-hog",
)


def _plain(value: Any) -> Any:
    """Make a detail JSON-ready with a deterministic layout (mappings by sorted key)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # strict JSON has no NaN / infinity
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy array or scalar
        try:
            return _plain(value.tolist())
        except (TypeError, ValueError):
            pass
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    return repr(value)


def _fallback(value: Any) -> Any:
    """JSON form of what the C encoder cannot serialise itself (sets, numpy values, arbitrary objects)."""
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    return _plain(value)


_INSTANT_TIDS = {"lifecycle": 1, "timer": 2, "storage": 3, "protocol": 4, "collective": 5, "net": 6}
_INSTANT_CATEGORY = {"deliver": "net", "drop": "net", "duplicate": "net", "durable": "storage", "annotate": "protocol",
                     "collective-start": "collective", "collective-done": "collective"}
_LANE_TID_BASE = {"net": 100, "storage": 3, "nemesis": 1}


def _on_lanes(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each X event a tid so that events on one (pid, tid) never overlap (greedy interval colouring)."""
    placed: list[dict[str, Any]] = []
    lanes: dict[tuple[int, str], list[float]] = {}  # (pid, category) -> end time of each lane
    for span in sorted(spans, key=lambda e: (e["pid"], e["cat"], e["ts"])):
        ends = lanes.setdefault((span["pid"], span["cat"]), [])
        for lane, end in enumerate(ends):
            if end <= span["ts"]:
                break
        else:
            lane = len(ends)
            ends.append(0.0)
            base = _LANE_TID_BASE[span["cat"]]
            placed.append({"name": "thread_name", "ph": "M", "pid": span["pid"], "tid": base + 1000 * lane,
                           "args": {"name": span["cat"] + (f" {lane}" if lane else "")}})
        ends[lane] = span["ts"] + span["dur"]
        placed.append({**span, "tid": _LANE_TID_BASE[span["cat"]] + 1000 * lane})
    return placed


class Trace:
    """An append-only list of records. ``enabled=False`` records nothing (hash of the empty trace)."""

    __slots__ = ("records", "enabled", "num_nodes")

    def __init__(self, *, enabled: bool = True, num_nodes: int = 0) -> None:
        self.records: list[tuple[Any, ...]] = []
        self.enabled = enabled
        self.num_nodes = num_nodes

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.records)

    def canonical_lines(self) -> Iterator[str]:
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=True, sort_keys=True, default=_fallback).encode
        for record in self.records:
            try:
                yield encode(record)
            except TypeError:  # mixed-type mapping keys: normalise the slow way
                yield encode(_plain(record))

    def canonical_bytes(self) -> bytes:
        pack = msgpack.Packer(default=_fallback, use_bin_type=True).pack
        return b"".join(pack(record) for record in self.records)

    def sha256(self) -> str:
        pack = msgpack.Packer(default=_fallback, use_bin_type=True).pack
        digest = hashlib.sha256()
        update = digest.update
        for record in self.records:
            update(pack(record))
        return digest.hexdigest()

    def count(self, kind: str) -> int:
        return sum(1 for record in self.records if record[1] == kind)

    def of_kind(self, kind: str) -> list[tuple[Any, ...]]:
        return [record for record in self.records if record[1] == kind]

    # ------------------------------------------------------------------------------------------ chrome export
    def to_chrome(self) -> dict[str, Any]:
        """The run as a Trace Event Format object (``{"traceEvents": [...], "displayTimeUnit": "ms"}``).

        Duration (``X``) events never overlap on one thread: message flights and faults are spread over as many
        "lanes" (threads) as were in flight at once, so viewers draw every one of them.
        """
        clients_pid = self.num_nodes
        nemesis_pid = self.num_nodes + 1
        events: list[dict[str, Any]] = []
        for pid in range(self.num_nodes):
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"node {pid}"}})
        events.append({"name": "process_name", "ph": "M", "pid": clients_pid, "tid": 0, "args": {"name": "clients"}})
        events.append({"name": "process_name", "ph": "M", "pid": nemesis_pid, "tid": 0, "args": {"name": "nemesis"}})
        for pid in range(self.num_nodes):
            for category, tid in _INSTANT_TIDS.items():
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": category}})
        spans: list[dict[str, Any]] = []  # X events still to be placed on lanes
        invokes: dict[int, tuple[float, str]] = {}
        faults: dict[int, tuple[float, str, Any]] = {}
        for record in self.records:
            time_s, kind, node = record[0], record[1], record[2]
            ts = time_s * 1e6
            pid = node if node >= 0 else nemesis_pid
            if kind == "send":
                _, _, _, name, dst, size, deliver_s = record
                spans.append({"name": name, "ph": "X", "cat": "net", "pid": pid, "ts": ts,
                              "dur": max(0.0, (deliver_s - time_s) * 1e6), "args": {"dst": dst, "size_bytes": size}})
            elif kind == "persist":
                _, _, _, count, size, durable_s = record
                spans.append({"name": "fsync", "ph": "X", "cat": "storage", "pid": pid, "ts": ts,
                              "dur": (durable_s - time_s) * 1e6, "args": {"writes": count, "size_bytes": size}})
            elif kind == "invoke":
                _, _, _, process, f, key, value = record
                invokes[process] = (ts, f"{f} {key}")
            elif kind == "return":
                _, _, _, process, outcome, value = record
                start, name = invokes.pop(process, (ts, "op"))
                events.append({"name": name, "ph": "X", "cat": "client", "pid": clients_pid, "tid": process,
                               "ts": start, "dur": ts - start, "args": {"outcome": outcome, "value": value}})
            elif kind == "fault-start":
                _, _, _, fault_id, name, params = record
                faults[fault_id] = (ts, name, params)
            elif kind == "fault-end":
                fault_id = record[3]
                start, name, params = faults.pop(fault_id, (ts, record[4], None))
                spans.append({"name": name, "ph": "X", "cat": "nemesis", "pid": nemesis_pid, "ts": start,
                              "dur": ts - start, "args": {"params": params}})
            else:
                category = _INSTANT_CATEGORY.get(kind, "timer" if kind.startswith("timer") else "lifecycle")
                events.append({"name": kind if kind != "annotate" else str(record[3]), "ph": "i", "s": "t",
                               "cat": category, "pid": pid, "tid": _INSTANT_TIDS[category], "ts": ts,
                               "args": {"details": record[3:]}})
        events.extend(_on_lanes(spans))
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write_chrome(self, path: str | Path) -> Path:
        """Write :meth:`to_chrome` as strict JSON (non-finite floats and odd objects as strings)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        document = self.to_chrome()
        try:  # the C encoder, one shot; details stay as recorded
            text = json.dumps(document, separators=(",", ":"), allow_nan=False, default=_fallback)
        except (ValueError, TypeError):  # NaN / infinity or mixed-type keys somewhere: normalise everything
            text = json.dumps(_plain(document), separators=(",", ":"), allow_nan=False)
        target.write_text(text, encoding="utf-8")
        return target
