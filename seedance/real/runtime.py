"""The real runtime: one asyncio event loop per OS process driving one unchanged protocol node.

Rules (contract.py; etcd/raft ``Ready`` ordering; Raft §5.1 stable storage):

* The node sees only its ``on_*`` inputs and ``now = time.monotonic()``; it is built by ``ProtocolSpec.factory`` with
  ``rng = default_rng(SeedSequence(seed, spawn_key=(node_id, incarnation)))`` and never learns it runs for real.
* Inputs are handled one at a time on the loop thread. Effects are executed with *group commit* (etcd/raft's
  ``Ready`` batching): the effects of every input handled in one turn of the event loop are queued in order; at the
  end of the turn all their writes are made durable in order (:meth:`DiskStorage.sync`: one fsync per run of log
  appends), and only then are the other effects executed, in their order. So a ``Send`` or ``Reply`` that follows a
  ``Persist`` leaves the process only after that write is on disk, as the contract demands, while one fsync serves
  many client requests. ``Send`` queues a frame to the peer's connection (lossy: a full
  queue or a broken connection drops it, as the contract allows); ``SetTimer`` replaces a pending timer of that name;
  ``Reply`` goes back on the requesting client's connection; ``StartCollective`` goes to :mod:`.collectives`.
* On start the node's durable directory is loaded: empty -> ``on_start``; otherwise a fresh node gets
  ``on_recover(DurableState)``. Nothing else survives a crash.
* Peers are found through an :class:`AddressBook`: the local launcher hands every node a fixed table and a listening
  socket it keeps across restarts (so a restarted node has the same address and no torch import is needed); under
  torchrun each node publishes ``host:port`` in the rendezvous store (``seedance/addr/<id>``), which peers re-read
  on every reconnect. No protocol-specific code lives here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seedance.errors import FrameError
from seedance.models.protocols.contract import (
    Annotate, CancelTimer, ClientRequest, CollectiveDone, Persist, PersistLog, ProtocolSpec, Reply, Send, SetTimer,
    StartCollective,
)
from seedance.models.wire import Codec
from seedance.real.collectives import CollectiveEngine
from seedance.real.faults import NodeFaults
from seedance.real.storage import DiskStorage, atomic_write
from seedance.real.trace import TraceRecorder
from seedance.real.transport import DEFAULT_MAX_FRAME_BYTES, Connection

log = logging.getLogger("seedance.real.runtime")

ADDR_KEY = "seedance/addr/{}"
PEER_QUEUE_LIMIT = 10_000


class AddressBook:
    """Where node ``i`` listens. ``publish`` is called once the node serves; ``lookup`` may return None."""

    def publish(self, node_id: int, host: str, port: int) -> None:
        raise NotImplementedError

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        raise NotImplementedError


class StaticAddressBook(AddressBook):
    """A fixed table (``"h:p,h:p,..."``), as the local launcher gives it."""

    def __init__(self, table: str | list[tuple[str, int]]) -> None:
        if isinstance(table, str):
            table = [(h, int(p)) for h, _, p in (item.rpartition(":") for item in table.split(","))]
        self.table = list(table)

    def publish(self, node_id: int, host: str, port: int) -> None:
        pass

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        return self.table[node_id] if 0 <= node_id < len(self.table) else None

    def encode(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.table)


class StoreAddressBook(AddressBook):
    """Addresses in a torch.distributed store (torchrun rendezvous)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def publish(self, node_id: int, host: str, port: int) -> None:
        self.store.set(ADDR_KEY.format(node_id), f"{host}:{port}")

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        key = ADDR_KEY.format(node_id)
        if not self.store.check([key]):
            return None
        host, _, port = self.store.get(key).decode().rpartition(":")
        return host, int(port)


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


