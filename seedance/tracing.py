"""Trace records, shared by both runtimes: every event of a run, compact in memory, hashed, exportable to Perfetto.

The simulator records into a :class:`Trace` directly; the real backend's nodes write JSON lines that
:mod:`seedance.real.trace` reads back into one. Both render and hash through this module, which knows neither.

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
* Memory stays bounded: records are appended to an in-memory list, and once it holds ``spill_records`` of them
  (checked by a callback :meth:`Trace.attach` puts on the simulator's clock, which touches nothing else, at an
  interval adapted to the recording rate: ``check_every_s`` .. ``max_check_s`` of virtual time) they are packed to a temporary spill file, the hash is updated with exactly
  those bytes, and the list is emptied in place. Reading a trace (iteration, :meth:`Trace.of_kind`,
  :meth:`Trace.sha256`, the Chrome export) covers the spilled records and then the rest; spilled records read back
  with arrays as tuples. ``trace_sha256`` is therefore still the sha256 of every record's canonical bytes in order
  (a disabled trace, ``--no-trace``: the hash of no bytes, ``e3b0c442...``), whatever was spilled.
* :meth:`Trace.write_chrome` streams: one event at a time to the file, never one document in memory. With
  ``limit`` it stops after that many events (a long run's trace.json would be gigabytes, more than a trace viewer
  loads) and says so in the file, in a last instant event and a top-level ``"truncated"`` object.
* :meth:`Trace.write_records` writes every record's canonical bytes in order (``trace.msgpack``): the file's sha256
  is ``trace_sha256``, and :func:`read_records` reads it back (checked: a malformed file is refused with the record
  it stopped at), so any window of a long run can be exported to the Chrome format later (``seedance trace``).
* :meth:`Trace.to_chrome` writes the Trace Event Format (Google, "Trace Event Format", 2016): ``X`` (complete)
  events for message flights, fsyncs, faults and client operations, ``i`` (instant) events for the rest, with
  ``pid`` = node (clients: one process after the nodes, nemesis: the next), ``tid`` = category, ``ts``/``dur`` in µs
  of virtual time. It opens in https://ui.perfetto.dev and chrome://tracing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from seedance.chrome_lanes import Lanes as _Lanes
from seedance.errors import SeedanceError
from seedance.jsonable import compact_encoder

KINDS = (
    "send", "deliver", "drop", "duplicate", "timer-set", "timer-fire", "timer-cancel", "persist", "durable",
    "crash", "restart", "pause", "resume", "fault-start", "fault-end", "heal", "invoke", "return",
    "collective-start", "collective-done", "annotate", "cpu-hog", "persisted", "work-start", "work-done", "observe",
    "span",  # (time_s, "span", node, name, category, duration_s, attrs): a protocol phase, e.g. vote -> commit
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


def pack_each(pack: Any, records: list[tuple[Any, ...]]) -> memoryview:
    """The bytes of ``pack(record)`` for every record, one after the other, from one call of the packer: a list packs
    as an array header followed by exactly those bytes, and the header is cut off."""
    data = pack(records)
    count = len(records)
    return memoryview(data)[1 if count < 16 else 3 if count < 0x10000 else 5:]


_INSTANT_TIDS = {"lifecycle": 1, "timer": 2, "storage": 3, "protocol": 4, "collective": 5, "net": 6}
_INSTANT_CATEGORY = {"deliver": "net", "drop": "net", "duplicate": "net", "durable": "storage", "annotate": "protocol",
                     "collective-start": "collective", "collective-done": "collective"}


def _plain_time(ts: Any, pid: Any) -> bool:
    """A finite float time and an int pid: written by ``repr`` exactly as the JSON encoder writes them."""
    return type(ts) is float and ts - ts == 0.0 and type(pid) is int


def _plain_flight(ts: Any, dur: Any, pid: Any, dst: Any, size: Any, name: Any) -> bool:
    """A message flight whose fields the text path writes as the encoder would (see :meth:`Trace._chrome`)."""
    return (_plain_time(ts, pid) and type(dur) is float and dur - dur == 0.0 and type(dst) is int
            and type(size) is int and type(name) is str)


def _quoted(names: dict[str, str], encode: Any, name: str) -> str:
    """``encode(name)``, made once per name."""
    quoted = names.get(name)
    if quoted is None:
        quoted = names[name] = encode(name)
    return quoted


def _details(encode: Any, record: tuple[Any, ...]) -> str | None:
    """The JSON of an instant event's details (``record[3:]``); None when the encoder refuses them (NaN /
    infinity, mixed-type keys: the event then goes the dict way, normalised)."""
    try:
        return encode(record[3:])
    except (ValueError, TypeError):
        return None


class Trace:
    """An append-only list of records. ``enabled=False`` records nothing (hash of the empty trace)."""

    __slots__ = ("records", "enabled", "num_nodes", "spill_records", "check_every_s", "max_check_s", "_spill",
                 "_spilled", "_digest", "_pack", "last_chrome")

    def __init__(self, *, enabled: bool = True, num_nodes: int = 0, spill_records: int = 100_000,
                 check_every_s: float = 1e-3, max_check_s: float = 1.0) -> None:
        self.records: list[tuple[Any, ...]] = []  # the records not spilled yet (this list object is never replaced)
        self.enabled = enabled
        self.num_nodes = num_nodes
        self.spill_records = spill_records
        self.check_every_s = check_every_s
        self.max_check_s = max_check_s
        self._spill: Any = None  # a temporary file of packed records, once anything was spilled
        self._spilled = 0
        self._digest = hashlib.sha256()  # over the spilled records' bytes
        self._pack = msgpack.Packer(default=_fallback, use_bin_type=True).pack
        self.last_chrome: dict[str, Any] | None = None  # what the last write_chrome wrote

    def __len__(self) -> int:
        return self._spilled + len(self.records)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._spill is not None:
            self._spill.flush()
            self._spill.seek(0)
            unpacker = msgpack.Unpacker(self._spill, raw=False, strict_map_key=False, use_list=False,
                                        max_buffer_size=1 << 30)
            for _, record in zip(range(self._spilled), unpacker):
                yield record
            self._spill.seek(0, 2)
        yield from list(self.records)

    # ------------------------------------------------------------------------------------------ streaming
    def attach(self, schedule: Any, now: Any) -> None:
        """Check the in-memory record count now and then on the runtime's clock and spill when full.

        ``schedule(at_s, fn)`` runs ``fn(event)`` at time ``at_s``; ``now()`` is the current time (the simulator
        passes its virtual clock). The callback reads and writes nothing of the run, so the run (and its records)
        are the same with or without it, and whenever it runs. The interval adapts to the recording rate: the next
        check comes when, at the rate seen since the last one, half the room left before ``spill_records`` would
        be used, but at most twice the previous interval later, and within ``check_every_s`` .. ``max_check_s`` of
        virtual time (a busy run is checked about as before; an idle stretch of a long run, such as training
        between collectives, costs a check per ``max_check_s`` instead of one per millisecond). Between two checks
        at most the interval times the recording rate accumulate.
        """
        if not self.enabled:
            return
        least, most, limit = self.check_every_s, max(self.max_check_s, self.check_every_s), self.spill_records
        last = [0.0, 0, least]  # the time, the record count (spilled included) and the wait of the previous check

        def check(event: Any) -> None:
            held = len(self.records)
            if held >= limit:
                self.spill()
                held = 0
            at, total = now(), self._spilled + held
            span, grew = at - last[0], total - last[1]
            wait = 2 * last[2]  # never more than twice the previous interval: a burst after a lull is caught soon
            if grew > 0 and span > 0:
                wait = min(wait, 0.5 * (limit - held) * span / grew)
            wait = least if wait < least else most if wait > most else wait
            last[0], last[1], last[2] = at, total, wait
            schedule(at + wait, check)

        schedule(least, check)

    def spill(self) -> None:
        """Pack the in-memory records to the spill file (and the hash) and empty the list in place."""
        if not self.records:
            return
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="seedance-trace-")
        data = pack_each(self._pack, self.records)
        self._digest.update(data)
        self._spill.write(data)
        self._spilled += len(self.records)
        self.records.clear()

    def close(self) -> None:
        """Drop the spill file (the trace is then only its in-memory records)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def canonical_lines(self) -> Iterator[str]:
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=True, sort_keys=True, default=_fallback).encode
        for record in self:
            try:
                yield encode(record)
            except TypeError:  # mixed-type mapping keys: normalise the slow way
                yield encode(_plain(record))

    def canonical_bytes(self) -> bytes:
        pack = msgpack.Packer(default=_fallback, use_bin_type=True).pack
        return b"".join(pack(record) for record in self)

    def sha256(self) -> str:
        """sha256 of the canonical bytes of every record in order (spilled ones were hashed as they were spilled)."""
        digest = self._digest.copy()
        if self.records:
            digest.update(pack_each(msgpack.Packer(default=_fallback, use_bin_type=True).pack, self.records))
        return digest.hexdigest()

    def count(self, kind: str) -> int:
        return sum(1 for record in self if record[1] == kind)

    def of_kind(self, kind: str) -> list[tuple[Any, ...]]:
        return [record for record in self if record[1] == kind]

    # ------------------------------------------------------------------------------------------ chrome export
    def to_chrome(self) -> dict[str, Any]:
        """The run as a Trace Event Format object (``{"traceEvents": [...], "displayTimeUnit": "ms"}``).

        Duration (``X``) events never overlap on one thread: message flights and faults are spread over as many
        "lanes" (threads) as were in flight at once, so viewers draw every one of them.
        """
        return {"traceEvents": list(self.chrome_events()), "displayTimeUnit": "ms"}

    def chrome_events(self, records: Iterable[tuple[Any, ...]] | None = None) -> Iterator[dict[str, Any]]:
        """The Trace Event Format events of ``records`` (default: this trace's), one at a time."""
        return self._chrome(self if records is None else records, None)

    def _chrome(self, records: Iterable[tuple[Any, ...]], text: Any) -> Iterator[Any]:
        """:meth:`chrome_events`; with ``text`` (an ``encode`` of :func:`compact_encoder`, and the list its last
        record's time goes to: ``(encode, last)``), the most frequent events (message flights and plain instant
        events) come as their JSON text instead, exactly what ``encode`` makes of their dict (same keys in the
        same order, floats as ``repr``), built without the dict; any event whose fields are not plain ints and
        finite floats still comes as a dict."""
        encode, last = text if text is not None else (None, None)
        names: dict[str, str] = {}  # a name -> its JSON string
        clients_pid = self.num_nodes
        nemesis_pid = self.num_nodes + 1
        for pid in range(self.num_nodes):
            yield {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"node {pid}"}}
        yield {"name": "process_name", "ph": "M", "pid": clients_pid, "tid": 0, "args": {"name": "clients"}}
        yield {"name": "process_name", "ph": "M", "pid": nemesis_pid, "tid": 0, "args": {"name": "nemesis"}}
        for pid in range(self.num_nodes):
            for category, tid in _INSTANT_TIDS.items():
                yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": category}}
        lanes = _Lanes()
        invokes: dict[int, tuple[float, str]] = {}
        faults: dict[int, tuple[float, str, Any]] = {}
        for record in records:
            time_s, kind, node = record[0], record[1], record[2]
            if last is not None:
                last[0] = time_s
            ts = time_s * 1e6
            pid = node if node >= 0 else nemesis_pid
            if kind == "send":
                _, _, _, name, dst, size, deliver_s = record
                dur = max(0.0, (deliver_s - time_s) * 1e6)
                if encode is not None and _plain_flight(ts, dur, pid, dst, size, name):
                    tid, named = lanes.assign(pid, "net", ts, dur)
                    if named is not None:
                        yield named
                    yield (f'{{"name":{_quoted(names, encode, name)},"ph":"X","cat":"net","pid":{pid},"ts":{ts!r},'
                           f'"dur":{dur!r},"args":{{"dst":{dst},"size_bytes":{size}}},"tid":{tid}}}')
                    continue
                yield from lanes.place({"name": name, "ph": "X", "cat": "net", "pid": pid, "ts": ts,
                                        "dur": dur, "args": {"dst": dst, "size_bytes": size}})
            elif kind == "persist":
                _, _, _, count, size, durable_s = record
                yield from lanes.place({"name": "fsync", "ph": "X", "cat": "storage", "pid": pid, "ts": ts,
                                        "dur": max(0.0, (durable_s - time_s) * 1e6),
                                        "args": {"writes": count, "size_bytes": size}})
            elif kind == "invoke":
                _, _, _, process, f, key, value = record
                invokes[process] = (ts, f"{f} {key}")
            elif kind == "return":
                _, _, _, process, outcome, value = record
                start, name = invokes.pop(process, (ts, "op"))
                yield {"name": name, "ph": "X", "cat": "client", "pid": clients_pid, "tid": process,
                       "ts": start, "dur": ts - start, "args": {"outcome": outcome, "value": value}}
            elif kind == "span":
                _, _, _, name, category, dur_s, attrs = record
                yield from lanes.place({"name": name, "ph": "X", "cat": category, "pid": pid, "ts": ts,
                                        "dur": max(0.0, dur_s * 1e6), "args": attrs})
            elif kind == "fault-start":
                _, _, _, fault_id, name, params = record
                faults[fault_id] = (ts, name, params)
            elif kind == "fault-end":
                fault_id = record[3]
                start, name, params = faults.pop(fault_id, (ts, record[4], None))
                yield from lanes.place({"name": name, "ph": "X", "cat": "nemesis", "pid": nemesis_pid, "ts": start,
                                        "dur": ts - start, "args": {"params": params}})
            else:
                category = _INSTANT_CATEGORY.get(kind, "timer" if kind.startswith("timer") else "lifecycle")
                name = kind if kind != "annotate" else str(record[3])
                details = _details(encode, record) if encode is not None and _plain_time(ts, pid) else None
                if details is not None:
                    yield (f'{{"name":{_quoted(names, encode, name)},"ph":"i","s":"t","cat":"{category}",'
                           f'"pid":{pid},"tid":{_INSTANT_TIDS[category]},"ts":{ts!r},"args":{{"details":{details}}}}}')
                    continue
                yield {"name": name, "ph": "i", "s": "t", "cat": category, "pid": pid,
                       "tid": _INSTANT_TIDS[category], "ts": ts, "args": {"details": record[3:]}}

    def write_chrome(self, path: str | Path, records: Iterable[tuple[Any, ...]] | None = None,
                     metadata: dict[str, Any] | None = None, limit: int | None = None,
                     rest: str = "") -> Path:
        """Stream :meth:`chrome_events` to ``path`` as strict JSON, one event per line (non-finite floats and odd
        objects as strings); the document is never held in memory whole. With ``limit``, at most that many events
        are written; when events remain, a last instant event and a top-level ``"truncated"`` object say where it
        stopped and ``rest`` (what holds the remainder: a sentence). Returns the path; :attr:`last_chrome` says
        ``{"path", "events", "truncated", "until_s"}`` (``until_s``: the virtual time of the last record rendered,
        None when none was)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        encode = compact_encoder(_fallback)
        last: list[Any] = [None]
        written, truncated = 0, False
        with open(target, "w", encoding="utf-8") as fh:
            fh.write('{"displayTimeUnit":"ms",')
            if metadata:
                fh.write('"metadata":' + json.dumps(_plain(metadata), separators=(",", ":"), allow_nan=False) + ",")
            fh.write('"traceEvents":[\n')
            buffer: list[str] = []
            for event in self._chrome(self if records is None else records, (encode, last)):
                if limit is not None and written >= limit:
                    truncated = True
                    break
                if type(event) is str:  # already its JSON text (see _chrome)
                    text = event
                else:
                    try:
                        text = encode(event)
                    except (ValueError, TypeError):  # NaN / infinity or mixed-type keys: normalise this event
                        text = json.dumps(_plain(event), separators=(",", ":"), allow_nan=False)
                buffer.append(text if not written else ",\n" + text)
                written += 1
                if len(buffer) >= 4096:
                    fh.write("".join(buffer))
                    buffer.clear()
            fh.write("".join(buffer))
            note = ""
            if truncated:
                until = float(last[0] or 0.0)
                said = (f"trace.json stops at {written:,} events (virtual time {until:.6f} s) of a longer run"
                        + (f"; {rest}" if rest else ""))
                mark = {"name": said, "ph": "i", "s": "g", "cat": "lifecycle", "pid": self.num_nodes + 1,
                        "tid": _INSTANT_TIDS["lifecycle"], "ts": until * 1e6, "args": {}}
                fh.write(",\n" + json.dumps(mark, separators=(",", ":"), allow_nan=False))
                note = ',"truncated":' + json.dumps({"events": written, "until_s": last[0], "rest": rest},
                                                     separators=(",", ":"), allow_nan=False)
            fh.write("\n]" + note + "}\n")
        self.last_chrome = {"path": str(target), "events": written, "truncated": truncated, "until_s": last[0]}
        return target

    def write_records(self, path: str | Path) -> Path:
        """Every record's canonical bytes, in order, to ``path`` (:func:`seedance.files.atomic_write`, in chunks):
        the file's sha256 is :meth:`sha256`. :func:`read_records` reads it back."""
        from seedance.files import atomic_write

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, self._canonical_chunks())
        return target

    def _canonical_chunks(self) -> Iterator[bytes | memoryview]:
        """The canonical bytes of every record in order: the spill file's, then the records in memory packed."""
        if self._spill is not None:
            self._spill.flush()
            self._spill.seek(0)
            try:
                while chunk := self._spill.read(1 << 22):
                    yield chunk
            finally:
                self._spill.seek(0, 2)
        if self.records:
            yield pack_each(msgpack.Packer(default=_fallback, use_bin_type=True).pack, self.records)


