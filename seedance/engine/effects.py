"""One node's effect engine: the ordering rule, group commit, timers, notices, buffers and work, for both runtimes.

Rules (the node contract, :mod:`seedance.models.protocols.contract`; etcd/raft's ``Ready``):

* Effects run in the order returned. The durable effects (``Persist``, ``PersistLog``, ``PersistRecords``,
  ``Checkpoint``) are a barrier: the first one met stops the run, the engine asks its runtime for a sync
  (:meth:`Driver.request_sync`), and everything after it — in this handler's list *and in every later handler's* —
  waits in order until the runtime reports the write durable (:meth:`EffectEngine.durable`). Nothing that follows
  a durable write can overtake it.
* Group commit: when the runtime starts the sync it calls :meth:`EffectEngine.take_group`, which takes every
  durable effect waiting in the queue (not only the first), up to the first effect that changes buffers (so a
  checkpoint saves the buffers as they were at its place in the order). One sync then serves many handlers; the
  non-durable effects between them still run after it, in their order — a delay, never a reordering.
* ``notify`` on a durable effect: once it is durable the node gets ``on_persisted(notify, now)``, an input queued
  like any other.
* Timers: ``SetTimer`` (re)arms by name with a fresh token; a firing whose token is not the current one (cancelled or
  replaced meanwhile, even after it fired but before it was handled) is dropped (:meth:`timer_due`).
* Collectives and work are validated here (misuse gives the node a failed ``CollectiveDone`` / ``WorkDone`` naming
  the problem, in both runtimes); buffers by handle live in a :class:`~seedance.engine.buffers.BufferTable`.
* A node that returns something that is not an effect, or misuses a buffer handle, is a protocol bug:
  :class:`ContractError` names the node and the effect; the runtime adds the seed and the reproduce command.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from seedance.engine import collectives as coll_rules
from seedance.engine import work as work_table
from seedance.engine.buffers import NUMPY, ArrayBackend, BufferError, BufferTable
from seedance.errors import SeedanceError
from seedance.models.protocols.contract import (
    DURABLE_EFFECTS, Annotate, CancelTimer, Checkpoint, ClientRequest, CollectiveDone, CreateBuffer, FreeBuffer,
    Observe, Reply, Restore, Send, SetTimer, StartCollective, StartWork, WorkDone,
)

# input kinds, shared by both runtimes (the order in which a node's inbox is typed)
MESSAGE, TIMER, CLIENT, COLLECTIVE, PERSISTED, WORK = 0, 1, 2, 3, 4, 5
INPUT_NAMES = ("message", "timer", "client", "collective", "persisted", "work")

DURABLE = DURABLE_EFFECTS
_BUFFER_EFFECTS = (CreateBuffer, FreeBuffer, StartWork, Restore)


class ContractError(SeedanceError, RuntimeError):
    """A node broke the contract (not an effect, a buffer misused): a protocol bug, never retried."""

    def __init__(self, node_id: int, effect: Any, problem: str) -> None:
        self.node_id = node_id
        self.effect = effect
        self.problem = problem
        RuntimeError.__init__(self, f"node {node_id}: {problem} (effect {effect!r})")

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True, slots=True)
class StagedCheckpoint:
    """A :class:`Checkpoint` as staged for a sync: the buffers' data copied at its place in the order."""

    name: str
    arrays: dict[str, np.ndarray]
    notify: Hashable | None = None

    @property
    def size_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))


class Driver(Protocol):
    """What a runtime does for the engine; ``cursor`` is the runtime's time for the effect (virtual or ignored)."""

    def send(self, effect: Send, cursor: float) -> None: ...
    def arm_timer(self, name: Any, token: int, delay_s: float, cursor: float) -> None: ...
    def disarm_timer(self, name: Any, cursor: float) -> None: ...
    def reply(self, effect: Reply, cursor: float) -> None: ...
    def annotate(self, effect: Annotate, cursor: float) -> None: ...
    def observe(self, effect: Observe, cursor: float) -> None: ...
    def start_collective(self, effect: StartCollective, meta: coll_rules.Meta, payload: Any, cursor: float) -> None: ...
    def start_work(self, effect: StartWork, fn: Any, arrays: list[Any], cursor: float) -> None: ...
    def request_sync(self, cursor: float) -> None: ...
    def deliver_later(self, kind: int, value: Any, cursor: float) -> None: ...
    def restore(self, name: str) -> dict[str, np.ndarray] | None: ...


