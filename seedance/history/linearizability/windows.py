"""The check of one key in windows: memory bounded by a window of operations, not by the key's history.

Rules:

* Two passes over the key's events (the source is read twice). The first (:func:`scan_key`) validates the events
  and holds only the open operations, the indeterminate ones, and for each value an open or indeterminate write or
  cas writes, the last line where a determinate operation observed it (an ok read returned it, an ok cas expected
  it): memory O(concurrency + indeterminate operations).
* Windows. The second pass pairs the events into operations and cuts the history after a completion that leaves no
  operation open, once the window holds at least ``window_ops`` operations. Failed operations are removed as in
  :mod:`.operations`. Indeterminate operations are known from the first pass at their invoke, so they never hold a
  window open: each joins the window of its invoke and, if not placed there, stays pending after it.
* Carry. A cut keeps every configuration a linearization of the history so far can end in: (register value,
  indeterminate operations still pending). At a cut no operation is open, so every determinate operation before it
  precedes in real time every operation after it (Herlihy & Wing 1990 §2): a linearization of the whole history is
  one of the part before the cut followed by one of the rest, which starts from such a configuration; a pending
  indeterminate operation may still take effect at any later point, or never. The next window is searched from
  every carried configuration (:func:`.wgl.explore`, exhaustive, one memo shared by all starts); the last window
  needs one linearization from one of them. No end at all: not linearizable, reported from the deepest dead end of
  that window, with the history's line numbers.
* Concrete end values. A window's search abstracts the values none of its operations observes (:mod:`.wgl`), but an
  end value must stay concrete, since a later window may observe it. A linearization of a window ends in a value
  written by a determinate write or cas that no other determinate write or cas follows in real time (this window's
  "frontier"), or by an indeterminate one placed because a candidate observed its value, or carried in: the frontier
  values and the carried values are kept concrete, so every end value is. So are the values of the indeterminate
  operations: one that writes a value no operation of its window observes may still be observed by a later window,
  and the search would otherwise take it as a forced step (a write of an abstract value on an abstract state),
  placed and gone.
* Pruning, the argument of :func:`.operations.prune_unobserved` made local: a linearization that places an
  indeterminate write or cas is followed, until the next write, only by operations that observe its new value, and
  such an operation returns after the write's invoke. So one whose value no determinate operation observes after its
  invoke, and no kept indeterminate cas expects, is never searched (to a fixpoint); a pending one leaves a carried
  configuration at the first cut after its value's last such observation and after the invoke of every kept
  indeterminate cas expecting its value, unless a cas pending in the same configuration expects it. Indeterminate
  reads are removed. Of two carried configurations with the same value, one whose pending operations are a subset
  of the other's is dropped (the larger allows all it allows).
* Cost. An exhaustive window visits every reachable configuration, where one search stops at its first
  linearization: a factor that grows with the concurrency on the key, paid once per window (the starts share the
  memo). On the simulator's Raft histories (16 clients, 8 keys) it is about 2.3 times the steps of one search, with
  at most a handful of configurations carried. The deadline applies to every step; more than ``MAX_CARRIED`` configurations at a cut gives "unknown". A
  key that never becomes quiescent keeps growing its window (then it holds what the whole search holds).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from seedance.errors import HistoryError
from seedance.history.events import Event, EventType, HistoryValidator, Operation
from seedance.history.linearizability.operations import HistoryOp
from seedance.history.linearizability.wgl import (
    UNOBSERVED, SearchOutcome, encode, explore, lift, refuted, unlift,
)

__all__ = ["DEFAULT_WINDOW_OPS", "MAX_CARRIED", "KeyScan", "KeyScanner", "KeyWindows", "WindowedKey", "check_windowed",
           "scan_key", "windows"]

DEFAULT_WINDOW_OPS = 20_000  # operations a window holds at least before it is cut (at the next quiescent point)
MAX_CARRIED = 4_096  # configurations carried across one cut at most; more: "unknown"

Numbered = Iterable[tuple[int, Event]]
Carry = list[tuple[Any, frozenset[int]]]  # (register value, invoke lines of the pending indeterminate operations)


@dataclass(slots=True)
class KeyScan:
    """What the first pass learned of one key. ``total``: operations invoked (failed ones included); ``kept``:
    operations left once failed ones are removed; ``indeterminate``: invoke line -> (f, value) of every
    indeterminate operation; ``last_seen``: invoke line -> the last line where a determinate operation observed its
    new value after its invoke, for the indeterminate writes and cas worth searching (module rules)."""

    total: int = 0
    kept: int = 0
    indeterminate: dict[int, tuple[Operation, Any]] = field(default_factory=dict)
    last_seen: dict[int, int] = field(default_factory=dict)


def _new_value(f: Operation, value: Any) -> Any:
    return value[1] if f is Operation.CAS else value


class KeyScanner:
    """The first pass over one key, fed event by event (:meth:`add`); :meth:`finish` gives its :class:`KeyScan`.
    Raises :class:`HistoryError` for an invalid history, or a cas that did not fail when ``cas_allowed`` is False
    (a failed one is removed, as :func:`.checker.check` removes it before it looks)."""

    __slots__ = ("_validator", "_scan", "_open", "_writers", "_last", "_cas_allowed")

    def __init__(self, *, cas_allowed: bool = True) -> None:
        self._validator = HistoryValidator()
        self._scan = KeyScan()
        self._open: dict[int, tuple[int, Event]] = {}
        self._writers: dict[Any, int] = {}  # value -> open or indeterminate writes / cas writing it
        self._last: dict[Any, int] = {}  # value (one writers holds) -> last line a determinate operation observed it
        self._cas_allowed = cas_allowed

    def add(self, line: int, event: Event) -> None:
        self._validator.add(event, f"line {line}")
        scan, writers = self._scan, self._writers
        if event.type is EventType.INVOKE:
            self._open[event.process] = (line, event)
            scan.total += 1
            if event.f is not Operation.READ:
                value = _new_value(event.f, event.value)
                writers[value] = writers.get(value, 0) + 1
            return
        invoke_line, invoke = self._open.pop(event.process)
        if invoke.f is Operation.CAS and event.type is not EventType.FAIL:
            self._no_cas(invoke_line)
        if event.type is EventType.INFO:
            scan.indeterminate[invoke_line] = (invoke.f, invoke.value)
            scan.kept += 1
            return
        if event.type is EventType.OK:
            scan.kept += 1
            if invoke.f is not Operation.WRITE:
                observed = event.value if invoke.f is Operation.READ else invoke.value[0]
                if observed in writers:
                    self._last[observed] = line
        if invoke.f is not Operation.READ:
            value = _new_value(invoke.f, invoke.value)
            if writers[value] > 1:
                writers[value] -= 1
            else:
                del writers[value]
                self._last.pop(value, None)

    def _no_cas(self, line: int) -> None:
        """A cas that did not fail (it is an operation of the history) under a model without cas: an error."""
        if not self._cas_allowed:
            raise HistoryError(f"line {line}", "cas is not an operation of model register",
                               "check it with --model cas-register or kv")

    def finish(self) -> KeyScan:
        scan = self._scan
        for invoke_line, invoke in self._open.values():
            if invoke.f is Operation.CAS:
                self._no_cas(invoke_line)
            scan.indeterminate[invoke_line] = (invoke.f, invoke.value)
            scan.kept += 1
        self._open = {}
        scan.last_seen = {line: self._last.get(_new_value(f, value), 0)
                          for line, (f, value) in scan.indeterminate.items() if f is not Operation.READ}
        _drop_unobserved(scan)
        _later_expectations(scan)
        return scan


def scan_key(events: Numbered, *, cas_allowed: bool = True) -> KeyScan:
    """The first pass over one key's ``(line, event)`` pairs (module rules)."""
    scanner = KeyScanner(cas_allowed=cas_allowed)
    for line, event in events:
        scanner.add(line, event)
    return scanner.finish()


