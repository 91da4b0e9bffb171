"""The causal protocol's full check of clock honesty over every live replica's whole state (the end of a run; the
rule is in :mod:`seedance.models.protocols.causal.invariants`), and the entry order both checks share."""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.crdt import _wins

_ORDER = ("version", "t", "node", "seq", "value")  # an entry's fields in the join order (:func:`_wins`)
_VERSION, _NODE, _SEQ = 0, 2, 3


def check(nodes: list[Any]) -> list[str]:
    """Breaches of clock honesty among ``nodes`` (live causal nodes; None entries are skipped)."""
    live = [n for n in nodes if n is not None and hasattr(n, "grid")]
    if not live:
        return []
    width = max(n.grid.clock.size for n in live)
    clock = np.stack([np.pad(n.grid.clock, (0, width - n.grid.clock.size)) for n in live])  # (nodes, width)
    fields = {name: np.stack([n.grid.f[name] for n in live]) for name in ("version", "t", "node", "seq", "value")}
    if not _any_breach(clock, fields):
        return []  # the pairwise search below (O(n² · pixels)) only words the breaches a faster pass found
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


def _any_breach(clock: np.ndarray, fields: dict[str, np.ndarray], chunk: int = 256) -> bool:
    """Whether :func:`check` would find a breach, in O(pixels · n · distinct entries per pixel) instead of
    O(n² · pixels): replicas holding the same entry at a pixel breach alike, so each distinct written entry of a
    pixel is held against every replica's clock and entry once (a few writes per pixel, not n holders)."""
    width = clock.shape[1]
    written = fields["version"] > 0  # (nodes, pixels)
    if not written.any():
        return False
    writers = np.clip(np.where(written, fields["node"], 0), 0, width - 1).astype(np.int64)
    if (written & (np.take_along_axis(clock, writers, axis=1) < fields["seq"])).any():
        return True  # an entry beyond its holder's own clock
    distinct = _distinct_entries(fields, written)
    for start in range(0, len(distinct), chunk):
        part = distinct[start:start + chunk]
        at = part[:, 0].astype(np.int64)
        entry = part[:, 1:].T  # (fields, k)
        writer = np.clip(entry[_NODE].astype(np.int64), 0, width - 1)
        covered = clock[:, writer] >= entry[_SEQ]  # (nodes, k): the replica's clock covers the write
        theirs = np.stack([fields[name][:, at] for name in _ORDER], axis=1).astype(np.float64)  # (nodes, fields, k)
        if (covered & _above(entry[None], theirs)).any():
            return True
    return False


def _distinct_entries(fields: dict[str, np.ndarray], written: np.ndarray, holders: int = 64) -> np.ndarray:
    """The distinct (pixel, entry) rows of the written entries (pixel, then the fields in :data:`_ORDER`, as float64;
    sorted, as ``np.unique`` gives them), gathered ``holders`` replicas at a time: all the holders' rows at once
    would take 48 bytes per replica and pixel (200 MB at 1,024 replicas of a 64×64 grid, with a sorted copy)."""
    parts = []
    for start in range(0, written.shape[0], holders):
        holder, pixel = np.nonzero(written[start:start + holders])
        holder += start
        rows = np.column_stack([pixel] + [fields[name][holder, pixel].astype(np.float64) for name in _ORDER])
        parts.append(np.unique(rows, axis=0))
    return np.unique(np.concatenate(parts), axis=0) if len(parts) > 1 else parts[0]


def _above(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Elementwise over the last axis: entry ``b`` is strictly greater than entry ``a`` (fields on axis -2, in
    :data:`_ORDER`) — :func:`_wins` on stacked fields, in a handful of array operations."""
    differ = b != a
    first = differ.argmax(axis=-2)[..., None, :]  # the first field where they differ
    return np.take_along_axis(b > a, first, axis=-2)[..., 0, :] & differ.any(axis=-2)
