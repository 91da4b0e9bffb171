"""The real runtime: one asyncio event loop per OS process driving one unchanged protocol node.

Rules (contract.py; etcd/raft ``Ready`` ordering; Raft §5.1 stable storage):

* The node sees only its ``on_*`` inputs and ``now = time.monotonic()``; it is built by ``ProtocolSpec.factory`` with
  ``rng = default_rng(SeedSequence(seed, spawn_key=(node_id, incarnation)))`` and never learns it runs for real.
* Inputs are handled one at a time on the loop thread; the node's effects go to the shared
  :class:`~seedance.engine.effects.EffectEngine` (the same ordering rule, timers, notices, buffers, work and
  collective rules as the simulator). What is this runtime's own: when the engine meets a durable write, the sync is
  started at the end of the event-loop turn (group commit: every durable effect waiting by then joins it, etcd/raft's
  ``Ready`` batching) and runs on a storage thread, so the loop keeps receiving and handling inputs while the fsync
  is in flight; their effects wait in the engine behind the write, in order. ``Send`` queues a frame to the peer's
  connection (lossy: a full queue, a broken connection or a peer not reachable drops it, as the contract allows);
  ``SetTimer`` is a ``loop.call_later`` whose firing the engine checks against the timer's current token; ``Reply``
  goes back on the requesting client's connection; collectives go to :mod:`.collectives` (one process group per
  membership, reused), work to a worker thread (one per node: the node's stream), buffers are torch tensors on the
  node's device (``cuda:LOCAL_RANK`` with NCCL, else the CPU); observations are appended to ``observations.jsonl``.
* On start the node's durable directory is loaded: empty -> ``on_start``; otherwise a fresh node gets
  ``on_recover(DurableState)``. Nothing else survives a crash.
* Peers are found through an :class:`AddressBook`: the local launcher hands every node a fixed table and a listening
  socket it keeps across restarts (so a restarted node has the same address and no torch import is needed); under
  torchrun each node publishes ``host:port`` in the rendezvous store (``seedance/addr/<id>``), which peers re-read
  on every reconnect. No protocol-specific code lives here.

The durable writes (group commit on the storage thread) are in :mod:`.durability`, the peers' and clients'
connections in :mod:`.messaging`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seedance.engine.effects import (
    CLIENT, COLLECTIVE, INPUT_NAMES, MESSAGE, TIMER, WORK, ContractError, EffectEngine, call_node, run_work,
)
from seedance.engine.rng import node_rng
from seedance.files import atomic_write
from seedance.models.host import carried_entries
from seedance.models.protocols.contract import CollectiveDone, ProtocolSpec, Reply, Send
from seedance.models.wire import Codec
from seedance.real.addresses import AddressBook
from seedance.real.aio import cancel_all
from seedance.real.collectives import CollectiveEngine
from seedance.real.devices import default_backend, node_device, run_on_device, torch_backend
from seedance.real.durability import Durability
from seedance.real.faults import NodeFaults
from seedance.real.loop_hooks import BusyPeriods, GcPauses
from seedance.real.messaging import Messaging
from seedance.real.storage import DiskStorage
from seedance.real.trace import TraceRecorder
from seedance.real.transport import DEFAULT_MAX_FRAME_BYTES, Connection

log = logging.getLogger("seedance.real.runtime")

CPU_PROFILE_ENV = "SEEDANCE_CPU_PROFILE"
# SEEDANCE_GC_PROFILE=1 (and no CPU profile): only the older-generation collections and the items handled, in a
# process that otherwise allocates as an unprofiled one does (the CPU profile's own records change how often the
# interpreter collects, and what a full collection costs)
GC_PROFILE_ENV = "SEEDANCE_GC_PROFILE"
@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    """Everything one node process needs (read from torchrun-style environment by :mod:`.node`)."""

    protocol: str
    node_id: int
    num_nodes: int
    seed: int
    incarnation: int
    state_dir: Path
    key: bytes
    bind_host: str = "127.0.0.1"
    advertise_host: str | None = None
    config: Mapping[str, Any] | None = None
    trace_path: Path | None = None
    t0_monotonic: float = 0.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ready_path: Path | None = None  # written (with the incarnation) once the node has recovered and serves
    fsync: bool = True  # False only to measure fsync's cost (see storage.py)


class NodeRuntime(Durability, Messaging):
    """Runs one node until :meth:`stop`; serves on ``listen_socket`` if given, else on ``bind_host`` port 0."""

    def __init__(self, cfg: NodeConfig, spec: ProtocolSpec, addresses: AddressBook,
                 collective_store_factory: Callable[[], Any] | None = None, listen_socket: Any = None) -> None:
        self.cfg = cfg
        self.spec = spec
        self.addresses = addresses
        self._listen_socket = listen_socket
        self.codec = Codec(spec.message_types, num_nodes=cfg.num_nodes)
        self.storage = DiskStorage(cfg.state_dir, self.codec, fsync=cfg.fsync)
        self.faults = NodeFaults.from_env(cfg.node_id, cfg.num_nodes, cfg.seed, cfg.incarnation, self.storage)
        self.trace = TraceRecorder(cfg.trace_path, cfg.t0_monotonic)
        self.node: Any = None
        self.frames_rejected = 0
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self.engine: EffectEngine | None = None
        self._sync_scheduled = False
        self._sync_future: Any = None
        self._io: Any = None  # the storage thread (fsync off the event loop)
        self._worker: Any = None  # the work thread (the node's stream)
        self._observations: Any = None
        # SEEDANCE_CPU_PROFILE=1 (seedance real profile): per-input handler CPU samples of the loop thread
        self._cpu_profile: dict[int, list[int]] | None = {} if os.environ.get(CPU_PROFILE_ENV) == "1" else None
        self._loop_cpu_start = 0
        self._process_cpu_start = 0
        self._busy: BusyPeriods | None = None
        # profile: (group, handoff ns, write+fsync ns, its CPU ns, 1 if an append reached a new file block else 0,
        # submitted -> the storage thread runs the job ns, the write+fsync's end on the host-wide monotonic clock ns:
        # the nodes' slow fsyncs that overlap are one stall of the shared device)
        self._sync_stats: list[tuple[int, int, int, int, int, int, int]] = []
        self._gc_pauses: GcPauses | None = None  # profile: the interpreter's older-generation collections
        self._gc_only = self._cpu_profile is None and os.environ.get(GC_PROFILE_ENV) == "1"
        self._gc_items = 0  # GC_PROFILE_ENV: inputs handled and fsyncs completed (the CPU profile's items)
        # profile: per handler sample, the log entries its input carried and its sends carried (encoded in the
        # handler), so the profile can fit a cost per entry beside the cost per input
        self._cpu_entries: dict[int, list[tuple[int, int]]] = {}
        self._entries_out = 0
        self._carried = [0, 0, 0, 0]  # profile: messages received, their entries, messages sent, their entries
        self.failed = False
        self._peer_queues: dict[int, asyncio.Queue] = {}
        self._clients: dict[Any, Connection] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._collective_store_factory = collective_store_factory
        self._collectives: CollectiveEngine | None = None
        self.address: tuple[str, int] | None = None

    # --------------------------------------------------------------------------------------------- lifecycle
    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_cpu_start = time.thread_time_ns()
        self._process_cpu_start = time.process_time_ns()
        if self._cpu_profile is not None:
            self._busy = BusyPeriods(self._loop)
            self._gc_pauses = GcPauses()
        elif self._gc_only:
            self._gc_pauses = GcPauses()
        self._stopping = asyncio.Event()
        if self._listen_socket is not None:
            self._server = await asyncio.start_server(self._accept, sock=self._listen_socket,
                                                      limit=self.cfg.max_frame_bytes + 64)
        else:
            self._server = await asyncio.start_server(self._accept, self.cfg.bind_host, 0,
                                                      limit=self.cfg.max_frame_bytes + 64)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = (host, port)
        log.info("node %d (incarnation %d) listening on %s:%d", self.cfg.node_id, self.cfg.incarnation, host, port)
        durable = self.storage.load()
        rng = node_rng(self.cfg.seed, self.cfg.node_id, self.cfg.incarnation)
        config = dict(self.spec.default_config)
        config.update(self.cfg.config or {})
        self._io = ThreadPoolExecutor(1, thread_name_prefix=f"node{self.cfg.node_id}-storage")
        self.node = self.spec.factory(self.cfg.node_id, self.cfg.num_nodes, rng, config)
        self.engine = EffectEngine(self.cfg.node_id, self, torch_backend(lambda: self.device))
        self.started_monotonic = time.monotonic()  # the protocol's clock starts here (its first timers)
        if durable.empty:
            self._lifecycle(lambda now: self.node.on_start(now))
        else:
            self._lifecycle(lambda now: self.node.on_recover(durable, now))
        await self._drain()  # the first effects are durable and done before the node says it is ready
        if self.failed:
            await self._shutdown()
            return
        if self.cfg.incarnation > 0:
            self.trace.record("restart", self.cfg.node_id, self.cfg.incarnation)
        self.addresses.publish(self.cfg.node_id, self.cfg.advertise_host or host, port)
        if self.cfg.ready_path is not None:
            # the incarnation, then when its protocol started (the monotonic clock every process shares)
            atomic_write(self.cfg.ready_path, f"{self.cfg.incarnation}\n{self.started_monotonic!r}".encode())
        gc.freeze()  # what start-up made (imports, the recovered state) is never scanned by a collection again
        try:
            await self._stopping.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    @property
    def device(self) -> str:
        return node_device(self._collective_backend())

    def _collective_backend(self) -> str:
        if self._collectives is not None:
            return self._collectives.backend
        return default_backend()

    def _write_cpu_profile(self) -> None:
        """The loop thread's CPU: handler samples per input kind, and its total (frame I/O included); with only
        the collections recorded (GC_PROFILE_ENV), those and the items handled."""
        if self._gc_only and self._gc_pauses is not None:
            atomic_write(self.cfg.state_dir.parent / f"gc-profile-{self.cfg.incarnation}.json",
                         json.dumps({"node": self.cfg.node_id, "incarnation": self.cfg.incarnation,
                                     "gc": self._gc_pauses.close(), "items": self._gc_items}).encode())
        if self._cpu_profile is None:
            return
        data = {"node": self.cfg.node_id, "incarnation": self.cfg.incarnation,
                "loop_cpu_ns": time.thread_time_ns() - self._loop_cpu_start,
                "process_cpu_ns": time.process_time_ns() - self._process_cpu_start,  # every thread's
                "handler_ns": {INPUT_NAMES[k]: v for k, v in self._cpu_profile.items()},
                "handler_entries": {INPUT_NAMES[k]: v for k, v in self._cpu_entries.items()},
                "carried": dict(zip(("messages_in", "entries_in", "messages_out", "entries_out"), self._carried)),
                "busy_periods": self._busy.periods if self._busy is not None else [],
                "syncs": self._sync_stats,
                **({"gc": self._gc_pauses.close(), "items": self._busy.items} if self._gc_pauses is not None
                   and self._busy is not None else {})}
        atomic_write(self.cfg.state_dir.parent / f"cpu-profile-{self.cfg.incarnation}.json",
                     json.dumps(data).encode())

    async def _shutdown(self) -> None:
        log.info("node %d stopping", self.cfg.node_id)
        # inputs stop first (timers, the listener, every connection's reader and sender), then the durable writes
        # already under way finish: drained while still serving, a node under load (or a candidate whose election
        # timer keeps firing) always had a write in flight, and a SIGTERM took the whole drain timeout or longer
        # (torchrun SIGKILLed it after 30 s when restarting its worker group)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._server is not None:
            self._server.close()
        await cancel_all(list(self._tasks))  # cancels again a task whose cancellation a wait_for swallowed
        log.debug("node %d: inputs stopped, draining its durable writes", self.cfg.node_id)
        if not self.failed:
            await self._drain(timeout_s=10.0)
        self._write_cpu_profile()
        for conn in self._clients.values():
            conn.close()
        for pool in (self._io, self._worker):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        if self._collectives is not None:
            self._collectives.close()
        if self._observations is not None:
            self._observations.close()
        self.trace.close()
        self.storage.close()
        log.info("node %d stopped cleanly", self.cfg.node_id)

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------------------- dispatching
    def _lifecycle(self, call: Callable[[float], list]) -> None:
        try:
            effects = call(time.monotonic())
            if effects:
                self.engine.perform(effects, 0.0)  # type: ignore[union-attr]
        except Exception:
            self._fail(f"node {self.cfg.node_id} raised while starting")

    def _input(self, kind: int, value: Any) -> None:
        """Hand one input to the node and its effects to the engine."""
        if self.failed or self.engine is None:
            return
        if self._gc_only:
            self._gc_items += 1
        if self._cpu_profile is not None:
            out0 = self._entries_out
            start = time.thread_time_ns()
            self._handle_input(kind, value)
            spent = time.thread_time_ns() - start
            samples = self._cpu_profile.setdefault(kind, [])
            if len(samples) < 50_000:
                samples.append(spent)
                self._cpu_entries.setdefault(kind, []).append(
                    (carried_entries(value[1]) if kind == MESSAGE else 0, self._entries_out - out0))
            if kind == MESSAGE:
                self._carried[0] += 1
                self._carried[1] += carried_entries(value[1])
            if self._busy is not None:
                self._busy.items += 1
                self._busy.kinds[kind] += 1
                self._busy.excluded_ns += spent
                if kind == CLIENT or (kind == MESSAGE and value[0] != self.cfg.node_id):
                    self._busy.frames_in += 1
            return
        self._handle_input(kind, value)

    def _handle_input(self, kind: int, value: Any) -> None:
        try:
            effects = call_node(self.node, kind, value, time.monotonic(), self.engine)
            if effects:
                self.engine.perform(effects, 0.0)
        except ContractError as err:
            self._fail(f"{err} (seed {self.cfg.seed}, incarnation {self.cfg.incarnation})")
        except Exception:
            self._fail(f"node {self.cfg.node_id} raised handling a {INPUT_NAMES[kind]} input")

    def _fail(self, what: str) -> None:
        """A protocol bug or a storage failure: stop loudly (the process exits non-zero), never limp on."""
        log.error("%s; stopping", what, exc_info=True)
        self.failed = True
        self.stop()

    # ------------------------------------------------------------------ the engine's driver (see engine.effects)
    def send(self, effect: Send, cursor: float) -> None:
        if self._cpu_profile is not None:
            carried = carried_entries(effect.message)
            self._entries_out += carried
            self._carried[2] += 1
            self._carried[3] += carried
        self._send(effect)
        if self.trace.enabled:
            self.trace.record("send", self.cfg.node_id, type(effect.message).__name__, effect.dst, effect.size_bytes,
                              self.trace.time_s())

    def arm_timer(self, name: Any, token: int, delay_s: float, cursor: float) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        assert self._loop is not None
        self._timers[name] = self._loop.call_later(max(0.0, delay_s), self._fire, name, token)
        if self.trace.enabled:
            self.trace.record("timer-set", self.cfg.node_id, name, self.trace.time_s() + max(0.0, delay_s))

    def disarm_timer(self, name: Any, cursor: float) -> None:
        handle = self._timers.pop(name, None)
        if handle is not None:
            handle.cancel()
        self.trace.record("timer-cancel", self.cfg.node_id, name)

    def reply(self, effect: Reply, cursor: float) -> None:
        self._reply(effect)

    def annotate(self, effect: Any, cursor: float) -> None:
        self.trace.record("annotate", self.cfg.node_id, effect.name, dict(effect.attrs))

    def observe(self, effect: Any, cursor: float) -> None:
        """A replica event, appended to ``observations.jsonl`` beside the node's state (merged into the history)."""
        if self._observations is None:
            self._observations = open(self.cfg.state_dir / "observations.jsonl", "a", encoding="utf-8")
        t = time.monotonic() - self.cfg.t0_monotonic
        record = {"type": "replica", "node": self.cfg.node_id, "f": effect.what, "key": effect.key,
                  "value": effect.value, "time": t}
        self._observations.write(json.dumps(record, default=repr) + "\n")
        self._observations.flush()

    def start_collective(self, effect: Any, meta: Any, payload: Any, cursor: float) -> None:
        self.trace.record("collective-start", self.cfg.node_id, repr(effect.collective_id), effect.op,
                          effect.nominal_size_bytes)
        self._start_collective(effect, meta, payload)

    def start_work(self, effect: Any, fn: Any, arrays: list[Any], cursor: float) -> None:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"node{self.cfg.node_id}-work")
        loop = self._loop
        assert loop is not None
        self.trace.record("work-start", self.cfg.node_id, repr(effect.work_id), effect.op)

        def work() -> None:
            done = run_on_device(self.device, lambda host: run_work(fn, effect, arrays, host), effect)
            loop.call_soon_threadsafe(self._work_done, done)

        self._worker.submit(work)

    def _work_done(self, done: Any) -> None:
        if self.engine is not None:
            self.engine.work_finished()
        self.trace.record("work-done", self.cfg.node_id, repr(done.work_id), done.ok)
        self._input(WORK, done)

    def request_sync(self, cursor: float) -> None:
        if not self._sync_scheduled:
            self._sync_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._start_sync)  # at the end of this turn: group commit

    def deliver_later(self, kind: int, value: Any, cursor: float) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._input, kind, value)

    def restore(self, name: str) -> Any:
        return self.storage.restore(name)

    # ---------------------------------------------------------------------------------------------- timers
    def _fire(self, name: Any, token: int) -> None:
        if self._timers.get(name) is not None:
            del self._timers[name]
        if self.engine is None or self._stopping.is_set() or not self.engine.timer_due(name, token):
            return  # a node shutting down takes no more inputs
        self.trace.record("timer-fire", self.cfg.node_id, name)
        self._input(TIMER, name)

    # ----------------------------------------------------------------------------------------- collectives
    def _start_collective(self, effect: Any, meta: Any, payload: Any) -> None:
        if self._collectives is None:
            assert self._loop is not None
            loop = self._loop
            factory = self._collective_store_factory
            if factory is None:
                done = CollectiveDone(collective_id=effect.collective_id, ok=False,
                                      error="misuse: StartCollective needs a rendezvous store (MASTER_ADDR/MASTER_PORT)")
                loop.call_soon(self._collective_done, done)
                return
            self._collectives = CollectiveEngine(
                rank=self.cfg.node_id, store_factory=factory,
                deliver=lambda done: loop.call_soon_threadsafe(self._collective_done, done),
                call_later=lambda delay, fn: loop.call_later(delay, fn),
                bind_host=self.cfg.bind_host if self.cfg.bind_host not in ("0.0.0.0", "::") else None,
                incarnation=self.cfg.incarnation)
        self._collectives.start(effect, meta, payload)

    def _collective_done(self, done: CollectiveDone) -> None:
        self.trace.record("collective-done", self.cfg.node_id, repr(done.collective_id), done.ok, done.error)
        self._input(COLLECTIVE, done)