def _drop_unobserved(scan: KeyScan) -> None:
    """Remove from ``scan.last_seen`` the indeterminate writes / cas no determinate operation observes after their
    invoke and no kept indeterminate cas expects, to a fixpoint."""
    while True:
        expects = Counter(scan.indeterminate[line][1][0] for line in scan.last_seen
                          if scan.indeterminate[line][0] is Operation.CAS)
        gone = [line for line, seen in scan.last_seen.items()
                if seen <= line and not _expected_by_another(expects, *scan.indeterminate[line])]
        if not gone:
            return
        for line in gone:
            del scan.last_seen[line]


def _later_expectations(scan: KeyScan) -> None:
    """Extend each kept operation's ``last_seen`` to the invoke of the last other kept indeterminate cas expecting
    its value: that cas may take effect at any time after its invoke, so until then the value may still be
    observed."""
    expecting: dict[Any, list[int]] = defaultdict(list)
    for line in scan.last_seen:
        f, value = scan.indeterminate[line]
        if f is Operation.CAS:
            expecting[value[0]].append(line)
    for line, seen in scan.last_seen.items():
        others = [other for other in expecting.get(_new_value(*scan.indeterminate[line]), ()) if other != line]
        if others:
            scan.last_seen[line] = max(seen, *others)


def _expected_by_another(expects: Counter[Any], f: Operation, value: Any) -> bool:
    own = 1 if f is Operation.CAS and value[0] == value[1] else 0
    return expects[_new_value(f, value)] > own


