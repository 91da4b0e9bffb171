"""Atomic files: write a temporary file, fsync it, publish it with ``os.replace``, fsync the directory.

A crash at any point leaves the old file or the new one, never a mix. Every layer that writes a result (the real
backend's durable state and run summaries, sweeps, the paper, studies, the CLI) writes through here; this module
imports nothing of seedance, so any floor may use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def fsync_dir(path: Path | str, enabled: bool = True) -> None:
    """Make a directory's entries (a rename, a new file) durable; a no-op when ``enabled`` is false."""
    if not enabled:
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, data: bytes | memoryview | Iterable[bytes | memoryview], fsync: bool = True) -> None:
    """write temp -> fsync -> os.replace -> fsync directory. ``data`` is the bytes, or an iterable of chunks written
    in turn (a file too large to hold whole in memory).

    The temporary name is built as a string, not with ``Path.with_name``: CPython's pathlib (before 3.13) interns
    every component it parses, and a fresh ``"<name>.tmp"`` interned and dropped on every write is one insertion into
    the interpreter's interned-string table each time (see ``seedance.real.storage.DiskStorage._path``)."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".", fsync)
