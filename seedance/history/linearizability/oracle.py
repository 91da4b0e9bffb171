"""A brute-force linearizability oracle: the definition, executed. For tests and the benchmark's baseline only.

It shares nothing with the fast checker beyond the event types: it pairs events itself, keeps every key in one
state map (no partitioning), keeps every indeterminate operation (no pruning) and tries every order of the
operations consistent with real time (Herlihy & Wing 1990 §3: an operation may be placed next iff no unplaced
operation returned before it was invoked), with no memoisation. Indeterminate operations may be placed or left out;
an indeterminate read, if placed, has no effect and no constraint. Exponential: keep histories to ~8 operations.
"""

from __future__ import annotations

import math
from typing import Any

from seedance.history.events import Event, EventType, Operation

__all__ = ["brute_force_linearizable"]


def brute_force_linearizable(events: list[Event], initial: Any = None) -> bool:
    """True iff some real-time-consistent order of the operations is legal for a map of cas registers."""
    ops: list[dict[str, Any]] = []
    open_ops: dict[int, dict[str, Any]] = {}
    for position, event in enumerate(events):
        if event.type is EventType.INVOKE:
            op = {"f": event.f, "key": event.key, "value": event.value, "output": None,
                  "call": position, "ret": math.inf, "required": False}
            open_ops[event.process] = op
            continue
        op = open_ops.pop(event.process)
        if event.type is EventType.OK:
            op.update(ret=position, required=True, output=event.value)
            ops.append(op)
        elif event.type is EventType.INFO:
            ops.append(op)
    ops.extend(open_ops.values())
    return _extend(ops, frozenset(), {}, initial)


def _extend(ops: list[dict[str, Any]], placed: frozenset[int], state: dict[Any, Any], initial: Any) -> bool:
    if all(op["required"] is False or i in placed for i, op in enumerate(ops)):
        return True
    for i, op in enumerate(ops):
        if i in placed:
            continue
        if any(j not in placed and other["ret"] < op["call"] for j, other in enumerate(ops) if j != i):
            continue  # some unplaced operation returned before this one was invoked
        current = state.get(op["key"], initial)
        if op["f"] is Operation.READ:
            legal, after = (not op["required"]) or current == op["output"], current
        elif op["f"] is Operation.WRITE:
            legal, after = True, op["value"]
        else:
            legal, after = current == op["value"][0], op["value"][1]
        if legal and _extend(ops, placed | {i}, {**state, op["key"]: after}, initial):
            return True
    return False
