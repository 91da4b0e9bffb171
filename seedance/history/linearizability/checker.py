"""``check``: is a history linearizable w.r.t. a register, a cas register or a key-value store of cas registers?

Rules:

* Models. ``register``: read / write (a cas operation is a user error). ``cas-register``: read / write / cas,
  where a cas ``[expected, new]`` that returned ok took effect because the value was ``expected``; one that returned
  fail did not take effect. ``kv``: a map from key to cas register. Every register starts at ``initial`` (``None``,
  what a read of a never-written key returns as JSON ``null``). In every model, distinct keys are independent
  objects, so a register history with keys is a set of registers.
* Linearizability (Herlihy & Wing 1990, §3): every ok operation takes effect at one instant between its invoke and
  its completion, every indeterminate one at such an instant after its invoke or never, and the resulting
  sequence is legal for the model. Keys are checked one by one (P-compositionality, Horn & Kroening, FORTE 2015;
  locality, Herlihy & Wing 1990 Theorem 1), each with the WGL search of :mod:`.wgl`.
* Verdict: ``False`` as soon as one key is not linearizable; ``"unknown"`` if some key ran out of the time budget
  and none was found not linearizable; ``True`` otherwise.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from seedance.history.events import Event, Operation
from seedance.history.linearizability.operations import (
    HistoryOp, pair_operations, prune_unobserved, split_by_key,
)
from seedance.history.linearizability.wgl import SearchOutcome, search
from seedance.history.linearizability.windows import (
    DEFAULT_WINDOW_OPS, KeyScan, KeyScanner, KeyWindows, WindowedKey, check_windowed, scan_key,
)
from seedance.errors import HistoryError, SpecError

__all__ = ["MIN_KEY_WINDOW_OPS", "CheckResult", "Model", "check", "check_keys", "check_streamed"]

MIN_KEY_WINDOW_OPS = 100  # a key's window in check_streamed at least, however many keys share the operations


class Model(str, enum.Enum):
    """The sequential specifications a history can be checked against."""

    REGISTER = "register"
    CAS_REGISTER = "cas-register"
    KV = "kv"


MODEL_NAMES = tuple(m.value for m in Model)


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """The verdict on a history.

    ``valid`` is True, False or ``"unknown"`` (time budget spent); ``ops`` counts the history's operations (failed
    and indeterminate ones included); ``first_violation`` (when ``valid`` is False) names the key, the operation
    that could not be linearized and the state it met; ``per_key`` holds, for each key, its operation count,
    verdict, search steps and seconds.
    """

    valid: bool | str
    ops: int
    elapsed_s: float
    model: str
    first_violation: dict[str, Any] | None = None
    per_key: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self, *, per_key: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "valid": self.valid, "ops": self.ops, "elapsed_s": self.elapsed_s, "model": self.model,
            "keys": len(self.per_key), "first_violation": self.first_violation,
        }
        if per_key:
            out["per_key"] = self.per_key
        return out


def check(
    events: list[Event],
    model: str | Model = Model.KV,
    timeout_s: float | None = None,
    *,
    initial: Any = None,
) -> CheckResult:
    """Check ``events`` (a validated history, e.g. from :func:`seedance.history.events.read_jsonl`).

    ``timeout_s`` bounds the whole check (``None``: no bound); when it runs out the verdict is ``"unknown"``.
    Raises :class:`HistoryError` for a history the model cannot judge (a cas under ``register``) and
    :class:`SpecError` for an unknown model or a negative timeout.
    """
    started = time.perf_counter()
    model, deadline = _model_and_deadline(model, timeout_s, started)
    ops, total = pair_operations(events)
    if model is Model.REGISTER:
        _no_cas(ops)
    groups = sorted(split_by_key(ops).items(), key=lambda item: _key_order(item[0]))
    return _judge(((key, _whole_key(key_ops, model, initial, deadline)) for key, key_ops in groups), total, model,
                  started)


def check_keys(keys: Iterable[tuple[str | None, Iterable[tuple[int, Event]]]], model: str | Model = Model.KV,
               timeout_s: float | None = None, *, initial: Any = None,
               window_ops: int | None = DEFAULT_WINDOW_OPS) -> CheckResult:
    """:func:`check` from each key's events in turn, each ``(line in the whole history, event)``, keys in the order
    :func:`check` takes them (``None`` first, then by name): the verdict and line numbers are the ones :func:`check`
    gives the whole history, but only part of one key is in memory at a time (a history streamed to disk is read
    back key by key, e.g. :meth:`seedance.history.stream.HistoryLog.by_key`).

    A key of more than ``window_ops`` operations is checked in windows of at least that many (:mod:`.windows`; its
    per-key figures add ``windows``, ``largest_window_ops`` and ``most_carried``); a shorter one, or every key when
    ``window_ops`` is None, as one search. Either way a key's events are read twice: give each as something that can
    be iterated again (a list, or an object whose ``__iter__`` reads them again); a one-shot iterator is read into a
    list first."""
    started = time.perf_counter()
    model, deadline = _model_and_deadline(model, timeout_s, started)
    if window_ops is not None and window_ops < 1:
        raise SpecError("window", f"must be at least 1 operation, got {window_ops!r}")
    counted = [0]

    def judged() -> Iterator[tuple[str | None, tuple[SearchOutcome, dict[str, Any]]]]:
        for key, numbered in keys:
            if iter(numbered) is numbered:  # type: ignore[comparison-overlap]
                numbered = list(numbered)
            if window_ops is None:
                done = _whole_from_events(numbered, model, initial, deadline, counted)
            else:
                done = _windowed_from_events(numbered, model, initial, deadline, window_ops, counted)
            if done is not None:
                yield key, done

    result = _judge(judged(), 0, model, started)
    return replace(result, ops=counted[0])


def _whole_from_events(numbered: Iterable[tuple[int, Event]], model: Model, initial: Any, deadline: float | None,
                       counted: list[int]) -> tuple[SearchOutcome, dict[str, Any]] | None:
    """One key as one search (its operations all in memory); None when it has no operation to judge."""
    numbered = list(numbered)
    ops, total = pair_operations((event for _, event in numbered), (line for line, _ in numbered))
    del numbered  # the key's events are paired: not held while its operations are searched
    counted[0] += total
    return _whole_key(ops, model, initial, deadline) if ops else None


def _windowed_from_events(numbered: Iterable[tuple[int, Event]], model: Model, initial: Any,
                          deadline: float | None, window_ops: int,
                          counted: list[int]) -> tuple[SearchOutcome, dict[str, Any]] | None:
    """One key: a first pass (:func:`.windows.scan_key`), then one search if it is short, windows if not."""
    scan = scan_key(numbered, cas_allowed=model is not Model.REGISTER)
    counted[0] += scan.total
    if not scan.kept:
        return None
    if scan.kept <= window_ops:
        return _whole_from_events(numbered, model, initial, deadline, [0])
    outcome, figures = check_windowed(numbered, scan, initial, deadline, window_ops)
    return outcome, {"ops": scan.kept, "searched_ops": _searched(scan), **figures}


def _whole_key(key_ops: list[HistoryOp], model: Model, initial: Any,
               deadline: float | None) -> tuple[SearchOutcome, dict[str, Any]]:
    """One key's operations as one search (after :func:`.operations.prune_unobserved`)."""
    if model is Model.REGISTER:
        _no_cas(key_ops)
    kept = prune_unobserved(key_ops)
    return search(kept, initial, deadline), {"ops": len(key_ops), "searched_ops": len(kept)}