class NodeRuntime:
    """Runs one node until :meth:`stop`; serves on ``listen_socket`` if given, else on ``bind_host`` port 0."""

    def __init__(self, cfg: NodeConfig, spec: ProtocolSpec, addresses: AddressBook,
                 collective_store_factory: Callable[[], Any] | None = None, listen_socket: Any = None) -> None:
        self.cfg = cfg
        self.spec = spec
        self.addresses = addresses
        self._listen_socket = listen_socket
        self.codec = Codec(spec.message_types)
        self.storage = DiskStorage(cfg.state_dir, self.codec, fsync=cfg.fsync)
        self.faults = NodeFaults.from_env(cfg.node_id, cfg.num_nodes, cfg.seed, cfg.incarnation, self.storage)
        self.trace = TraceRecorder(cfg.trace_path, cfg.t0_monotonic)
        self.node: Any = None
        self.frames_rejected = 0
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._batch: list = []
        self._flush_scheduled = False
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
        rng = np.random.default_rng(np.random.SeedSequence(self.cfg.seed,
                                                           spawn_key=(self.cfg.node_id, self.cfg.incarnation)))
        config = dict(self.spec.default_config)
        config.update(self.cfg.config or {})
        self.node = self.spec.factory(self.cfg.node_id, self.cfg.num_nodes, rng, config)
        if durable.empty:
            self._dispatch("on_start", lambda now: self.node.on_start(now))
        else:
            self._dispatch("on_recover", lambda now: self.node.on_recover(durable, now))
        self.flush()  # the first effects are durable and done before the node says it is ready
        if self.failed:
            await self._shutdown()
            return
        if self.cfg.incarnation > 0:
            self.trace.record("restart", self.cfg.node_id, self.cfg.incarnation)
        self.addresses.publish(self.cfg.node_id, self.cfg.advertise_host or host, port)
        if self.cfg.ready_path is not None:
            atomic_write(self.cfg.ready_path, str(self.cfg.incarnation).encode())
        try:
            await self._stopping.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def _shutdown(self) -> None:
        if not self.failed:
            self.flush()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in self._clients.values():
            conn.close()
        self.trace.close()
        self.storage.close()
        log.info("node %d stopped cleanly", self.cfg.node_id)

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------------------- dispatching
    def _dispatch(self, name: str, call: Callable[[float], list]) -> None:
        try:
            effects = call(time.monotonic())
        except Exception:
            self._fail(f"node {self.cfg.node_id} raised in {name}")
            return
        if effects:
            self._batch.extend(effects)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                assert self._loop is not None
                self._loop.call_soon(self.flush)

    def _fail(self, what: str) -> None:
        """A protocol bug or a storage failure: stop loudly (the process exits non-zero), never limp on."""
        log.exception("%s; stopping", what)
        self.failed = True
        self._batch.clear()
        self.stop()

    def flush(self) -> None:
        """Make this turn's writes durable (in order), then run the other effects in order."""
        try:
            self._flush()
        except Exception:
            self._fail(f"node {self.cfg.node_id} failed executing its effects")

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._batch = self._batch, []
        writes = [e for e in batch if isinstance(e, (Persist, PersistLog))]
        if writes:
            start = time.monotonic()
            for effect in writes:
                self.storage.stage(effect)
            self.storage.sync()
            if self.trace.enabled:
                self.trace.record("persist", self.cfg.node_id, len(writes), sum(e.size_bytes for e in writes),
                                  self.trace.time_s(), at=start)
        self._execute([e for e in batch if not isinstance(e, (Persist, PersistLog))])

    def _execute(self, effects: list) -> None:
        me, trace = self.cfg.node_id, self.trace
        for effect in effects:
            if isinstance(effect, Send):
                self._send(effect)
                if trace.enabled:
                    t = trace.time_s()
                    trace.record("send", me, type(effect.message).__name__, effect.dst, effect.size_bytes, t)
            elif isinstance(effect, SetTimer):
                self._set_timer(effect.name, effect.delay_s)
                if trace.enabled:
                    trace.record("timer-set", me, effect.name, trace.time_s() + max(0.0, effect.delay_s))
            elif isinstance(effect, CancelTimer):
                handle = self._timers.pop(effect.name, None)
                if handle is not None:
                    handle.cancel()
                trace.record("timer-cancel", me, effect.name)
            elif isinstance(effect, Reply):
                self._reply(effect)
            elif isinstance(effect, StartCollective):
                trace.record("collective-start", me, repr(effect.collective_id), effect.op, effect.nominal_size_bytes)
                self._start_collective(effect)
            elif isinstance(effect, Annotate):
                trace.record("annotate", me, effect.name, dict(effect.attrs))
            else:
                raise TypeError(f"node {self.cfg.node_id} returned a non-effect {effect!r}")

    # ---------------------------------------------------------------------------------------------- timers
    def _set_timer(self, name: Any, delay_s: float) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        assert self._loop is not None
        self._timers[name] = self._loop.call_later(max(0.0, delay_s), self._fire, name)

    def _fire(self, name: Any) -> None:
        self._timers.pop(name, None)
        self.trace.record("timer-fire", self.cfg.node_id, name)
        self._dispatch("on_timer", lambda now: self.node.on_timer(name, now))

    # ------------------------------------------------------------------------------------------- messaging
    def _send(self, effect: Send) -> None:
        if effect.dst == self.cfg.node_id:
            message = effect.message
            assert self._loop is not None
            self._loop.call_soon(self._deliver_message, self.cfg.node_id, message)
            return
        queue = self._peer_queues.get(effect.dst)
        if queue is None:
            queue = self._peer_queues[effect.dst] = asyncio.Queue(PEER_QUEUE_LIMIT)
            self._spawn(self._peer_sender(effect.dst, queue))
        try:
            queue.put_nowait(self.codec.encode(effect.message))
        except asyncio.QueueFull:
            log.debug("dropping message to %d: queue full", effect.dst)

    def _deliver_message(self, src: int, message: Any) -> None:
        if self.faults.active and self.faults.intercept(src, message, self._deliver_message):
            return  # dropped or deferred by a launcher-set fault rule (seedance.real.faults)
        self.trace.record("deliver", self.cfg.node_id, type(message).__name__, src)
        self._dispatch("on_message", lambda now: self.node.on_message(src, message, now))

    async def _peer_sender(self, dst: int, queue: asyncio.Queue) -> None:
        backoff = 0.02
        while True:
            conn = None
            try:
                address = self.addresses.lookup(dst)
                if address is None:
                    raise ConnectionError("peer not published yet")
                conn = await Connection.open(*address, self.cfg.key, self.cfg.max_frame_bytes)
                conn.send_nowait("peer", self.cfg.node_id, None)
                backoff = 0.02
                while True:
                    data = await queue.get()
                    conn.send_nowait("msg", self.cfg.node_id, data)
                    while not queue.empty() and conn.writer.transport.get_write_buffer_size() < (1 << 20):
                        conn.send_nowait("msg", self.cfg.node_id, queue.get_nowait())
                    await conn.writer.drain()
            except asyncio.CancelledError:
                if conn is not None:
                    conn.close()
                raise
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, FrameError, ConnectionError) as err:
                log.debug("connection to %d lost: %s", dst, err)
                if conn is not None:
                    conn.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.cfg.key, self.cfg.max_frame_bytes)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        client_ids: set[Any] = set()
        try:
            await asyncio.wait_for(conn.handshake(), 5.0)
            first = await conn.recv()
            if first.kind == "peer" and isinstance(first.src, int) and 0 <= first.src < self.cfg.num_nodes:
                src = first.src
                while True:
                    frame = await conn.recv()
                    if frame.kind != "msg" or frame.src != src:
                        raise FrameError("frame", f"unexpected {frame.kind!r} from peer {src}", "msg frames")
                    message = self.codec.decode(frame.message)
                    self._deliver_message(src, message)
            elif first.kind == "ctl":  # the launcher's fault rules (seedance.real.faults), control-key signed
                await self.faults.serve(conn)
            elif first.kind == "client":
                while True:
                    frame = await conn.recv()
                    request = self.codec.decode(frame.message)
                    if frame.kind != "req" or not isinstance(request, ClientRequest):
                        raise FrameError("frame", f"unexpected {frame.kind!r} from a client", "req frames")
                    self._clients[request.client_id] = conn
                    client_ids.add(request.client_id)
                    self._dispatch("on_client_request", lambda now: self.node.on_client_request(request, now))
            else:
                raise FrameError("frame", f"unexpected first frame {first.kind!r}", "'peer' or 'client'")
        except FrameError as err:
            self.frames_rejected += 1
            log.warning("rejected frame, dropping connection: %s", err)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            for cid in client_ids:
                if self._clients.get(cid) is conn:
                    del self._clients[cid]
            conn.close()
            if task is not None:
                self._tasks.discard(task)

    def _reply(self, effect: Reply) -> None:
        conn = self._clients.get(effect.client_id)
        if conn is None:
            return  # the client is gone; it records the operation as indeterminate
        try:
            conn.send_nowait("rep", self.cfg.node_id, self.codec.encode(effect))
        except (OSError, RuntimeError) as err:
            log.debug("reply to client %s lost: %s", effect.client_id, err)

    # ----------------------------------------------------------------------------------------- collectives
    def _start_collective(self, effect: StartCollective) -> None:
        if self._collectives is None:
            assert self._loop is not None
            loop = self._loop
            factory = self._collective_store_factory
            if factory is None:
                raise RuntimeError("StartCollective needs a rendezvous store (MASTER_ADDR/MASTER_PORT)")
            self._collectives = CollectiveEngine(
                rank=self.cfg.node_id, store_factory=factory,
                deliver=lambda done: loop.call_soon_threadsafe(self._collective_done, done),
                call_later=lambda delay, fn: loop.call_later(delay, fn),
                bind_host=self.cfg.bind_host if self.cfg.bind_host not in ("0.0.0.0", "::") else None)
        self._collectives.start(effect)

    def _collective_done(self, done: CollectiveDone) -> None:
        self.trace.record("collective-done", self.cfg.node_id, repr(done.collective_id), done.ok, done.error)
        self._dispatch("on_collective_done", lambda now: self.node.on_collective_done(done, now))