class KeyWindows:
    """The second pass over one key, fed event by event: :meth:`add` returns a window when the history is cut after
    this event, :meth:`rest` the last window (each in invoke order)."""

    __slots__ = ("_scan", "_window_ops", "_open", "_quiet", "_window")

    def __init__(self, scan: KeyScan, window_ops: int) -> None:
        self._scan, self._window_ops = scan, window_ops
        self._open: dict[int, tuple[int, Event]] = {}
        self._quiet: set[int] = set()  # processes whose open operation is indeterminate (it is in a window already)
        self._window: list[HistoryOp] = []

    def add(self, line: int, event: Event) -> list[HistoryOp] | None:
        process = event.process
        if event.type is EventType.INVOKE:
            if line in self._scan.indeterminate:
                self._quiet.add(process)
                if line in self._scan.last_seen:
                    self._window.append(_operation(event, line, None, None))
            else:
                self._open[process] = (line, event)
            return None
        if process in self._quiet:
            self._quiet.discard(process)
            return None
        invoke_line, invoke = self._open.pop(process)
        if event.type is EventType.OK:
            self._window.append(_operation(invoke, invoke_line, event, line))
        if self._open or len(self._window) < self._window_ops:
            return None
        return self.rest()

    def rest(self) -> list[HistoryOp]:
        window, self._window = self._window, []
        window.sort(key=_invoke_line)
        return window


def windows(events: Numbered, scan: KeyScan, window_ops: int) -> Iterator[tuple[list[HistoryOp], int | None]]:
    """The second pass: each window's operations (invoke order) and the line it is cut after (None: the last)."""
    cutter = KeyWindows(scan, window_ops)
    for line, event in events:
        window = cutter.add(line, event)
        if window is not None:
            yield window, line
    yield cutter.rest(), None


def _invoke_line(op: HistoryOp) -> int:
    return op.invoke_line


def _operation(invoke: Event, invoke_line: int, done: Event | None, line: int | None) -> HistoryOp:
    return HistoryOp(
        process=invoke.process, f=invoke.f, key=invoke.key, value=invoke.value,
        output=done.value if done is not None and invoke.f is Operation.READ else None,
        invoke_line=invoke_line, return_line=line, invoke_time=invoke.time,
        return_time=None if done is None else done.time,
    )


@dataclass(slots=True)
class WindowedKey:
    """The state of one key's windowed check between windows: :meth:`step` searches the next window,
    :meth:`result` gives the key's outcome once its last window (or a verdict) is reached."""

    scan: KeyScan
    deadline: float | None
    carry: Carry
    pending: dict[int, HistoryOp] = field(default_factory=dict)  # line -> an op pending in a carried configuration
    outcome: SearchOutcome | None = None  # set by the window that ends the key (its verdict, or "unknown")
    placed: int = 0  # determinate operations of the windows searched so far
    steps: int = 0
    windows: int = 0
    largest_window: int = 0
    largest_cache: int = 0
    most_carried: int = 1
    elapsed_s: float = 0.0

    def step(self, window: list[HistoryOp], cut: int | None) -> bool:
        """Search ``window`` (cut after line ``cut``; None: the key's last one); True once the key is judged."""
        started = time.perf_counter()
        self.windows += 1
        self.largest_window = max(self.largest_window, len(window))
        self.outcome = _step(window, cut, self)
        if cut is None and self.outcome is None:
            self.outcome = SearchOutcome(valid=True, steps=0, cache_size=0)
        self.elapsed_s += time.perf_counter() - started
        return self.outcome is not None

    def result(self) -> tuple[SearchOutcome, dict[str, Any]]:
        """The outcome (``steps`` of all windows, ``cache_size`` the largest window's memo) and the figures."""
        assert self.outcome is not None
        figures = {"windows": self.windows, "largest_window_ops": self.largest_window,
                   "most_carried": self.most_carried}
        return replace(self.outcome, steps=self.steps, cache_size=self.largest_cache), figures


