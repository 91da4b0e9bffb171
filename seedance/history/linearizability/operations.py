"""From a history's events to the operations a linearizability search has to place, split by key.

Rules (Herlihy & Wing 1990 §2; Jepsen/Knossos conventions for indeterminate operations):

* An invoke and its process's next completion form one operation. Real-time order is the order of events:
  ``a`` precedes ``b`` iff ``a``'s completion comes before ``b``'s invoke in the history.
* ``fail``: the operation definitely did not take effect; it is removed.
* ``info``, or no completion before the history ends: indeterminate. The operation may take effect at any point
  after its invoke, or never; its return is at +infinity.
* An indeterminate read constrains nothing (its value is unknown) and is removed.
* An indeterminate write or cas whose new value is never observed — no read returns it and no remaining cas expects
  it — is removed too. This keeps both verdicts: a linearization that places it is followed, until the next
  write or cas, only by operations that could not tell (a read would return its value, a cas would expect it), so
  dropping it from that linearization leaves a valid one; and "never took effect" was always allowed. Removing
  one can unobserve another, so this repeats to a fixpoint. It is the step that keeps histories with many client
  timeouts tractable: each remaining indeterminate operation stays a candidate at every later search step.
* Keys are independent objects; P-compositionality (Herlihy & Wing 1990, Theorem 1 "locality"; Horn & Kroening
  2015) lets each key's sub-history be checked on its own.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from seedance.history.events import Event, EventType, HistoryValidator, Operation

__all__ = ["HistoryOp", "pair_operations", "prune_unobserved", "split_by_key"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryOp:
    """One operation: ``value`` is its input (written value, ``(expected, new)`` for cas), ``output`` what a read
    returned. ``invoke_line`` / ``return_line`` are 1-based event indexes (= line numbers of the history file);
    ``return_line`` is ``None`` for an indeterminate operation."""

    process: int
    f: Operation
    key: str | None
    value: Any
    output: Any
    invoke_line: int
    return_line: int | None
    invoke_time: float
    return_time: float | None

    @property
    def indeterminate(self) -> bool:
        return self.return_line is None

    def describe(self) -> str:
        """Short human form: ``p3 write(5)``, ``p1 read() -> 4``, ``p2 cas(1->2) ?`` (``?`` = indeterminate)."""
        if self.f is Operation.READ:
            text = f"p{self.process} read() -> {self.output!r}"
        elif self.f is Operation.WRITE:
            text = f"p{self.process} write({self.value!r})"
        else:
            text = f"p{self.process} cas({self.value[0]!r}->{self.value[1]!r})"
        return text + (" ?" if self.indeterminate else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "process": self.process, "f": self.f.value, "key": self.key,
            "value": self.output if self.f is Operation.READ else self.value,
            "type": "info" if self.indeterminate else "ok",
            "invoke_line": self.invoke_line, "return_line": self.return_line,
            "invoke_time": self.invoke_time, "return_time": self.return_time,
        }


def pair_operations(events: Iterable[Event], lines: Iterable[int] | None = None) -> tuple[list[HistoryOp], int]:
    """Pair invokes with completions (validating the history) and drop failed operations.

    Returns the operations in invoke order and the number of operations in the history (failed ones included).
    ``lines`` numbers the events (default 1, 2, ...): a part of a history (one key's events) keeps the line
    numbers it has in the whole.
    """
    validator = HistoryValidator()
    open_ops: dict[int, tuple[int, Event]] = {}
    done: list[tuple[int, HistoryOp]] = []
    total = 0
    for index, event in zip(itertools.count(1) if lines is None else lines, events):
        validator.add(event, index)
        if event.type is EventType.INVOKE:
            open_ops[event.process] = (index, event)
            total += 1
            continue
        invoke_index, invoke = open_ops.pop(event.process)
        if event.type is EventType.FAIL:
            continue
        determinate = event.type is EventType.OK
        done.append((invoke_index, HistoryOp(
            process=event.process, f=invoke.f, key=invoke.key, value=invoke.value,
            output=event.value if determinate and invoke.f is Operation.READ else None,
            invoke_line=invoke_index, return_line=index if determinate else None,
            invoke_time=invoke.time, return_time=event.time if determinate else None,
        )))
    for invoke_index, invoke in open_ops.values():
        done.append((invoke_index, HistoryOp(
            process=invoke.process, f=invoke.f, key=invoke.key, value=invoke.value, output=None,
            invoke_line=invoke_index, return_line=None, invoke_time=invoke.time, return_time=None,
        )))
    done.sort(key=lambda item: item[0])
    return [op for _, op in done], total


def prune_unobserved(ops: list[HistoryOp]) -> list[HistoryOp]:
    """Remove indeterminate reads, and indeterminate writes/cas whose new value is never observed (to a fixpoint).

    ``ops`` are one key's operations; the order is kept.
    """
    kept = [op for op in ops if not (op.indeterminate and op.f is Operation.READ)]
    while True:
        observed: set[Any] = set()
        for op in kept:
            if op.f is Operation.READ:
                observed.add(op.output)
            elif op.f is Operation.CAS:
                observed.add(op.value[0])
        survivors = [op for op in kept if not (op.indeterminate and _new_value(op) not in observed)]
        if len(survivors) == len(kept):
            return kept
        kept = survivors


def _new_value(op: HistoryOp) -> Any:
    return op.value[1] if op.f is Operation.CAS else op.value


def split_by_key(ops: list[HistoryOp]) -> dict[str | None, list[HistoryOp]]:
    """Group operations by key, keeping invoke order within each key."""
    groups: dict[str | None, list[HistoryOp]] = defaultdict(list)
    for op in ops:
        groups[op.key].append(op)
    return dict(groups)
