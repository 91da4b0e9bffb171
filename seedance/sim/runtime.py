"""The simulator's runtime: hosts protocol nodes in virtual time; the shared effect engine interprets their effects.

What is the simulator's own (the rest — ordering, group commit, timers' tokens, notices, buffers, work and collective
rules, node RNG — is :mod:`seedance.engine`, shared with the real backend):

* Each node lives on a :class:`Host` with one CPU that handles one input at a time, FIFO. An input arriving while
  the CPU is busy or the node is paused waits in the host's inbox. Handling an input of kind k costs
  ``cpu.<k>_s``: the handler is called with ``now`` = its start time, and its effects are performed at
  start + cost (sends leave, timers are armed then).
* Durable writes: when the engine asks for a sync, the host's disk model books one fsync of the whole group
  (``fsync_s + bytes / bandwidth`` after the disk is free); the engine holds every later effect until it
  completes. The CPU stays free meanwhile (fsync is I/O wait, as in the real backend, whose fsync runs off the event
  loop): inputs keep being handled and their effects queue behind the write. On a measured host the write goes
  through the node's storage thread, which shares the interpreter's lock with the loop thread: its steps before
  and after the syscall wait until the loop is idle (or has run a switch interval), and its own CPU holds the loop
  (:meth:`Runtime.with_lock`).
* A node's timers run at ``timer_rate`` (clock-skew fault): a delay d fires after d / rate.
* Work (``StartWork``) runs on the node's device stream, in order: it takes the compute model's time
  (:mod:`seedance.models.compute`, by the device kind of the node's topology device) plus ``params["duration_s"]``;
  its arithmetic is applied to the node's numpy buffers when it completes.
* Crash: the node object is discarded with its engine (timers, buffers, queued effects), inbox and device stream;
  un-fsynced writes are lost; messages to it are dropped while it is down. Restart: a fresh node from the spec's
  factory with :func:`seedance.engine.rng.node_rng` (seed, node, boot) and ``on_recover(durable_state)``.
* Pause (SIGSTOP): inputs queue up, nothing runs (a write that becomes durable meanwhile releases its effects only
  on resume), then they are handled in order on resume. CPU hog: the CPU is busy until a time, so inputs
  (heartbeats included) are handled late.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from heapq import heappush
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL

from seedance.engine.effects import (
    CLIENT, COLLECTIVE, MESSAGE, PERSISTED, TIMER, WORK, EffectEngine, call_node, run_work,
)
from seedance.engine.rng import node_rng
from seedance.models.protocols.contract import ClientRequest, CollectiveDone, ProtocolSpec, Reply
from seedance.sim.config import CpuConfig, StorageConfig
from seedance.sim.host import Host
from seedance.sim.host_costs import HostCosts
from seedance.sim.kernel import Call
from seedance.models.host import CorePool, DiskStallProcess, HostProfile, SpellProcess, carried_entries
from seedance.sim.network import Network
from seedance.sim.storage import Storage
from seedance.sim.storage_thread import StorageThread
from seedance.tracing import Trace

HOST_STREAM = 0x686F7374  # "host": the host model's draws, apart from every other stream of the root seed
SYNCED = 6  # an amortised host's fsync completion, queued for the node's CPU like an input (not a node input)

__all__ = ["CLIENT", "COLLECTIVE", "MESSAGE", "PERSISTED", "TIMER", "WORK", "Host", "Runtime"]


class Runtime(StorageThread, HostCosts):
    """Drives ``num_nodes`` nodes of ``spec`` on ``env``; see the module docstring for the rules."""

    fast_forward = True  # an optimisation only: tests check the trace is identical without it
    # Slots, not an instance dict: past 30 attributes CPython 3.11 turns an instance's inline values into a dict,
    # and then no method call on it (``self._handle(...)``) is specialised. An attribute not listed here is an
    # AttributeError when first set.
    __slots__ = ("env", "spec", "protocol_config", "num_nodes", "network", "trace", "seed", "_tracing", "_record",
                 "_queue", "_eid", "_cost", "_recover_s", "_fsync", "host", "_host_rng", "cores", "_disk_stalls",
                 "_amortised", "_plain_cpu", "_entry_costs", "_client_busy", "_lock_seq", "_connected",
                 "_accept_free", "_link_up", "hosts", "messages_sent", "messages_delivered", "messages_dropped",
                 "reply_sink", "observe_sink", "collectives", "after_input", "crash_sinks",
                 # the events' callbacks, bound once
                 "_delivered", "_wake", "_timer_fired", "_persisted", "_later")

    def __init__(self, *, env: simpy.Environment, spec: ProtocolSpec, protocol_config: Mapping[str, Any],
                 num_nodes: int, network: Network, cpu: CpuConfig, storage: StorageConfig, trace: Trace,
                 seed: int, host: HostProfile | None = None) -> None:
        self.env = env
        self.spec = spec
        self.protocol_config = dict(protocol_config)
        self.num_nodes = num_nodes
        self.network = network
        self.trace = trace
        self.seed = int(seed)
        self._tracing = trace.enabled
        self._record = trace.records.append
        self._queue = env._queue
        self._eid = env._eid
        self._cost = {MESSAGE: cpu.message_s, TIMER: cpu.timer_s, CLIENT: cpu.client_request_s,
                      COLLECTIVE: cpu.collective_s, PERSISTED: cpu.timer_s, WORK: cpu.collective_s}
        self._recover_s = cpu.recover_s
        self._fsync = storage.fsync  # False: durable writes reach the page cache only (the real SEEDANCE_FSYNC=0)
        # a measured host (seedance.models.host): service times drawn per input, processes sharing its cores
        self.host = host
        self._host_rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(HOST_STREAM,)))
        self.cores = None if host is None else CorePool(
            host.cores, host.tenants,  # other tenants' bursts: their own stream, apart from the service times
            np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(HOST_STREAM, 1))),
            # the host's slow spells: their own stream too, so a profile without them draws what it drew before
            None if host.spell is None else SpellProcess(
                host.spell, np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(HOST_STREAM, 2)))))
        # the shared disk's stalls (every node's fsyncs held together): their own stream as well
        self._disk_stalls = None if host is None or host.disk_stalls is None else DiskStallProcess(
            host.disk_stalls, np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(HOST_STREAM, 3))))
        self._amortised = host is not None and host.amortised
        self._plain_cpu = host is None  # each input costs its kind's configured CPU (no measured host)
        self._entry_costs = None if host is None else host.entries
        self._client_busy = 0.0
        self._lock_seq = 0  # numbers the storage threads' waits for the interpreter's lock (with_lock)
        self._connected: set[tuple[int, int]] = set()  # (client, node) connections opened (a modelled host)
        self._accept_free: dict[int, float] = {}  # per node: when its last connection set-up is done
        # (src, dst) -> when src's connection to a restarted dst is up again (a modelled host's reconnect_s)
        self._link_up: dict[tuple[int, int], float] = {}
        kinds = network.topology.device_kinds
        shared: dict[str, dict[Any, Any]] = {}  # equal immutable records the nodes hand over, stored once
        self.hosts = [
            Host(i, self, Storage(fsync_s=storage.fsync_s if storage.fsync else 0.0,
                                  # a measured host's own bandwidth (its 8 MiB fsynced writes), else the config's
                                  write_bandwidth_GBps=(host.write_bandwidth_GBps if host is not None
                                                        else storage.write_bandwidth_GBps),
                                  block_bytes=(host.block_bytes if host is not None and host.block_bytes else 4096),
                                  shared=shared,
                                  # file growth is read only to draw an allocating fsync (StorageThread)
                                  track_growth=host is not None and host.fsync_grow is not None),
                 kinds[network.devices[i]] if kinds is not None else None)
            for i in range(num_nodes)
        ]
        self.messages_sent = 0
        self.messages_delivered = 0
        self.messages_dropped = 0
        # wired by the simulation: where replies and observations go, who runs collectives, hooks after each input
        self.reply_sink: Callable[[int, Reply, float], None] = lambda node_id, reply, at: None
        self.observe_sink: Callable[[int, Any, float], None] = lambda node_id, effect, at: None
        self.collectives: Any = None
        self.after_input: list[Callable[[Host], None]] = []  # told the host that has just handled an input
        self.crash_sinks: list[Callable[[int, float], None]] = []  # told (node, time) when a node crashes
        # the events' callbacks bound once (``self._wake`` would otherwise make a new bound method per event)
        self._delivered, self._wake, self._timer_fired, self._persisted, self._later = (
            self._on_delivered, self._on_wake, self._on_timer_fired, self._on_persisted, self._on_later)

    # ----------------------------------------------------------------------------------------------- scheduling
    def _at(self, at_s: float, fn: Callable[[Any], None], args: Any) -> None:
        heappush(self._queue, (at_s, NORMAL, next(self._eid), Call(fn, args)))

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _new_node(self, host: Host) -> Any:
        rng = node_rng(self.seed, host.node_id, host.boots)
        host.boots += 1
        host.collections = [0]  # a new process (forked from the zygote, real): the collections count again
        node = self.spec.factory(host.node_id, self.num_nodes, rng, self.protocol_config)
        host.node = node
        host.engine = EffectEngine(host.node_id, host)
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
        host.engine = None
        host.incarnation += 1
        host.inbox.clear()
        host.paused = False
        host.deferred = None
        host.wake_at = None
        host.busy_until = now
        host.stream_free = now
        host.owed = 0.0
        host.lock_waiters.clear()
        if self._tracing:
            self._record((now, "crash", node_id, lost))
        if self.collectives is not None:
            self.collectives.member_crashed(node_id)
        for sink in self.crash_sinks:
            sink(node_id, now)

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
        model = self.host
        if model is not None and model.reconnect_s:
            # the running peers retry a refused connection every reconnect_s: each reaches the restarted node at
            # its next retry, a uniform point within the interval; the restarted process connects at once
            for other in self.hosts:
                if other.node_id != node_id:
                    self._link_up[(other.node_id, node_id)] = now + model.reconnect_s * float(self._host_rng.random())
                    if other.up:
                        self._link_up.pop((node_id, other.node_id), None)
        # a measured host: the node process's restart (spawn to serving), inputs queueing behind it; where
        # measured, its CPU on a shared core (more for a longer durable log), which the running nodes feel
        recover = model.restart.draw(self._host_rng) if model is not None and model.restart is not None \
            else self._recover_s
        ready = now + recover
        if model is not None and model.restart_cpu is not None:
            per_entry = (model.recover_per_entry_s or 0.0) * sum(len(log) for log in durable.logs.values())
            ready = max(ready + per_entry, self.cores.take(now, model.restart_cpu.draw(self._host_rng) + per_entry))
        self._run(host, node.on_recover(durable, now), ready)

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
            group, host.deferred = host.deferred, None
            host.engine.durable(group, now)  # type: ignore[union-attr]
        if host.lock_waiters:  # the storage thread was stopped with the process
            self._at(now, self._lock_try, (host, host.incarnation, None))
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
    def client_request(self, dst: int, request: ClientRequest) -> bool:
        """A client request arrives at node ``dst`` now; False when the node is down (the request is lost)."""
        host = self.hosts[dst]
        if not host.up:
            return False
        now = self.env._now
        if self._plain_cpu and host.busy_until <= now and not host.inbox and not host.paused:
            self._handle(host, CLIENT, request, now)  # _arrive's verdict for an idle node, without its call
        else:
            self._arrive(host, CLIENT, request)
        return True

    def collective_done(self, node_id: int, incarnation: int, done: CollectiveDone) -> None:
        host = self.hosts[node_id]
        if host.up and host.incarnation == incarnation:
            self._arrive(host, COLLECTIVE, done)

    def _on_later(self, event: Call) -> None:
        host, incarnation, kind, value = event.args
        if host.up and host.incarnation == incarnation:
            self._arrive(host, kind, value)

    def _on_timer_fired(self, event: Call) -> None:
        host, incarnation, name, token = event.args
        if host.incarnation == incarnation and host.engine.timer_current(name, token):
            self._arrive(host, TIMER, (name, token))

    def _work_done(self, event: Call) -> None:
        host, incarnation, effect, fn, arrays = event.args
        if host.incarnation != incarnation or not host.up:
            return
        done = run_work(fn, effect, arrays, lambda a: a.copy())
        host.engine.work_finished()
        if self._tracing:
            self._record((self.env._now, "work-done", host.node_id, repr(effect.work_id), done.ok))
        self._arrive(host, WORK, done)

    def _arrive(self, host: Host, kind: int, value: Any) -> None:
        now = self.env._now
        # the loop was idle: this input starts a busy period. One arriving at the very moment the previous input's
        # CPU ends was scheduled by it for the loop's next turn (a zero-delay timer, a durability notice: the real
        # loop's call_later(0) / call_soon, which it runs after a select that does not block): the same period.
        if self._amortised:
            if not host.inbox and host.busy_until < now and not host.woke:
                host.woke = True
                host.wakeups += 1
            if host.inbox and host.turn_end == now and not host.paused:
                # ... and it runs before the inputs that arrived while that input was handled: their bytes wait for
                # the loop's next select, then a reader callback that wakes their task one turn later
                host.inbox.insert(host.ahead, (kind, value))
                host.ahead += 1
                self._arm(host)
                return
        if host.paused or host.inbox or (host.busy_until > now if self.cores is None else self._ready_at(host) > now):
            host.inbox.append((kind, value))
            self._arm(host)
            return
        self._handle(host, kind, value, now)

    def _arm(self, host: Host, spent: Call | None = None) -> None:
        """Make sure a wake-up is scheduled for when the CPU frees, if inputs wait. ``spent``: the event being
        handled, whose callback arms this as its last step (the kernel reads nothing of an event once its callback
        has returned): it becomes the wake-up, instead of a new one."""
        if not host.inbox or host.paused or not host.up:
            return
        at = host.busy_until if self.cores is None else self._ready_at(host)
        if host.wake_at is not None and host.wake_at <= at:
            return
        host.wake_at = at
        if spent is None:
            spent = Call(self._wake, (host, host.incarnation))
        else:
            spent.fn, spent.args = self._wake, (host, host.incarnation)
        heappush(self._queue, (at, NORMAL, next(self._eid), spent))

    def _on_wake(self, event: Call) -> None:
        host, incarnation = event.args
        if host.incarnation != incarnation:
            return
        host.wake_at = None
        env = self.env
        queue = self._queue
        inbox = host.inbox
        while inbox and host.up and not host.paused:
            now = env._now
            ready = host.busy_until if self.cores is None else self._ready_at(host)
            if ready > now:
                # Fast-forward: when nothing else is scheduled up to the moment the CPU frees, handling the next
                # input now at that moment is exactly what a wake-up event would do (same order, same times).
                if not self.fast_forward or (queue and queue[0][0] <= ready):
                    break
                env._now = now = ready
            kind, value = inbox.popleft()
            self._handle(host, kind, value, now)
        if inbox:
            self._arm(host, event)

    def _handle(self, host: Host, kind: int, value: Any, now: float) -> None:
        engine = host.engine
        if self._amortised:
            host.ahead = len(host.inbox)
        if kind == MESSAGE:  # the most frequent input first; call_node's first case, without its call
            effects = host.node.on_message(value[0], value[1], now)
        elif kind == CLIENT:
            effects = host.node.on_client_request(value, now)
        else:
            if kind == SYNCED:  # an amortised host's fsync completion: the effects behind it run on the loop's CPU
                cursor = self.cores.take(now, self._owe(host, self.host.completion_cost(self._host_rng, host.woke,
                                                                                         host.collections)))
                host.woke = False
                host.busy_until = host.turn_end = cursor
                engine.durable(value, cursor)
                return
            if kind == TIMER:
                name, token = value
                if not engine.timer_due(name, token):  # cancelled or replaced while waiting in the inbox
                    return
                if self._tracing:
                    self._record((now, "timer-fire", host.node_id, name))
                value = name
            elif kind == PERSISTED and self._tracing:
                self._record((now, "persisted", host.node_id, value))
            effects = call_node(host.node, kind, value, now, engine)
        host.handled += 1
        if self._plain_cpu:
            cursor = now + self._cost[kind]
        else:
            cost = self.host.cpu_cost(kind, self._host_rng, host.woke, host.collections)
            if self._entry_costs is not None and kind == MESSAGE:  # decoding the entries it carries
                cost += self._entry_costs.received(carried_entries(value[1]))
            cursor = self.cores.take(now, self._owe(host, cost))
            host.woke = False
        host.busy_until = host.turn_end = cursor
        if effects:
            engine.perform(effects, cursor)
        if self.after_input:
            for hook in self.after_input:
                hook(host)

    def _run(self, host: Host, effects: list[Any], cursor: float) -> None:
        """Perform a lifecycle handler's effects (start / recover) and let queued inputs proceed."""
        if host.busy_until < cursor:
            host.busy_until = cursor
        if effects:
            host.engine.perform(effects, cursor)
        self._arm(host)

    # -------------------------------------------------------------------------------------------------- effects
    def _on_persisted(self, event: Call) -> None:
        host, incarnation, group = event.args
        if host.incarnation != incarnation:
            return  # crashed meanwhile: the writes were lost and the effects die with the node
        now = self.env._now
        count = host.storage.commit()
        if self._tracing:
            self._record((now, "durable", host.node_id, count))
        if host.paused:
            host.deferred = group
            return
        if self._amortised:
            self._arrive(host, SYNCED, group)
            return
        host.engine.durable(group, now)
        if host.inbox:
            self._arm(host)

    def _send(self, src: int, dst: int, message: Any, size_bytes: int, depart: float) -> None:
        self.messages_sent += 1
        if self._link_up:
            up = self._link_up.get((src, dst))
            if up is not None and depart < up:  # queued until the sender's connection to a restarted node is up
                depart = up
        network = self.network
        if network.faulty and src != dst:
            reason, copies, extra = network.plan(src, dst)
            if reason is not None:
                self.messages_dropped += 1
                if self._tracing:
                    self._record((depart, "drop", src, type(message).__name__, dst, reason))
                return
            arrive = network.transit(src, dst, size_bytes, depart) + extra + self.extra_latency()
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
        if self.host is not None:
            arrive += self.extra_latency()
        if self._tracing:
            self._record((depart, "send", src, type(message).__name__, dst, size_bytes, arrive))
        heappush(self._queue, (arrive, NORMAL, next(self._eid), Call(self._delivered, (dst, src, message))))

    def _on_delivered(self, event: Call) -> None:
        """A node-to-node message arrives at its destination now (dropped if the node is down)."""
        dst, src, message = event.args
        host = self.hosts[dst]
        if not host.up:
            self.messages_dropped += 1
            if self._tracing:
                self._record((self.env._now, "drop", dst, type(message).__name__, src, "crashed"))
            return
        self.messages_delivered += 1
        now = self.env._now
        if self._tracing:
            self._record((now, "deliver", dst, type(message).__name__, src))
        if not self._plain_cpu or host.paused:
            self._arrive(host, MESSAGE, (src, message))
            return
        # _arrive's and _arm's verdicts without their calls: an idle node handles it now, a busy one queues it (and
        # is woken when its CPU frees, unless a wake-up is already due by then)
        inbox = host.inbox
        if not inbox and host.busy_until <= now:
            self._handle(host, MESSAGE, (src, message), now)
            return
        inbox.append((MESSAGE, (src, message)))
        wake = host.wake_at
        if wake is None or wake > host.busy_until:
            self._arm(host, event)