def check_windowed(events: Numbered, scan: KeyScan, initial: Any, deadline: float | None,
                   window_ops: int) -> tuple[SearchOutcome, dict[str, Any]]:
    """Check one key window by window (module rules): ``events`` is read again (the first pass made ``scan``)."""
    key = WindowedKey(scan=scan, deadline=deadline, carry=[(initial, frozenset())])
    for window, cut in windows(events, scan, window_ops):
        if key.step(window, cut):
            break
    return key.result()


def _step(window: list[HistoryOp], cut: int | None, progress: WindowedKey) -> SearchOutcome | None:
    """Search one window from the carried configurations; an outcome ends the key (a verdict or "unknown"),
    None goes on with the next window."""
    deadline = progress.deadline
    if deadline is not None and time.perf_counter() > deadline:
        return SearchOutcome(valid="unknown", steps=0, cache_size=0)
    carried = sorted(progress.pending.values(), key=_invoke_line)
    ops = carried + window
    keep = _frontier_values(window)  # and what the carried and indeterminate operations write (module rules)
    keep.update(value for value, _ in progress.carry)
    keep.update(_new_value(op.f, op.value) for op in ops if op.indeterminate)
    coded = encode(ops, keep)
    cache: set[tuple[int, int, int, Any]] = set()
    ends: set[tuple[Any, int]] | None = None if cut is None else set()
    deepest = None
    for value, pending in progress.carry:
        excluded = [i for i, op in enumerate(carried) if op.invoke_line not in pending]
        for i in excluded:
            lift(coded.nxt, coded.prv, 2 * i)
        walk = explore(coded, value, sum(1 << i for i in excluded), cache, deadline, ends)
        for i in reversed(excluded):
            unlift(coded.nxt, coded.prv, 2 * i)
        progress.steps += walk.steps
        progress.largest_cache = max(progress.largest_cache, len(cache))
        if walk.valid == "unknown" or (cut is None and walk.valid is True):
            return SearchOutcome(valid=walk.valid, steps=0, cache_size=0)
        if deepest is None or walk.depth > deepest.depth:
            deepest = walk
    if not ends:
        assert deepest is not None
        return refuted(coded, deepest, len(cache), progress.placed)
    progress.placed += sum(1 for op in window if not op.indeterminate)
    return _carry_over(ends, ops, cut, progress)  # type: ignore[arg-type]


def _frontier_values(window: list[HistoryOp]) -> set[Any]:
    """The values written by the window's determinate writes and cas that no other one follows in real time."""
    changes = [op for op in window if op.f is not Operation.READ and not op.indeterminate]
    if not changes:
        return set()
    last_invoke = max(op.invoke_line for op in changes)
    return {_new_value(op.f, op.value) for op in changes if op.return_line > last_invoke}  # type: ignore[operator]


def _carry_over(ends: set[tuple[Any, int]], ops: list[HistoryOp], cut: int,
                progress: WindowedKey) -> SearchOutcome | None:
    """The configurations to carry across the cut after line ``cut``, from the window's ends (module rules)."""
    indeterminate = [op for op in ops if op.indeterminate]  # numbered as their bits
    by_value: dict[Any, set[frozenset[int]]] = defaultdict(set)
    for value, placed in ends:
        if value is UNOBSERVED:
            raise AssertionError("a window ended in an abstract value: its frontier values were not all kept")
        pending = frozenset(op.invoke_line for j, op in enumerate(indeterminate) if not placed >> j & 1)
        by_value[value].add(_still_observable(pending, progress.scan, cut))
    carry: Carry = []
    for value, sets in by_value.items():
        widest: list[frozenset[int]] = []
        for pending in sorted(sets, key=len, reverse=True):
            if not any(pending <= other for other in widest):
                widest.append(pending)
        carry.extend((value, pending) for pending in widest)
    progress.most_carried = max(progress.most_carried, len(carry))
    if len(carry) > MAX_CARRIED:
        return SearchOutcome(valid="unknown", steps=0, cache_size=0)
    progress.carry = carry
    lines = set().union(*(pending for _, pending in carry))
    progress.pending = {op.invoke_line: op for op in indeterminate if op.invoke_line in lines}
    return None


def _still_observable(pending: frozenset[int], scan: KeyScan, cut: int) -> frozenset[int]:
    """``pending`` less the operations whose value nothing after line ``cut`` can observe (to a fixpoint)."""
    live = set(pending)
    while True:
        expects = Counter(scan.indeterminate[line][1][0] for line in live
                          if scan.indeterminate[line][0] is Operation.CAS)
        gone = [line for line in live
                if scan.last_seen[line] <= cut and not _expected_by_another(expects, *scan.indeterminate[line])]
        if not gone:
            return frozenset(live)
        live.difference_update(gone)
