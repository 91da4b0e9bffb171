"""Multi-Paxos safety as an incremental monitor (Lamport, "Paxos Made Simple" §2.1 "Safety requirements").

* Agreement: no slot is decided with two different commands, on one node or across nodes, crashes included (the
  monitor remembers every decision it has seen, down to what every watched replica has compacted).
* One leader per ballot: a ballot names its leader (``ballot % n``), so two nodes leading one ballot is a breach.
* Local breaches a node records itself (``violations``): a leader's own slot executing another command than the one
  it proposed.

Compaction (:mod:`.snapshots`): a replica's ``decided_log`` keeps the decisions it learned since the snapshot before
its last one (``decided_base`` counts those it dropped, so the monitor's progress marks stay positions in the whole
sequence); the monitor observes every node after each input, so it has seen what a node drops. The monitor forgets
the decisions of the slots every watched replica (every node observed and not crashed since) has compacted
(``snapshot_index``), so its memory follows the replicas'; a decision of a slot it has forgotten (a replica that
recovered from an older snapshot learning it again) is not recorded again, as nothing is left to compare it with.
"""

from __future__ import annotations

from typing import Any

from seedance.models.protocols.monitoring import NodeMonitor, progress

_PRUNE_EVERY = 4096  # the forgotten slots are dropped each time the highest slot seen crosses a multiple of this


class Monitor(NodeMonitor):
    """Examines one node per input (:meth:`observe_node`): its role and ballot, and the decisions it learned since it
    was last observed, against the first decision seen for each slot. :meth:`finish` re-checks the final state."""

    def __init__(self) -> None:
        super().__init__()
        self.decided: dict[int, tuple[Any, int]] = {}  # slot -> (command, node that first showed it)
        self.leaders: dict[int, int] = {}  # ballot -> node id
        self._scanned: dict[Any, tuple[Any, int]] = {}  # node id -> (node, decided_log position seen)
        self._watched: dict[Any, Any] = {}  # node id -> node, every node observed and not crashed since
        self._floor = 0  # the decisions of slots at or below it are forgotten
        self._top = 0  # the highest slot decided

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        self._watched[node.node_id] = node
        if getattr(node, "role", None) == "leader":
            holder = self.leaders.setdefault(node.ballot, node.node_id)
            if holder != node.node_id:
                found.append(f"leader uniqueness: nodes {holder} and {node.node_id} both led ballot {node.ballot}")
        base = getattr(node, "decided_base", 0)
        start = max(progress(self._scanned, node.node_id, node), base)
        log = node.decided_log
        if base + len(log) > start:
            decided, floor, top = self.decided, self._floor, self._top
            for slot, command in log[start - base:]:
                if slot <= floor:
                    continue
                seen = decided.setdefault(slot, (command, node.node_id))
                if seen[0] != command:
                    found.append(f"Agreement: slot {slot} decided as {seen[0]} on node {seen[1]} and as {command} "
                                 f"on node {node.node_id}")
                elif slot > top:
                    top = slot
            self._scanned[node.node_id] = (node, base + len(log))
            if top // _PRUNE_EVERY != self._top // _PRUNE_EVERY:
                self._prune()
            self._top = top
        return found

    def _prune(self) -> None:
        """Forget the decisions of the slots every watched replica has compacted."""
        floor = min((getattr(n, "snapshot_index", 0) for n in self._watched.values()), default=0)
        for slot in range(self._floor + 1, floor + 1):
            self.decided.pop(slot, None)
        self._floor = max(self._floor, floor)

    def forget(self, node_id: Any) -> None:
        for table in (self._scanned, self._local, self._watched):
            table.pop(node_id, None)
