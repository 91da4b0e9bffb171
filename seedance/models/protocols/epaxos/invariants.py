"""EPaxos safety as an incremental monitor (Moraru et al. SOSP'13 §4.5: Nontriviality, Stability, Consistency,
Execution consistency), remembered across crashes:

* Consistency: an instance is committed with one (command, seq, deps) on every replica.
* Execution consistency: the commands on one key (they all interfere) are executed in the same order on every
  replica — each replica's per-key execution sequence is a prefix of one global sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Monitor:
    def __init__(self) -> None:
        self.committed: dict[Any, tuple[Any, int]] = {}
        self.order: dict[Any, list[Any]] = {}  # key -> the executed instances in order
        self.violations: list[str] = []
        self._commits: dict[int, tuple[Any, int]] = {}
        self._execs: dict[int, tuple[Any, int, dict]] = {}
        self._local: dict[int, tuple[Any, int]] = {}

    def observe(self, nodes: Iterable[Any]) -> list[str]:
        found: list[str] = []
        for node in nodes:
            held = self._local.get(id(node))
            reported = held[1] if held is not None and held[0] is node else 0
            if len(node.violations) > reported:
                found.extend(node.violations[reported:])
                self._local[id(node)] = (node, len(node.violations))
            held = self._commits.get(id(node))
            start = held[1] if held is not None and held[0] is node else 0
            log = node.commit_log
            for iid, attrs in log[start:]:
                seen = self.committed.setdefault(iid, (attrs, node.node_id))
                if seen[0] != attrs:
                    found.append(f"Consistency: instance {iid} committed as {seen[0]} on node {seen[1]} and as "
                                 f"{attrs} on node {node.node_id}")
            if len(log) > start:
                self._commits[id(node)] = (node, len(log))
            held_exec = self._execs.get(id(node))
            if held_exec is not None and held_exec[0] is node:
                start, positions = held_exec[1], held_exec[2]
            else:
                start, positions = 0, {}
            log = node.exec_log
            for key, iid in log[start:]:
                order = self.order.setdefault(key, [])
                k = positions.get(key, 0)
                if k < len(order):
                    if order[k] != iid:
                        found.append(f"Execution consistency: key {key!r}: node {node.node_id} executed {iid} "
                                     f"where another replica executed {order[k]} (position {k})")
                else:
                    order.append(iid)
                positions[key] = k + 1
            if len(log) > start:
                self._execs[id(node)] = (node, len(log), positions)
        new = [v for v in dict.fromkeys(found) if v not in self.violations]
        self.violations.extend(new)
        return new
