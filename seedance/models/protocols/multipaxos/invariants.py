"""Multi-Paxos safety as an incremental monitor (Lamport, "Paxos Made Simple" §2.1 "Safety requirements").

* Agreement: no slot is decided with two different commands, on one node or across nodes, crashes included (the
  monitor remembers every decision it has seen).
* One leader per ballot: a ballot names its leader (``ballot % n``), so two nodes leading one ballot is a breach.
* Local breaches a node records itself (``violations``): a leader's own slot executing another command than the one
  it proposed.
"""

from __future__ import annotations

from typing import Any

from seedance.models.protocols.monitoring import NodeMonitor, progress


class Monitor(NodeMonitor):
    """Examines one node per input (:meth:`observe_node`): its role and ballot, and the decisions it learned since it
    was last observed, against the first decision seen for each slot. :meth:`finish` re-checks the final state."""

    def __init__(self) -> None:
        super().__init__()
        self.decided: dict[int, tuple[Any, int]] = {}  # slot -> (command, node that first showed it)
        self.leaders: dict[int, int] = {}  # ballot -> node id
        self._scanned: dict[Any, tuple[Any, int]] = {}  # node id -> (node, decided_log entries seen)

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        if getattr(node, "role", None) == "leader":
            holder = self.leaders.setdefault(node.ballot, node.node_id)
            if holder != node.node_id:
                found.append(f"leader uniqueness: nodes {holder} and {node.node_id} both led ballot {node.ballot}")
        start = progress(self._scanned, node.node_id, node)
        log = node.decided_log
        if len(log) > start:
            decided = self.decided
            for slot, command in log[start:]:
                seen = decided.setdefault(slot, (command, node.node_id))
                if seen[0] != command:
                    found.append(f"Agreement: slot {slot} decided as {seen[0]} on node {seen[1]} and as {command} "
                                 f"on node {node.node_id}")
            self._scanned[node.node_id] = (node, len(log))
        return found

    def forget(self, node_id: Any) -> None:
        for table in (self._scanned, self._local):
            table.pop(node_id, None)