class TraceFileError(SeedanceError, ValueError):
    """A records file (``trace.msgpack``) that is not a sequence of trace records; ``field`` names the file and the
    record."""


def read_records(path: str | Path) -> Iterator[tuple[Any, ...]]:
    """The records of a file :meth:`Trace.write_records` wrote, one at a time, checked: each must be an array
    ``[time_s, kind, node, ...]`` with a finite, non-negative time (records are in the order recorded, which is
    not strictly the order of their times: a span is recorded at its end with its start), a kind of :data:`KINDS`
    and an integer node; anything else raises :class:`TraceFileError` naming the file, the record's index and what was wrong.
    MessagePack decodes plain data only (no objects are built from the file)."""
    kinds = frozenset(KINDS)
    index = 0
    try:
        fh = open(path, "rb")
    except OSError as err:
        raise TraceFileError(str(path), f"cannot be read: {err.strerror or err}",
                             "a trace.msgpack that `seedance sim run` wrote") from None
    with fh:
        unpacker = msgpack.Unpacker(fh, raw=False, strict_map_key=False, use_list=False, max_buffer_size=1 << 26)
        while True:
            try:
                record = next(unpacker)
            except StopIteration:
                size = os.fstat(fh.fileno()).st_size
                if unpacker.tell() != size:  # the file ends inside a record (a copy cut short)
                    raise TraceFileError(f"{path} record {index}", f"the file ends inside it (byte {unpacker.tell()} "
                                         f"of {size})", "a whole trace.msgpack") from None
                return
            except (msgpack.UnpackException, ValueError) as err:
                raise TraceFileError(f"{path} record {index}", f"not MessagePack ({type(err).__name__}: {err})",
                                     "a trace.msgpack that `seedance sim run` wrote") from None
            if not isinstance(record, tuple) or len(record) < 3:
                raise TraceFileError(f"{path} record {index}", f"got {str(record)[:80]!s}",
                                     "an array [time_s, kind, node, ...]")
            time_s, kind, node = record[0], record[1], record[2]
            if isinstance(time_s, bool) or not isinstance(time_s, (int, float)) or not 0 <= time_s < math.inf:
                raise TraceFileError(f"{path} record {index}", f"time_s {time_s!r}", "a finite number >= 0")
            if kind not in kinds:
                raise TraceFileError(f"{path} record {index}", f"unknown kind {kind!r}", f"valid: {', '.join(KINDS)}")
            if isinstance(node, bool) or not isinstance(node, int):
                raise TraceFileError(f"{path} record {index}", f"node {node!r}", "an integer")
            index += 1
            yield record
