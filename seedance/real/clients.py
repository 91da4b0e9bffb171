"""Closed-loop clients that speak to real nodes over authenticated TCP and record the shared history format.

Rules (Herlihy & Wing 1990 §2 as recorded by Jepsen; seedance.history.events):

* Each client is one logical process with at most one operation outstanding. It records ``invoke`` when it first
  sends an operation and exactly one completion: ``ok`` (the node replied OK; a read carries the value read),
  ``fail`` (the node replied FAIL, e.g. a cas mismatch: definitely not applied) or ``info`` (no answer within
  ``op_timeout_s``, or the connection died after the request was sent: it may or may not have taken effect).
  After an ``info`` the client continues as a fresh process id (``process + num_clients``), as Jepsen does.
* A "not-leader" FAIL is not a completion: nothing was applied, so the client re-sends the same operation (new
  ``request_id``) to the hinted leader, or the next node, until the operation's deadline.
* Operations are drawn from a seeded generator per client (keys and uniforms 256 at a time): reads, writes of
  unique values, and cas from the last value the client saw; keys uniform over ``keys``. Times are seconds since the
  run's ``t0`` (monotonic clock).
* After the load phase a final read of every key (``final_reads``) makes lost acknowledged writes visible to the
  checker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seedance.history.events import Event
from seedance.errors import FrameError
from seedance.models.protocols.contract import ClientRequest, Operation, Outcome, Reply
from seedance.models.wire import Codec
from seedance.real.trace import TraceRecorder
from seedance.real.transport import DEFAULT_MAX_FRAME_BYTES, Connection

log = logging.getLogger("seedance.real.clients")

CLIENT_PROFILE_ENV = "SEEDANCE_CLIENT_PROFILE"  # a path: `seedance real profile` gets the client loop's busy periods


@dataclass(frozen=True, kw_only=True)
class Workload:
    num_clients: int = 8
    keys: int = 8
    read_fraction: float = 0.5  # the simulator's default mix: 0.5 read, 0.4 write, 0.1 cas
    cas_fraction: float = 0.1
    value_size_bytes: int = 0  # 0: integer values; > 0: string values of this length
    op_timeout_s: float = 1.0  # real processes restart in ~1 s on a loaded machine: longer than the simulator's
    retry_pause_s: float = 0.01
    frame_rate_hz: float = 0.0  # > 0: frame mode, as the simulator's: per frame a burst of writes, then one read
    writes_per_frame: int = 1


class Draws:
    """A client's seeded keys and uniforms, drawn ``block`` at a time (one numpy call per block, not per op)."""

    def __init__(self, rng: np.random.Generator, keys: int, block: int = 256) -> None:
        self._rng, self._keys, self._block = rng, keys, block
        self._key_block: list[int] = []
        self._uniform_block: list[float] = []

    def key(self) -> int:
        if not self._key_block:
            self._key_block = self._rng.integers(self._keys, size=self._block).tolist()[::-1]
        return self._key_block.pop()

    def uniform(self) -> float:
        if not self._uniform_block:
            self._uniform_block = self._rng.random(self._block).tolist()[::-1]
        return self._uniform_block.pop()


