"""Raft's safety properties (Figure 3) as checks over a set of nodes, for unit tests, the simulator and campaigns.

* Election Safety (§5.2): at most one leader per term.
* Log Matching (§5.3): two logs with an entry of the same index and term are identical up to that index.
* Leader Completeness (§5.4): a leader's log holds every entry committed in an earlier (or its own) term. What
  counts is the term in which the entry was *committed*, not the entry's own term: a deposed leader of term 7 that
  has not yet heard of its successor may lack an entry of term 6 that the leader of term 9 committed. The commit
  term is taken as the current term of the node seen holding the entry committed (the smallest such term in
  :func:`check`; the observing node's term at first sight in :class:`Monitor`). That is never below the true commit
  term, so the check has no false alarms; observed after every step, it is exact.
* State Machine Safety (§5.4.3): no two nodes apply different entries at the same index.

:func:`check` looks at one instant. A crash wipes a node's volatile state, so some breaches are visible only over
time: :class:`Monitor` remembers every (term → leader) and (index → committed entry) it has seen and reports a breach
even if the evidence has since been lost. Each returns human-readable violation strings (empty: all hold).
Nodes are duck-typed: ``node_id``, ``role``, ``current_term``, ``log``, ``commit_index`` and ``violations``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from seedance.models.protocols.raft.node import Role


def _committed(node: Any, index: int) -> Any:
    return node.log.entry(index)


def check(nodes: Iterable[Any]) -> list[str]:
    """Violations of Raft's safety properties visible in the current state of ``nodes``."""
    nodes = list(nodes)
    found: list[str] = []
    for node in nodes:
        local = getattr(node, "check_invariants", None)
        found.extend(local() if local is not None else getattr(node, "violations", ()))
    leaders: dict[int, Any] = {}
    for node in nodes:
        if node.role is Role.LEADER:
            other = leaders.setdefault(node.current_term, node)
            if other is not node:
                found.append(f"Election Safety (§5.2): nodes {other.node_id} and {node.node_id} both lead term "
                             f"{node.current_term}")
    # Log Matching (§5.3): find the highest index where both logs hold the same term; the prefixes must be equal.
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            top = min(a.log.last_index, b.log.last_index)
            while top > 0 and a.log.term_at(top) != b.log.term_at(top):
                top -= 1
            for index in range(top, 0, -1):
                if a.log.entry(index) != b.log.entry(index):
                    found.append(f"Log Matching (§5.3): nodes {a.node_id} and {b.node_id} agree on term at index "
                                 f"{top} but differ at index {index}")
                    break
    # State Machine Safety (§5.4.3) over committed prefixes, Leader Completeness (§5.4) for current leaders.
    reference: dict[int, tuple[Any, Any, int]] = {}
    for node in nodes:
        for index in range(1, min(node.commit_index, node.log.last_index) + 1):
            entry = node.log.entry(index)
            seen = reference.setdefault(index, (entry, node.node_id, node.current_term))
            if seen[0] != entry:
                found.append(f"State Machine Safety (§5.4.3): index {index} committed as {seen[0]} on node "
                             f"{seen[1]} and as {entry} on node {node.node_id}")
            elif node.current_term < seen[2]:
                reference[index] = (entry, node.node_id, node.current_term)
    for leader in leaders.values():
        found.extend(_leader_completeness(leader, reference))
    return found


def _leader_completeness(leader: Any, committed: dict[int, tuple[Any, Any, int]]) -> list[str]:
    for index, (entry, where, commit_term) in sorted(committed.items()):
        if commit_term > leader.current_term:
            continue  # committed after this leader's term began: §5.4 says nothing about it
        if index > leader.log.last_index or leader.log.entry(index) != entry:
            return [f"Leader Completeness (§5.4): leader {leader.node_id} of term {leader.current_term} lacks "
                    f"entry {index} (term {entry.term}) committed by term {commit_term} on node {where}"]
    return []


class Monitor:
    """Remembers leaders per term and committed entries per index across observations (crashes included).

    :meth:`observe` is incremental (work proportional to what changed), so a runtime can call it after every step;
    call :func:`check` as well at the end of a run for the full pairwise Log Matching comparison.
    """

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> node id
        # index -> (entry, node id that first showed it committed, that node's term then)
        self.committed: dict[int, tuple[Any, Any, int]] = {}
        self.violations: list[str] = []
        # per node object (kept referenced so an id is never reused): progress already recorded
        self._scanned: dict[int, tuple[Any, int]] = {}  # id(node) -> (node, commit index recorded)
        self._leader_scanned: dict[tuple[int, int], tuple[Any, int]] = {}  # (id, term) -> (node, index checked)
        self._local_seen: dict[int, tuple[Any, int]] = {}  # id(node) -> (node, node.violations reported)
        self._max_committed = 0

    def observe(self, nodes: Iterable[Any]) -> list[str]:
        """Record what ``nodes`` show now; return the violations first found by this observation."""
        found: list[str] = []
        nodes = list(nodes)
        leaders = [node for node in nodes if node.role is Role.LEADER]
        for node in leaders:
            leader = self.leaders.setdefault(node.current_term, node.node_id)
            if leader != node.node_id:
                found.append(f"Election Safety (§5.2): nodes {leader} and {node.node_id} both led term "
                             f"{node.current_term}")
        for node in nodes:
            local = getattr(node, "violations", ())
            reported = _progress(self._local_seen, id(node), node)
            if len(local) > reported:
                found.extend(local[reported:])
                self._local_seen[id(node)] = (node, len(local))
            start = _progress(self._scanned, id(node), node)
            top = min(node.commit_index, node.log.last_index)
            for index in range(start + 1, top + 1):
                entry = node.log.entry(index)
                seen = self.committed.get(index)
                if seen is None:
                    self.committed[index] = (entry, node.node_id, node.current_term)
                    self._max_committed = max(self._max_committed, index)
                elif seen[0] != entry:
                    found.append(f"State Machine Safety (§5.4.3): index {index} committed as {seen[0]} on node "
                                 f"{seen[1]} and as {entry} on node {node.node_id}")
            if top > start:
                self._scanned[id(node)] = (node, top)
        for node in leaders:
            key = (id(node), node.current_term)
            start = _progress(self._leader_scanned, key, node)
            if start >= self._max_committed:
                continue
            subset = {i: self.committed[i] for i in range(start + 1, self._max_committed + 1) if i in self.committed}
            found.extend(_leader_completeness(node, subset))
            self._leader_scanned[key] = (node, self._max_committed)
        new = [v for v in dict.fromkeys(found) if v not in self.violations]
        self.violations.extend(new)
        return new


def _progress(table: dict[Any, tuple[Any, int]], key: Any, node: Any) -> int:
    held = table.get(key)
    return held[1] if held is not None and held[0] is node else 0