class EffectEngine:
    """The effects of one node incarnation; see the module docstring."""

    __slots__ = ("node_id", "driver", "buffers", "timers", "_token", "_queue", "syncing", "pending_work",
                 "_into")

    def __init__(self, node_id: int, driver: Driver, backend: ArrayBackend = NUMPY) -> None:
        self.node_id = node_id
        self.driver = driver
        self.buffers = BufferTable(backend)
        self.timers: dict[Any, int] = {}
        self._token = 0
        self._queue: deque[Any] = deque()
        self.syncing = False
        self.pending_work = 0
        self._into: dict[Any, str | None] = {}  # collective id -> result_into of the collectives in flight

    # ------------------------------------------------------------------------------------------------ effects
    def perform(self, effects: Any, cursor: float) -> None:
        """Run a handler's effects (or queue them behind a durable write in flight)."""
        if self.syncing:
            self._queue.extend(effects)
            return
        driver = self.driver
        effects = iter(effects)  # a durable effect hands the rest of this very iterator to the queue
        for effect in effects:
            kind = type(effect)
            if kind is Send:
                driver.send(effect, cursor)
            elif kind in DURABLE:
                self._queue.append(effect)
                self._queue.extend(effects)
                self.syncing = True
                driver.request_sync(cursor)
                return
            elif kind is SetTimer:
                self._token += 1
                self.timers[effect.name] = self._token
                driver.arm_timer(effect.name, self._token, effect.delay_s, cursor)
            elif kind is CancelTimer:
                if self.timers.pop(effect.name, None) is not None:
                    driver.disarm_timer(effect.name, cursor)
            elif kind is Reply:
                driver.reply(effect, cursor)
            elif kind is StartCollective:
                self._start_collective(effect, cursor)
            elif kind is Annotate:
                driver.annotate(effect, cursor)
            elif kind is Observe:
                driver.observe(effect, cursor)
            elif kind is CreateBuffer:
                self._buffer_op(effect, lambda e: self.buffers.create(e.handle, e.shape, e.dtype, e.fill, e.data))
            elif kind is FreeBuffer:
                self._buffer_op(effect, lambda e: self.buffers.free(e.handle))
            elif kind is StartWork:
                self._start_work(effect, cursor)
            elif kind is Restore:
                self._restore(effect)
            else:
                raise ContractError(self.node_id, effect, "returned something that is not an effect of the node "
                                    "contract")

    def _buffer_op(self, effect: Any, op: Any) -> None:
        try:
            op(effect)
        except BufferError as err:
            raise ContractError(self.node_id, effect, str(err)) from None

    def _restore(self, effect: Restore) -> None:
        arrays = self.driver.restore(effect.name)
        if arrays is None:
            raise ContractError(self.node_id, effect, f"checkpoint {effect.name!r} does not exist (see "
                                "DurableState.checkpoints)")
        for handle, array in arrays.items():
            self.buffers.put(handle, array)

    def _start_collective(self, effect: StartCollective, cursor: float) -> None:
        payload = effect.payload
        if isinstance(payload, str):
            try:
                payload = self.buffers.backend.to_numpy(self.buffers.get(payload))
            except BufferError as err:
                raise ContractError(self.node_id, effect, str(err)) from None
        meta, problem = coll_rules.check_start(self.node_id, effect.op, effect.group, effect.root, payload)
        if problem is not None:
            self.driver.deliver_later(COLLECTIVE, CollectiveDone(collective_id=effect.collective_id, ok=False,
                                                                 error=problem), cursor)
            return
        self._into[effect.collective_id] = effect.result_into
        self.driver.start_collective(effect, meta, payload, cursor)

    @property
    def pending_collectives(self) -> int:
        return len(self._into)

    def collective_result(self, done: CollectiveDone) -> CollectiveDone:
        """Just before the node sees ``done``: apply ``result_into`` (the result goes to a buffer)."""
        into = self._into.pop(done.collective_id, None)
        if done.ok and into is not None and done.result is not None:
            self.buffers.put(into, np.asarray(done.result))
            return CollectiveDone(collective_id=done.collective_id, ok=True, result=None)
        return done

    def _start_work(self, effect: StartWork, cursor: float) -> None:
        fn, problem = work_table.lookup(effect.op, len(effect.buffers))
        if problem is None:
            try:
                arrays = [self.buffers.get(h) for h in effect.buffers]
            except BufferError as err:
                raise ContractError(self.node_id, effect, str(err)) from None
            self.pending_work += 1
            self.driver.start_work(effect, fn, arrays, cursor)
            return
        self.driver.deliver_later(WORK, WorkDone(work_id=effect.work_id, ok=False, error=f"misuse: {problem}"),
                                  cursor)

    def work_finished(self) -> None:
        self.pending_work = max(0, self.pending_work - 1)

    # --------------------------------------------------------------------------------------------- durability
    def take_group(self) -> list[Any]:
        """Take every durable effect waiting in the queue (up to the first buffer effect), for one sync."""
        group: list[Any] = []
        rest: deque[Any] = deque()
        effects = iter(self._queue)
        for effect in effects:
            kind = type(effect)
            if kind in DURABLE:
                if kind is Checkpoint:
                    try:
                        arrays = self.buffers.snapshot(tuple(effect.buffers))
                    except BufferError as err:
                        raise ContractError(self.node_id, effect, str(err)) from None
                    effect = StagedCheckpoint(effect.name, arrays, effect.notify)
                group.append(effect)
                continue
            rest.append(effect)
            if kind in _BUFFER_EFFECTS or (kind is StartCollective and effect.result_into is not None):
                rest.extend(effects)  # gathering stops at the first buffer effect: the rest waits as it is
                break
        self._queue = rest
        return group

    def durable(self, group: list[Any], cursor: float) -> None:
        """The runtime made ``group`` durable: send the notices, then run what waited behind it."""
        for effect in group:
            if effect.notify is not None:
                self.driver.deliver_later(PERSISTED, effect.notify, cursor)
        self.syncing = False
        if self._queue:
            queued, self._queue = self._queue, deque()
            self.perform(queued, cursor)

    # ------------------------------------------------------------------------------------------------- timers
    def timer_due(self, name: Any, token: int) -> bool:
        """A firing of ``name`` with ``token`` is handled (and disarms the timer) only if it is still current."""
        if self.timers.get(name) != token:
            return False
        del self.timers[name]
        return True

    def timer_current(self, name: Any, token: int) -> bool:
        return self.timers.get(name) == token


