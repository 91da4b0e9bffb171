"""What the causal and convergence checkers share: client operations paired from a history's events, the report
of anomalies (every one counted, the first :data:`MAX_REPORTED` listed), and the order and cycle helpers both
judge a graph with."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from seedance.history.events import EventType, Operation, ReplicaEvent

MAX_REPORTED = 20  # anomalies listed (all are counted)


@dataclass(slots=True)
class Op:
    index: int  # position among operations (invoke order)
    process: int
    f: Operation
    key: str | None
    value: Any
    outcome: EventType  # ok / fail / info (info also for never-completed)
    invoke_s: float
    complete_s: float | None
    line: int  # line (1-based, in the event sequence given) of its invoke

    def describe(self) -> dict[str, Any]:
        return {"process": self.process, "f": self.f.value, "key": self.key, "value": self.value,
                "type": self.outcome.value, "time": self.invoke_s, "line": self.line}


def operations(events: Iterable[Any]) -> tuple[list[Op], list[ReplicaEvent]]:
    """Pair invokes with completions (client events) and collect replica events."""
    ops: list[Op] = []
    replicas: list[ReplicaEvent] = []
    pending: dict[int, Op] = {}
    for line, event in enumerate(events, start=1):
        if type(event) is ReplicaEvent:
            replicas.append(event)
            continue
        if event.type is EventType.INVOKE:
            op = Op(len(ops), event.process, event.f, event.key, event.value, EventType.INFO, event.time, None, line)
            ops.append(op)
            pending[event.process] = op
            continue
        op = pending.pop(event.process, None)
        if op is None:
            continue
        op.outcome = event.type
        op.complete_s = event.time
        if op.f is Operation.READ:
            op.value = event.value if event.type is EventType.OK else None
    return ops, replicas


class Report:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.listed: list[dict[str, Any]] = []

    def add(self, kind: str, explanation: str, **ops: Any) -> None:
        self.counts[kind] += 1
        if len(self.listed) < MAX_REPORTED:
            self.listed.append({"type": kind, "explanation": explanation,
                                **{k: (v.describe() if isinstance(v, Op) else v) for k, v in ops.items()}})


def topological(n: int, edges: list[tuple[int, int]]) -> list[int] | None:
    """A topological order of nodes 0..n-1 (stable: by node number among the ready ones), or None when cyclic."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = deque(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    while ready:
        a = ready.popleft()
        order.append(a)
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return order if len(order) == n else None


def a_cycle(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Some cycle of a cyclic graph (node ids, in order)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
    color = [0] * n
    parent = [-1] * n
    for root in range(n):
        if color[root]:
            continue
        stack = [(root, iter(succ[root]))]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
            elif color[nxt] == 0:
                color[nxt] = 1
                parent[nxt] = node
                stack.append((nxt, iter(succ[nxt])))
            elif color[nxt] == 1:
                cycle = [node]
                while cycle[-1] != nxt:
                    cycle.append(parent[cycle[-1]])
                return cycle[::-1]
    return []
