"""The causal clock-honesty monitor as it was before the holder-count skip (seedance main 047768f), kept verbatim as
the reference the faster :class:`seedance.models.protocols.causal.invariants.Monitor` is compared with
(tests/test_causal_monitor.py): the same reports, in the same order, after every input."""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.protocols.causal.invariants import check
from seedance.models.protocols.monitoring import NodeMonitor

_ORDER = ("version", "t", "node", "seq", "value")  # an entry's fields in the join order (:func:`_wins`)
_VERSION, _NODE, _SEQ = 0, 2, 3
_NONE = np.zeros(0, np.int64)


def _above(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Elementwise over the last axis: entry ``b`` is strictly greater than entry ``a`` (fields on axis -2, in
    :data:`_ORDER`) — :func:`_wins` on stacked fields, in a handful of array operations."""
    differ = b != a
    first = differ.argmax(axis=-2)[..., None, :]  # the first field where they differ
    return np.take_along_axis(b > a, first, axis=-2)[..., 0, :] & differ.any(axis=-2)



class ReferenceMonitor(NodeMonitor):
    """The monitor as of main 047768f, verbatim (only the name differs)."""

    def __init__(self) -> None:
        super().__init__()
        # (pixels, replicas, fields): each replica's grid as last observed, pixel-major so that one pixel of every
        # replica is one contiguous block (what the cross-replica checks read after each input)
        self._g = np.zeros((0, 0, len(_ORDER)))
        self._clock = np.zeros((0, 0), np.int64)  # (replicas, replicas): each replica's clock as last observed
        self._obj: list[Any] = []  # row -> the node object observed there (None: crashed or not yet seen)
        self._alive = np.zeros(0, bool)
        self._dots: dict[tuple[int, int], set[int]] = {}  # (writer, seq) -> the pixels where an entry carries it
        self._ever = np.zeros(0, bool)

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        grid = getattr(node, "grid", None)
        if grid is None:
            return found
        if not self._obj:
            self._allocate(node.num_nodes, grid.pixels)
        row = node.node_id
        arrays = [grid.f[name] for name in _ORDER]
        raw = tuple(a.tobytes() for a in arrays)  # compared as bytes: one memcmp per field when nothing changed
        if self._obj[row] is not node:  # first sight of this incarnation: every pixel counts as changed
            changed = np.arange(grid.pixels)
            covered: list[int] = []
            self._obj[row] = node
            self._alive[row] = True
        else:
            changed = self._changed(row, arrays, raw)
            covered = self._newly_covered(row, grid.clock)
            if not len(changed) and not covered:
                if not np.array_equal(self._clock[row], grid.clock):
                    self._clock[row] = grid.clock
                return found
        self._raw[row] = raw
        entries = np.stack([a[changed] for a in arrays]).astype(np.float64, copy=False)  # (fields, changed)
        if len(changed):
            self._g[changed, row, :] = entries.T
        self._clock[row] = grid.clock
        mask = entries[_VERSION] > 0
        written = changed[mask]
        self._ever[written] = True
        dots = self._dots
        for p, writer, seq in zip(written.tolist(), entries[_NODE, mask].tolist(), entries[_SEQ, mask].tolist()):
            dots.setdefault((int(writer), int(seq)), set()).add(p)
        found.extend(self._held_by(row, written))
        pixels = np.union1d(changed, np.asarray(covered, np.int64)) if covered else changed
        found.extend(self._covered_by(row, pixels))
        return found

    def _allocate(self, replicas: int, pixels: int) -> None:
        self._g = np.zeros((pixels, replicas, len(_ORDER)))
        self._clock = np.zeros((replicas, replicas), np.int64)
        self._obj = [None] * replicas
        self._raw: list[tuple[bytes, ...] | None] = [None] * replicas  # each grid's fields as last observed, bytes
        self._alive = np.zeros(replicas, bool)
        self._ever = np.zeros(pixels, bool)  # pixels some replica has held a written entry at (a superset of now)

    def _changed(self, row: int, arrays: list[np.ndarray], raw: tuple[bytes, ...]) -> np.ndarray:
        """The pixels whose entry differs from what was last observed at ``row``."""
        old = self._raw[row]
        if raw == old:
            return _NONE
        if old is None or any(a.nbytes != len(o) for a, o in zip(arrays, old)):
            now = np.stack(arrays).astype(np.float64, copy=False)
            return np.flatnonzero((self._g[:, row, :].T != now).any(axis=0))
        mask = None
        for a, new, before in zip(arrays, raw, old):
            if new != before:
                differ = a != np.frombuffer(before, a.dtype)
                mask = differ if mask is None else mask | differ
        return np.flatnonzero(mask)

    def _newly_covered(self, row: int, clock: np.ndarray) -> list[int]:
        """The pixels carrying a write that ``clock`` covers and the replica's previous clock did not."""
        old = self._clock[row]
        pixels: list[int] = []
        for writer in np.flatnonzero(clock > old).tolist():
            for seq in range(int(old[writer]) + 1, int(clock[writer]) + 1):
                pixels.extend(self._dots.get((writer, seq), ()))
        return pixels

    def _held_by(self, row: int, pixels: np.ndarray) -> list[str]:
        """Breaches by the entries ``row`` now holds at ``pixels`` (the written ones matter only): a live replica
        whose clock covers one of them holds an older entry there (``row`` itself: an entry beyond its own
        clock)."""
        if not len(pixels):
            return []
        mine = self._g[pixels, row, :].T  # (fields, pixels)
        written = mine[_VERSION] > 0
        if not written.any():
            return []
        live = np.flatnonzero(self._alive)
        writers = np.clip(mine[_NODE].astype(np.int64), 0, self._clock.shape[1] - 1)
        covered = written & (self._clock[np.ix_(live, writers)] >= mine[_SEQ])  # (live, pixels)
        me = int(np.flatnonzero(live == row)[0])
        own = written & ~covered[me]
        covered[me] = False
        found = [self._report(row, row, int(pixels[j]), own=True) for j in np.flatnonzero(own).tolist()]
        if covered.any():
            theirs = self._at(live, pixels)  # (live, fields, pixels)
            lower = covered & _above(mine[None], theirs)
            found += [self._report(int(live[i]), row, int(pixels[j])) for i, j in zip(*np.nonzero(lower))]
        return found

    def _covered_by(self, row: int, pixels: np.ndarray) -> list[str]:
        """Breaches against ``row``'s clock at ``pixels``: a live replica holds an entry there that the clock covers,
        while ``row`` holds an older one."""
        pixels = pixels[self._ever[pixels]]  # where no replica ever held a written entry, nothing is covered
        if not len(pixels):
            return []
        live = np.flatnonzero(self._alive)
        live = live[live != row]
        theirs = self._at(live, pixels)  # (live, fields, pixels)
        clock = self._clock[row]
        writers = np.clip(theirs[:, _NODE].astype(np.int64), 0, clock.size - 1)
        covered = (theirs[:, _VERSION] > 0) & (clock[writers] >= theirs[:, _SEQ])
        if not covered.any():
            return []
        lower = covered & _above(theirs, self._g[pixels, row, :].T[None])
        return [self._report(row, int(live[i]), int(pixels[j])) for i, j in zip(*np.nonzero(lower))]

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
            self._obj[node_id] = None
            self._alive[node_id] = False

    def _check(self, nodes: list[Any]) -> list[str]:
        return check(nodes)
