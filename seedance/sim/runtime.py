"""The runtime adapter: hosts protocol nodes in virtual time and performs the effects they return.

Rules (the node contract, :mod:`seedance.models.protocols.contract`, and etcd/raft's ``Ready`` ordering):

* Each node lives on a :class:`Host` with one CPU that handles one input at a time, FIFO. An input arriving while
  the CPU is busy, the node is paused, or a persist is in flight waits in the host's inbox. Handling an input of
  kind k costs ``cpu.<k>_s``: the handler is called with ``now`` = its start time, and its effects are performed at
  start + cost (sends leave, timers are armed then).
* Effects are performed in order. ``Persist``/``PersistLog`` (consecutive ones share one fsync) block the node until
  the fsync completes; only then are the effects after them performed and the next input handled — so nothing that
  follows a persist, in this handler or a later one, can overtake it.
* ``SetTimer`` (re)arms a named timer; the firing is dropped if the timer was cancelled or replaced in between,
  even while the firing waited in the inbox. A node's timers run at ``timer_rate`` (clock-skew fault): a delay d
  fires after d / rate.
* Crash: the node object is discarded with its timers, inbox and pending effects; un-fsynced writes are lost;
  messages to it are dropped while it is down. Restart: a fresh node from the spec's factory (a fresh RNG spawned
  for the incarnation) and ``on_recover(durable_state)``.
* Pause (SIGSTOP): inputs queue up, nothing runs, then they are handled in order on resume. CPU hog: the CPU is
  busy until a time, so inputs (heartbeats included) are handled late.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from heapq import heappush
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL

from seedance.models.protocols.contract import (
    Annotate, CancelTimer, ClientRequest, CollectiveDone, Persist, PersistLog, ProtocolSpec, Reply, Send, SetTimer,
    StartCollective,
)
from seedance.sim.config import CpuConfig, StorageConfig
from seedance.sim.kernel import Call
from seedance.sim.network import Network
from seedance.sim.storage import Storage
from seedance.sim.trace import Trace

MESSAGE, TIMER, CLIENT, COLLECTIVE = 0, 1, 2, 3


def _sorted_mapping(attrs: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy with keys in sorted order (by their text), so the trace's bytes do not depend on insertion order."""
    return {k: attrs[k] for k in sorted(attrs, key=str)}


class Host:
    """One node's machine: its node object (None while crashed), CPU, timers, inbox, storage."""

    __slots__ = ("node_id", "node", "up", "incarnation", "paused", "waiting", "busy_until", "inbox", "timers",
                 "timer_rate", "storage", "wake_at", "deferred", "seed_sequence", "handled", "on_message",
                 "on_timer", "on_client_request", "on_collective_done")

    def __init__(self, node_id: int, storage: Storage, seed_sequence: np.random.SeedSequence) -> None:
        self.node_id = node_id
        self.node: Any = None
        self.up = False
        self.incarnation = 0
        self.paused = False
        self.waiting = False  # a persist is in flight
        self.busy_until = 0.0
        self.inbox: deque[tuple[int, Any, Any]] = deque()
        self.timers: dict[Any, int] = {}
        self.timer_rate = 1.0
        self.storage = storage
        self.wake_at: float | None = None
        self.deferred: tuple[list[Any], int] | None = None  # effects left when a persist completed during a pause
        self.seed_sequence = seed_sequence
        self.handled = 0

    def bind(self, node: Any) -> None:
        self.node = node
        self.on_message = node.on_message
        self.on_timer = node.on_timer
        self.on_client_request = node.on_client_request
        self.on_collective_done = node.on_collective_done


