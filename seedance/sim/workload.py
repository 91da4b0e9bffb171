"""Clients: closed- and open-loop workloads of read / write / cas operations, recorded as a history.

Rules (Jepsen's client model, Kingsbury 2013–; history format of :mod:`seedance.history.events`):

* A client *process* has at most one operation outstanding. Its history events are ``invoke`` when it issues the
  operation and ``ok`` / ``fail`` / ``info`` when it learns the outcome. After an ``info`` (a timeout, or an
  indeterminate reply) the client continues under a NEW process id — process ids are unique per client incarnation.
* Closed loop: ``clients`` clients, each issuing its next operation ``think_s`` after the previous completes.
  Open loop: Poisson arrivals at ``rate_ops_s``; an arrival takes the longest-idle process, or a new one.
* Requests and replies cross the network model: client ``c`` sits on the device of node ``c % nodes`` (a client
  co-located with a server; see :mod:`seedance.sim.network`). Client traffic is not subject to network faults (a
  reliable session), but a request to a crashed node is lost (see the crash rule below).
* A ``not-leader`` reply from the node the client is talking to makes it retry the SAME request (same client id and
  request id, so a server that deduplicates applies it once — Raft §8) at ``leader_hint``, or at the next node after
  ``not_leader_backoff_s`` when there is no hint. A request reaching a crashed node is refused (the client hears
  it one network hop later) and retried likewise at the next node: it never ran. A node that crashes while a
  client's request is out to it resets the connection (``crash_resets``; its kernel closes the sockets of a killed
  process): the client hears it one hop later and completes the operation as ``info`` (it may have taken effect),
  as the real clients do; without it the client waits for its timeout. A timeout (``op_timeout_s`` since the invoke) gives ``info`` and
  the next operation goes to the next node. A late ``ok`` from an earlier target still counts: the operation took
  effect. This serves every ``ProtocolSpec.routing``: with ``"any"`` (every replica serves, e.g. EPaxos) no node
  answers ``not-leader``, so each client keeps to its co-located replica and moves only on a timeout or a crashed
  target — the load spreads over all replicas.
* Frame mode (a renderer at a frame rate): every ``1 / frame_rate_hz`` seconds, from a random phase, each client
  issues a burst of ``writes_per_frame`` writes and then one read, back to back; a burst still running when the
  next frame starts is cut short (the new burst replaces what is left of it). With ``roam`` each burst goes to a
  node drawn uniformly (a client bound to no replica: for ``routing="any"`` protocols).
* Session context: a reply's ``context`` (a causal protocol's vector clock) replaces the client's, and every later
  request of that client carries it (``ClientRequest.context``), across process ids and target nodes.
* Values: every write and cas writes a fresh integer (unique across the run), which keeps histories easy to check;
  a cas expects the value most recently seen for that key by any client. Keys ``k0 .. k{keys-1}`` are drawn
  uniformly, by a Zipf law of exponent ``zipf_s`` (rank 1 = ``k0``), or with probability ``conflict_rate`` on the hot
  key ``k0`` and otherwise uniformly among the others.
* Operations still pending when the run ends are completed as ``info`` at the end time.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from functools import partial
from heapq import heappush
from itertools import chain
from typing import Any

import numpy as np
from simpy.events import NORMAL

from seedance.history.column import FloatColumn
from seedance.history.events import Event, EventType
from seedance.history.stream import HistoryLog
from seedance.models.protocols.contract import ClientRequest, Operation, Outcome, Reply
from seedance.sim.config import WorkloadConfig
from seedance.sim.kernel import Call, call_at

_OPS = (Operation.READ, Operation.WRITE, Operation.CAS)
_TYPE = {Outcome.OK: EventType.OK, Outcome.FAIL: EventType.FAIL, Outcome.INFO: EventType.INFO}
_INVOKE, _OK, _INFO = EventType.INVOKE, EventType.OK, EventType.INFO
# enum members as globals: in Python 3.11 reading an Enum class's attribute goes through the Enum metaclass's
# __getattr__ hook, several times the cost of reading a global
_READ, _WRITE, _FAIL = Operation.READ, Operation.WRITE, Outcome.FAIL
_OP_VALUES = {op: op.value for op in Operation}  # for the trace (Enum.value is a property: a dict look-up is cheaper)
_TYPE_VALUES = {kind: kind.value for kind in EventType}


class _Blocks:
    """An endless iterator of blocks of uniform draws, each drawn when asked for (a class, not a generator: it
    pickles and copies with the clients)."""

    __slots__ = ("rng", "size")

    def __init__(self, rng: np.random.Generator, size: int) -> None:
        self.rng, self.size = rng, size

    def __iter__(self) -> Iterator[list[float]]:
        return self

    def __next__(self) -> list[float]:
        return self.rng.random(self.size).tolist()


class Uniforms:
    """Uniform [0, 1) draws from an injected generator, fetched in blocks (numpy's per-call cost is paid once).

    :attr:`next` returns the next draw: ``next`` of one endless iterator over the blocks, each drawn when the one
    before is used up (as lazily as a refill on exhaustion), so a draw runs no Python frame of its own."""

    __slots__ = ("rng", "_block", "next")

    def __init__(self, rng: np.random.Generator, block: int = 4096) -> None:
        self.rng = rng
        self._block = block
        self.next = partial(next, chain.from_iterable(_Blocks(rng, block)))

    def __call__(self) -> float:
        return self.next()

    def exponential(self, mean: float) -> float:
        return -mean * math.log1p(-self.next())


class KeyChooser:
    """Draws keys by the configured distribution from an injected generator."""

    def __init__(self, config: WorkloadConfig, rng: np.random.Generator | Uniforms) -> None:
        self.names = [f"k{i}" for i in range(config.keys)]
        self.uniform = rng if isinstance(rng, Uniforms) else Uniforms(rng)
        self.distribution = config.key_distribution
        self.conflict_rate = config.conflict_rate
        weights = 1.0 / np.arange(1, config.keys + 1, dtype=float) ** config.zipf_s
        self.zipf_cdf = np.cumsum(weights / weights.sum())
        self._cdf = self.zipf_cdf.tolist()

    def probabilities(self) -> np.ndarray:
        """The exact probability of each key (for tests against the empirical frequencies)."""
        n = len(self.names)
        if self.distribution == "uniform":
            return np.full(n, 1.0 / n)
        if self.distribution == "zipf":
            return np.diff(np.concatenate([[0.0], self.zipf_cdf]))
        if n == 1:
            return np.ones(1)
        return np.concatenate([[self.conflict_rate], np.full(n - 1, (1.0 - self.conflict_rate) / (n - 1))])

    def draw(self) -> str:
        n = len(self.names)
        u = self.uniform.next()
        if self.distribution == "uniform":
            return self.names[int(u * n)]
        if self.distribution == "zipf":
            return self.names[min(bisect_right(self._cdf, u), n - 1)]
        if n == 1 or u < self.conflict_rate:
            return self.names[0]
        return self.names[1 + int(self.uniform.next() * (n - 1))]


class _Client:
    __slots__ = ("slot", "process", "device", "target", "busy", "request", "op_seq", "deadline_s", "watchdog",
                 "context", "sent")

    def __init__(self, slot: int, process: int, device: int, target: int) -> None:
        self.slot = slot
        self.process = process
        self.device = device
        self.target = target
        self.busy = False
        self.request: ClientRequest | None = None
        self.op_seq = 0
        self.deadline_s = 0.0  # when the outstanding operation times out
        self.watchdog = False  # a timeout check is scheduled (one per client, re-armed lazily)
        self.context = None  # the session context of the last reply that carried one (Reply.context)
        self.sent = False  # the outstanding request is out to ``target`` (not between a refusal and its retry)


class Clients:
    """All client processes of a run, driving requests through the runtime and recording the history."""

    # Slots, not an instance dict: with more than 30 attributes CPython 3.11 gives an instance a real dict, and no
    # method call on it is specialised any more
    __slots__ = ("_closed", "_draw", "_eid", "_events", "_frame_left", "_frame_mode", "_idle", "_last_value",
                 "_mix_cdf", "_modelled", "_next_process", "_next_request", "_next_value", "_queue", "_records",
                 "_reply_arrives", "_reply_bytes", "_request_arrives", "_request_bytes", "_think_s", "_timeout_s",
                 "_tracing", "clients", "config", "end_s", "env", "keys", "log", "network", "num_nodes", "ok_times",
                 "rows", "runtime", "start_s", "trace", "uniform")

    def __init__(self, *, env: Any, runtime: Any, config: WorkloadConfig, rng: np.random.Generator,
                 num_nodes: int, end_s: float, start_s: float = 0.0) -> None:
        self.env = env
        self._queue = env._queue  # SimPy's heap and event ids (seedance.sim.kernel), for call_at without its call
        self._eid = env._eid
        self.runtime = runtime
        self.network = runtime.network
        self.config = config
        self.uniform = Uniforms(rng)
        self._draw = self.uniform.next
        self.keys = KeyChooser(config, self.uniform)
        self.num_nodes = num_nodes
        self.start_s = start_s  # the clients' first requests (the nodes booted at 0)
        self.end_s = end_s
        self.trace = runtime.trace
        # the history as raw rows, spilled to disk in chunks (seedance.history.stream): memory stays bounded
        self.log = HistoryLog()
        self.rows: list[tuple[int, EventType, Operation, str | None, Any, float]] = self.log.rows
        self._events: list[Event] = []  # the Event objects built so far by :attr:`history` (only when asked for)
        self.clients: list[_Client] = []
        self._idle: deque[_Client] = deque()
        self._next_process = 0
        self._next_value = 1
        self._next_request = 0
        self._frame_left: dict[int, int] = {}  # frame mode: operations left in each client's burst
        self._last_value: dict[str, Any] = {}
        self.ok_times = FloatColumn()  # the time of every ok completion, in order, on disk in chunks (liveness)
        self._tracing = self.trace.enabled
        self._records = self.trace.records  # the trace's in-memory list (never replaced; see Trace.spill)
        self._frame_mode = config.mode == "frame"
        self._timeout_s = config.op_timeout_s
        self._request_bytes = config.request_bytes
        self._reply_bytes = config.reply_bytes
        self._closed = config.mode == "closed"
        self._think_s = config.think_s
        self._modelled = runtime.host is not None  # a measured host: client CPU, connection set-up, loopback draws
        runtime.reply_sink = self._reply_sent
        # the events' callbacks bound once (not a new bound method per event)
        self._request_arrives, self._reply_arrives = self._on_request_arrives, self._on_reply_arrives
        if config.crash_resets:
            runtime.crash_sinks.append(self._node_crashed)
        cumulative = np.cumsum(config.mix)
        self._mix_cdf = (cumulative / cumulative[-1]).tolist()

    # ------------------------------------------------------------------------------------------------- set-up
    def _new_client(self) -> _Client:
        slot = len(self.clients)
        device = slot % self.num_nodes
        client = _Client(slot, self._fresh_process(), device, target=device)
        self.clients.append(client)
        return client

    def _fresh_process(self) -> int:
        self._next_process += 1
        return self._next_process - 1

    def start(self) -> None:
        if self.config.mode == "frame":
            for _ in range(self.config.clients):
                client = self._new_client()
                call_at(self.env, self.start_s + self.uniform() / self.config.frame_rate_hz, self._frame, client)
        elif self.config.mode == "closed":
            for _ in range(self.config.clients):
                client = self._new_client()
                call_at(self.env, self.start_s + self.uniform() * 1e-3, self._begin, client)
        else:
            call_at(self.env, self.start_s + self.uniform.exponential(1.0 / self.config.rate_ops_s), self._arrival,
                    None)

    def _arrival(self, event: Any) -> None:
        now = self.env.now
        if now >= self.end_s:
            return
        client = self._idle.popleft() if self._idle else self._new_client()
        self._invoke(client, now)
        call_at(self.env, now + self.uniform.exponential(1.0 / self.config.rate_ops_s), self._arrival, None)

    def _frame(self, event: Any) -> None:
        client = event.args
        now = self.env.now
        if now >= self.end_s:
            return
        call_at(self.env, now + 1.0 / self.config.frame_rate_hz, self._frame, client)
        self._frame_left[client.slot] = self.config.writes_per_frame + 1
        if self.config.roam and not client.busy:
            client.target = min(int(self.uniform() * self.num_nodes), self.num_nodes - 1)
        if not client.busy:
            self._invoke(client, now)

    def _draw_frame_op(self, client: _Client) -> tuple[Operation, str, Any]:
        left = self._frame_left.get(client.slot, 1)
        self._frame_left[client.slot] = left - 1
        key = self.keys.draw()
        if left <= 1:
            return _READ, key, None
        return _WRITE, key, self._fresh_value()

    def _fresh_value(self) -> Any:
        """A value never written before: an integer, or (``value_bytes`` > 0) a string of that many characters,
        as the real clients write (so log entries, messages and durable writes carry the bytes)."""
        value = self._next_value
        self._next_value += 1
        pad = self.config.value_bytes
        return str(value).ljust(pad, "x") if pad else value

    def _begin(self, event: Any) -> None:
        client = event.args
        now = self.env.now
        if now < self.end_s and not client.busy:
            self._invoke(client, now)

    # ----------------------------------------------------------------------------------------------- operations
    def _draw_op(self) -> tuple[Operation, str, Any]:
        op = _OPS[min(bisect_right(self._mix_cdf, self._draw()), 2)]
        key = self.keys.draw()
        if op is _READ:
            return op, key, None
        value = self._fresh_value()
        if op is _WRITE:
            return op, key, value
        return op, key, (self._last_value.get(key), value)

    def _invoke(self, client: _Client, now: float) -> None:
        op, key, value = self._draw_frame_op(client) if self._frame_mode else self._draw_op()
        self._next_request += 1
        client.request = ClientRequest(client_id=client.slot, request_id=self._next_request, op=op, key=key,
                                       value=value, context=client.context)
        client.busy = True
        client.op_seq += 1
        self.rows.append((client.process, _INVOKE, op, key, value, now))
        if self._tracing:
            self._records.append((now, "invoke", -1, client.process, _OP_VALUES[op], key, value))
        client.deadline_s = now + self._timeout_s
        if not client.watchdog:
            client.watchdog = True
            call_at(self.env, client.deadline_s, self._watchdog, client)
        self._send(client, now)

    def _send(self, client: _Client, now: float) -> None:
        if not self._modelled:  # clients cost nothing, no connection set-up, no loopback draws
            arrive = self.network.transit(client.device, client.target, self._request_bytes, now)
        else:
            runtime = self.runtime
            depart = runtime.client_cpu(now)  # a modelled host: the client process's CPU per operation first
            depart += runtime.connect_latency(client.slot, client.target, depart)  # a first request: the connection
            arrive = self.network.transit(client.device, client.target, self._request_bytes, depart) \
                + runtime.extra_latency()
        client.sent = True  # call_at without its call (arrive is never before now)
        heappush(self._queue, (arrive, NORMAL, next(self._eid),
                               Call(self._request_arrives, (client.target, client, client.op_seq))))

    def _on_request_arrives(self, event: Any) -> None:
        target, client, op_seq = event.args
        if self.runtime.client_request(target, client.request):
            return
        # the node is down: the connection is refused, the request never ran; try the next node after a backoff
        if client.op_seq == op_seq:
            client.sent = False
        back = self.network.transit(target, client.device, self.config.reply_bytes, self.env.now)
        call_at(self.env, back + self.config.not_leader_backoff_s, self._refused, (client, op_seq, target))

    def _refused(self, event: Any) -> None:
        client, op_seq, target = event.args
        if client.busy and client.op_seq == op_seq and client.target == target:
            client.target = (target + 1) % self.num_nodes
            self._send(client, self.env.now)

    def _reply_sent(self, node_id: int, reply: Reply, depart_s: float) -> None:
        if not 0 <= reply.client_id < len(self.clients):
            raise ValueError(f"node {node_id} replied to unknown client {reply.client_id}")
        client = self.clients[reply.client_id]
        arrive = self.network.transit(node_id, client.device, self._reply_bytes, depart_s)
        if self._modelled:
            arrive += self.runtime.extra_latency()
        heappush(self._queue, (arrive, NORMAL, next(self._eid), Call(self._reply_arrives, (client, node_id, reply))))

    def _on_reply_arrives(self, event: Any) -> None:
        client, node_id, reply = event.args
        request = client.request
        if not client.busy or request is None or reply.request_id != request.request_id:
            return  # a late reply to an operation already completed (e.g. timed out)
        now = self.env._now  # the clock itself, not SimPy's property: one call less per operation
        if reply.context is not None:  # a causal session: the client has now observed what the reply reflects
            client.context = reply.context
        if reply.outcome is _FAIL and reply.error == "not-leader":
            if node_id != client.target:
                return  # a stale redirect from a node we already left
            hint = reply.leader_hint
            client.sent = False
            if hint is not None and hint != node_id and 0 <= hint < self.num_nodes:
                client.target = hint
                delay = 0.0
            else:
                client.target = (client.target + 1) % self.num_nodes
                delay = self.config.not_leader_backoff_s
            call_at(self.env, now + delay, self._retry, (client, client.op_seq))
            return
        self._complete(client, _TYPE[reply.outcome], reply.value, now)

    def _node_crashed(self, node_id: int, now: float) -> None:
        """``node_id`` crashed: every client with a request out to it hears its connection reset one hop later."""
        for client in self.clients:
            if client.busy and client.sent and client.target == node_id:
                notice = self.network.transit(node_id, client.device, self.config.reply_bytes, now) \
                    + self.runtime.extra_latency()
                call_at(self.env, notice, self._connection_lost, (client, client.op_seq, node_id))

    def _connection_lost(self, event: Any) -> None:
        client, op_seq, node_id = event.args
        if client.busy and client.op_seq == op_seq and client.sent and client.target == node_id:
            client.target = (node_id + 1) % self.num_nodes
            self._complete(client, EventType.INFO, None, self.env.now)

    def _retry(self, event: Any) -> None:
        client, op_seq = event.args
        if client.busy and client.op_seq == op_seq:
            self._send(client, self.env.now)

    def _watchdog(self, event: Any) -> None:
        """The client's timeout check: time out the outstanding op if its deadline passed, else re-arm for it."""
        client = event.args
        now = self.env.now
        if client.busy and client.deadline_s <= now:
            client.target = (client.target + 1) % self.num_nodes
            client.watchdog = False
            self._complete(client, EventType.INFO, None, now)
        elif client.busy:
            call_at(self.env, client.deadline_s, self._watchdog, client)
        else:
            client.watchdog = False

    def _complete(self, client: _Client, outcome: EventType, read_value: Any, now: float) -> None:
        request = client.request
        assert request is not None
        op = request.op
        if op is _READ:
            value = read_value if outcome is _OK else None
        else:
            value = request.value
        rows = self.rows
        rows.append((client.process, outcome, op, request.key, value, now))
        if len(rows) >= self.log.spill_rows:
            self.log.spill()
        client.sent = False
        if self._tracing:
            self._records.append((now, "return", -1, client.process, _TYPE_VALUES[outcome], value))
        if outcome is _OK:
            self.ok_times.append(now)
            if op is _READ:
                self._last_value[request.key] = read_value
            else:
                self._last_value[request.key] = request.value if op is _WRITE else request.value[1]
        elif outcome is _INFO:
            client.process = self._fresh_process()
        client.busy = False
        client.request = None
        if self._closed:
            if self._think_s == 0.0:
                if now < self.end_s:
                    self._invoke(client, now)
            elif now + self._think_s < self.end_s:
                call_at(self.env, now + self._think_s, self._begin, client)
        elif self._frame_mode:
            if self._frame_left.get(client.slot, 0) > 0 and now < self.end_s:
                self._invoke(client, now)
        else:
            self._idle.append(client)

    @property
    def history(self) -> list[Event]:
        """The history so far as :class:`Event` objects, built on demand from the rows (trusted: the clients made
        them) and kept. The run itself never asks for it (its summary and check read :attr:`log` back), so its
        memory stays bounded; a caller that asks holds the whole history."""
        events = self._events
        log = self.log
        if len(events) < log.spilled:  # rows went to disk since: read them back (the rest comes from memory)
            have = len(events)
            events.extend(event for line, event in log.events() if have < line <= log.spilled)
        trusted = Event.trusted
        for process, kind, op, key, value, time_s in self.rows[len(events) - log.spilled:]:
            events.append(trusted(process, kind, op, key, value, time_s))
        return events

    def finish(self, now: float) -> None:
        """Complete every pending operation as ``info`` (indeterminate) at the end of the run."""
        for client in self.clients:
            if client.busy:
                self._complete(client, EventType.INFO, None, now)
