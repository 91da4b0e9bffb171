"""The shape every protocol's invariant monitor shares: per-node observation, remembered breaches, a full check.

A node's state changes only while it handles an input (or on start / recovery), so a runtime that tells the monitor
which node has just handled one lets it examine that node alone: the work per input is proportional to what the
input changed (a commit index that advanced, a role or term that changed, new log entries), not to the number of
nodes. Cross-node properties compare the node's news with what the monitor remembers of the others (a leader per
term, a committed entry per index, ...), which is exactly what scanning every node would compare it with, since the
others have not changed since they were last observed.

The interface (duck-typed; :class:`NodeMonitor` implements it):

* ``observe_node(node) -> list[str]``: the breaches first seen in ``node``'s new state (after its input);
* ``forget(node_id)``: the node crashed (its object is gone; what it showed stays remembered);
* ``observe(live_nodes) -> list[str]``: ``observe_node`` for each (a runtime without per-node news, unit tests);
* ``finish(live_nodes) -> list[str]``: the protocol's full check over the final state (pairwise properties the
  incremental monitor does not compare), breaches not reported before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class NodeMonitor:
    """Base: subclasses implement :meth:`_observe` (one node's news) and :meth:`_check` (the full check)."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._reported: set[str] = set()
        self._present: set[Any] = set()  # the node ids of the last observe(live_nodes)
        # per node id: (the node object, its progress already examined); a new incarnation starts again from 0
        self._local: dict[Any, tuple[Any, int]] = {}  # node.violations already reported

    def observe_node(self, node: Any) -> list[str]:
        found = self._observe(node)
        return self._new(found) if found else found

    def observe(self, nodes: Iterable[Any]) -> list[str]:
        """Every live node (a node missing since the last call crashed: it is forgotten)."""
        live = [node for node in nodes if node is not None]
        present = {node.node_id for node in live}
        for node_id in self._present - present:
            self.forget(node_id)
        self._present = present
        found: list[str] = []
        for node in live:
            found.extend(self._observe(node))
        return self._new(found)

    def forget(self, node_id: Any) -> None:
        """The node crashed: its progress marks go (what it showed stays remembered)."""
        self._local.pop(node_id, None)

    def finish(self, nodes: Iterable[Any]) -> list[str]:
        live = [node for node in nodes if node is not None]
        found = self.observe(live)
        self._release()  # what the incremental checks kept goes before the full check builds its own
        return found + self._new(self._check(live))

    def _release(self) -> None:
        """Drop the per-node state :meth:`_observe` keeps (a later observe starts over from the nodes' states);
        by default nothing. What was reported stays reported."""

    def _observe(self, node: Any) -> list[str]:
        raise NotImplementedError

    def _check(self, nodes: list[Any]) -> list[str]:
        """The full check: a fresh monitor over every node's whole state, and each node's local invariants."""
        found = type(self)().observe(nodes)
        for node in nodes:
            local = getattr(node, "check_invariants", None)
            if local is not None:
                found.extend(local())
        return found

    def _local_news(self, node: Any) -> list[str]:
        """The breaches ``node`` recorded itself (``node.violations``) since it was last observed."""
        local = getattr(node, "violations", ())
        if not local:
            return []
        reported = progress(self._local, node.node_id, node)
        if len(local) <= reported:
            return []
        self._local[node.node_id] = (node, len(local))
        return list(local[reported:])

    def _new(self, found: list[str]) -> list[str]:
        if not found:
            return []
        new = [v for v in dict.fromkeys(found) if v not in self._reported]
        self._reported.update(new)
        self.violations.extend(new)
        return new


def progress(table: dict[Any, tuple[Any, int]], key: Any, node: Any) -> int:
    """The progress mark recorded for ``key`` if it belongs to this very node object (0 for a new incarnation)."""
    held = table.get(key)
    return held[1] if held is not None and held[0] is node else 0
