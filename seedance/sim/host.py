"""One simulated node's machine (:class:`Host`): its node object, engine, CPU inbox, storage and device stream, and
the engine's :class:`~seedance.engine.effects.Driver` for that node. The timing rules are the runtime's
(:mod:`seedance.sim.runtime`); a host turns the engine's effects into the runtime's scheduled events."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from heapq import heappush
from typing import Any

from simpy.events import NORMAL

from seedance.engine.effects import EffectEngine
from seedance.models.compute import work_time_s
from seedance.models.host import carried_entries
from seedance.models.protocols.contract import Reply
from seedance.sim.kernel import Call
from seedance.sim.storage import Storage


def _sorted_mapping(attrs: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy with keys in sorted order (by their text), so the trace's bytes do not depend on insertion order."""
    return {k: attrs[k] for k in sorted(attrs, key=str)}


class Host:
    """One node's machine: its node object (None while crashed), engine, CPU, inbox, storage, device stream.

    It is also the engine's :class:`~seedance.engine.effects.Driver` for its node.
    """

    __slots__ = ("node_id", "runtime", "node", "engine", "up", "incarnation", "boots", "paused", "busy_until",
                 "inbox", "timer_rate", "storage", "wake_at", "deferred", "handled", "stream_free", "device_kind",
                 "syncs", "woke", "wakeups", "ahead", "turn_end", "owed", "lock_waiters", "collections")

    def __init__(self, node_id: int, runtime: Any, storage: Storage, device_kind: str | None) -> None:
        # runtime: the seedance.sim.runtime.Runtime that owns this host (not imported: it imports this module)
        self.node_id = node_id
        self.runtime = runtime
        self.node: Any = None
        self.engine: EffectEngine | None = None
        self.up = False
        self.incarnation = 0  # bumped on crash and restart: events of an older incarnation are void
        self.boots = 0  # how many times the node started (its RNG stream)
        self.paused = False
        self.busy_until = 0.0
        self.inbox: deque[tuple[int, Any]] = deque()
        self.timer_rate = 1.0
        self.storage = storage
        self.wake_at: float | None = None
        self.deferred: list[Any] | None = None  # a group that became durable during a pause
        self.handled = 0
        self.stream_free = 0.0
        self.device_kind = device_kind
        self.syncs = 0
        self.woke = False  # an amortised host: the next input handled starts a busy period (pays the wake-up)
        self.owed = 0.0  # a measured host: CPU of its sends' entries (around the profile's mean), paid next item
        self.wakeups = 0  # busy periods started (an amortised host)
        self.ahead = 0  # an amortised host: inputs queued when the one being handled started (see Runtime._arrive)
        self.turn_end = -1.0  # when the last input's effects were performed (what it scheduled with no delay arrives)
        self.collections = [0]  # a measured host: this incarnation's older-generation collections (GcProfile.draw)
        # a measured host: the storage thread's steps waiting for the interpreter's lock (Runtime.with_lock)
        self.lock_waiters: deque[tuple[int, float, Callable[..., None], tuple[Any, ...]]] = deque()

    @property
    def waiting(self) -> bool:
        """A durable write is in flight (effects wait behind it)."""
        return self.engine is not None and self.engine.syncing

    # ------------------------------------------------------------------------------------ the engine's driver
    def send(self, effect: Any, cursor: float) -> None:
        runtime = self.runtime
        network = runtime.network
        if runtime._plain_cpu and not network.faulty:
            # the common case of Runtime._send, without its call (no host model: no entry costs, no reconnects,
            # no loopback draws; no network fault): book the path, record the send, schedule the delivery
            runtime.messages_sent += 1
            src, dst, message, size = self.node_id, effect.dst, effect.message, effect.size_bytes
            arrive = network.transit(src, dst, size, cursor)
            if runtime._tracing:
                runtime._record((cursor, "send", src, type(message).__name__, dst, size, arrive))
            heappush(runtime._queue, (arrive, NORMAL, next(runtime._eid),
                                      Call(runtime._delivered, (dst, src, message))))
            return
        costs = runtime._entry_costs
        if costs is not None:  # encoding the entries it carries: paid with the node's next item (see owe)
            self.owed += costs.sent(carried_entries(effect.message))
        runtime._send(self.node_id, effect.dst, effect.message, effect.size_bytes, cursor)

    def arm_timer(self, name: Any, token: int, delay_s: float, cursor: float) -> None:
        runtime = self.runtime
        fire = cursor + delay_s / self.timer_rate
        if runtime._tracing:
            runtime._record((cursor, "timer-set", self.node_id, name, fire))
        heappush(runtime._queue, (fire, NORMAL, next(runtime._eid),
                                  Call(runtime._timer_fired, (self, self.incarnation, name, token))))

    def disarm_timer(self, name: Any, cursor: float) -> None:
        if self.runtime._tracing:
            self.runtime._record((cursor, "timer-cancel", self.node_id, name))

    def reply(self, effect: Reply, cursor: float) -> None:
        self.runtime.reply_sink(self.node_id, effect, cursor)

    def annotate(self, effect: Any, cursor: float) -> None:
        if self.runtime._tracing:
            self.runtime._record((cursor, "annotate", self.node_id, effect.name, _sorted_mapping(effect.attrs)))

    def observe(self, effect: Any, cursor: float) -> None:
        runtime = self.runtime
        if runtime._tracing:
            runtime._record((cursor, "observe", self.node_id, effect.what, effect.key))
        runtime.observe_sink(self.node_id, effect, cursor)

    def start_collective(self, effect: Any, meta: Any, payload: Any, cursor: float) -> None:
        self.runtime.collectives.join(self, effect, meta, payload, cursor)

    def start_work(self, effect: Any, fn: Any, arrays: list[Any], cursor: float) -> None:
        runtime = self.runtime
        duration = work_time_s(self.device_kind, effect.flops, effect.bytes_moved)
        extra = effect.params.get("duration_s", 0.0) if effect.params else 0.0
        if isinstance(extra, (int, float)) and not isinstance(extra, bool) and extra > 0:
            duration += float(extra)
        start = cursor if cursor > self.stream_free else self.stream_free
        done = start + duration
        self.stream_free = done
        if runtime._tracing:
            runtime._record((cursor, "work-start", self.node_id, repr(effect.work_id), effect.op, start, done))
        runtime._at(done, runtime._work_done, (self, self.incarnation, effect, fn, arrays))

    def request_sync(self, cursor: float) -> None:
        runtime = self.runtime
        group = self.engine.take_group()  # type: ignore[union-attr]
        storage = self.storage
        for effect in group:
            storage.stage(effect)
        model = runtime.host
        self.syncs += 1
        if model is None:
            done = storage.sync_done_s(cursor, None)
            if runtime._tracing:
                runtime._record((cursor, "persist", self.node_id, len(storage.staged), storage.staged_bytes, done))
            heappush(runtime._queue, (done, NORMAL, next(runtime._eid),
                                      Call(runtime._persisted, (self, self.incarnation, group))))
            return
        # a measured host: the loop hands the write (or, with fsync off, the write alone) to its storage thread,
        # which runs Python only while it holds the interpreter's lock (Runtime.with_lock), then the syscall with
        # the lock let go, then takes the lock again to hand the result back through the loop's self-pipe
        start = model.sync_start_cost(runtime._host_rng) if runtime._amortised else 0.0
        if start:  # the loop's own CPU to hand the write over, before the thread starts
            cursor = runtime.cores.take(cursor, start)
            if cursor > self.busy_until:
                self.busy_until = cursor
        if model.handover is not None:  # the run's own first half under load (the thread's wake-up, the lock)
            handoff = 2.0 * model.handover.draw(runtime._host_rng)
        else:  # the idle probe's round trip, half of it
            handoff = model.handoff.draw(runtime._host_rng) if model.handoff is not None else 0.0
        runtime.with_lock(self, cursor + handoff / 2, runtime._sync_thread,
                          (self, self.incarnation, group, handoff, cursor))

    def deliver_later(self, kind: int, value: Any, cursor: float) -> None:
        runtime = self.runtime  # runtime._at without its call
        heappush(runtime._queue, (cursor, NORMAL, next(runtime._eid),
                                  Call(runtime._later, (self, self.incarnation, kind, value))))

    def restore(self, name: str) -> Any:
        return self.storage.restore(name)