def call_node(node: Any, kind: int, value: Any, now: float, engine: EffectEngine | None = None) -> list[Any]:
    """Hand input ``value`` of ``kind`` to ``node``: the one dispatch both runtimes use."""
    if kind == MESSAGE:  # the most frequent kinds first
        src, message = value
        return node.on_message(src, message, now)
    if kind == CLIENT:
        return node.on_client_request(value, now)
    if kind == TIMER:
        return node.on_timer(value, now)
    if kind == COLLECTIVE:
        return node.on_collective_done(value if engine is None else engine.collective_result(value), now)
    if kind == PERSISTED:
        handler = getattr(node, "on_persisted", None)
        if handler is None:
            raise ContractError(getattr(node, "node_id", -1), value, "asked for a durability notice (notify=...) "
                                "but has no on_persisted(token, now)")
        return handler(value, now)
    if kind == WORK:
        handler = getattr(node, "on_work_done", None)
        if handler is None:
            raise ContractError(getattr(node, "node_id", -1), value, "started work but has no on_work_done(done, now)")
        return handler(value, now)
    raise ValueError(f"unknown input kind {kind}")


def run_work(fn: Any, effect: StartWork, arrays: list[Any], host: Any) -> WorkDone:
    """Run a work op; a bad parameter or arithmetic error is a failed WorkDone, not a crash."""
    try:
        result = fn(arrays, effect.params, host)
    except (ValueError, TypeError, ArithmeticError, RuntimeError) as err:
        return WorkDone(work_id=effect.work_id, ok=False, error=f"{type(err).__name__}: {err}")
    return WorkDone(work_id=effect.work_id, ok=True, result=result)


__all__ = ["ClientRequest", "ContractError", "Driver", "EffectEngine", "StagedCheckpoint", "call_node", "run_work"]
