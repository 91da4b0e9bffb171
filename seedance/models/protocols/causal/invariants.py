"""The causal protocol's safety invariant across live replicas: every clock is honest.

A replica's clock claims the writes it has seen. If replica ``b``'s clock covers the dot ``(writer, seq)`` of the
entry replica ``a`` holds at pixel ``p`` (``b.clock[writer] >= seq``), then ``b`` has applied that write or a greater
one: ``b``'s entry at ``p`` is not below ``a``'s in the join order. A replica that joins an interval before its causal
predecessors (or a merge that loses entries) claims writes it does not hold, and this finds it — across all pairs,
vectorised over the grid. (``a = b`` checks that every entry a replica holds is covered by its own clock.)

The check runs every ``every``-th call (``sim run`` calls the monitor after every input; the grid comparison is
O(n² · pixels)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.crdt import _wins


def check(nodes: list[Any]) -> list[str]:
    """Breaches of clock honesty among ``nodes`` (live causal nodes; None entries are skipped)."""
    live = [n for n in nodes if n is not None and hasattr(n, "grid")]
    found: list[str] = []
    for a in live:
        fa = a.grid.f
        written = fa["version"] > 0
        writers = np.where(written, fa["node"], 0).astype(np.int64)
        for b in live:
            clock = b.grid.clock
            covered = written & (writers < clock.size)
            covered &= np.where(covered, clock[np.minimum(writers, clock.size - 1)], -1) >= fa["seq"]
            if a is b:
                bad = written & ~covered
                if bad.any():
                    p = int(np.flatnonzero(bad)[0])
                    found.append(f"node {a.node_id} holds pixel {p} written by node {int(fa['node'][p])} "
                                 f"(dot {int(fa['seq'][p])}) beyond its own clock {clock.tolist()}")
                continue
            if not covered.any():
                continue
            lower = covered & _wins(b.grid.f, fa)
            if lower.any():
                p = int(np.flatnonzero(lower)[0])
                found.append(f"node {b.node_id}'s clock {clock.tolist()} covers write (node {int(fa['node'][p])}, "
                             f"dot {int(fa['seq'][p])}) at pixel {p} held by node {a.node_id}, but node {b.node_id} "
                             f"holds an older entry there")
    return found


class Monitor:
    """``observe(live_nodes)`` -> breaches first seen now (checked every ``every``-th call)."""

    def __init__(self, every: int = 32) -> None:
        self.every = every
        self.calls = 0
        self.seen: set[str] = set()

    def observe(self, nodes: list[Any]) -> list[str]:
        self.calls += 1
        if self.calls % self.every:
            return []
        new = [text for text in check(nodes) if text not in self.seen]
        self.seen.update(new)
        return new
