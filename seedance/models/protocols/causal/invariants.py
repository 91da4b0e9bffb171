"""The causal protocol's safety invariant across live replicas: every clock is honest.

A replica's clock claims the writes it has seen. If replica ``b``'s clock covers the dot ``(writer, seq)`` of the
entry replica ``a`` holds at pixel ``p`` (``b.clock[writer] >= seq``), then ``b`` has applied that write or a greater
one: ``b``'s entry at ``p`` is not below ``a``'s in the join order. A replica that joins an interval before its causal
predecessors (or a merge that loses entries) claims writes it does not hold, and this finds it — across all pairs,
vectorised over the grid. (``a = b`` checks that every entry a replica holds is covered by its own clock.)

The check runs every ``every``-th call (256; ``sim run`` calls the monitor after every input; the grid comparison is
O(n² · pixels)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.crdt import _wins


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


class Monitor:
    """``observe(live_nodes)`` -> breaches first seen now (checked every ``every``-th call)."""

    def __init__(self, every: int = 256) -> None:
        self.every = every
        self.calls = 0
        self.seen: set[str] = set()
        self._last: tuple = ()

    def observe(self, nodes: list[Any]) -> list[str]:
        self.calls += 1
        if self.calls % self.every:
            return []
        stamp = tuple((n.node_id, n.grid.clock.tobytes()) for n in nodes if n is not None and hasattr(n, "grid"))
        if stamp == self._last:
            return []  # no clock moved since the last check: no state did either
        self._last = stamp
        new = [text for text in check(nodes) if text not in self.seen]
        self.seen.update(new)
        return new
