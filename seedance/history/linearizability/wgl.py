"""The Wing & Gong search with Lowe's memoisation ("WGL"), for one register (one key's operations).

Rules, following Lowe, "Testing for linearizability", Concurrency Comput. Pract. Exper. 29(4), 2017, §3-4
(the algorithm Porcupine and Knossos also implement), after Wing & Gong, J. Parallel Distrib. Comput. 17, 1993:

* The history is a doubly linked list of call and return entries in real-time order. The search walks it from the
  head: at a call entry it tries to linearize that operation now (the sequential model must accept it); on success
  it lifts the call and its return out of the list, pushes (entry, previous state) and restarts from the head. At a
  return entry, the operation returning there was not linearized before its return: the search backtracks (pops
  the last choice, relinks it, moves past it). The calls before the first return entry are exactly the operations
  that may come next in a linearization (all operations that precede them in real time are placed).
* Lowe's memoisation: a configuration (set of linearized operations as a bitset, model state) already explored is
  never explored again. Without it the search is exponential on many ordinary histories. The memo stores the set
  of determinate operations as (first unlinearized one, bits above it), and the indeterminate ones apart: a few
  words instead of one bit per operation of the history.
* Indeterminate operations have their return at +infinity (after every other entry). Reaching one of those
  returns means every determinate operation is linearized: the history is linearizable; the indeterminate
  operations still in the list never took effect.
* The model is a compare-and-set register (read / write / cas), which contains the plain register. A read is
  legal iff it returns the current value; a cas ``(expected, new)`` that returned ok is legal iff the current value
  equals ``expected``; a write always is.

Reductions, all exact (they never change a verdict), keep real histories tractable:

* Unobserved values. A value that no read returns and no cas expects can never be told apart from another such
  value: legality only compares the state with observed values. All of them are mapped to one abstract value,
  so configurations that differ only in which unobserved value was last written are merged in the memo.
* Forced steps. A read of the current value is linearized at once, with no branch: if some linearization places
  it later, moving it to now keeps that linearization legal (a read changes no state, and every operation that
  must precede it is already placed). The same holds for a write of an unobserved value while the state is
  unobserved: wherever a linearization places it, what follows it up to the next write can only be writes (nothing
  else is legal on an unobserved value), so it may as well take effect now, where it changes nothing. (A write of
  an *observed* value is never forced: moving it would drop a state change where it was.) If the configuration
  after a forced step was already explored, so was this one.
* Indeterminate operations are placed only where a candidate observes their value at once: one that is placed
  anywhere else in a linearization is followed by a write (which hides it) or by nothing, so leaving it out keeps
  the linearization legal; and the observer, a read returning its value or a cas expecting it, is a candidate in
  the same configuration (an indeterminate operation precedes nothing in real time). So an indeterminate
  operation is tried only if its new value is "wanted" by a read or cas among the candidates, not if it would
  leave the state unchanged, and of several identical ones (same operation and values) already invoked only the
  first: they are interchangeable from then on.

Each configuration first takes all its forced steps, then branches: first on the candidates giving a wanted value
(the only ones where indeterminate operations are tried), then on the other determinate ones, in list order. The
order changes speed only. Without the last reduction, Jepsen's etcd histories (many timed-out writes of five
values) took ~1e6 steps; with it they take ~500. Concurrency on one key is what stays expensive: a 4,000-operation
history of 31 clients on one register takes ~1e7 steps (tens of seconds), against ~5e5 with 16 clients.

A deadline (a ``time.perf_counter()`` value), checked every few thousand steps, turns a search that would run too
long into "unknown".

:func:`explore` is that search; :func:`search` stops it at the first linearization. The windowed check
(:mod:`.windows`) needs every way a window of operations can end instead: given a set ``ends``, :func:`explore`
records at each configuration where every determinate operation is linearized its (register value, placed
indeterminate operations) and backtracks, so it visits every configuration reachable from its start once (the
memo may be shared by several starts over the same operations: a configuration explored from one start leads to
the same ends from another). The reductions above keep what the set of ends can do next: an indeterminate operation
they leave unplaced stays pending and may still take effect after the window, and a read placed now ends in the
same state as placed later. The recorded value is concrete if :func:`encode` was told to keep every value a
linearization can end in (a value abstracted to ``UNOBSERVED`` is forgotten).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from seedance.history.events import Operation
from seedance.history.linearizability.operations import HistoryOp

__all__ = ["UNOBSERVED", "Coded", "SearchOutcome", "Walk", "encode", "explore", "lift", "refuted", "search",
           "unlift"]

_READ, _WRITE, _CAS = 0, 1, 2
_KIND = {Operation.READ: _READ, Operation.WRITE: _WRITE, Operation.CAS: _CAS}
_FORCED, _WANTED, _REST = 0, 1, 2  # the phases of a configuration (see the module docstring)
_CLOCK_EVERY = 4096  # search steps between two looks at the clock
_CONCURRENT_SHOWN = 8


class _Unobserved:
    """The abstract value standing for every value no read returns and no cas expects."""

    def __repr__(self) -> str:
        return "<a value no operation observes>"


UNOBSERVED = _Unobserved()


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchOutcome:
    """``valid`` is True, False or ``"unknown"`` (deadline). When False, ``blocked`` is the operation that could not
    be linearized at the deepest point the search reached, ``state`` the register's value there, ``linearized``
    how many operations were linearized before it, and ``concurrent`` some other operations pending there."""

    valid: bool | str
    steps: int
    cache_size: int
    blocked: HistoryOp | None = None
    state: Any = None
    linearized: int = 0
    concurrent: tuple[HistoryOp, ...] = ()


def search(ops: list[HistoryOp], initial: Any = None, deadline: float | None = None) -> SearchOutcome:
    """Decide whether ``ops`` (one key, invoke order) is linearizable w.r.t. a cas register starting at ``initial``."""
    if not ops:
        return SearchOutcome(valid=True, steps=0, cache_size=0)
    coded = encode(ops)
    cache: set[tuple[int, int, int, Any]] = set()  # (low, determinate bits above low, indeterminate bits, state)
    walk = explore(coded, initial, 0, cache, deadline)
    if walk.valid is False:
        return refuted(coded, walk, len(cache))
    return SearchOutcome(valid=walk.valid, steps=walk.steps, cache_size=len(cache))


@dataclass(slots=True)
class Coded:
    """Operations encoded for the search, one entry per operation (see :func:`encode`), with the entry list."""

    ops: list[HistoryOp]
    kind: list[int]
    arg: list[Any]
    new: list[Any]
    written: list[Any]
    indeterminate: list[bool]
    signature: list[Any]
    bit: list[int]
    nxt: list[int]
    prv: list[int]
    observed: set[Any]

    def abstract(self, value: Any) -> Any:
        return value if value in self.observed else UNOBSERVED


@dataclass(frozen=True, slots=True)
class Walk:
    """What one :func:`explore` found: ``valid`` (True: a linearization / an end was reached, False: none,
    "unknown": deadline), its steps, and the deepest dead end (op index, concrete value there, other pending ops)
    with its depth (operations linearized in this walk before it)."""

    valid: bool | str
    steps: int
    depth: int
    best: tuple[int, Any, tuple[int, ...]] | None


def explore(coded: Coded, initial: Any, placed_indeterminate: int, cache: set[tuple[int, int, int, Any]],
            deadline: float | None, ends: set[tuple[Any, int]] | None = None) -> Walk:
    """The search from the value ``initial``, the indeterminate operations of ``placed_indeterminate`` (bits)
    already placed and lifted out by the caller, memo ``cache``; with ``ends``, exhaustive (module docstring)."""
    kind, arg, new, written, indeterminate = coded.kind, coded.arg, coded.new, coded.written, coded.indeterminate
    signature, bit, nxt, prv = coded.signature, coded.bit, coded.nxt, coded.prv
    head, tail = 2 * len(kind), 2 * len(kind) + 1
    placed = 0  # the operations linearized, as two bitsets (see encode)
    stack: list[tuple[int, Any, Any, int]] = []  # (call entry, state before, concrete value before, phase)
    entry, phase, concrete, state = nxt[head], _FORCED, initial, coded.abstract(initial)  # concrete: actual value
    wanted: set[Any] = set()  # values the blocked candidates wait for (reads' results, cas' expected values)
    seen: set[tuple[int, Any, Any]] = set()  # signatures of the indeterminate candidates tried in this phase
    steps, best_depth, best, found = 0, -1, None, False
    while True:
        steps += 1
        if deadline is not None and steps % _CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            return Walk("unknown", steps, best_depth, best)
        i = entry >> 1
        if entry == tail or entry & 1:  # a return entry (or the end): the candidates are behind us
            if entry == tail or indeterminate[i]:
                if ends is None:
                    return Walk(True, steps, best_depth, best)
                ends.add((state, placed_indeterminate))
                found = True
            elif phase != _REST:  # the next phase, from the head: _FORCED -> _WANTED -> _REST
                if phase == _FORCED:
                    wanted = _wanted(nxt, head, kind, arg, state)
                    seen.clear()
                phase, entry = phase + 1, nxt[head]
                continue
            elif len(stack) > best_depth:  # op i returns here, not linearized: this configuration is a dead end
                best_depth, best = len(stack), (i, concrete, _pending_calls(nxt, head, entry, i))
        else:  # a call entry: can op i take effect now?
            k = kind[i]
            if k == _READ:
                legal, after, free = state == arg[i], state, True
            elif k == _WRITE:
                after = arg[i]
                legal, free = True, after is UNOBSERVED and state is UNOBSERVED
            else:
                legal, after, free = state == arg[i], new[i], False
            if not legal or free != (phase == _FORCED):
                entry = nxt[entry]
                continue
            if phase == _WANTED:  # a value some blocked candidate waits for; an indeterminate op only here, only if
                # it changes the state and no identical one was tried here (module docstring)
                if after not in wanted or (indeterminate[i] and (after == state or signature[i] in seen)):
                    entry = nxt[entry]
                    continue
                if indeterminate[i]:
                    seen.add(signature[i])
            elif phase == _REST and (indeterminate[i] or after in wanted):
                entry = nxt[entry]
                continue
            if indeterminate[i]:
                grown, grown_indeterminate = placed, placed_indeterminate | 1 << bit[i]
            else:
                grown, grown_indeterminate = placed | 1 << bit[i], placed_indeterminate
            low = ((grown + 1) & ~grown).bit_length() - 1  # every determinate op numbered below ``low`` is placed
            config = (low, grown >> low, grown_indeterminate, after)
            if config not in cache:
                cache.add(config)
                stack.append((entry, state, concrete, phase))
                placed, placed_indeterminate, state = grown, grown_indeterminate, after
                if k != _READ:
                    concrete = written[i]
                lift(nxt, prv, entry)
                if phase == _FORCED:
                    entry = nxt[prv[entry]]  # its successor now (its own return may have been next)
                else:
                    entry, phase = nxt[head], _FORCED
                continue
            if phase != _FORCED:
                entry = nxt[entry]
                continue
            # a forced step into an explored configuration: this one is a dead end too
        back = _backtrack(stack, nxt, prv, kind, arg, indeterminate, signature, bit, placed, placed_indeterminate)
        if back is None:
            return Walk(found, steps, best_depth, best)
        entry, state, concrete, phase, placed, placed_indeterminate, wanted, seen = back


def encode(ops: list[HistoryOp], keep: Iterable[Any] = ()) -> Coded:
    """Per operation: its kind, argument (abstract where unobserved), new value of a cas, concrete value written
    (for reports), indeterminacy, signature (indeterminate ones with equal signatures are interchangeable once
    both are invoked) and bit; and the entry list. Values read, expected by a cas or in ``keep`` stay concrete.

    The linearized set is two bitsets, over determinate and over indeterminate operations (numbered apart); the
    memo keeps the first unlinearized determinate operation and the determinate bits above it. An operation's
    "bit" is its number in its bitset, not the power of two itself: those would take O(n²) bits in all (a key of
    91,000 operations: 0.5 GB)."""
    n = len(ops)
    observed = {op.output for op in ops if op.f is Operation.READ}
    observed.update(op.value[0] for op in ops if op.f is Operation.CAS)
    observed.update(keep)

    def abstract(value: Any) -> Any:
        return value if value in observed else UNOBSERVED

    kind = [_KIND[op.f] for op in ops]
    arg = [op.output if op.f is Operation.READ else (op.value[0] if op.f is Operation.CAS else abstract(op.value))
           for op in ops]
    new = [abstract(op.value[1]) if op.f is Operation.CAS else None for op in ops]
    written = [op.value[1] if op.f is Operation.CAS else op.value for op in ops]
    indeterminate = [op.indeterminate for op in ops]
    signature = [(kind[i], arg[i], new[i]) if indeterminate[i] else None for i in range(n)]
    bit = [0] * n
    determinate_count = indeterminate_count = 0
    for j in range(n):
        if indeterminate[j]:
            bit[j], indeterminate_count = indeterminate_count, indeterminate_count + 1
        else:
            bit[j], determinate_count = determinate_count, determinate_count + 1
    nxt, prv = _entry_list(ops)
    return Coded(ops, kind, arg, new, written, indeterminate, signature, bit, nxt, prv, observed)


def _backtrack(stack: list[tuple[int, Any, Any, int]], nxt: list[int], prv: list[int], kind: list[int],
               arg: list[Any], indeterminate: list[bool], signature: list[Any], bit: list[int], placed: int,
               placed_indeterminate: int) -> tuple[int, Any, Any, int, int, int, set[Any], set[Any]] | None:
    """Undo the forced steps and the last branching choice; the search goes on with the candidate after that
    choice: (that entry, then as before the choice: state, concrete value, phase, the linearized bitsets, the
    wanted values and, in the wanted phase, the signatures tried), or None when no choice is left (refuted)."""
    head = len(nxt) - 2
    while stack:
        entry, state, concrete, phase = stack.pop()
        if indeterminate[entry >> 1]:
            placed_indeterminate ^= 1 << bit[entry >> 1]
        else:
            placed ^= 1 << bit[entry >> 1]
        unlift(nxt, prv, entry)
        if phase != _FORCED:
            wanted = _wanted(nxt, head, kind, arg, state)
            seen = _seen_before(nxt, head, entry, signature) if phase == _WANTED else set()
            return nxt[entry], state, concrete, phase, placed, placed_indeterminate, wanted, seen
    return None


def refuted(coded: Coded, walk: Walk, cache_size: int, linearized_before: int = 0) -> SearchOutcome:
    """The "not linearizable" outcome, from the deepest dead end a walk reached (``linearized_before``: operations
    placed before the walk began, for the report)."""
    if walk.best is None:  # no dead end recorded (every configuration was explored by an earlier walk)
        blocked, best_state, others = 0, None, ()
    else:
        blocked, best_state, others = walk.best
    return SearchOutcome(
        valid=False, steps=walk.steps, cache_size=cache_size, blocked=coded.ops[blocked], state=best_state,
        linearized=linearized_before + max(walk.depth, 0), concurrent=tuple(coded.ops[j] for j in others),
    )


def _entry_list(ops: list[HistoryOp]) -> tuple[list[int], list[int]]:
    """The doubly linked entry list: call of op i = 2i, its return = 2i+1, head = 2n, tail = 2n+1.

    Entries are in event order; indeterminate returns go after everything, in invoke order.
    """
    n = len(ops)
    infinity = float("inf")
    positions = []
    for i, op in enumerate(ops):
        positions.append((op.invoke_line, 0, 2 * i))
        positions.append((infinity if op.return_line is None else op.return_line, i, 2 * i + 1))
    positions.sort()
    nxt = [0] * (2 * n + 2)
    prv = [0] * (2 * n + 2)
    previous = 2 * n
    for _, _, entry in positions:
        nxt[previous] = entry
        prv[entry] = previous
        previous = entry
    nxt[previous] = 2 * n + 1
    prv[2 * n + 1] = previous
    return nxt, prv


def lift(nxt: list[int], prv: list[int], call: int) -> None:
    """Unlink a call entry and its return entry (``call + 1``)."""
    ret = call + 1
    nxt[prv[call]] = nxt[call]
    prv[nxt[call]] = prv[call]
    nxt[prv[ret]] = nxt[ret]
    prv[nxt[ret]] = prv[ret]


def unlift(nxt: list[int], prv: list[int], call: int) -> None:
    """Relink what :func:`lift` unlinked, in the reverse order."""
    ret = call + 1
    prv[nxt[ret]] = ret
    nxt[prv[ret]] = ret
    prv[nxt[call]] = call
    nxt[prv[call]] = call


def _wanted(nxt: list[int], head: int, kind: list[int], arg: list[Any], state: Any) -> set[Any]:
    """Values the candidates cannot proceed without: what the pending reads return, what blocked cas expect."""
    wanted = set()
    entry = nxt[head]
    while not entry & 1 and entry != 2 * len(kind) + 1:
        i = entry >> 1
        if kind[i] == _READ or (kind[i] == _CAS and arg[i] != state):
            wanted.add(arg[i])
        entry = nxt[entry]
    return wanted


def _seen_before(nxt: list[int], head: int, stop: int, signature: list[Any]) -> set[Any]:
    """Signatures of the indeterminate calls from the head up to and including ``stop`` (a call entry)."""
    seen = set()
    entry = nxt[head]
    while True:
        if not entry & 1 and signature[entry >> 1] is not None:
            seen.add(signature[entry >> 1])
        if entry == stop:
            return seen
        entry = nxt[entry]


def _pending_calls(nxt: list[int], head: int, stop: int, skip: int) -> tuple[int, ...]:
    """Operations whose call is still in the list before ``stop`` (at most a few), other than ``skip``."""
    found = []
    entry = nxt[head]
    while entry != stop and len(found) < _CONCURRENT_SHOWN:
        if not entry & 1 and entry >> 1 != skip:
            found.append(entry >> 1)
        entry = nxt[entry]
    return tuple(found)