def check_streamed(events: Callable[[], Iterable[tuple[int, Event]]], model: str | Model = Model.KV,
                   timeout_s: float | None = None, *, initial: Any = None,
                   window_ops: int = DEFAULT_WINDOW_OPS) -> CheckResult:
    """:func:`check` of a history read in two passes, ``events()`` giving its ``(line, event)`` pairs each time
    (e.g. :meth:`seedance.history.stream.HistoryLog.events`): the first scans every key (:mod:`.windows`), the second
    feeds every key's windows side by side, so the history is read twice whatever its number of keys, and memory
    holds about ``window_ops`` operations in all: each key's window is ``window_ops`` shared among the keys (at
    least ``MIN_KEY_WINDOW_OPS``, or ``window_ops`` if smaller). A key no longer than its window is kept whole and searched as :func:`check`
    searches it, after the second pass. The verdict, the first violation's key (keys in :func:`check`'s order) and
    the line numbers are :func:`check`'s; a violation found in windows names the deepest dead end of its window."""
    started = time.perf_counter()
    model, deadline = _model_and_deadline(model, timeout_s, started)
    scanners: dict[str | None, KeyScanner] = {}
    for line, event in events():
        scanner = scanners.get(event.key)
        if scanner is None:
            scanner = scanners[event.key] = KeyScanner(cas_allowed=model is not Model.REGISTER)
        scanner.add(line, event)
    scans = {key: scanner.finish() for key, scanner in scanners.items()}
    del scanners
    key_window = max(window_ops // max(len(scans), 1), min(window_ops, MIN_KEY_WINDOW_OPS))
    whole: dict[str | None, list[tuple[int, Event]]] = {}
    cut: dict[str | None, tuple[KeyWindows, WindowedKey]] = {}
    for key, scan in scans.items():
        if scan.kept > key_window:
            cut[key] = (KeyWindows(scan, key_window), WindowedKey(scan=scan, deadline=deadline,
                                                                   carry=[(initial, frozenset())]))
        elif scan.kept:
            whole[key] = []
    for line, event in events():
        key = event.key
        if key in cut:
            cutter, judged = cut[key]
            window = cutter.add(line, event) if judged.outcome is None else None
            if window is not None:
                judged.step(window, line)
        elif key in whole:
            whole[key].append((line, event))
    for cutter, judged in cut.values():
        if judged.outcome is None:
            judged.step(cutter.rest(), None)

    def outcomes() -> Iterator[tuple[str | None, tuple[SearchOutcome, dict[str, Any]]]]:
        for key in sorted(set(whole) | set(cut), key=_key_order):
            if key in cut:
                judged = cut.pop(key)[1]
                outcome, figures = judged.result()
                yield key, (outcome, {"ops": judged.scan.kept, "searched_ops": _searched(judged.scan), **figures,
                                      "elapsed_s": judged.elapsed_s})
            else:
                yield key, _whole_from_events(whole.pop(key), model, initial, deadline, [0])  # type: ignore[misc]

    return _judge(outcomes(), sum(scan.total for scan in scans.values()), model, started)


def _searched(scan: KeyScan) -> int:
    """The operations of a windowed key that its windows search (failed ones, indeterminate reads and
    unobservable indeterminate writes / cas left out)."""
    return scan.kept - len(scan.indeterminate) + len(scan.last_seen)


def _no_cas(ops: list[HistoryOp]) -> None:
    for op in ops:
        if op.f is Operation.CAS:
            raise HistoryError(f"line {op.invoke_line}", "cas is not an operation of model register",
                               "check it with --model cas-register or kv")


def _key_order(key: str | None) -> tuple[bool, str]:
    return key is not None, key or ""


def _model_and_deadline(model: str | Model, timeout_s: float | None, started: float) -> tuple[Model, float | None]:
    try:
        model = Model(model)
    except ValueError:
        raise SpecError("model", f"unknown model {model!r}", f"valid: {', '.join(MODEL_NAMES)}") from None
    if timeout_s is not None and not timeout_s >= 0:
        raise SpecError("timeout", f"must be >= 0 seconds, got {timeout_s!r}")
    return model, None if timeout_s is None else started + timeout_s


def _judge(outcomes: Iterable[tuple[str | None, tuple[SearchOutcome, dict[str, Any]]]], total: int, model: Model,
           started: float) -> CheckResult:
    """Each key's outcome in turn, computed as it is drawn (stop at the first key that is not linearizable)."""
    verdict: bool | str = True
    violation = None
    per_key: dict[str, dict[str, Any]] = {}
    key_started = time.perf_counter()
    for key, (outcome, figures) in outcomes:
        ops, searched = figures.pop("ops"), figures.pop("searched_ops")
        elapsed = figures.pop("elapsed_s", time.perf_counter() - key_started)
        per_key[str(key)] = {
            "ops": ops, "searched_ops": searched, "valid": outcome.valid, "steps": outcome.steps,
            "cache_size": outcome.cache_size, "elapsed_s": elapsed, **figures,
        }
        key_started = time.perf_counter()
        if outcome.valid is False:
            verdict, violation = False, _violation(key, outcome)
            break
        if outcome.valid == "unknown":
            verdict = "unknown"
    return CheckResult(valid=verdict, ops=total, elapsed_s=time.perf_counter() - started, model=model.value,
                       first_violation=violation, per_key=per_key)


def _violation(key: str | None, outcome: SearchOutcome) -> dict[str, Any]:
    blocked: HistoryOp = outcome.blocked  # type: ignore[assignment]
    explanation = (
        f"{blocked.describe()} (lines {blocked.invoke_line}-{blocked.return_line}) cannot be linearized: no "
        f"order consistent with real time and the model lets it take effect before it returns; the deepest "
        f"legal prefix places {outcome.linearized} operation(s) of key {key!r} and leaves the register at "
        f"{outcome.state!r}"
    )
    return {
        "key": key,
        "op": blocked.to_dict(),
        "state": outcome.state,
        "linearized": outcome.linearized,
        "concurrent": [op.to_dict() for op in outcome.concurrent],
        "explanation": explanation,
    }
