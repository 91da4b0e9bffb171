"""Durable node state on disk: what a :class:`~seedance.models.protocols.contract.Persist` promises, for real.

Rules (contract.py; Raft §5.1 "stable storage"; write temp → fsync → rename → fsync directory, as everywhere
in seedance):

* A value (``Persist``) is one file ``values/<hex key>.val``: written to a temporary file, ``fsync``-ed, published by
  ``os.replace`` and made durable by an ``fsync`` of the directory. A crash at any point leaves either the old or the
  new file, never a mix. Each file carries a magic, a length and a SHA-256 of its body, so a torn or corrupt file is
  *detected* (:class:`StorageError`), never silently read.
* A log (``PersistLog``) is one append-only file ``logs/<hex key>.log`` of records ``[u32 length][u32 crc32][body]``.
  Truncating to ``start`` entries cuts the file at that record's offset; new entries are appended; then ``fsync``.
  On open, an incomplete or bad *last* record is a torn tail from a crash during an append that was never
  acknowledged (its ``fsync`` never returned): it is cut off, as etcd's WAL does. A bad record followed by more data
  is corruption: :class:`StorageError`.
* Compaction (``CompactLog(key, first)``): the entries from position ``first`` on are written to a new file that
  starts with a header ``[b"SDLS"][u64 first]`` (its first entry's position), published like a value file (temp,
  fsync, ``os.replace``, directory fsync): after a crash the log is the old file or the compacted one. Positions
  never change, so ``PersistLog`` ``start`` counts from the log's beginning. The header's first four bytes read as
  a record length above the record limit, so a log without it is never taken for one with it.
* Values and entries are encoded with the protocol's wire codec (plain data; never pickle).
* ``fsync=False`` (``SEEDANCE_FSYNC=0``) skips every fsync: the writes survive a process crash (the page cache
  keeps them) but not a power loss. It exists only to measure what fsync costs (benchmarks/raft_vs_pysyncobj.py);
  runs record it, and the default is always on.
* Keyed records (``PersistRecords``): one append-only record file per table (``logs/`` with a reserved key), each
  record one step ``[put, delete]``; on open the steps are replayed in order. When the file holds more than twice
  the live records (plus 256) it is compacted: one snapshot record written to a temporary file, fsynced, published
  by ``os.replace`` and a directory fsync, so a crash leaves the old file or the new, never neither.
* Appends that reach a new file-system block (``DiskStorage.grown``, counted per append; block size from
  ``statvfs``): on ext4 such an fsync also commits the block allocation's metadata to the journal (measured by
  ``seedance real profile`` in a run of three nodes: 453 us against 288 us within the file's last block); the
  simulator's host model draws the two kinds of fsync apart (``fsync_grow``).
* Checkpoints (``Checkpoint``): each buffer one ``.npy`` file (``numpy.save``, never pickled) in a fresh folder
  ``checkpoints/<name>/<n>/``, every file and the folder fsynced, then the pointer file ``checkpoints/<name>/CURRENT``
  is published atomically. A folder the pointer does not name is an incomplete checkpoint: ignored and removed.
* :meth:`DiskStorage.persist` returns only after the data is durable, so the runtime may then run the next effect.
* Group commit: :meth:`stage` queues writes and :meth:`sync` performs them *in order*, coalescing consecutive
  appends to one log into one ``fsync``; before any write to another file, the pending log is fsynced first. So
  whatever a crash leaves is a *prefix* of the staged writes (never a later write without an earlier one), which
  is exactly what the effects' order promised.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from hashlib import sha256
from pathlib import Path
from typing import Any

import numpy as np

from seedance.errors import SeedanceError
from seedance.files import atomic_write, fsync_dir
from seedance.models.host import reaches_new_block
from seedance.engine.durable import not_durable, writers
from seedance.engine.effects import StagedCheckpoint
from seedance.models.protocols.contract import CompactLog, DurableState, Persist, PersistLog, PersistRecords
from seedance.models.wire import Codec

log = logging.getLogger("seedance.real.storage")

_VALUE_MAGIC = b"SDV1"
_VALUE_HEADER = struct.Struct(">4sQ32s")  # magic, body length, sha256(body)
_RECORD_HEADER = struct.Struct(">II")  # body length, crc32(body)
_MAX_RECORD = 1 << 30
_LOG_START = struct.Struct(">4sQ")  # a compacted log's header: magic, the position of its first entry
_LOG_MAGIC = b"SDLS"  # as a record length: 0x53444C53, above _MAX_RECORD
RECORDS_PREFIX = "\x00records\x00"  # log keys of keyed-record tables (no protocol log key starts with NUL)


class StorageError(SeedanceError, OSError):
    """A durable file is torn or corrupt (``field`` names the file); the node refuses to start on it."""


def encode_value_file(body: bytes) -> bytes:
    return _VALUE_HEADER.pack(_VALUE_MAGIC, len(body), sha256(body).digest()) + body


def decode_value_file(path: Path, raw: bytes) -> bytes:
    if len(raw) < _VALUE_HEADER.size:
        raise StorageError(str(path), f"torn value file ({len(raw)} bytes, header needs {_VALUE_HEADER.size})",
                           "restore it from a replica or delete the node's state directory")
    magic, length, digest = _VALUE_HEADER.unpack_from(raw)
    body = raw[_VALUE_HEADER.size:]
    if magic != _VALUE_MAGIC:
        raise StorageError(str(path), f"bad magic {magic!r}", "a seedance value file starts with b'SDV1'")
    if len(body) != length:
        raise StorageError(str(path), f"torn value file: body {len(body)} bytes, header says {length}",
                           "restore it from a replica or delete the node's state directory")
    if sha256(body).digest() != digest:
        raise StorageError(str(path), "checksum mismatch (corrupt value file)",
                           "restore it from a replica or delete the node's state directory")
    return body


class DiskStorage:
    """One node's durable state in ``root`` (created 0700)."""

    def __init__(self, root: Path, codec: Codec, *, fsync: bool = True) -> None:
        self.fsync = fsync
        self.root = Path(root)
        self.codec = codec
        self._values_dir = self.root / "values"
        self._logs_dir = self.root / "logs"
        for d in (self.root, self._values_dir, self._logs_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._log_offsets: dict[str, list[int]] = {}  # key -> byte offset of each record, plus end offset
        self._log_starts: dict[str, int] = {}  # key -> a compacted log's first position (absent: 0)
        self._log_fds: dict[str, int] = {}
        self._staged: list[Any] = []
        self._records: dict[str, dict[str, Any]] = {}  # table -> live records (mirrors the record files)
        self._checkpoints_dir = self.root / "checkpoints"
        self._paths: dict[tuple[str, str], str] = {}
        self.sync_delay_s = 0.0  # slow-disk fault: seconds slept before each sync's writes (set by the launcher)
        try:  # the file system's block: an append past a multiple of it allocates one (see ``grown``)
            self.block_bytes = max(512, int(os.statvfs(self.root).f_bsize))
        except (OSError, AttributeError):
            self.block_bytes = 4096
        self.grown = 0  # log appends that reached a new block of their file (its size crossed a block boundary)

    _MAX_PATHS = 4096

    def _path(self, kind: str, key: str) -> str:
        """The file or folder of ``key`` (kind: value, log, checkpoint, pointer), built once and kept.

        A long run writes the same few files on every commit. Rebuilding their names each time (a new string, then a
        ``Path``, which interns it, then dropped) churned CPython's interned-string table: each dead entry costs a
        slot until a resize, and after ~25,000 writes the table doubled (a 1.9 MB RSS step in ``seedance real
        soak``, found with a breakpoint on the table's insertions). Kept strings, which pathlib never sees again,
        make the hot path intern nothing. Bounded: the keys are a protocol's durable names, and the memo is dropped
        past ``_MAX_PATHS`` entries."""
        found = self._paths.get((kind, key))
        if found is None:
            if len(self._paths) >= self._MAX_PATHS:
                self._paths.clear()
            if kind == "value":
                found = os.path.join(self._values_dir, key.encode().hex() + ".val")
            elif kind == "log":
                found = os.path.join(self._logs_dir, key.encode().hex() + ".log")
            elif kind == "checkpoint":
                found = os.path.join(self._checkpoints_dir, key.encode().hex())
            else:  # pointer: the CURRENT file of checkpoint folder ``key``
                found = os.path.join(key, "CURRENT")
            self._paths[(kind, key)] = found
        return found

    # ------------------------------------------------------------------------------------------------ values
    def _value_path(self, key: str) -> str:
        return self._path("value", key)

    def persist(self, key: str, value: Any) -> None:
        atomic_write(self._value_path(key), encode_value_file(self.codec.pack(value)), self.fsync)

    # -------------------------------------------------------------------------------------------------- logs
    def _log_path(self, key: str) -> str:
        return self._path("log", key)

    def _log_fd(self, key: str) -> int:
        fd = self._log_fds.get(key)
        if fd is None:
            path = self._log_path(key)
            existed = os.path.exists(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            if not existed:
                fsync_dir(self._logs_dir, self.fsync)
            self._log_fds[key] = fd
            if key not in self._log_offsets:
                self._log_offsets[key] = [0]
        return fd

    def persist_log(self, key: str, start: int, entries: tuple[Any, ...] | list[Any]) -> None:
        self._write_log(key, start, entries)
        self._fsync_log(key)

    def stage(self, effect: Any) -> None:
        """Queue a durable write (:data:`seedance.engine.durable.STAGED`) for the next :meth:`sync`."""
        self._staged.append(effect)

    def sync(self) -> int:
        """Perform the staged writes in order, durably; returns how many there were. Each is written by its type's
        writer (:data:`_WRITERS`); consecutive appends to one log (or record table) share one fsync, and a write
        to another file fsyncs the pending log first."""
        staged, self._staged = self._staged, []
        if staged and self.sync_delay_s > 0:  # the slow-disk fault (seedance.real.faults): this fsync takes longer
            time.sleep(self.sync_delay_s)
        dirty: str | None = None
        for effect in staged:
            writer = _WRITERS.get(type(effect))
            if writer is None:
                raise not_durable("DiskStorage", effect)
            dirty = writer(self, effect, dirty)
        if dirty is not None:
            self._fsync_log(dirty)
        return len(staged)

    def _switch_log(self, dirty: str | None, key: str | None) -> None:
        """Before writing to ``key`` (None: a file of its own), fsync the log appended to so far if it is another."""
        if dirty is not None and dirty != key:
            self._fsync_log(dirty)

    def _sync_value(self, effect: Persist, dirty: str | None) -> None:
        self._switch_log(dirty, None)
        self.persist(effect.key, effect.value)

    def _sync_log(self, effect: PersistLog, dirty: str | None) -> str:
        self._switch_log(dirty, effect.key)
        self._write_log(effect.key, effect.start, effect.entries)
        return effect.key

    def _sync_compact(self, effect: CompactLog, dirty: str | None) -> None:
        self._switch_log(dirty, None)
        self._compact_log(effect.key, effect.first)

    def _sync_records(self, effect: PersistRecords, dirty: str | None) -> str | None:
        self._switch_log(dirty, RECORDS_PREFIX + effect.table)
        return self._write_records(effect)

    def _sync_checkpoint(self, effect: StagedCheckpoint, dirty: str | None) -> None:
        self._switch_log(dirty, None)
        self._write_checkpoint(effect.name, effect.arrays)

    # ----------------------------------------------------------------------------------------------- records
    def _write_records(self, effect: Any) -> str | None:
        """Append one step to the table's record file; compact it when it grew large. The key to fsync, if any."""
        key = RECORDS_PREFIX + effect.table
        table = self._records.setdefault(effect.table, {})
        step = [dict(effect.put), list(effect.delete)]
        table.update(effect.put)
        for k in effect.delete:
            table.pop(k, None)
        self._log_fd(key)
        count = len(self._log_offsets[key]) - 1
        if count + 1 > 2 * len(table) + 256:
            self._compact_records(key, table)
            return None
        self._write_log(key, count, [step])
        return key

    def _compact_records(self, key: str, table: dict[str, Any]) -> None:
        body = self.codec.pack([dict(table), []])
        data = _RECORD_HEADER.pack(len(body), zlib.crc32(body)) + body
        self._replace_log(key, data, [0, len(data)])

    def _replace_log(self, key: str, data: bytes, offsets: list[int]) -> None:
        """Publish ``data`` as log ``key``'s whole file atomically (its records at ``offsets``) and reopen it."""
        fd = self._log_fds.pop(key, None)
        if fd is not None:
            os.close(fd)
        atomic_write(self._log_path(key), data, self.fsync)
        self._log_offsets[key] = offsets
        self._log_fd(key)

    # ------------------------------------------------------------------------------------------- checkpoints
    def _checkpoint_dir(self, name: str) -> str:
        return self._path("checkpoint", name)

    def _write_checkpoint(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        base = self._checkpoint_dir(name)
        os.makedirs(base, mode=0o700, exist_ok=True)
        current = self._current_checkpoint(base)
        number = (int(os.path.basename(current)) + 1) if current is not None else 0
        folder = os.path.join(base, str(number))
        if os.path.isdir(folder):  # an incomplete attempt (never published)
            for leftover in os.listdir(folder):
                os.unlink(os.path.join(folder, leftover))
        else:
            os.mkdir(folder, 0o700)
        for handle, array in arrays.items():
            with open(os.path.join(folder, handle.encode().hex() + ".npy"), "wb") as fh:
                np.save(fh, np.ascontiguousarray(array), allow_pickle=False)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
        fsync_dir(folder, self.fsync)
        fsync_dir(base, self.fsync)
        atomic_write(self._path("pointer", base), str(number).encode(), self.fsync)
        if current is not None and current != folder:
            for leftover in os.listdir(current):
                os.unlink(os.path.join(current, leftover))
            os.rmdir(current)

    def _current_checkpoint(self, base: str) -> str | None:
        """The published folder of checkpoint folder ``base``, as a string path (no ``Path``: see :meth:`_path`)."""
        try:
            with open(self._path("pointer", base), "rb") as fh:
                number = int(fh.read())
        except (OSError, ValueError):
            return None
        folder = os.path.join(base, str(number))
        return folder if os.path.isdir(folder) else None

    def checkpoint_names(self) -> list[str]:
        if not self._checkpoints_dir.exists():
            return []
        return sorted(bytes.fromhex(d.name).decode() for d in self._checkpoints_dir.iterdir()
                      if d.is_dir() and self._current_checkpoint(os.fspath(d)) is not None)

    def restore(self, name: str) -> dict[str, np.ndarray] | None:
        """The arrays of checkpoint ``name`` (None when it does not exist)."""
        folder = self._current_checkpoint(self._checkpoint_dir(name))
        if folder is None:
            return None
        arrays = {}
        for file in sorted(f for f in os.listdir(folder) if f.endswith(".npy")):
            path = os.path.join(folder, file)
            try:
                arrays[bytes.fromhex(file[:-len(".npy")]).decode()] = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as err:
                raise StorageError(path, f"unreadable checkpoint file: {err}",
                                   "restore it from a replica or delete the node's state directory") from None
        return arrays

    def _fsync_log(self, key: str) -> None:
        if self.fsync:
            os.fsync(self._log_fds[key])

    def _compact_log(self, key: str, first: int) -> None:
        """Keep the entries of log ``key`` from position ``first`` on, in a new file published atomically."""
        fd = self._log_fd(key)
        offsets, held_from = self._log_offsets[key], self._log_starts.get(key, 0)
        if first < held_from:
            raise ValueError(f"CompactLog({key!r}, first={first}) before the log's first position {held_from}")
        drop = min(first - held_from, len(offsets) - 1)
        begin, end = offsets[drop], offsets[-1]
        kept = os.pread(fd, end - begin, begin) if end > begin else b""
        header = _LOG_START.pack(_LOG_MAGIC, first)
        self._log_starts[key] = first
        self._replace_log(key, header + kept, [o - begin + len(header) for o in offsets[drop:]])

    def _write_log(self, key: str, start: int, entries: tuple[Any, ...] | list[Any]) -> None:
        fd = self._log_fd(key)
        offsets = self._log_offsets[key]
        count = len(offsets) - 1
        held_from = self._log_starts.get(key, 0)
        start -= held_from
        if not 0 <= start <= count:
            raise ValueError(f"PersistLog({key!r}, start={start + held_from}) outside the log's positions "
                             f"{held_from}..{held_from + count}")
        if start < count:
            del offsets[start + 1:]
            os.ftruncate(fd, offsets[start])
        write_at = end = offsets[-1]
        chunks = []
        for entry in entries:
            # an entry object with a plain form (Raft's Entry) is stored as that form: the file holds plain lists
            to_plain = getattr(entry, "to_plain", None)
            body = self.codec.pack(entry if to_plain is None else to_plain())
            chunks.append(_RECORD_HEADER.pack(len(body), zlib.crc32(body)) + body)
            end += _RECORD_HEADER.size + len(body)
            offsets.append(end)
        if reaches_new_block(write_at, end, self.block_bytes):
            self.grown += 1
        data = memoryview(b"".join(chunks))
        while data:
            written = os.pwrite(fd, data, write_at)
            data, write_at = data[written:], write_at + written

    def _read_log(self, key: str, path: Path) -> list[Any]:
        raw = path.read_bytes()
        entries: list[Any] = []
        pos = 0
        if raw[:len(_LOG_MAGIC)] == _LOG_MAGIC:  # a compacted log: its first entry's position
            if len(raw) < _LOG_START.size:
                raise StorageError(str(path), f"torn compacted-log header ({len(raw)} bytes)",
                                   "restore it from a replica or delete the node's state directory")
            self._log_starts[key] = _LOG_START.unpack_from(raw)[1]
            pos = _LOG_START.size
        offsets = [pos]
        while pos < len(raw):
            bad = None
            if len(raw) - pos < _RECORD_HEADER.size:
                bad = "incomplete record header"
            else:
                length, crc = _RECORD_HEADER.unpack_from(raw, pos)
                body_end = pos + _RECORD_HEADER.size + length
                if length > _MAX_RECORD or body_end > len(raw):
                    bad = "incomplete record body"
                elif zlib.crc32(raw[pos + _RECORD_HEADER.size:body_end]) != crc:
                    bad = "crc mismatch"
            if bad is not None:
                # a torn tail (nothing valid after it) was never acknowledged; anything else is corruption
                if bad == "crc mismatch" and body_end < len(raw):
                    raise StorageError(str(path), f"corrupt log record {len(entries)} at byte {pos} ({bad})",
                                       "restore it from a replica or delete the node's state directory")
                if getattr(self, "_read_only", False):
                    break
                log.warning("%s: cutting torn tail at byte %d (%s, %d bytes)", path, pos, bad, len(raw) - pos)
                with open(path, "r+b") as fh:
                    fh.truncate(pos)
                    fh.flush()
                    os.fsync(fh.fileno())
                break
            entries.append(self.codec.unpack(raw[pos + _RECORD_HEADER.size:body_end]))
            pos = body_end
            offsets.append(pos)
        self._log_offsets[key] = offsets
        return entries

    # ------------------------------------------------------------------------------------------------- load
    def load(self, *, read_only: bool = False) -> DurableState:
        """Everything durably persisted so far (raises :class:`StorageError` on a torn/corrupt file).

        The owner calls it once at start-up: it deletes temporary files of an interrupted write and cuts a torn
        log tail. ``read_only=True`` (an observer, e.g. a test, reading a live node's state) changes nothing.
        """
        self._read_only = read_only
        values: dict[str, Any] = {}
        for path in sorted(self._values_dir.glob("*.val")):
            key = bytes.fromhex(path.stem).decode()
            values[key] = self.codec.unpack(decode_value_file(path, path.read_bytes()))
        for stale in ([] if read_only else self._values_dir.glob("*.tmp")):  # crash before replace: old file stands
            stale.unlink()
        logs: dict[str, list[Any]] = {}
        records: dict[str, dict[str, Any]] = {}
        for path in sorted(self._logs_dir.glob("*.log")):
            key = bytes.fromhex(path.stem).decode()
            entries = self._read_log(key, path)
            if key.startswith(RECORDS_PREFIX):
                table: dict[str, Any] = {}
                for put, delete in entries:
                    table.update(put)
                    for k in delete:
                        table.pop(k, None)
                records[key[len(RECORDS_PREFIX):]] = table
            else:
                logs[key] = entries
        for stale in ([] if read_only else self._logs_dir.glob("*.tmp")):
            stale.unlink()
        self._records = {t: dict(r) for t, r in records.items()}
        checkpoints = self.checkpoint_names()
        if not read_only and self._checkpoints_dir.exists():  # folders no pointer names: incomplete, removed
            for base in self._checkpoints_dir.iterdir():
                current = self._current_checkpoint(os.fspath(base))
                for folder in base.iterdir():
                    if folder.is_dir() and str(folder) != current:
                        for leftover in folder.iterdir():
                            leftover.unlink()
                        folder.rmdir()
        return DurableState(values=values, logs=logs, records=records, checkpoints=tuple(checkpoints),
                            log_starts={k: v for k, v in self._log_starts.items() if k in logs})

    def close(self) -> None:
        for fd in self._log_fds.values():
            os.close(fd)
        self._log_fds.clear()


# the one table of what DiskStorage.sync writes, by the staged effect's type (each writer: (storage, effect, the log
# appended to so far) -> the log appended to now, or None); seedance.engine.durable checks it covers every type
_WRITERS = writers("DiskStorage", {Persist: DiskStorage._sync_value, PersistLog: DiskStorage._sync_log,
                                   CompactLog: DiskStorage._sync_compact,
                                   PersistRecords: DiskStorage._sync_records,
                                   StagedCheckpoint: DiskStorage._sync_checkpoint})
