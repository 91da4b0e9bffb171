"""Per-node durable storage: writes are volatile until their fsync completes; a crash loses the rest.

Rules (the contract's Persist/PersistLog, and the "save to stable storage before sending" duty of Raft §5.1):

* :meth:`Storage.stage` puts a write into the volatile buffer (a copy of its plain data, so the node may keep
  mutating its own objects). :meth:`Storage.sync_done_s` books the disk: the fsync of the staged writes completes
  ``fsync_s + bytes / bandwidth`` after the disk is free (one fsync per handler: group commit).
* :meth:`Storage.commit` (called by the runtime when the fsync completes) applies the staged writes to the durable
  image in order; :meth:`Storage.crash` drops whatever is still staged.
* ``Persist(key, value)`` replaces ``values[key]``; ``PersistLog(key, start, entries)`` truncates ``logs[key]`` to
  its first ``start`` entries, then appends ``entries`` (``start`` beyond the end is a protocol bug and raises).
* ``CompactLog(key, first)`` drops the log's entries before position ``first`` (positions are kept: ``log_starts``
  holds each compacted log's first position, and a later ``PersistLog`` counts from the log's beginning); a log
  that ends before ``first`` is emptied and continues there. The compacted file counts as a new file (``grows``).
* ``PersistRecords(table, put, delete)`` sets / removes keyed records of one table in one step; a staged checkpoint
  (the engine's :class:`~seedance.engine.effects.StagedCheckpoint`) replaces the checkpoint of its name whole.
* File growth: each log (and record table) keeps its file's length as written (entries, bytes); an append that
  reaches a new ``block_bytes`` block of its file, or a write of a new file (a value, a checkpoint), sets
  :attr:`Storage.grows` until the next :meth:`Storage.sync_done_s`, so a measured host can draw that fsync from its
  allocating kind (``fsync_grow``). A truncation keeps the dropped entries' mean size (the file's length is not
  kept per entry). Only a storage made with ``track_growth`` (the default) keeps these lengths: the runtime asks
  for it where a measured host reads ``grows`` (a profile with ``fsync_grow``), not for every staged write of
  every run.
* Shared values (``shared``, one dict per simulation): a record a node handed over (``PersistRecords(...,
  handed_over=True)``: it never changes afterwards) whose value is immutable and equal to the last one any node of
  the run wrote under the same table and key is stored as that same object. Every replica of a simulated cluster
  writes the same entries (1,024 causal replicas each persist every write): one copy instead of one per node; the
  dict holds one value per (table, key), and what each node holds is unchanged.
* :meth:`Storage.durable_state` rebuilds the :class:`DurableState` handed to ``on_recover`` from the durable image
  only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from seedance.engine.durable import not_durable, writers
from seedance.engine.effects import StagedCheckpoint
from seedance.models.host import reaches_new_block
from seedance.models.protocols.contract import CompactLog, DurableState, Persist, PersistLog, PersistRecords


_SCALARS = frozenset({int, float, str, bool, bytes, type(None)})


def _copy_plain(value: Any) -> Any:
    """Copy mutable plain data (lists, dicts, sets, bytearrays); immutable values are shared. A flat list or tuple
    (scalars only, as a vector of dependencies) is copied whole, without a call per item; scalars inside a container
    are taken as they are, without a call each."""
    kind = type(value)
    if kind is list or kind is tuple:
        if _SCALARS.issuperset(map(type, value)):
            return value.copy() if kind is list else value
        scalars = _SCALARS
        copied = [v if type(v) in scalars else _copy_plain(v) for v in value]
        return copied if kind is list else tuple(copied)
    if kind is dict:
        scalars = _SCALARS
        return {k: v if type(v) in scalars else _copy_plain(v) for k, v in value.items()}
    if kind in _SCALARS:
        return value
    if isinstance(value, list):
        return [_copy_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy_plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copy_plain(v) for v in value)
    if isinstance(value, (set, bytearray)):
        return type(value)(value)
    return value


_MUTABLE = (list, dict, tuple, set, bytearray)
_IMMUTABLE = frozenset({tuple, int, float, str, bytes, bool})


class Storage:
    """The durable image and volatile buffer of one node."""

    __slots__ = ("values", "logs", "log_starts", "records", "checkpoints", "staged", "staged_bytes", "disk_free_s", "fsync_s",
                 "base_fsync_s", "inv_bandwidth", "bytes_written", "fsyncs", "lost_writes", "block_bytes",
                 "file_sizes", "grows", "shared", "track_growth")

    def __init__(self, *, fsync_s: float, write_bandwidth_GBps: float, block_bytes: int = 4096,
                 shared: dict[str, dict[Any, Any]] | None = None, track_growth: bool = True) -> None:
        self.values: dict[str, Any] = {}
        self.logs: dict[str, list[Any]] = {}
        self.log_starts: dict[str, int] = {}  # a compacted log's first position (absent: 0)
        self.records: dict[str, dict[str, Any]] = {}
        self.checkpoints: dict[str, dict[str, np.ndarray]] = {}
        self.staged: list[Any] = []
        self.staged_bytes = 0
        self.disk_free_s = 0.0
        self.fsync_s = fsync_s
        self.base_fsync_s = fsync_s  # the slow-disk fault adds to fsync_s; the difference is its extra delay
        self.inv_bandwidth = 1.0 / (write_bandwidth_GBps * 1e9)
        self.bytes_written = 0
        self.fsyncs = 0
        self.lost_writes = 0
        self.block_bytes = block_bytes
        # log key or ("records", table) -> [end position, bytes, first position] of the file as written
        self.file_sizes: dict[Any, list[int]] = {}
        self.grows = False  # since the last booked sync: a write reached a new file block (see the module docstring)
        self.shared = shared  # table -> key -> the last immutable value handed over under it (module docstring)
        self.track_growth = track_growth  # keep file_sizes and grows (module docstring)

    def _grow(self, effect: Any) -> None:
        kind = type(effect)
        if kind is not PersistLog and kind is not PersistRecords:  # a value, checkpoint or compacted log: new files
            self.grows = True
            if kind is CompactLog and effect.key in self.file_sizes:  # the kept entries at the mean entry size
                size = self.file_sizes[effect.key]
                held, kept = size[0] - size[2], max(0, size[0] - effect.first)
                size[1] = size[1] * kept // held if held > 0 else 0
                size[0], size[2] = max(size[0], effect.first), effect.first
            return
        key = effect.key if kind is PersistLog else ("records", effect.table)
        size = self.file_sizes.get(key)
        if size is None:
            size = self.file_sizes[key] = [0, 0, 0]
        if kind is PersistLog:
            if effect.start < size[0]:  # a truncation: the dropped entries at the file's mean entry size
                held = size[0] - size[2]
                size[1] = size[1] * max(0, effect.start - size[2]) // held if held > 0 else 0
                size[0] = effect.start
            size[0] += len(effect.entries)
        else:
            size[0] += 1
        before = size[1]
        size[1] = before + effect.size_bytes
        if reaches_new_block(before, size[1], self.block_bytes):
            self.grows = True

    def stage(self, effect: Any) -> None:
        if type(effect) is Persist and type(effect.value) in _MUTABLE:
            effect = Persist(key=effect.key, value=_copy_plain(effect.value), size_bytes=effect.size_bytes)
        elif type(effect) is PersistRecords:
            if not effect.handed_over or type(effect.put) is not dict or type(effect.delete) is not tuple:
                effect = PersistRecords(table=effect.table, put={k: _copy_plain(v) for k, v in effect.put.items()},
                                        delete=tuple(effect.delete), size_bytes=effect.size_bytes)
        self.staged.append(effect)
        self.staged_bytes += effect.size_bytes
        if self.track_growth:
            self._grow(effect)

    def sync_done_s(self, now_s: float, fsync_s: float | None = None,
                    hold: Callable[[float, float], float] | None = None) -> float:
        """Book one fsync of everything staged, starting at ``now_s``; when it completes. ``fsync_s`` overrides the
        configured latency (a host profile's draw; the slow-disk fault's extra delay still applies on top). ``hold``
        (the shared device's stalls: ``DiskStallProcess.hold``) moves the end by what stopped the device meanwhile;
        this node's next fsync queues behind it."""
        size = self.staged_bytes
        start = now_s if now_s > self.disk_free_s else self.disk_free_s
        latency = self.fsync_s if fsync_s is None else fsync_s + max(0.0, self.fsync_s - self.base_fsync_s)
        done = start + latency + size * self.inv_bandwidth
        if hold is not None:
            done = hold(start, done)
        self.disk_free_s = done
        self.bytes_written += size
        self.fsyncs += 1
        self.grows = False
        return done

    def commit(self) -> int:
        """Apply the staged writes to the durable image, each by its type's writer (:data:`_APPLY`); how many."""
        count = len(self.staged)
        for effect in self.staged:
            apply = _APPLY.get(type(effect))
            if apply is None:
                raise not_durable("sim Storage", effect)
            apply(self, effect)
        self.staged = []
        self.staged_bytes = 0
        return count

    def _apply_value(self, effect: Persist) -> None:
        self.values[effect.key] = effect.value

    def _apply_records(self, effect: PersistRecords) -> None:
        table = self.records.setdefault(effect.table, {})
        if self.shared is None or not effect.handed_over:
            table.update(effect.put)
        else:
            latest = self.shared.get(effect.table)
            if latest is None:
                latest = self.shared[effect.table] = {}
            immutable = _IMMUTABLE
            for key, value in effect.put.items():
                if type(value) in immutable:  # only these are shared (a list, say, is stored as it is)
                    seen = latest.get(key)
                    if seen is not None and type(seen) is type(value) and seen == value:
                        value = seen
                    else:
                        latest[key] = value
                table[key] = value
        for key in effect.delete:
            table.pop(key, None)

    def _apply_log(self, effect: PersistLog) -> None:
        log = self.logs.setdefault(effect.key, [])
        first = self.log_starts.get(effect.key, 0)
        at = effect.start - first
        if at > len(log) or at < 0:
            raise ValueError(f"PersistLog({effect.key!r}, start={effect.start}) outside the durable log's positions "
                             f"{first}..{first + len(log)}: a protocol bug")
        del log[at:]
        log.extend(effect.entries)

    def _apply_compact(self, effect: CompactLog) -> None:
        log = self.logs.setdefault(effect.key, [])
        first = self.log_starts.get(effect.key, 0)
        if effect.first < first:
            raise ValueError(f"CompactLog({effect.key!r}, first={effect.first}) before the durable log's first "
                             f"position {first}: a protocol bug")
        del log[:effect.first - first]  # all of it when the log ends before ``first``
        self.log_starts[effect.key] = effect.first

    def _apply_checkpoint(self, effect: StagedCheckpoint) -> None:
        self.checkpoints[effect.name] = effect.arrays  # the engine already copied its buffers

    def crash(self) -> int:
        """Lose the volatile buffer; how many writes were lost."""
        lost = len(self.staged)
        self.lost_writes += lost
        self.staged = []
        self.staged_bytes = 0
        self.disk_free_s = 0.0  # the lost writes' fsync is abandoned: the next incarnation does not queue behind it
        return lost

    def durable_state(self) -> DurableState:
        return DurableState(values={k: _copy_plain(v) for k, v in self.values.items()},
                            logs={k: tuple(v) for k, v in self.logs.items()}, log_starts=dict(self.log_starts),
                            records={t: {k: _copy_plain(v) for k, v in r.items()} for t, r in self.records.items()},
                            checkpoints=tuple(sorted(self.checkpoints)))

    def restore(self, name: str) -> dict[str, np.ndarray] | None:
        arrays = self.checkpoints.get(name)
        return None if arrays is None else {h: a.copy() for h, a in arrays.items()}


# the one table of what Storage.commit applies, by the staged effect's type; seedance.engine.durable checks that it
# covers every durable type
_APPLY = writers("sim Storage", {Persist: Storage._apply_value, PersistLog: Storage._apply_log,
                                 CompactLog: Storage._apply_compact,
                                 PersistRecords: Storage._apply_records, StagedCheckpoint: Storage._apply_checkpoint})
