"""EPaxos safety as an incremental monitor (Moraru et al. SOSP'13 §4.5: Nontriviality, Stability, Consistency,
Execution consistency), remembered across crashes:

* Consistency: an instance is committed with one (command, seq, deps) on every replica.
* Execution consistency: the commands on one key (they all interfere) are executed in the same order on every
  replica — each replica's per-key execution sequence is a prefix of one global sequence.
"""

from __future__ import annotations

from typing import Any

from seedance.models.protocols.monitoring import NodeMonitor, progress


class Monitor(NodeMonitor):
    """Examines one node per input (:meth:`observe_node`): the instances it committed and the commands it executed
    since it was last observed, against the first commit seen per instance and the one execution order per key.
    :meth:`finish` re-checks the final state."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: dict[Any, tuple[Any, int]] = {}
        self.order: dict[Any, list[Any]] = {}  # key -> the executed instances in order
        self._commits: dict[Any, tuple[Any, int]] = {}  # node id -> (node, commit_log entries seen)
        self._execs: dict[Any, tuple[Any, int, dict]] = {}  # node id -> (node, exec_log entries seen, key -> count)

    def _observe(self, node: Any) -> list[str]:
        found = self._local_news(node)
        node_id = node.node_id
        start = progress(self._commits, node_id, node)
        log = node.commit_log
        if len(log) > start:
            for iid, attrs in log[start:]:
                seen = self.committed.setdefault(iid, (attrs, node_id))
                if seen[0] != attrs:
                    found.append(f"Consistency: instance {iid} committed as {seen[0]} on node {seen[1]} and as "
                                 f"{attrs} on node {node_id}")
            self._commits[node_id] = (node, len(log))
        held = self._execs.get(node_id)
        start, positions = (held[1], held[2]) if held is not None and held[0] is node else (0, {})
        log = node.exec_log
        if len(log) > start:
            for key, iid in log[start:]:
                order = self.order.setdefault(key, [])
                k = positions.get(key, 0)
                if k < len(order):
                    if order[k] != iid:
                        found.append(f"Execution consistency: key {key!r}: node {node_id} executed {iid} "
                                     f"where another replica executed {order[k]} (position {k})")
                else:
                    order.append(iid)
                positions[key] = k + 1
            self._execs[node_id] = (node, len(log), positions)
        return found

    def forget(self, node_id: Any) -> None:
        for table in (self._commits, self._execs, self._local):
            table.pop(node_id, None)
