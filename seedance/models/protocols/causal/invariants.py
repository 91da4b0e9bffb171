"""The causal protocol's safety invariant across live replicas: every clock is honest.

A replica's clock claims the writes it has seen. If replica ``b``'s clock covers the dot ``(writer, seq)`` of the
entry replica ``a`` holds at pixel ``p`` (``b.clock[writer] >= seq``), then ``b`` has applied that write or a greater
one: ``b``'s entry at ``p`` is not below ``a``'s in the join order. A replica that joins an interval before its causal
predecessors (or a merge that loses entries) claims writes it does not hold, and this finds it — across all pairs,
vectorised over the grid. (``a = b`` checks that every entry a replica holds is covered by its own clock.)

:func:`check` compares every pair over the whole grid (O(n² · pixels)); it is the full check at the end of a run.
:class:`Monitor` is told after every input which replica handled it and examines only what changed there: the pixels
whose entry changed (against every live replica's clock and entry) and the writes its clock newly covers (found by
their dots, against the entries the live replicas hold at those pixels). Every pair is clean after each observation,
so a breach can only arise from such a change: the monitor is exact, at a cost per input that follows the change,
not the number of replicas. What changed is known without comparing grids: a :class:`~seedance.models.crdt.PixelGrid`
shows its arrays read-only and notes every pixel its own mutators write for each watcher, so the monitor drains the
notes of the grid it watches and compares only those pixels with its copy of the replica's entries (a grid it has
not watched yet, or an object that is not a PixelGrid, is compared whole). The clock is compared whole (O(replicas),
vectorised) unless it is the same read-only array as before (a PixelGrid replaces its clock when it changes) or the
grid says where it moved (one join replaced the clock last seen: :meth:`PixelGrid.moved_since`).

Two shortcuts keep that cost off the number of replicas, with the same reports:

* It counts, per pixel, the distinct written entries the live replicas hold. A replica that takes an entry another
  live replica already held is not checked against the other replicas again while no breach has been found: that
  holder's pair with each of them was clean after the previous input, and they have not changed since, so the same
  check would pass (its own clock is still checked). A breach stays in the remembered state, so after the first one
  (or a dot that :meth:`Monitor._newly_covered` could miss, a writer outside the clock) every check is made in full.
* Whether the replica's clock newly covers a write it holds an older entry for is decided on those distinct entries,
  a few per pixel, not on every replica's; only a breach found so is looked up replica by replica, for its words.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from seedance.models.protocols.causal.full_check import _NODE, _ORDER, _SEQ, _VERSION, _above, check
from seedance.models.protocols.monitoring import NodeMonitor


_NONE = np.zeros(0, np.int64)
_UNWRITTEN = (0.0, 0.0, -1.0, 0.0, 0.0)  # an unwritten pixel's entry (:func:`seedance.models.crdt._empty_fields`)
_ENTRY = struct.Struct(f"={len(_ORDER)}d")  # an entry's key in :attr:`Monitor._held`: its fields as float64
_EXACT = 2.0 ** 53  # a dot's sequence number beyond this is not exact in float64


def _not_unwritten(arrays: list[np.ndarray]) -> np.ndarray:
    """Where a grid's entry (its fields in :data:`_ORDER`) is not :data:`_UNWRITTEN`."""
    differ = arrays[0] != _UNWRITTEN[0]
    for a, unwritten in zip(arrays[1:], _UNWRITTEN[1:]):
        differ |= a != unwritten
    return differ


def _drop(held: dict[bytes, int], key: bytes) -> None:
    """One holder of ``key`` fewer."""
    held[key] -= 1
    if not held[key]:
        del held[key]


