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
not the number of replicas (a copy of each replica's grid and clock is kept to see what changed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.crdt import _wins
from seedance.models.protocols.monitoring import NodeMonitor


def check(nodes: list[Any]) -> list[str]:
    """Breaches of clock honesty among ``nodes`` (live causal nodes; None entries are skipped)."""
    live = [n for n in nodes if n is not None and hasattr(n, "grid")]
    if not live:
        return []
    width = max(n.grid.clock.size for n in live)
    clock = np.stack([np.pad(n.grid.clock, (0, width - n.grid.clock.size)) for n in live])  # (nodes, width)
    fields = {name: np.stack([n.grid.f[name] for n in live]) for name in ("version", "t", "node", "seq", "value")}
    found: list[str] = []
    for a_pos, a in enumerate(live):
        fa = {name: arr[a_pos] for name, arr in fields.items()}
        written = fa["version"] > 0
        if not written.any():
            continue
        writers = np.clip(np.where(written, fa["node"], 0), 0, width - 1).astype(np.int64)
        covered = written & (clock[:, writers] >= fa["seq"])  # (nodes, pixels): b's clock covers a's entry
        lower = covered & _wins(fields, {name: arr[None, :] for name, arr in fa.items()})
        lower[a_pos] = written & ~covered[a_pos]  # a's own entries beyond its own clock
        for b_pos in np.flatnonzero(lower.any(axis=1)).tolist():
            b = live[b_pos]
            p = int(np.flatnonzero(lower[b_pos])[0])
            if b is a:
                found.append(f"node {a.node_id} holds pixel {p} written by node {int(fa['node'][p])} "
                             f"(dot {int(fa['seq'][p])}) beyond its own clock {clock[a_pos].tolist()}")
            else:
                found.append(f"node {b.node_id}'s clock {clock[b_pos].tolist()} covers write (node "
                             f"{int(fa['node'][p])}, dot {int(fa['seq'][p])}) at pixel {p} held by node {a.node_id}, "
                             f"but node {b.node_id} holds an older entry there")
    return found


class Monitor(NodeMonitor):
    """Clock honesty, incrementally: :meth:`observe_node` after each input, :meth:`finish` (:func:`check`) at the end."""

    def __init__(self) -> None:
        super().__init__()
        self._f: dict[str, np.ndarray] = {}  # field -> (replicas, pixels): each replica's grid as last observed
        self._clock = np.zeros((0, 0), np.int64)  # (replicas, replicas): each replica's clock as last observed
        self._obj: list[Any] = []  # row -> the node object observed there (None: crashed or not yet seen)
        self._alive = np.zeros(0, bool)
        self._dots: dict[tuple[int, int], set[int]] = {}  # (writer, seq) -> the pixels where an entry carries it

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        grid = getattr(node, "grid", None)
        if grid is None:
            return found
        if not self._obj:
            self._allocate(node.num_nodes, grid.pixels)
        row = node.node_id
        if self._obj[row] is not node:  # first sight of this incarnation: every pixel counts as changed
            changed = np.arange(grid.pixels)
            covered: list[int] = []
            self._obj[row] = node
            self._alive[row] = True
        else:
            diff = self._f["version"][row] != grid.f["version"]
            for name in ("value", "t", "node", "seq"):
                diff |= self._f[name][row] != grid.f[name]
            changed = np.flatnonzero(diff)
            covered = self._newly_covered(row, grid.clock)
        if not len(changed) and not covered and np.array_equal(self._clock[row], grid.clock):
            return found
        for name in self._f:
            self._f[name][row, changed] = grid.f[name][changed]
        self._clock[row] = grid.clock
        for p in changed.tolist():
            if self._f["version"][row, p] > 0:
                self._dots.setdefault((int(self._f["node"][row, p]), int(self._f["seq"][row, p])), set()).add(p)
        found.extend(self._held_by(row, changed))
        pixels = np.union1d(changed, np.asarray(covered, np.int64)) if covered else changed
        found.extend(self._covered_by(row, pixels))
        return found

    def _allocate(self, replicas: int, pixels: int) -> None:
        self._f = {name: np.zeros((replicas, pixels), np.float64 if name == "t" else np.int64)
                   for name in ("value", "version", "t", "node", "seq")}
        self._clock = np.zeros((replicas, replicas), np.int64)
        self._obj = [None] * replicas
        self._alive = np.zeros(replicas, bool)

    def _newly_covered(self, row: int, clock: np.ndarray) -> list[int]:
        """The pixels carrying a write that ``clock`` covers and the replica's previous clock did not."""
        old = self._clock[row]
        pixels: list[int] = []
        for writer in np.flatnonzero(clock > old).tolist():
            for seq in range(int(old[writer]) + 1, int(clock[writer]) + 1):
                pixels.extend(self._dots.get((writer, seq), ()))
        return pixels

    def _live(self) -> np.ndarray:
        return np.flatnonzero(self._alive)

    def _held_by(self, row: int, pixels: np.ndarray) -> list[str]:
        """Breaches by the entries ``row`` now holds at ``pixels``: a live replica whose clock covers one of them
        holds an older entry there (``row`` itself: an entry beyond its own clock)."""
        mine = {name: arr[row, pixels] for name, arr in self._f.items()}
        written = mine["version"] > 0
        if not written.any():
            return []
        live = self._live()
        width = self._clock.shape[1]
        writers = np.clip(np.where(written, mine["node"], 0), 0, width - 1)
        covered = written & (self._clock[np.ix_(live, writers)] >= mine["seq"])  # (live, pixels)
        theirs = {name: arr[np.ix_(live, pixels)] for name, arr in self._f.items()}
        lower = covered & _wins(theirs, {name: v[None, :] for name, v in mine.items()})
        me = np.flatnonzero(live == row)
        if me.size:
            lower[me[0]] = written & ~covered[me[0]]
        return [self._report(int(live[i]), row, int(pixels[j]), own=int(live[i]) == row)
                for i, j in zip(*np.nonzero(lower))]

    def _covered_by(self, row: int, pixels: np.ndarray) -> list[str]:
        """Breaches against ``row``'s clock at ``pixels``: a live replica holds an entry there that the clock covers,
        while ``row`` holds an older one."""
        if not len(pixels):
            return []
        live = self._live()
        live = live[live != row]
        theirs = {name: arr[np.ix_(live, pixels)] for name, arr in self._f.items()}
        written = theirs["version"] > 0
        clock = self._clock[row]
        writers = np.clip(np.where(written, theirs["node"], 0), 0, clock.size - 1)
        covered = written & (clock[writers] >= theirs["seq"])
        mine = {name: arr[row, pixels][None, :] for name, arr in self._f.items()}
        lower = covered & _wins(mine, theirs)
        return [self._report(row, int(live[i]), int(pixels[j])) for i, j in zip(*np.nonzero(lower))]

    def _report(self, b: int, a: int, p: int, *, own: bool = False) -> str:
        """The breach at pixel ``p``: ``b``'s clock covers the write ``a`` holds there (``own``: ``a`` is ``b``)."""
        writer, seq = int(self._f["node"][a, p]), int(self._f["seq"][a, p])
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