class ClientPool:
    """Runs the workload against nodes found through ``lookup(node_id) -> (host, port) | None``."""

    def __init__(self, *, num_nodes: int, lookup: Callable[[int], tuple[str, int] | None], key: bytes,
                 workload: Workload, seed: int, t0_monotonic: float, codec: Codec | None = None,
                 trace: TraceRecorder | None = None, routing: str = "leader-hint",
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.num_nodes = num_nodes
        self.routing = routing  # the protocol's ProtocolSpec.routing: "leader-hint" | "any"
        self.lookup = lookup
        self.key = key
        self.workload = workload
        self.seed = seed
        self.t0 = t0_monotonic
        self.codec = codec or Codec(())
        self._raw: list[tuple[Any, ...]] = []  # (process, type, f, key, value, monotonic time) per record
        self._events: list[Event] = []
        self._traced = 0  # history records already in the trace (trace_history)
        self.trace = trace
        self.max_frame_bytes = max_frame_bytes  # the nodes' (SEEDANCE_MAX_FRAME_BYTES): a batch is split to fit it
        self._conns: dict[int, Connection] = {}  # one per node, shared by every client
        self._opening: dict[int, asyncio.Future] = {}
        self._readers: dict[int, asyncio.Task] = {}
        # (client, request id) -> (future, deadline, node): what the reader and the deadline sweep complete
        self._pending: dict[tuple[int, int], tuple[asyncio.Future, float, int]] = {}
        self._sweeper: asyncio.Task | None = None
        self._leader_guess = 0
        self._stop = False
        self._contexts: dict[int, Any] = {}  # client -> session context of the last reply carrying one
        self._busy: Any = None  # CLIENT_PROFILE_ENV: the loop's busy periods (seedance.real.runtime.BusyPeriods)
        self._connects: list[float] = []  # CLIENT_PROFILE_ENV: connection set-up times (s)

    # --------------------------------------------------------------------------------------------- history
    def _record(self, process: int, kind: str, op: Operation, key: str | None, value: Any) -> None:
        # made Events (validated) when read (.events), and trace records after each phase (trace_history)
        self._raw.append((process, kind, op, key, value, time.monotonic()))

    def trace_history(self) -> None:
        """The trace's ``invoke``/``return`` records of the history recorded since the last call, with the times
        they happened: written after a phase (load, warm-up, final reads), off the operations' path."""
        raw, start = self._raw, self._traced
        self._traced = len(raw)
        if self.trace is None:
            return
        record = self.trace.record
        for process, kind, op, key, value, at in raw[start:]:
            if kind == "invoke":
                record("invoke", -1, process, op.value, key, value, at=at)
            else:
                record("return", -1, process, kind, value, at=at)

    @property
    def events(self) -> list[Event]:
        """The history so far (:class:`Event`, validated): built from the raw records on first read after the
        load, not one validated object per record while it runs."""
        for process, kind, op, key, value, at in self._raw[len(self._events):]:
            self._events.append(Event(process=process, type=kind, f=op, key=key, value=value,
                                      time=max(0.0, at - self.t0)))
        return self._events

    # ---------------------------------------------------------------------------------------- connections
    async def _conn(self, client: int, node: int) -> Connection | None:
        """The pool's one connection to ``node``, shared by every client (requests pipelined on it, replies matched
        by client and request id); opened once however many clients ask at the same time."""
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        opening = self._opening.get(node)
        if opening is None:
            opening = self._opening[node] = asyncio.ensure_future(self._open(node))
            opening.add_done_callback(lambda _f, node=node: self._opening.pop(node, None))
        return await asyncio.shield(opening)

    async def _open(self, node: int) -> Connection | None:
        address = self.lookup(node)
        if address is None:
            return None
        opened = time.perf_counter()
        try:
            conn = await Connection.open(*address, self.key, self.max_frame_bytes, timeout_s=0.5)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, FrameError):
            return None
        try:
            await asyncio.wait_for(conn.send("client", -1, None), 0.5)
        except (OSError, asyncio.TimeoutError):
            conn.close()
            return None
        self._conns[node] = conn
        if self._busy is not None:  # profiling: how long a connection set-up took
            self._connects.append(time.perf_counter() - opened)
        self._readers[node] = asyncio.ensure_future(self._read_replies(node, conn))
        return conn

    async def _read_replies(self, node: int, conn: Connection) -> None:
        try:
            while True:
                frame = conn.next_frame() or await conn.recv()  # a batch's replies: no await per reply
                reply = self.codec.decode(frame.message)
                if frame.kind != "rep" or not isinstance(reply, Reply):
                    raise FrameError("frame", f"unexpected {frame.kind!r} from node {node}", "rep frames")
                pending = self._pending.get((reply.client_id, reply.request_id))
                if pending is not None and not pending[0].done():
                    pending[0].set_result(reply)
                    if self._busy is not None:  # one reply in, and (next) one request out
                        self._busy.items += 1
                        self._busy.frames_in += 1
                        self._busy.frames_out += 1
        except (OSError, asyncio.IncompleteReadError, FrameError, asyncio.CancelledError) as err:
            if isinstance(err, FrameError):
                log.warning("connection to node %d: %s", node, err)
        finally:
            conn.close()
            if self._conns.get(node) is conn:
                del self._conns[node]
            for future, _, at in list(self._pending.values()):
                if at == node and not future.done():
                    future.set_exception(ConnectionError(f"connection to node {node} lost"))

    async def _sweep_deadlines(self, every_s: float = 0.01) -> None:
        """One timer for every outstanding request: each ``every_s`` the expired ones end with TimeoutError (an
        ``asyncio.wait_for`` per operation armed and cancelled a timer handle per request)."""
        while True:
            await asyncio.sleep(every_s)
            now = time.monotonic()
            for future, deadline, _ in list(self._pending.values()):
                if deadline <= now and not future.done():
                    future.set_exception(asyncio.TimeoutError())

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep_deadlines())

    # ------------------------------------------------------------------------------------------ operations
    async def execute(self, client: int, request_ids: list[int], op: Operation, key: str | None,
                      value: Any) -> tuple[str, Any]:
        """Run one operation to completion: ("ok", value) | ("fail", None) | ("info", None)."""
        self._ensure_sweeper()
        deadline = time.monotonic() + self.workload.op_timeout_s
        # leader-hint: every client goes where the last success was; any: each client to its own replica
        target = client % self.num_nodes if self.routing == "any" else self._leader_guess
        while time.monotonic() < deadline:
            conn = await self._conn(client, target)
            if conn is None:  # node down: nothing was sent, try the next one
                target = (target + 1) % self.num_nodes
                await asyncio.sleep(self.workload.retry_pause_s)
                continue
            request_ids[0] += 1
            rid = request_ids[0]
            future = asyncio.get_running_loop().create_future()
            self._pending[(client, rid)] = (future, deadline, target)
            try:
                conn.send_soon("req", client, self.codec.encode(
                    ClientRequest(client_id=client, request_id=rid, op=op, key=key, value=value,
                                  context=self._contexts.get(client))))
                reply: Reply = await future
            except (asyncio.TimeoutError, ConnectionError, OSError, RuntimeError):
                return "info", None  # sent; may or may not have taken effect
            finally:
                self._pending.pop((client, rid), None)
            if reply.context is not None:  # a causal session: later requests carry what this reply reflects
                self._contexts[client] = reply.context
            if reply.outcome == Outcome.OK:
                if self.routing != "any":
                    self._leader_guess = target
                return "ok", reply.value
            if reply.outcome == Outcome.INFO:
                return "info", None
            if reply.error == "not-leader":
                hint = reply.leader_hint
                target = hint if hint is not None and hint != target else (target + 1) % self.num_nodes
                if hint is None:
                    await asyncio.sleep(self.workload.retry_pause_s)
                continue
            return "fail", None
        return "info", None

    def _draw(self, draws: Draws, client: int, counter: int, seen: dict[str, Any]) -> tuple[Operation, str, Any]:
        key = f"k{draws.key()}"
        u = draws.uniform()
        unique = client * 10_000_000 + counter
        if self.workload.value_size_bytes > 0:
            new: Any = str(unique).ljust(self.workload.value_size_bytes, "x")
        else:
            new = unique
        if u < self.workload.read_fraction:
            return Operation.READ, key, None
        if u < self.workload.read_fraction + self.workload.cas_fraction:
            return Operation.CAS, key, [seen.get(key), new]
        return Operation.WRITE, key, new

    async def _client(self, client: int, until: float) -> None:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(1_000 + client,)))
        draws = Draws(rng, self.workload.keys)
        process, counter, request_ids = client, 0, [0]
        seen: dict[str, Any] = {}
        frame_s = 1.0 / self.workload.frame_rate_hz if self.workload.frame_rate_hz > 0 else 0.0
        next_frame = time.monotonic() + draws.uniform() * frame_s
        left = 0
        while not self._stop and time.monotonic() < until:
            counter += 1
            if frame_s:  # frame mode: wait for the next frame, then writes_per_frame writes and one read
                if left == 0:
                    now = time.monotonic()
                    if next_frame > now:
                        await asyncio.sleep(next_frame - now)
                    next_frame = max(next_frame + frame_s, time.monotonic())  # a late frame is not made up
                    left = self.workload.writes_per_frame + 1
                    if time.monotonic() >= until:
                        break
                left -= 1
                key = f"k{draws.key()}"
                op, value = (Operation.READ, None) if left == 0 else (Operation.WRITE, client * 10_000_000 + counter)
            else:
                op, key, value = self._draw(draws, client, counter, seen)
            self._record(process, "invoke", op, key, value)
            outcome, result = await self.execute(client, request_ids, op, key, value)
            if outcome == "ok":
                seen[key] = result if op == Operation.READ else (value[1] if op == Operation.CAS else value)
            done_value = result if op == Operation.READ and outcome == "ok" else (
                None if op == Operation.READ else value)
            self._record(process, outcome, op, key, done_value)
            if outcome == "info":
                process += self.workload.num_clients

    async def run(self, duration_s: float) -> None:
        until = time.monotonic() + duration_s
        profile_path = os.environ.get(CLIENT_PROFILE_ENV)
        if profile_path:
            from seedance.real.loop_hooks import BusyPeriods, GcPauses

            self._busy = BusyPeriods(asyncio.get_running_loop())
            pauses = GcPauses()
        await asyncio.gather(*(self._client(c, until) for c in range(self.workload.num_clients)))
        self.trace_history()
        if self._busy is not None:
            from seedance.real.storage import atomic_write

            atomic_write(Path(profile_path), json.dumps({"busy_periods": self._busy.periods,
                                                             "connects_s": self._connects, "gc": pauses.close(),
                                                             "items": self._busy.items}).encode())
            self._busy = None

    async def warm_up(self, within_s: float = 60.0) -> bool:
        """Write once (process 2,000,000, value -1) until it succeeds: the cluster has a leader and commits."""
        client, process, request_ids = self.workload.num_clients + 1, 2_000_000, [0]
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            self._record(process, "invoke", Operation.WRITE, "k0", -1)
            outcome, _ = await self.execute(client, request_ids, Operation.WRITE, "k0", -1)
            self._record(process, outcome, Operation.WRITE, "k0", -1)
            if outcome == "ok":
                self.trace_history()
                return True
            if outcome == "info":
                process += 1
            await asyncio.sleep(0.05)
        self.trace_history()
        return False

    async def final_reads(self, within_s: float = 5.0) -> dict[str, int]:
        """Read every key once (retrying on not-leader) so lost acknowledged writes show in the history.

        Returns ``{"keys": keys, "read": how many were read ok}`` (all of them unless ``within_s`` ran out)."""
        client = self.workload.num_clients
        process = 1_000_000  # a process id no load client reaches
        request_ids = [0]
        deadline = time.monotonic() + within_s
        read = 0
        for k in range(self.workload.keys):
            key = f"k{k}"
            while time.monotonic() < deadline:
                self._record(process, "invoke", Operation.READ, key, None)
                outcome, result = await self.execute(client, request_ids, Operation.READ, key, None)
                self._record(process, outcome, Operation.READ, key, result if outcome == "ok" else None)
                if outcome == "ok":
                    read += 1
                    break
                if outcome == "info":
                    process += 1
                await asyncio.sleep(0.05)
        self.trace_history()
        return {"keys": self.workload.keys, "read": read}

    async def close(self) -> None:
        self._stop = True
        self.trace_history()  # what a phase cut short recorded
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in [*self._readers.values(), *self._opening.values()]:
            task.cancel()
        await asyncio.gather(*self._readers.values(), *self._opening.values(), *(
            [self._sweeper] if self._sweeper is not None else []), return_exceptions=True)
        for conn in self._conns.values():
            conn.close()
