"""Multi-Paxos safety as an incremental monitor (Lamport, "Paxos Made Simple" §2.1 "Safety requirements").

* Agreement: no slot is decided with two different commands, on one node or across nodes, crashes included (the
  monitor remembers every decision it has seen).
* One leader per ballot: a ballot names its leader (``ballot % n``), so two nodes leading one ballot is a breach.
* Local breaches a node records itself (``violations``): a leader's own slot executing another command than the one
  it proposed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Monitor:
    def __init__(self) -> None:
        self.decided: dict[int, tuple[Any, int]] = {}  # slot -> (command, node that first showed it)
        self.leaders: dict[int, int] = {}  # ballot -> node id
        self.violations: list[str] = []
        self._scanned: dict[int, tuple[Any, int]] = {}  # id(node) -> (node, decided_log entries seen)
        self._local: dict[int, tuple[Any, int]] = {}

    def observe(self, nodes: Iterable[Any]) -> list[str]:
        found: list[str] = []
        for node in nodes:
            if getattr(node, "role", None) == "leader":
                holder = self.leaders.setdefault(node.ballot, node.node_id)
                if holder != node.node_id:
                    found.append(f"leader uniqueness: nodes {holder} and {node.node_id} both led ballot {node.ballot}")
            held = self._local.get(id(node))
            reported = held[1] if held is not None and held[0] is node else 0
            local = node.violations
            if len(local) > reported:
                found.extend(local[reported:])
                self._local[id(node)] = (node, len(local))
            held = self._scanned.get(id(node))
            start = held[1] if held is not None and held[0] is node else 0
            log = node.decided_log
            for slot, command in log[start:]:
                seen = self.decided.setdefault(slot, (command, node.node_id))
                if seen[0] != command:
                    found.append(f"Agreement: slot {slot} decided as {seen[0]} on node {seen[1]} and as {command} "
                                 f"on node {node.node_id}")
            if len(log) > start:
                self._scanned[id(node)] = (node, len(log))
        new = [v for v in dict.fromkeys(found) if v not in self.violations]
        self.violations.extend(new)
        return new
