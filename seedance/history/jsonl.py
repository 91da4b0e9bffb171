"""Writing histories as JSON Lines: one event per line, the objects of :meth:`Event.to_dict` /
:meth:`ReplicaEvent.to_dict` in compact JSON; a whole history atomically (:func:`write_jsonl`) or streamed from a
running system (:class:`HistoryWriter`). Every event is validated as it is written
(:class:`~seedance.history.events.HistoryValidator`); :func:`seedance.history.events.read_jsonl` reads the files.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from seedance.history.events import Event, HistoryValidator, ReplicaEvent
from seedance.jsonable import compact_encoder

__all__ = ["HistoryWriter", "event_to_json", "write_jsonl"]

_ENCODE = compact_encoder()  # json.dumps(..., separators=(",", ":"), allow_nan=False), its C encoder made once


_ASCII = json.encoder.encode_basestring_ascii


def event_to_json(event: Event | ReplicaEvent) -> str:
    """One history line (no trailing newline): the text of ``json.dumps(event.to_dict(), separators=(",", ":"),
    allow_nan=False)``, put together from its pieces for the common fields (an int, string or null value; an int
    process or node; a finite time) and encoded whole otherwise (a test compares the two)."""
    kind, value, time_s = type(event), event.value, event.time
    if kind is Event and type(event.process) is int:
        head = f'{{"process":{int.__repr__(event.process)},"type":"{event.type._value_}","f":"{event.f._value_}"'
    elif kind is ReplicaEvent and type(event.node) is int:
        head = f'{{"type":"replica","node":{int.__repr__(event.node)},"f":"{event.f}"'
    else:
        return _ENCODE(event.to_dict())
    if type(time_s) is not float or time_s - time_s != 0.0:  # not a float, or not finite (raise as json does)
        return _ENCODE(event.to_dict())
    if type(value) is int:
        text = int.__repr__(value)
    elif value is None:
        text = "null"
    elif type(value) is str:
        text = _ASCII(value)
    else:
        text = _ENCODE(value)
    key = event.key
    if key is None:
        return f'{head},"value":{text},"time":{float.__repr__(time_s)}}}'
    if type(key) is not str:
        return _ENCODE(event.to_dict())
    return f'{head},"key":{_ASCII(key)},"value":{text},"time":{float.__repr__(time_s)}}}'


def write_jsonl(events: Iterable[Event], path: str | os.PathLike[str]) -> Path:
    """Write a whole history atomically (temp file, fsync, ``os.replace``, fsync of the directory).

    The events are validated as they are written; a malformed sequence raises and leaves ``path`` untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            add, lines, write = HistoryValidator().add, [], handle.write
            for index, event in enumerate(events, start=1):
                add(event, index)
                lines.append(event_to_json(event))
                if len(lines) == 4096:  # written in blocks: one call per line was a third of the time
                    lines.append("")
                    write("\n".join(lines))
                    lines.clear()
            if lines:
                lines.append("")
                write("\n".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    return target


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class HistoryWriter:
    """Streams a history from a running system: one validated, flushed line per event.

    Use as a context manager. ``fsync=True`` also fsyncs every line (slower; survives a host crash).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._validator = HistoryValidator()
        self._count = 0
        self._handle: IO[str] | None = open(self.path, "w", encoding="utf-8")

    def append(self, event: Event) -> None:
        if self._handle is None:
            raise ValueError("HistoryWriter is closed")
        self._count += 1
        self._validator.add(event, f"line {self._count}")
        self._handle.write(event_to_json(event) + "\n")
        self._handle.flush()
        if self._fsync:
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