class Runtime:
    """Drives ``num_nodes`` nodes of ``spec`` on ``env``; see the module docstring for the rules."""

    fast_forward = True  # an optimisation only: tests check the trace is identical without it

    def __init__(self, *, env: simpy.Environment, spec: ProtocolSpec, protocol_config: Mapping[str, Any],
                 num_nodes: int, network: Network, cpu: CpuConfig, storage: StorageConfig, trace: Trace,
                 seed_sequence: np.random.SeedSequence) -> None:
        self.env = env
        self.spec = spec
        self.protocol_config = dict(protocol_config)
        self.num_nodes = num_nodes
        self.network = network
        self.trace = trace
        self._tracing = trace.enabled
        self._record = trace.records.append
        self._queue = env._queue
        self._eid = env._eid
        self._cost = {MESSAGE: cpu.message_s, TIMER: cpu.timer_s, CLIENT: cpu.client_request_s,
                      COLLECTIVE: cpu.collective_s}
        self._recover_s = cpu.recover_s
        self.hosts = [
            Host(i, Storage(fsync_s=storage.fsync_s, write_bandwidth_GBps=storage.write_bandwidth_GBps), child)
            for i, child in enumerate(seed_sequence.spawn(num_nodes))
        ]
        self._timer_token = 0
        self.messages_sent = 0
        self.messages_delivered = 0
        self.messages_dropped = 0
        # wired by the simulation: where replies go, who runs collectives, hooks after each handled input
        self.reply_sink: Callable[[int, Reply, float], None] = lambda node_id, reply, at: None
        self.collectives: Any = None
        self.after_input: list[Callable[[], None]] = []

    # ----------------------------------------------------------------------------------------------- scheduling
    def _at(self, at_s: float, fn: Callable[[Any], None], args: Any) -> None:
        heappush(self._queue, (at_s, NORMAL, next(self._eid), Call(self.env, fn, args)))

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _new_node(self, host: Host) -> Any:
        rng = np.random.default_rng(host.seed_sequence.spawn(1)[0])
        node = self.spec.factory(host.node_id, self.num_nodes, rng, self.protocol_config)
        host.bind(node)
        return node

    def boot(self) -> None:
        """Start every node (``on_start`` at time 0, in node order)."""
        now = self.env.now
        for host in self.hosts:  # every node exists before any of them acts
            self._new_node(host)
            host.up = True
        for host in self.hosts:
            self._run(host, host.node.on_start(now), now)

    def crash(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if not host.up:
            return
        now = self.env.now
        lost = host.storage.crash()
        host.up = False
        host.node = None
        host.incarnation += 1
        host.timers.clear()
        host.inbox.clear()
        host.waiting = False
        host.paused = False
        host.deferred = None
        host.wake_at = None
        host.busy_until = now
        if self._tracing:
            self._record((now, "crash", node_id, lost))
        if self.collectives is not None:
            self.collectives.member_crashed(node_id)

    def restart(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if host.up:
            return
        now = self.env.now
        host.incarnation += 1
        node = self._new_node(host)
        host.up = True
        host.paused = False
        if self._tracing:
            self._record((now, "restart", node_id, host.incarnation))
        durable = host.storage.durable_state()
        self._run(host, node.on_recover(durable, now), now + self._recover_s)

    def pause(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if host.up and not host.paused:
            host.paused = True
            if self._tracing:
                self._record((self.env.now, "pause", node_id))

    def resume(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if not host.paused:
            return
        host.paused = False
        now = self.env.now
        if self._tracing:
            self._record((now, "resume", node_id, len(host.inbox)))
        if host.busy_until < now:
            host.busy_until = now
        if host.deferred is not None:
            effects, index = host.deferred
            host.deferred = None
            self._perform(host, effects, index, now)
        self._arm(host)

    def hog(self, node_id: int, until_s: float) -> None:
        """Occupy the node's CPU until ``until_s`` (a competing process on the same core)."""
        host = self.hosts[node_id]
        if host.up and host.busy_until < until_s:
            host.busy_until = until_s
            if self._tracing:
                self._record((self.env.now, "cpu-hog", node_id, until_s))

    def set_timer_rate(self, node_id: int, rate: float) -> None:
        self.hosts[node_id].timer_rate = rate

    # --------------------------------------------------------------------------------------------------- inputs
    def deliver(self, dst: int, src: int, message: Any) -> None:
        """A node-to-node message arrives at ``dst`` now."""
        host = self.hosts[dst]
        if not host.up:
            self.messages_dropped += 1
            if self._tracing:
                self._record((self.env._now, "drop", dst, type(message).__name__, src, "crashed"))
            return
        self.messages_delivered += 1
        if self._tracing:
            self._record((self.env._now, "deliver", dst, type(message).__name__, src))
        self._arrive(host, MESSAGE, src, message)

    def client_request(self, dst: int, request: ClientRequest) -> bool:
        """A client request arrives at node ``dst`` now; False when the node is down (the request is lost)."""
        host = self.hosts[dst]
        if not host.up:
            return False
        self._arrive(host, CLIENT, request, None)
        return True

    def collective_done(self, node_id: int, incarnation: int, done: CollectiveDone) -> None:
        host = self.hosts[node_id]
        if host.up and host.incarnation == incarnation:
            self._arrive(host, COLLECTIVE, done, None)

    def _timer_fired(self, event: Call) -> None:
        host, incarnation, name, token = event.args
        if host.incarnation == incarnation and host.timers.get(name) == token:
            self._arrive(host, TIMER, name, token)

    def _arrive(self, host: Host, kind: int, a: Any, b: Any) -> None:
        now = self.env._now
        if host.paused or host.waiting or host.busy_until > now or host.inbox:
            host.inbox.append((kind, a, b))
            self._arm(host)
            return
        self._handle(host, kind, a, b, now)

    def _arm(self, host: Host) -> None:
        """Make sure a wake-up is scheduled for when the CPU frees, if inputs wait."""
        if not host.inbox or host.paused or host.waiting or not host.up:
            return
        at = host.busy_until
        if host.wake_at is not None and host.wake_at <= at:
            return
        host.wake_at = at
        self._at(at, self._wake, (host, host.incarnation))

    def _wake(self, event: Call) -> None:
        host, incarnation = event.args
        if host.incarnation != incarnation:
            return
        host.wake_at = None
        env = self.env
        queue = self._queue
        inbox = host.inbox
        while inbox and host.up and not host.paused and not host.waiting:
            now = env._now
            if host.busy_until > now:
                # Fast-forward: when nothing else is scheduled up to the moment the CPU frees, handling the next
                # input now at that moment is exactly what a wake-up event would do (same order, same times).
                if not self.fast_forward or (queue and queue[0][0] <= host.busy_until):
                    break
                env._now = now = host.busy_until
            kind, a, b = inbox.popleft()
            self._handle(host, kind, a, b, now)
        self._arm(host)

    def _handle(self, host: Host, kind: int, a: Any, b: Any, now: float) -> None:
        if kind == MESSAGE:
            effects = host.on_message(a, b, now)
        elif kind == TIMER:
            if host.timers.get(a) != b:  # cancelled or replaced while waiting in the inbox
                return
            del host.timers[a]
            if self._tracing:
                self._record((now, "timer-fire", host.node_id, a))
            effects = host.on_timer(a, now)
        elif kind == CLIENT:
            effects = host.on_client_request(a, now)
        else:
            effects = host.on_collective_done(a, now)
        host.handled += 1
        cursor = now + self._cost[kind]
        host.busy_until = cursor
        if effects:
            self._perform(host, effects, 0, cursor)
        if self.after_input:
            for hook in self.after_input:
                hook()

    def _run(self, host: Host, effects: list[Any], cursor: float) -> None:
        """Perform a lifecycle handler's effects (start / recover) and let queued inputs proceed."""
        if host.busy_until < cursor:
            host.busy_until = cursor
        if effects:
            self._perform(host, effects, 0, cursor)
        self._arm(host)

    # -------------------------------------------------------------------------------------------------- effects
    def _perform(self, host: Host, effects: list[Any], index: int, cursor: float) -> None:
        node_id = host.node_id
        tracing = self._tracing
        count = len(effects)
        while index < count:
            effect = effects[index]
            index += 1
            kind = type(effect)
            if kind is Send:
                self._send(node_id, effect.dst, effect.message, effect.size_bytes, cursor)
            elif kind is SetTimer:
                self._timer_token += 1
                token = self._timer_token
                host.timers[effect.name] = token
                fire = cursor + effect.delay_s / host.timer_rate
                if tracing:
                    self._record((cursor, "timer-set", node_id, effect.name, fire))
                self._at(fire, self._timer_fired, (host, host.incarnation, effect.name, token))
            elif kind is CancelTimer:
                if host.timers.pop(effect.name, None) is not None and tracing:
                    self._record((cursor, "timer-cancel", node_id, effect.name))
            elif kind is Reply:
                self.reply_sink(node_id, effect, cursor)
            elif kind is Persist or kind is PersistLog:
                storage = host.storage
                storage.stage(effect)
                while index < count and type(effects[index]) in (Persist, PersistLog):
                    storage.stage(effects[index])
                    index += 1
                done = storage.sync_done_s(cursor)
                if tracing:
                    self._record((cursor, "persist", node_id, len(storage.staged), storage.staged_bytes, done))
                host.waiting = True
                host.busy_until = done
                self._at(done, self._persisted, (host, host.incarnation, effects, index))
                return
            elif kind is StartCollective:
                self.collectives.join(host, effect, cursor)
            elif kind is Annotate:
                if tracing:
                    self._record((cursor, "annotate", node_id, effect.name, _sorted_mapping(effect.attrs)))
            else:
                raise TypeError(f"node {node_id} returned {effect!r}, which is not an effect of the node contract")

    def _persisted(self, event: Call) -> None:
        host, incarnation, effects, index = event.args
        if host.incarnation != incarnation:
            return  # crashed meanwhile: the writes were lost and the effects die with the node
        now = self.env._now
        count = host.storage.commit()
        if self._tracing:
            self._record((now, "durable", host.node_id, count))
        host.waiting = False
        if host.paused:
            host.deferred = (effects, index)
            return
        self._perform(host, effects, index, now)
        self._arm(host)

    def _send(self, src: int, dst: int, message: Any, size_bytes: int, depart: float) -> None:
        self.messages_sent += 1
        network = self.network
        if network.faulty and src != dst:
            reason, copies, extra = network.plan(src, dst)
            if reason is not None:
                self.messages_dropped += 1
                if self._tracing:
                    self._record((depart, "drop", src, type(message).__name__, dst, reason))
                return
            arrive = network.transit(src, dst, size_bytes, depart) + extra
            if self._tracing:
                self._record((depart, "send", src, type(message).__name__, dst, size_bytes, arrive))
            self._at(arrive, self._delivered, (dst, src, message))
            if copies > 1:
                again = arrive + network.extra_delay()
                if self._tracing:
                    self._record((depart, "duplicate", src, type(message).__name__, dst, again))
                self._at(again, self._delivered, (dst, src, message))
            return
        arrive = network.transit(src, dst, size_bytes, depart)
        if self._tracing:
            self._record((depart, "send", src, type(message).__name__, dst, size_bytes, arrive))
        heappush(self._queue, (arrive, NORMAL, next(self._eid), Call(self.env, self._delivered, (dst, src, message))))

    def _delivered(self, event: Call) -> None:
        dst, src, message = event.args
        self.deliver(dst, src, message)
