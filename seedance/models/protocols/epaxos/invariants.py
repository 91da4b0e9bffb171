"""EPaxos safety as an incremental monitor (Moraru et al. SOSP'13 §4.5: Nontriviality, Stability, Consistency,
Execution consistency), remembered across crashes:

* Consistency: an instance is committed with one (command, seq, deps) on every replica.
* Execution consistency: the commands on one key (they all interfere) are executed in the same order on every
  replica — each replica's per-key execution sequence is a prefix of one global sequence.
* Compaction (seedance/models/protocols/epaxos/snapshots.py): a replica forgets an instance only once the snapshot
  of every replica reflects it (its ``forgotten`` watermark never passes another replica's ``snapshot_prefix``, as
  last seen; a snapshot is durable, so a crashed replica's counts).

Bounded memory: a node's logs keep only what it logged since the snapshot before its last one (``commit_base``,
``exec_base``, ``exec_base_counts`` place what is left), and the monitor forgets the commits of the instances, and
the executions per key, that every watched replica (observed and not crashed since) has in its snapshot. A commit or
an execution at a position it has forgotten (a replica restarting from an older snapshot) is not compared again.
"""

from __future__ import annotations

from typing import Any

from seedance.models.protocols.monitoring import NodeMonitor


_PRUNE_EVERY = 4096  # the monitor forgets what every watched replica compacted every so many commits seen


class Monitor(NodeMonitor):
    """Examines one node per input (:meth:`observe_node`): the instances it committed and the commands it executed
    since it was last observed, against the first commit seen per instance and the one execution order per key.
    :meth:`finish` re-checks the final state."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: dict[Any, tuple[Any, int]] = {}
        self.order: dict[Any, list[Any]] = {}  # key -> the executed instances in order, from position _base[key]
        self._base: dict[Any, int] = {}
        self._commits: dict[Any, tuple[Any, int]] = {}  # node id -> (node, commit_log entries seen)
        self._execs: dict[Any, tuple[Any, int, dict]] = {}  # node id -> (node, exec_log entries seen, key -> count)
        self._watched: dict[Any, Any] = {}  # node id -> node, observed and not crashed since
        self._snapshots: dict[Any, list[int]] = {}  # node id -> the highest snapshot prefix seen
        self._forgotten: dict[Any, list[int]] = {}  # node id -> its forgotten watermark as last checked
        self._compaction_seen: dict[Any, tuple[Any, Any]] = {}  # node id -> (snapshot_prefix, forgotten) objects
        self._floor: list[int] = []  # commits of instances (q, i <= _floor[q]) are forgotten
        self._seen = 0

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        node_id = node.node_id
        base = node.commit_base
        log = node.commit_log
        end = base + len(log)
        held = self._commits.get(node_id)
        if held is None or held[0] is not node:
            self._watched[node_id] = node
            self._commit_news(node, base, end, found)
        elif held[1] != end:  # most inputs commit nothing: then there is nothing to compare or to store
            self._commit_news(node, held[1] if held[1] > base else base, end, found)
        held = self._execs.get(node_id)
        if held is None or held[0] is not node or held[1] != node.exec_base + len(node.exec_log):
            self._observe_execs(node, found)
        seen = self._compaction_seen.get(node_id)
        if seen is None or seen[0] is not node.snapshot_prefix or seen[1] is not node.forgotten:
            self._check_compaction(node, found)
        if self._seen >= _PRUNE_EVERY:
            self._seen = 0
            self._prune()
        return found

    def _commit_news(self, node: Any, start: int, end: int, found: list[str]) -> None:
        """The node's commits logged at positions ``start`` to ``end`` against the first commit seen of each."""
        node_id = node.node_id
        if end > start:
            floor = self._floor
            for iid, attrs in node.commit_log[start - node.commit_base:]:
                if floor and iid[1] <= floor[iid[0]]:
                    continue
                seen = self.committed.setdefault(iid, (attrs, node_id))
                if seen[0] != attrs:
                    found.append(f"Consistency: instance {iid} committed as {seen[0]} on node {seen[1]} and as "
                                 f"{attrs} on node {node_id}")
            self._seen += end - start
        self._commits[node_id] = (node, end)

    def _observe_execs(self, node: Any, found: list[str]) -> None:
        node_id = node.node_id
        held = self._execs.get(node_id)
        base = node.exec_base
        if held is not None and held[0] is node and held[1] >= base:
            start, positions = held[1], held[2]
        else:  # a new incarnation, or entries dropped unseen (two snapshots in one input): from the log's front
            start, positions = base, dict(node.exec_base_counts)
        log = node.exec_log
        if base + len(log) <= start:
            return
        for key, iid in log[start - base:]:
            k = positions.get(key, 0)
            positions[key] = k + 1
            order = self.order.get(key)
            if order is None:
                order = self.order[key] = []
                self._base[key] = k
            at = k - self._base[key]
            if at < 0:
                continue
            if at < len(order):
                if order[at] is None:
                    order[at] = iid
                elif order[at] != iid:
                    found.append(f"Execution consistency: key {key!r}: node {node_id} executed {iid} "
                                 f"where another replica executed {order[at]} (position {k})")
            else:
                order.extend([None] * (at - len(order)))
                order.append(iid)
        self._execs[node_id] = (node, base + len(log), positions)

    def _check_compaction(self, node: Any, found: list[str]) -> None:
        node_id = node.node_id  # called when either list changed (the node replaces them, never changes them)
        self._compaction_seen[node_id] = (node.snapshot_prefix, node.forgotten)
        mine = self._snapshots.get(node_id)
        prefix = node.snapshot_prefix
        self._snapshots[node_id] = list(prefix) if mine is None else [max(a, b) for a, b in zip(mine, prefix)]
        forgotten = node.forgotten
        if self._forgotten.get(node_id) == forgotten or not any(forgotten):
            return
        self._forgotten[node_id] = list(forgotten)
        for other, theirs in self._snapshots.items():
            live = self._watched.get(other)
            if live is not None:  # its snapshot now (a monitor that observes periodically may hold an older one)
                theirs = self._snapshots[other] = [max(a, b) for a, b in zip(theirs, live.snapshot_prefix)]
            for q, (f, p) in enumerate(zip(forgotten, theirs)):
                if f > p:
                    found.append(f"Compaction: node {node_id} forgot instances of replica {q} up to {f}, which "
                                 f"node {other}'s snapshot reflects only up to {p}")
                    break

    def _prune(self) -> None:
        """Forget what every watched replica has in its snapshot."""
        nodes = [n for n in self._watched.values() if hasattr(n, "snapshot_prefix")]
        if not nodes:
            return
        floor = [min(column) for column in zip(*(n.snapshot_prefix for n in nodes))]
        old = self._floor or [0] * len(floor)
        for q, top in enumerate(floor):
            for i in range(old[q] + 1, top + 1):
                self.committed.pop((q, i), None)
        self._floor = [max(a, b) for a, b in zip(old, floor)]
        for key, order in self.order.items():
            done = min(n.snapshot_key_counts.get(key, 0) for n in nodes) - self._base[key]
            if done > 0:
                del order[:done]
                self._base[key] += done

    def forget(self, node_id: Any) -> None:
        for table in (self._commits, self._execs, self._local, self._watched):
            table.pop(node_id, None)