class Monitor(NodeMonitor):
    """Clock honesty, incrementally: :meth:`observe_node` after each input, :meth:`finish` (:func:`check`) at the end."""

    small = 8  # at most this many changed pixels: handled in plain Python (numpy's overhead dominates tiny arrays)

    def __init__(self) -> None:
        super().__init__()
        self._g = np.zeros((0, 0, len(_ORDER)))  # (pixels, replicas, fields): each grid as last observed (_allocate)
        self._clock = np.zeros((0, 0), np.int64)  # (replicas, replicas): each replica's clock as last observed
        self._obj: list[Any] = []  # row -> the node object observed there (None: crashed or not yet seen)
        self._alive = np.zeros(0, bool)
        self._dots: dict[tuple[int, int], set[int]] = {}  # (writer, seq) -> the pixels where an entry carries it
        self._held: list[dict[bytes, int]] = []  # per pixel: each distinct entry live replicas hold -> how many
        self._clean = True  # no breach found yet (and every dot findable again): every live pair is clean
        self._token = id(self)  # this monitor's name with the grids it watches (the rest: _allocate)

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        grid = getattr(node, "grid", None)
        if grid is None:
            return found
        if not self._obj:
            self._allocate(node.num_nodes, grid.pixels)
        row = node.node_id
        noted = None
        if self._obj[row] is node and self._grid[row] is grid and grid.watched_by(self._token):
            noted = grid.drain(self._token)  # the common case: a grid watched since this incarnation was first seen
            if not noted and grid.clock is self._seen[row]:
                return found  # nothing written and the same clock: an acknowledgement, a timer
            if (len(noted) == 1 and type(noted[0]) is int) or len(noted) <= self.small and all(
                    type(p) is int for p in noted):  # one pixel (the common case) is decided at once
                return found + self._watched(row, grid, noted) if found else self._watched(row, grid, noted)
        arrays = [grid.f[name] for name in _ORDER]
        first = self._obj[row] is not node
        if first:  # first sight of this incarnation: every pixel counts as changed
            if self._alive[row]:
                self._uncount(row)  # a predecessor never forgotten: its entries no longer count
            changed = np.arange(grid.pixels)
            covered: list[int] = []
            self._obj[row] = node
            self._alive[row] = True
            self._seen[row] = grid.clock
        else:
            changed = self._changed(row, grid, arrays, noted)
            clock = grid.clock
            moved = self._moved(row, clock)
            covered = self._newly_covered(row, clock, moved)
            if not len(changed) and not covered:
                if self._grid[row] is not grid:
                    self._follow(row, grid, arrays)
                return found
        self._follow(row, grid, arrays)
        self._clock[row] = grid.clock
        before, now = self._store(row, changed, arrays, first)
        return found + self._judge(row, changed, covered, before, now)

    def _moved(self, row: int, clock: np.ndarray, grid: Any = None) -> np.ndarray | None:
        """The entries where ``clock`` differs from ``row``'s clock as last observed (None: a clock of another
        size), and ``clock`` remembered as the object last seen. The same read-only clock object that owns its data
        is :data:`_NONE` at once (a PixelGrid replaces its clock when it changes); ``grid`` may know the entries."""
        seen, old = self._seen[row], self._clock[row]
        if clock is seen and not clock.flags.writeable and clock.base is None:
            moved = _NONE
        elif grid is not None and clock is grid.clock and (hint := grid.moved_since(seen)) is not None:
            moved = hint  # one join replaced the clock last seen (whose values _clock[row] holds) and knew where
        elif clock.shape == old.shape:
            if seen is not None and not seen.flags.writeable and seen.base is None and seen.shape == old.shape:
                old = seen if seen.dtype == old.dtype else old
            moved = (clock != old).nonzero()[0]
        else:
            moved = None
        self._seen[row] = clock
        return moved

    def _judge(self, row: int, changed: np.ndarray | list[int], covered: list[int],
               before: list[tuple[int, tuple[float, ...]]], now: list[tuple[int, tuple[float, ...]]]) -> list[str]:
        """The breaches of ``row``'s change, once its entries are stored (``before`` / ``now``, see :meth:`_store`):
        by the entries it holds now, and against its clock where it changed or now covers a write."""
        known = self._count(before, now)
        breaches = self._held_by(row, now, known)
        if len(changed) + len(covered) <= self.small:
            changed = changed.tolist() if isinstance(changed, np.ndarray) else changed
            pixels = sorted(set(changed).union(covered)) if covered else changed
        else:  # where no replica ever held a written entry, nothing is covered
            pixels = np.asarray(changed, np.int64)
            pixels = np.union1d(pixels, np.asarray(covered, np.int64)) if covered else pixels
            pixels = pixels[self._ever[pixels]].tolist()
        breaches += self._covered_by(row, pixels)
        if breaches:
            self._clean = False  # a breach stays in the remembered state: from now on every check is made in full
        return breaches

    def _watched(self, row: int, grid: Any, noted: list[int]) -> list[str]:
        """:meth:`_observe` for a watched grid that noted at most :attr:`small` single pixels: the same steps, with
        the entries compared, stored and counted in one pass over plain tuples."""
        clock = grid.clock
        moved = self._moved(row, clock, grid)
        if not noted and moved is _NONE:
            return []  # nothing written, and the same clock
        changed: list[int] = []
        before: list[tuple[int, tuple[float, ...]]] = []
        now: list[tuple[int, tuple[float, ...]]] = []
        if noted:
            g, arrays = self._g, self._arrays[row]
            for p in sorted(set(noted)) if len(noted) > 1 else noted:
                at = g[p, row]
                old = tuple(at.tolist())
                entry = tuple([float(a.item(p)) for a in arrays])
                if entry != old:
                    changed.append(p)
                    at[:] = entry
                    if old[_VERSION] > 0:
                        before.append((p, old))
                    if entry[_VERSION] > 0:
                        now.append((p, entry))
        covered = self._newly_covered(row, clock, moved)
        if not changed and not covered:
            return []
        return self._judge(row, changed, covered, before, now)

    def _follow(self, row: int, grid: Any, arrays: list[np.ndarray]) -> None:
        """Keep track of ``row``'s grid as just observed: a grid that notes its writes (:meth:`PixelGrid.watch`) is
        watched from now on; any other is remembered as bytes for the next whole comparison."""
        if getattr(grid, "watch", None) is None:
            self._grid[row] = None
            self._arrays[row] = None
            self._raw[row] = tuple([a.tobytes() for a in arrays])
        elif self._grid[row] is not grid or not grid.watched_by(self._token):
            if self._grid[row] is not None:
                self._grid[row].unwatch(self._token)
            grid.watch(self._token)
            self._grid[row] = grid
            self._arrays[row] = arrays  # a PixelGrid's field arrays are never replaced
            self._raw[row] = None

    def _allocate(self, replicas: int, pixels: int) -> None:
        # pixel-major: one pixel of every replica is one contiguous block (what the cross-replica checks read)
        self._g = np.empty((pixels, replicas, len(_ORDER)))
        self._g[...] = _UNWRITTEN  # a replica's first sight stores only its other entries (at boot: none)
        self._fresh = np.ones(replicas, bool)  # rows never stored: they hold the unwritten entry everywhere
        self._ever = np.zeros(pixels, bool)  # pixels some replica has held a written entry at (a superset of now)
        self._clock = np.zeros((replicas, replicas), np.int64)
        self._obj = [None] * replicas
        # each grid as last observed: the grid object when it notes its writes for this monitor, else its fields
        # as bytes (compared whole after each input)
        self._grid: list[Any] = [None] * replicas
        self._arrays: list[Any] = [None] * replicas  # the watched grid's field arrays, in _ORDER
        self._seen: list[Any] = [None] * replicas  # each replica's clock object as last observed
        self._raw: list[tuple[bytes, ...] | None] = [None] * replicas
        self._alive = np.zeros(replicas, bool)
        self._held = [{} for _ in range(pixels)]

    def _store(self, row: int, changed: np.ndarray, arrays: list[np.ndarray],
               first: bool) -> tuple[list[tuple[int, tuple[float, ...]]], list[tuple[int, tuple[float, ...]]]]:
        """Remember the entries ``row`` now holds at ``changed``; returns the written ones it held there before
        (none at a first sight: nothing of it counts) and those it holds now, as (pixel, entry) in pixel order."""
        g = self._g
        if first and self._fresh[row]:
            self._fresh[row] = False
            if len(changed) > self.small:  # its row holds the unwritten entry everywhere: only the others change it
                changed = changed[_not_unwritten(arrays)]
        if len(changed) <= self.small:  # one pixel at a time (basic indexing: no fancy-index machinery)
            before, now = [], []
            for p in changed.tolist():
                at = g[p, row]
                if not first:
                    old = tuple(at.tolist())
                    if old[_VERSION] > 0:
                        before.append((p, old))
                entry = tuple([float(a.item(p)) for a in arrays])
                at[:] = entry
                if entry[_VERSION] > 0:
                    now.append((p, entry))
            return before, now
        entries = np.stack([a[changed] for a in arrays], axis=1).astype(np.float64, copy=False)  # (changed, fields)
        before = []
        if not first:
            old = g[changed, row, :]
            mask = old[:, _VERSION] > 0
            before = list(zip(changed[mask].tolist(), map(tuple, old[mask].tolist())))
        g[changed, row, :] = entries
        mask = entries[:, _VERSION] > 0
        return before, list(zip(changed[mask].tolist(), map(tuple, entries[mask].tolist())))

    def _count(self, before: list[tuple[int, tuple[float, ...]]],
               now: list[tuple[int, tuple[float, ...]]]) -> list[bool] | None:
        """Count the entries ``now`` held in place of ``before`` (see :meth:`_store`) and note their dots. Returns,
        while every live pair is clean, whether another live replica held each entry of ``now`` there before this
        input (None: not clean, everything is checked)."""
        held, dots, ever, width, pack = self._held, self._dots, self._ever, self._clock.shape[1], _ENTRY.pack
        for p, old in before:
            _drop(held[p], pack(*old))
        known: list[bool] = []
        for p, entry in now:
            writer, seq = entry[_NODE], entry[_SEQ]
            dots.setdefault((int(writer), int(seq)), set()).add(p)
            ever[p] = True
            if not (0 <= writer < width and -_EXACT < seq < _EXACT):
                self._clean = False  # a dot :meth:`_newly_covered` might not find again: the skip's premise fails
            key, at = pack(*entry), held[p]
            count = at.get(key, 0)
            known.append(count > 0)
            at[key] = count + 1
        return known if self._clean else None

    def _uncount(self, row: int) -> None:
        """The replica at ``row`` is no longer live: its entries no longer count."""
        pixels = np.flatnonzero(self._g[:, row, _VERSION] > 0)
        for p, old in zip(pixels.tolist(), self._g[pixels, row, :].tolist()):
            _drop(self._held[p], _ENTRY.pack(*old))

    def _changed(self, row: int, grid: Any, arrays: list[np.ndarray], noted: list | None = None) -> np.ndarray:
        """The pixels whose entry differs from what was last observed at ``row``: among the pixels the grid noted
        as written when it is the one watched (``noted``: already drained), else found by comparing the whole
        grid."""
        if noted is not None or (self._grid[row] is grid and grid.watched_by(self._token)):
            if noted is None:
                noted = grid.drain(self._token)
            if not noted:
                return _NONE
            g = self._g[:, row, :]
            if (len(noted) == 1 and type(noted[0]) is int) or len(noted) <= self.small and all(
                    type(p) is int for p in noted):  # one pixel (the common case) is decided at once
                return np.array(sorted(p for p in set(noted) if tuple(g[p].tolist()) != tuple(
                    [float(a.item(p)) for a in arrays])), np.int64)
            pixels = np.unique(np.concatenate([np.atleast_1d(p) for p in noted]).astype(np.int64))
            now = np.stack([a[pixels] for a in arrays], axis=1).astype(np.float64, copy=False)
            return pixels[(g[pixels] != now).any(axis=1)]
        old = self._raw[row]
        if old is None or any(a.nbytes != len(o) for a, o in zip(arrays, old)):
            now = np.stack(arrays).astype(np.float64, copy=False)
            return np.flatnonzero((self._g[:, row, :].T != now).any(axis=0))
        mask = None
        for a, before in zip(arrays, old):
            if a.tobytes() != before:
                differ = a != np.frombuffer(before, a.dtype)
                mask = differ if mask is None else mask | differ
        return _NONE if mask is None else np.flatnonzero(mask)

    def _newly_covered(self, row: int, clock: np.ndarray, moved: np.ndarray | None = None) -> list[int]:
        """The pixels carrying a write that ``clock`` covers and the replica's previous clock did not (``moved``:
        the entries where the two clocks differ, when known); ``clock`` is ``row``'s clock as observed from now on."""
        old = self._clock[row]
        pixels: list[int] = []
        if moved is None:
            moved = (clock != old).nonzero()[0]
        for writer in (moved := moved.tolist()):
            if (now := clock.item(writer)) > (was := old.item(writer)):  # Python numbers: no numpy scalars
                for seq in range(int(was) + 1, int(now) + 1):
                    pixels.extend(self._dots.get((writer, seq), ()))
        for writer in moved if len(moved) <= self.small else ():  # the entries that moved, not the whole row
            old[writer] = clock.item(writer)
        if len(moved) > self.small:
            old[:] = clock
        return pixels

    def _held_by(self, row: int, now: list[tuple[int, tuple[float, ...]]], known: list[bool] | None) -> list[str]:
        """Breaches by the written entries ``row`` now holds (``now``, see :meth:`_store`): one beyond its own clock,
        or a live replica whose clock covers it holding an older one. Where ``known``, another live replica held the
        same entry before this input while every pair was clean: against the others (unchanged since) its check
        stands for this one, so only ``row``'s own clock is checked there."""
        if not now:
            return []
        clock = self._clock[row]
        last = clock.size - 1
        if len(now) <= self.small:
            found = [self._report(row, row, p, own=True) for p, entry in now
                     if not float(clock.item(min(max(int(entry[_NODE]), 0), last))) >= entry[_SEQ]]
        else:
            mine = np.array([entry for _, entry in now]).T  # (fields, pixels)
            beyond = ~(clock[np.clip(mine[_NODE].astype(np.int64), 0, last)] >= mine[_SEQ])
            found = [self._report(row, row, now[j][0], own=True) for j in np.flatnonzero(beyond).tolist()]
        if known is not None:
            now = [held for held, skip in zip(now, known) if not skip]
        return found + self._lower(row, np.array([p for p, _ in now], np.int64)) if now else found

    def _lower(self, row: int, pixels: np.ndarray) -> list[str]:
        """The live replicas whose clock covers the entry ``row`` holds at one of ``pixels`` (written ones) while
        they hold an older one there."""
        mine = self._g[pixels, row, :].T  # (fields, pixels)
        live = np.flatnonzero(self._alive)
        live = live[live != row]
        writers = np.clip(mine[_NODE].astype(np.int64), 0, self._clock.shape[1] - 1)
        covered = self._clock[np.ix_(live, writers)] >= mine[_SEQ]  # (others, pixels)
        if not covered.any():
            return []
        theirs = self._at(live, pixels)  # (others, fields, pixels)
        lower = covered & _above(mine[None], theirs)
        return [self._report(int(live[i]), row, int(pixels[j])) for i, j in zip(*np.nonzero(lower))]

    def _covered_by(self, row: int, pixels: list[int]) -> list[str]:
        """Breaches against ``row``'s clock at ``pixels`` (sorted): a live replica holds an entry there that the clock
        covers, while ``row`` holds an older one."""
        held = self._held
        pixels = [p for p in pixels if held[p]]  # where no live replica holds a written entry, nothing is covered
        if not pixels or not self._any_covered(row, pixels):
            return []
        at = np.array(pixels, np.int64)
        live = np.flatnonzero(self._alive)
        live = live[live != row]
        theirs = self._at(live, at)  # (live, fields, pixels)
        clock = self._clock[row]
        writers = np.clip(theirs[:, _NODE].astype(np.int64), 0, clock.size - 1)
        covered = (theirs[:, _VERSION] > 0) & (clock[writers] >= theirs[:, _SEQ])
        if not covered.any():
            return []
        lower = covered & _above(theirs, self._g[at, row, :].T[None])
        return [self._report(row, int(live[i]), pixels[j]) for i, j in zip(*np.nonzero(lower))]

    def _any_covered(self, row: int, pixels: list[int]) -> bool:
        """Whether :meth:`_covered_by` finds a breach at ``pixels``, decided on the distinct entries the live replicas
        hold there (:attr:`_held`, a few per pixel) instead of every replica's: replicas holding one entry breach
        alike, and ``row``'s own entry is never above itself."""
        clock, held, g = self._clock[row], self._held, self._g
        last = clock.size - 1
        if len(pixels) <= self.small:
            for p in pixels:
                own = tuple(g[p, row].tolist())
                for key in held[p]:
                    entry = _ENTRY.unpack(key)
                    if entry > own and float(clock.item(min(max(int(entry[_NODE]), 0), last))) >= entry[_SEQ]:
                        return True
            return False
        keys = [(j, key) for j, p in enumerate(pixels) for key in held[p]]
        theirs = np.frombuffer(b"".join(key for _, key in keys), np.float64).reshape(len(keys), len(_ORDER)).T
        covered = clock[np.clip(theirs[_NODE].astype(np.int64), 0, last)] >= theirs[_SEQ]
        mine = g[np.array(pixels, np.int64)[[j for j, _ in keys]], row, :].T
        return bool((covered & _above(theirs, mine)).any())

    def _at(self, rows: np.ndarray, pixels: np.ndarray) -> np.ndarray:
        """The remembered entries of replicas ``rows`` at ``pixels``, (rows, fields, pixels): the pixels are taken
        first, so the copy is of rows x fields x pixels, never of whole grids (at 1,024 replicas of a 64x64 grid,
        one whole-grid copy is 168 MB), and each pixel is one contiguous block of every replica's entry."""
        taken = self._g[pixels].transpose(1, 2, 0)  # one contiguous block per pixel
        return taken if len(rows) == taken.shape[0] else taken[rows]

    def _report(self, b: int, a: int, p: int, *, own: bool = False) -> str:
        """The breach at pixel ``p``: ``b``'s clock covers the write ``a`` holds there (``own``: ``a`` is ``b``)."""
        writer, seq = int(self._g[p, a, _NODE]), int(self._g[p, a, _SEQ])
        if own:
            return (f"node {a} holds pixel {p} written by node {writer} (dot {seq}) beyond its own clock "
                    f"{self._clock[a].tolist()}")
        return (f"node {b}'s clock {self._clock[b].tolist()} covers write (node {writer}, dot {seq}) at pixel {p} "
                f"held by node {a}, but node {b} holds an older entry there")

    def forget(self, node_id: Any) -> None:
        super().forget(node_id)
        if node_id < len(self._obj):
            if self._alive[node_id]:
                self._uncount(node_id)
            if self._grid[node_id] is not None:
                self._grid[node_id].unwatch(self._token)
                self._grid[node_id] = None
            self._seen[node_id] = None
            self._obj[node_id] = None
            self._alive[node_id] = False

    def _release(self) -> None:
        """The copy of every replica's grid goes before :func:`check` stacks every grid again (168 MB each at 1,024
        replicas of 64x64); the grids stop noting writes for this monitor."""
        for grid in getattr(self, "_grid", ()):
            if grid is not None:
                grid.unwatch(self._token)
        self._g, self._clock, self._obj = np.zeros((0, 0, len(_ORDER))), np.zeros((0, 0), np.int64), []
        self._alive, self._dots, self._held, self._clean, self._grid = np.zeros(0, bool), {}, [], True, []

    def _check(self, nodes: list[Any]) -> list[str]:
        return check(nodes)
