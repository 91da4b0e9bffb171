"""A pixel grid replicated as a delta-state CRDT (Almeida, Shoker & Baquero, "Delta state replicated data types",
JPDC 111, 2018), on numpy arrays.

State. Every pixel ``(x, y)`` of a ``width × height`` grid holds the field report's tuple ``(x, y, t, value,
version)`` (§2.1) plus the writer's id and dot: ``value`` (int64), ``version`` (int64, the write's Lamport
timestamp: the sum of its vector clock; 0 = never written), ``t`` (float64, the writer's clock when it wrote),
``node`` (int32, the writer; -1 when unwritten) and ``seq`` (int64, the writer's own clock entry for this write, so
``(node, seq)`` is the write's dot). A state also carries its causal context ``clock`` (a dense vector clock,
:mod:`seedance.models.clocks`): the writes it has seen.

Join (⊔). Pixelwise, the entry with the larger key ``(version, t, node, seq, value)`` compared lexicographically wins; the
clocks join componentwise. This is a per-pixel last-writer-wins register whose order is a total order on writes, so
the join is the least upper bound of a join-semilattice: commutative, associative and idempotent (tested with
Hypothesis in ``tests/test_crdt.py``). The rule for concurrent writes to one pixel is therefore deterministic and the
same on every replica:

1. the larger ``version`` wins: a write's version is the sum of its vector clock, so a write that causally follows
   another (its clock is strictly larger) always has a strictly larger version and wins — causality is never
   overridden by clock skew;
2. for concurrent writes of equal version, the later writer clock ``t`` wins (the report's timestamp);
3. then the larger writer id, then the larger dot counter (distinct writes of correct replicas never tie on all
   four: one writer's versions grow), and last the larger value, so that the join is a total order even on entries
   no correct replica produces (two values under one dot), and the lattice laws hold for any states.

Deltas. A mutator returns a delta ``m^δ(X)`` with ``m(X) = X ⊔ m^δ(X)`` (the paper's §3): writing a pixel returns a
:class:`GridDelta` holding that one pixel. Deltas join into *delta-groups* (:func:`join_deltas`; same rule, sparse);
the whole state is also a delta (:meth:`PixelGrid.full_delta`). A delta is sparse: sorted unique flat pixel indices
with the five per-pixel arrays, plus the causal context it carries.

Delta-intervals and causal merging (the paper's §6, Algorithm 2) live in
:mod:`seedance.models.delta_intervals` (:class:`~seedance.models.delta_intervals.DeltaBuffer`,
:class:`~seedance.models.delta_intervals.IntervalReceiver`): a replica numbers the delta-groups it joins (its own writes and what it received) with a
counter; the *delta-interval* ``Δ[a, b)`` is the join of groups ``a .. b-1``; a receiver joins an interval from
``i`` only if it already holds every group of ``i`` before ``a`` (causal delta-merging), otherwise it drops it and
waits; acknowledgements move each peer's start; groups every peer acknowledged are garbage-collected; a peer whose
start was collected (or is not known yet) gets the full state. A replica's group 0 is its whole state when it
(re)started, so an interval from 0 is causally closed as well. Lost, duplicated or reordered messages are repaired by
the periodic resend of the interval from the acknowledged start (anti-entropy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from seedance.models import clocks
from seedance.models.grid_records import (  # noqa: F401 (_ENTRY, _grid_fields: this module's, as before)
    _ENTRY, _FIELDS, _INDEX, _PARENTS, _RECORD, _SIZE, _grid_fields, _index, _read_only, _shared, listed,
)

# bytes per pixel entry on the wire: index (4) + value (8) + version (8) + t (8) + node (4) + seq (8)
ENTRY_BYTES = 40


_WIRE = tuple(np.dtype(d) for d in (np.int64, np.int64, np.int64, np.float64, np.int32, np.int64, np.int64))  # to_wire
_ARRAYS = (np.ndarray,) * 7
_WIRE_FIELDS = ("idx", "value", "version", "t", "node", "seq", "clock")
_new = object.__new__


def _empty_fields(n: int) -> dict[str, np.ndarray]:
    return {"value": np.zeros(n, np.int64), "version": np.zeros(n, np.int64), "t": np.zeros(n, np.float64),
            "node": np.full(n, -1, np.int32), "seq": np.zeros(n, np.int64)}


def _wins(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> np.ndarray:
    """Elementwise: entry ``b`` is strictly greater than entry ``a`` under (version, t, node, seq)."""
    gt = b["version"] > a["version"]
    eq = b["version"] == a["version"]
    for name in ("t", "node", "seq", "value"):
        gt |= eq & (b[name] > a[name])
        eq &= b[name] == a[name]
    return gt


@dataclass(frozen=True, eq=False)
class GridDelta:
    """A sparse grid state: pixels ``idx`` (sorted, unique, flat ``y * width + x``) and their entries; ``clock`` is
    the causal context it carries (the writes it reflects, with every write they depend on)."""

    idx: np.ndarray
    value: np.ndarray
    version: np.ndarray
    t: np.ndarray
    node: np.ndarray
    seq: np.ndarray
    clock: np.ndarray = field(default_factory=lambda: clocks.zeros(0))

    @classmethod
    def empty(cls, nodes: int = 0) -> GridDelta:
        return cls(idx=np.zeros(0, np.int64), **_empty_fields(0), clock=clocks.zeros(nodes))

    def fields(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in _FIELDS}

    def __len__(self) -> int:
        return int(self.idx.size)

    @property
    def size_bytes(self) -> int:
        """Bytes on the wire: one entry per pixel plus the clock (8 bytes per node)."""
        return len(self) * ENTRY_BYTES + 8 * int(self.clock.size)

    def to_wire(self) -> tuple:
        """Plain data for a message (numeric numpy arrays travel as such through the wire codec)."""
        return (self.idx, self.value, self.version, self.t, self.node, self.seq, self.clock)

    @classmethod
    def from_wire(cls, data: tuple | list) -> GridDelta:
        if len(data) == 7 and tuple(map(type, data)) == _ARRAYS and tuple([a.dtype for a in data]) == _WIRE:
            # already the arrays of a delta (the simulator passes them as sent): no conversion, and no frozen
            # dataclass __init__ (an object.__setattr__ per field): the same fields, set directly
            delta = _new(cls)
            delta.__dict__.update(zip(_WIRE_FIELDS, data))
            return delta
        idx, value, version, t, node, seq, clock = (np.asarray(a) for a in data)
        # no copy when the arrays already have their types (a delta's arrays are never written in place)
        return cls(idx=idx.astype(np.int64, copy=False), value=value.astype(np.int64, copy=False),
                   version=version.astype(np.int64, copy=False), t=t.astype(np.float64, copy=False),
                   node=node.astype(np.int32, copy=False), seq=seq.astype(np.int64, copy=False),
                   clock=clock.astype(np.int64, copy=False))

    def only(self) -> tuple[int, tuple[int, float, int, int, int], tuple[int, int, float, int, int]]:
        """A one-pixel delta's pixel and entry as Python numbers, ``(i, (version, t, node, seq, value), (value,
        version, t, node, seq))``: in the join order, and as :meth:`PixelGrid.entry` gives it. Made once per delta (a
        delta's arrays are never written in place, and one delta may be joined by every replica: the interval a
        write sends to each peer), so every replica that joins it holds the same tuples."""
        return self._one()[:3]

    def _one(self) -> tuple:
        """:meth:`only`'s three, the entry as a record's bytes (:data:`_RECORD`) and ``[i]``, made once per delta."""
        made = self.__dict__.get("_only")
        if made is None:
            version, t, node, seq, value = (int(self.version.item(0)), float(self.t.item(0)),
                                            int(self.node.item(0)), int(self.seq.item(0)), int(self.value.item(0)))
            key = (version, t, node, seq, value)
            i = int(self.idx.item(0))
            made = self.__dict__["_only"] = (i, key, (value, version, t, node, seq), _RECORD.pack(*key), [i])
        return made

    def before(self, node: int) -> bytes:
        """The bytes of this delta's clock with ``node``'s entry one lower (for :meth:`PixelGrid.steps_to`), made
        once per delta (for the last ``node`` asked); the clock is made read-only then (a delta's arrays are never
        written in place): a grid may take it as its own clock."""
        made = self.__dict__.get("_before")
        if made is None or made[0] != node:
            clock = self.clock.copy()
            clock[node] -= 1
            made = self.__dict__["_before"] = (node, clock.tobytes())
            self.clock.setflags(write=False)
        return made[1]

    def pixels(self) -> np.ndarray:
        """``idx`` as a read-only copy, made once per delta: what a join that took every pixel of it returns (each
        receiver of one delta gets the same array; read-only, so no one of them can change another's)."""
        made = self.__dict__.get("_pixels")
        if made is None:
            made = self.__dict__["_pixels"] = _shared(self.idx.copy())
        return made

    def same_as(self, other: GridDelta) -> bool:
        """Equal as states (same pixels, entries and clock)."""
        return (np.array_equal(self.idx, other.idx) and all(
            np.array_equal(getattr(self, n), getattr(other, n)) for n in _FIELDS)
            and np.array_equal(*clocks._pad(self.clock, other.clock)))


def join_deltas(a: GridDelta, b: GridDelta) -> GridDelta:
    """``a ⊔ b`` of two sparse states (a delta-group): per pixel the greater entry, clocks joined."""
    return join_many([a, b])


def join_many(deltas: list[GridDelta]) -> GridDelta:
    """The join of several sparse states at once (one sort): per pixel the greatest entry, clocks joined."""
    if not deltas:
        return GridDelta.empty()
    clock = deltas[0].clock
    for d in deltas[1:]:
        clock = clocks.join(clock, d.clock)
    full = [d for d in deltas if len(d)]
    if len(full) <= 1:
        src = full[0] if full else deltas[0]
        return GridDelta(idx=src.idx, **src.fields(), clock=clock)
    idx = np.concatenate([d.idx for d in full])
    cat = {n: np.concatenate([getattr(d, n) for d in full]) for n in _FIELDS}
    # sort by pixel, then by the entry key ascending: the last row of each pixel is its maximum
    order = np.lexsort((cat["value"], cat["seq"], cat["node"], cat["t"], cat["version"], idx))
    idx = idx[order]
    last = np.ones(idx.size, bool)
    last[:-1] = idx[1:] != idx[:-1]
    return GridDelta(idx=idx[last], **{n: v[order][last] for n, v in cat.items()}, clock=clock)


class PixelGrid:
    """One replica's grid state (dense arrays) with its causal context ``clock`` over ``nodes`` nodes.

    ``f`` maps each field to a read-only view of its array (strided: a pixel's fields are one record, see
    :data:`_ENTRY`): the grid's own mutators (:meth:`join` and what builds on it, :meth:`overwrite`) are the only
    writers, and each notes the pixels it wrote for every watcher (:meth:`watch`, :meth:`drain`), so an invariant
    monitor learns what an input changed without comparing whole grids. Writing through ``f`` raises (numpy:
    "assignment destination is read-only"); so does replacing a field.
    The clock is read-only too: every change replaces it (the setter copies what it is given), so a clock that is
    the same object as before has not changed.
    """

    def __init__(self, width: int, height: int, nodes: int) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"grid must be at least 1x1, got {width}x{height}")
        self.width = int(width)
        self.height = int(height)
        # the writable records and views of their fields (only this class writes them)
        self._buffer = bytearray(self.width * self.height * _SIZE)  # the records' memory (see _RECORD)
        self._records, self._w = _grid_fields(self.width * self.height, self._buffer)
        self.f = _read_only(self._w)
        # (theirs, mine, where theirs is above, the joined clock when known: theirs itself, see steps_to)
        self._ahead: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._clock: np.ndarray | None = None
        self._own_clock(clocks.zeros(nodes))
        self._watchers: dict[int, list] = {}  # watcher token -> the pixels written since its last drain
        # (i, its record) of the pixel a one-pixel join wrote last, while no other write came after it: what
        # entry(i) then reads without going back to the record (the node persists the pixel a join just wrote)
        self._last_entry: tuple[int, tuple] | None = None
        self._written = 0  # pixels with version > 0 (kept by the mutators: len(written()) without a scan)

    @property
    def clock(self) -> np.ndarray:
        """The causal context, read-only: a change replaces the array (so an unchanged clock is the same object)."""
        return self._clock

    @clock.setter
    def clock(self, value: np.ndarray) -> None:
        self._own_clock(np.array(value, np.int64, copy=True))

    def _own_clock(self, fresh: np.ndarray, moved: np.ndarray | None = None) -> None:
        """Take ``fresh`` (an array no one else holds) as the clock, read-only; ``moved``: the entries where it
        differs from the clock it replaces, when known (:meth:`moved_since`)."""
        fresh.setflags(write=False)
        self._clock_from = self._clock
        self._clock_moved = moved
        self._clock = fresh

    def moved_since(self, clock: np.ndarray | None) -> np.ndarray | None:
        """The entries where the clock differs from ``clock``, when ``clock`` is the very array the last change
        replaced and that change knew them (a join does); None otherwise (compare the two). What a reader of the
        clock (the node persisting its moved entries, a monitor) would otherwise find by comparing N entries."""
        if clock is self._clock_from and clock is not None:
            return self._clock_moved
        return None

    def ahead(self, clock: np.ndarray) -> np.ndarray:
        """The entries where ``clock`` (an int64 array of the clock's shape) is above this grid's clock. The answer
        for the same two arrays is kept: a delivery's causal check and the join that follows ask the same."""
        mine = self._clock
        cached = self._ahead
        if cached is not None and cached[0] is clock and cached[1] is mine:
            return cached[2]
        above = (clock > mine).nonzero()[0]
        self._ahead = (clock, mine, above, None)
        return above

    def steps_to(self, clock: np.ndarray, node: int, before: bytes) -> bool:
        """Whether ``clock`` (read-only, int64, of the clock's shape) is this grid's clock with ``node``'s entry one
        higher: the clock of ``node``'s next write after everything this grid holds (a delivery's usual case).
        ``before``: its bytes with that entry one lower (:meth:`GridDelta.before`), compared with the clock's bytes
        (one memory comparison; no array made). Then :meth:`ahead` of it is ``[node]``, and the join that follows
        takes ``clock`` itself as its new clock (shared by every grid that joins it: it is read-only)."""
        mine = self._clock
        made = _PARENTS.get(id(clock))  # clock made by write_delta from mine: no comparison (the usual case)
        known = made is not None and made[0] is clock and made[1] is mine and made[2] == node
        if not known and mine.tobytes() != before:
            return False
        self._ahead = (clock, mine, _index(node), clock)
        return True

    def watch(self, token: int) -> None:
        """From now on, note for ``token`` the pixels every mutation writes (what it noted before is dropped)."""
        self._watchers[token] = []

    def unwatch(self, token: int) -> None:
        self._watchers.pop(token, None)

    def watched_by(self, token: int) -> bool:
        return token in self._watchers

    def drain(self, token: int) -> list:
        """The pixels written since ``token``'s last drain (or :meth:`watch`), as ints and index arrays in the order
        written, with repeats; a pixel written back to its old entry is still listed. Empties the list."""
        noted = self._watchers[token]
        if not noted:
            return noted
        self._watchers[token] = []
        return noted

    def _note(self, pixels: int | np.ndarray) -> None:
        for noted in self._watchers.values():
            noted.append(pixels)

    # ------------------------------------------------------------------------------------------- queries
    @property
    def pixels(self) -> int:
        return self.width * self.height

    def index(self, x: int, y: int) -> int:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise IndexError(f"pixel ({x}, {y}) outside the {self.width}x{self.height} grid")
        return y * self.width + x

    def get(self, x: int, y: int) -> int | None:
        """The pixel's value, None when never written."""
        i = self.index(x, y)
        return int(self.f["value"][i]) if self.f["version"][i] > 0 else None

    def entry(self, i: int) -> tuple[int, int, float, int, int]:
        """(value, version, t, node, seq) of flat pixel ``i``."""
        last = self._last_entry
        if last is not None and last[0] == i:
            return last[1]  # (the delta's own tuple: every replica that joined it gives the same object)
        version, t, node, seq, value = _RECORD.unpack_from(self._buffer, i * _SIZE)
        return value, version, t, node, seq

    def values(self) -> np.ndarray:
        """The (height, width) value image (0 where unwritten)."""
        return self.f["value"].reshape(self.height, self.width).copy()

    def written(self) -> np.ndarray:
        return np.flatnonzero(self.f["version"] > 0)

    @property
    def written_count(self) -> int:
        """``len(self.written())``, kept up to date by the mutators (no scan of the grid)."""
        return self._written

    def full_delta(self) -> GridDelta:
        """The whole state as a sparse delta (the written pixels and the clock): full-state sync sends this."""
        idx = self.written()
        return GridDelta(idx=idx, **{n: v[idx].copy() for n, v in self.f.items()}, clock=self.clock.copy())

    @property
    def full_state_bytes(self) -> int:
        """Bytes of the dense state (every pixel's entry and the clock): what a full-state sync of the grid ships."""
        return self.pixels * ENTRY_BYTES + 8 * int(self.clock.size)

    def contains(self, delta: GridDelta) -> bool:
        """``delta ⊑ self`` (joining it would change nothing)."""
        if not clocks.leq(delta.clock, self.clock):
            return False
        if len(delta) == 0:
            return True
        mine = {n: v[delta.idx] for n, v in self.f.items()}
        return not bool(np.any(_wins(mine, delta.fields())))

    def same_as(self, other: PixelGrid) -> bool:
        return all(np.array_equal(self.f[n], other.f[n]) for n in _FIELDS) and np.array_equal(
            *clocks._pad(self.clock, other.clock))

    def copy(self) -> PixelGrid:
        """An independent grid with the same state (no watchers)."""
        out = PixelGrid(self.width, self.height, int(self.clock.size))
        out._records[:] = self._records
        out._own_clock(self._clock.copy())
        out._written = self._written
        return out

    # ------------------------------------------------------------------------------------------ mutators
    def write_delta(self, x: int, y: int, value: int, *, node: int, t: float) -> GridDelta:
        """The delta mutator of a write by ``node`` at its clock ``t``: ticks ``node``'s clock entry (``update_vc``)
        and stamps the pixel with version = sum of the new clock, dot = (node, clock[node]). Does not change
        ``self``; ``self.join(delta)`` applies it (``m(X) = X ⊔ m^δ(X)``). The delta's clock is read-only, and
        remembered as this clock's step (see :meth:`steps_to`, :meth:`join_next`); the join of it here takes it."""
        i = self.index(x, y)
        clock = clocks.update_vc(self._clock, node)
        clock.setflags(write=False)  # (a delta's arrays are never written in place)
        # what steps_to then knows without comparing, and the join of it here: ahead of this clock by node's entry
        _PARENTS[id(clock)] = (clock, self._clock, node)
        if len(_PARENTS) > 64:  # (the latest writes' only: a delivery follows its write soon)
            del _PARENTS[next(iter(_PARENTS))]
        self._ahead = (clock, self._clock, _index(node), clock)
        delta = GridDelta(idx=np.array([i], np.int64), value=np.array([value], np.int64),
                          version=np.array([int(clock.sum())], np.int64), t=np.array([t], np.float64),
                          node=np.array([node], np.int32), seq=np.array([int(clock[node])], np.int64), clock=clock)
        return delta

    def write(self, x: int, y: int, value: int, *, node: int, t: float) -> GridDelta:
        """Write and return the delta (``X := X ⊔ m^δ(X)``)."""
        delta = self.write_delta(x, y, value, node=node, t=t)
        self.join(delta)
        return delta

    def join(self, delta: GridDelta) -> np.ndarray:
        """``self := self ⊔ delta``; returns the flat indices of the pixels whose entry changed (the writes this
        replica now shows)."""
        mine, theirs = self._clock, delta.clock
        if type(theirs) is np.ndarray and theirs.dtype is mine.dtype and theirs.ndim == 1 and theirs.size == mine.size:
            above = self.ahead(theirs)  # the common case (clocks.join's, without its checks)
            if above.size:  # an unchanged clock stays the same object
                joined = self._ahead[3]  # (ahead just kept its answer for theirs and mine)
                if joined is None:
                    self._own_clock(np.maximum(mine, theirs), above)
                else:  # theirs is the join (steps_to), read-only already
                    self._clock_from, self._clock_moved, self._clock = mine, above, joined
        else:
            joined = clocks.join(mine, theirs)
            if joined is mine or joined is theirs:
                joined = joined.copy()
            self._own_clock(joined)
        size = delta.idx.size
        if size == 0:
            return np.zeros(0, np.int64)
        if size == 1:  # one write (the common delta)
            return delta.pixels() if self._join_one(delta._one()) else np.zeros(0, np.int64)
        self._last_entry = None  # (below: writes several records)
        mine = {n: v[delta.idx] for n, v in self._w.items()}
        wins = _wins(mine, delta.fields())
        changed = delta.idx[wins]
        if len(changed):
            self._written += int(np.count_nonzero((mine["version"][wins] <= 0) & (delta.version[wins] > 0)))
        for n in _FIELDS:
            self._w[n][changed] = getattr(delta, n)[wins]
        if self._watchers and len(changed):
            self._note(changed)
        return changed

    def _join_one(self, one: tuple) -> bool:
        """Join a one-pixel delta's entry (``GridDelta._one``) after the clocks joined; whether it won: compared as
        a tuple (the same order as _wins), read and written as its record's bytes."""
        i, theirs, stored, record, _ = one
        at = i * _SIZE
        held = _RECORD.unpack_from(self._buffer, at)  # (version, t, node, seq, value), as ``theirs``
        if not theirs > held:
            return False
        self._buffer[at:at + _SIZE] = record
        self._last_entry = (i, stored)
        if held[0] <= 0 < theirs[0]:
            self._written += 1
        if self._watchers:
            self._note(i)
        return True

    def join_next(self, delta: GridDelta, node: int, mine: np.ndarray) -> list[int] | None:
        """:meth:`join` of the usual delivery in one step, the changed pixels as a list (not to be changed): a
        one-pixel delta whose clock is this grid's clock ``mine`` (the caller's, checked) with ``node``'s entry one
        higher, known without comparing (write_delta made it from this very clock; what steps_to then finds, and
        the clock join takes). None, nothing done, in any other case."""
        clock = delta.clock
        made = _PARENTS.get(id(clock))
        if (made is None or made[0] is not clock or made[1] is not mine or mine is not self._clock or made[2] != node
                or delta.idx.size != 1):
            return None
        above = _INDEX.get(node)
        self._ahead = (clock, mine, _index(node) if above is None else above, clock)
        self._clock_from, self._clock_moved, self._clock = mine, self._ahead[2], clock
        one = delta._one()
        return one[4] if self._join_one(one) else []

    def overwrite(self, idx: int | np.ndarray, **entries: int | float | np.ndarray) -> None:
        """Set fields of pixels ``idx`` as given, whatever the join would keep: not a CRDT operation (a planted
        fault, a test's corrupt state); noted for watchers like any write. Unknown fields raise KeyError."""
        self._last_entry = None
        for name, value in entries.items():
            if name not in self._w:
                raise KeyError(f"unknown field {name!r}: valid: {', '.join(_FIELDS)}")
            self._w[name][idx] = value
        self._written = int(np.count_nonzero(self._w["version"] > 0))
        if self._watchers:
            self._note(np.atleast_1d(np.asarray(idx, np.int64)).copy())

    def join_grid(self, other: PixelGrid) -> np.ndarray:
        """``self := self ⊔ other`` (dense)."""
        return self.join(other.full_delta())

    # ------------------------------------------------------------------------------------------ persistence
    def restore(self, idx: np.ndarray, entries: np.ndarray, clock: np.ndarray) -> None:
        """Load persisted pixels (``entries`` rows: value, version, t, node, seq) and the clock."""
        self.clock = clocks.join(self.clock, np.asarray(clock, np.int64))  # (the setter copies)
        if len(idx):
            rows = np.asarray(entries, dtype=np.float64)
            self.join(GridDelta(idx=np.asarray(idx, np.int64), value=rows[:, 0].astype(np.int64),
                                version=rows[:, 1].astype(np.int64), t=rows[:, 2], node=rows[:, 3].astype(np.int32),
                                seq=rows[:, 4].astype(np.int64), clock=self.clock))


def join_states(a: PixelGrid, b: PixelGrid) -> PixelGrid:
    """``a ⊔ b`` as a new state (neither argument changes)."""
    out = a.copy()
    out.join_grid(b)
    return out

