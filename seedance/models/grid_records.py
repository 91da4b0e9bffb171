"""The memory of a pixel grid (:mod:`seedance.models.crdt`) and the read-only arrays its replicas share.

A grid's pixels are one record each (:data:`_ENTRY`) in a byte buffer of the grid's own, read and written through
:data:`_RECORD`; numpy views of its fields serve the whole-grid operations. Arrays that every receiver of one delta
gets alike (a join's changed pixels, the clock entries a delivery moved) are made read-only once and carry their
list form (:func:`listed`), and the clocks a write makes remember the clock they step from (``_PARENTS``), so a
delivery that finds its replica's clock to be that very array needs no comparison (``PixelGrid.steps_to``)."""

from __future__ import annotations

import struct
from types import MappingProxyType

import numpy as np

_FIELDS = ("value", "version", "t", "node", "seq")

_INDEX: dict[int, np.ndarray] = {}  # j -> a read-only array([j]) (see _index)
_LISTS: dict[int, tuple[np.ndarray, list[int]]] = {}  # id(a) -> (a, a.tolist()) of shared read-only arrays (listed)
_PARENTS: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}  # id(clock) -> (clock, parent, node): write_delta's


def _index(j: int) -> np.ndarray:
    """``np.array([j])``, read-only, one per ``j`` (the entries a delivery moved: its sender's, usually)."""
    made = _INDEX.get(j)
    if made is None:
        made = _INDEX[j] = _shared(np.array([j], np.intp))
    return made


def _shared(a: np.ndarray) -> np.ndarray:
    """Make ``a`` (no one else's) read-only and keep its ``tolist()`` for :func:`listed`; returns ``a``."""
    a.setflags(write=False)
    if len(_LISTS) >= 4096 + len(_INDEX):  # (a bound: the deltas' long delivered are dropped, _index's kept)
        _LISTS.clear()
        _LISTS.update((id(kept), (kept, kept.tolist())) for kept in _INDEX.values())
    _LISTS[id(a)] = (a, a.tolist())
    return a


def listed(a: np.ndarray) -> list[int]:
    """``a.tolist()``, not to be changed: for an array this module made read-only and shared (a join's changed
    pixels, a clock's moved entries: every receiver of one delta gets the same one) the list made with it, so a
    delivery converts nothing (the array is kept with it, so its id names no other array meanwhile)."""
    made = _LISTS.get(id(a))
    if made is not None and made[0] is a:
        return made[1]
    return a.tolist()



# one record per pixel, its fields side by side in the join order: a join or a persist reads and writes all five
# fields of one pixel, which in five separate arrays were five cache misses (a grid per replica is far larger than
# the caches at scale), and a record read is the pixel's key (version, t, node, seq, value) in one call
_ENTRY = np.dtype([("version", np.int64), ("t", np.float64), ("node", np.int32), ("seq", np.int64),
                   ("value", np.int64)], align=True)
# the same record as bytes (native order, the node's 4 bytes of padding skipped): a grid reads and writes a record
# of its byte buffer through this: a read in about half the instructions of a numpy structured item (1.2k, 2.4k), a
# write of the delta's packed bytes in three quarters of a structured assignment (2.1k, 2.8k)
_RECORD = struct.Struct("=qdi4xqq")
_SIZE = _RECORD.size  # == _ENTRY.itemsize


def _grid_fields(n: int, buffer: bytearray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``n`` unwritten :data:`_ENTRY` records (all zero but node -1) in ``buffer`` (``n`` records' bytes, zero;
    made when None), and the five fields as views of them (strided). Zeroed memory, then the node field filled:
    ``np.full`` with a record as the fill value copies it record by record through numpy's generic structured path,
    about fifty times slower (every replica makes one grid: at 1,024 replicas of 64×64 pixels that was a fifth of a
    CPU second of the boot)."""
    records = np.frombuffer(bytearray(n * _SIZE) if buffer is None else buffer, _ENTRY)  # (its memory, writable)
    node = records["node"]
    node.fill(-1)
    return records, {name: node if name == "node" else records[name] for name in _FIELDS}


def _read_only(arrays: dict[str, np.ndarray]) -> MappingProxyType:
    """Read-only views of ``arrays`` in a read-only mapping: what :attr:`PixelGrid.f` shows."""
    views = {}
    for name, array in arrays.items():
        view = array.view()
        view.flags.writeable = False
        views[name] = view
    return MappingProxyType(views)
