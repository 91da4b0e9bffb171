"""The causal pixel-grid node: vector-clock write coordination (field report §2.2) over a delta-state CRDT grid.

Every node is a replica and a coordinator (routing ``any``). Keys ``k0 .. k{W·H-1}`` name pixels: ``k{i}`` is pixel
``(i mod W, i div W)``; a value is an integer (a colour).

Clients. A client keeps a *context*: the vector clock of everything it has observed (the join of the clocks in the
replies it received, ``ClientRequest.context`` / ``Reply.context``), and sends it with every request (report §2.2:
"the client sends its latest vector clock with the write").

Coordinator. A replica serves a request only if its own clock covers the client's context (``context ≤ clock``):
otherwise the client has observed writes this replica has not applied, and serving it would break causal order (a
write stamped with this replica's clock would not follow the writes it depends on; a read could return a value older
than one the client already saw). Such a request is rejected (``fail``, error ``causal-order: ...`` naming the
missing entries) and definitely did not take effect. An accepted write ticks the replica's own clock entry
(``update_vc``), becomes a one-pixel delta stamped by :meth:`PixelGrid.write_delta` (version = the sum of the new
clock, so causality orders concurrent-write resolution), is persisted with the clock (``PersistRecords``), recorded
as ``Observe("apply")`` and acknowledged with the new clock as context.

Replication (Almeida, Shoker & Baquero 2018, §6, Algorithm 2, restricted to a replica's own delta-groups because
every pair of replicas talks directly). Each replica numbers its delta-groups — group 0 is its whole state when it
(re)started, then one group per accepted write — and pushes the delta-interval ``Δ[sent, counter)`` to every peer
after each write. A receiver joins an interval only when (1) it holds the sender's groups before its start, in the
same sender incarnation (causal delta-merging: an interval from 0 or a full state is always joinable), and (2) its
clock covers the interval's clock on every entry but the sender's (the writes the interval depends on: causal
delivery, Birman, Schiper & Stephenson 1991). An interval failing (2) waits in a small per-sender queue and is
retried after every join; one failing (1) is answered with a rejecting acknowledgement, and the sender resends
from the receiver's prefix. Joined pixels are persisted with the clock before they are observed and acknowledged.
Anti-entropy: every ``sync_interval_s`` a replica resends from the acknowledged prefix to each peer that made no
progress since the last tick, or its full state when that prefix was collected or is unknown. Acknowledged groups
are collected.

On receive the replica joins clocks componentwise (:func:`clocks.join`) without ticking its own entry — the
report's ``merge`` (max, then tick) would count receive events that no other replica's state reflects, and a client
carrying such a tick would be rejected by a replica holding every write it depends on. Own entries count writes.

A recovering replica records ``Observe("observe", key, value)`` for every pixel it holds again: a crash can fall
between a write becoming durable and the ``Observe("apply")`` that follows it.

Durable state: table ``grid`` (``p{i}`` → [value, version, t, writer, seq]; ``clock``), value ``epoch`` (the
incarnation, incremented at every recovery). Volatile: delta buffer, acknowledgements, prefixes held.

Sync traffic is reported, once per ``stats_interval_s`` when it changed, as ``Observe("observe", key=None,
value=[delta_bytes, full_state_bytes])``: the bytes of the Sync messages sent since the last report, and the bytes
the same messages would have carried as full states (state-based sync on the same schedule).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from seedance.models import clocks
from seedance.models.crdt import ENTRY_BYTES, GridDelta, PixelGrid, listed
from seedance.models.delta_intervals import DeltaBuffer, IntervalReceiver, peers_of
from seedance.models.protocols.causal.config import CausalConfig
from seedance.models.protocols.causal.messages import HEADER_BYTES, Ack, Sync
from seedance.models.protocols.causal.shared import (
    _CLOCK_RECORDS, _PIXEL_KEYS, _PIXEL_RECORDS, CLOCK_ENTRY_BYTES, CLOCK_PREFIX, _ack, _applied, _one_step,
    _timer, key_of,
)
from seedance.models.protocols.contract import (
    Annotate, ClientRequest, CollectiveDone, DurableState, Effects, Observe, Operation, Outcome, Persist,
    PersistRecords, Reply, Send,
)

GRID_TABLE = "grid"
CLOCK_RECORD = "clock"  # the whole clock as a list (older files); now each entry j is record "c{j}"
EPOCH_KEY = "epoch"
SYNC_TIMER = "sync"
STATS_TIMER = "stats"
_KEY = re.compile(r"k(\d+)\Z")
_INT64 = np.dtype(np.int64)


class CausalNode:
    """One replica/coordinator of the pixel grid; see the module docstring."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: CausalConfig) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng
        self.config = config
        self.peers = peers_of(node_id, num_nodes)
        # ``src in ids and src != node_id``: ``src`` is a peer, without a look-up in an N-entry map per message (a
        # cache miss at scale)
        self._ids = range(num_nodes)
        self.grid = PixelGrid(config.width, config.height, num_nodes)
        self.epoch = 0
        self.buffer = DeltaBuffer(self.peers, max_groups=config.max_groups, me=node_id)
        # per peer, indexed by node id (this replica's own entry unused), made at boot: a list of N equal items is
        # one fill, where a dict of N peers was a copy of N entries per replica
        self.sent: list[int | None] = []
        self.progress: list[int | None] = []  # acked at the last sync tick
        # a replica's first incarnation (epoch 0) starts empty, so its group 0 is the empty state: every receiver
        # holds it already, and a fresh start sends it to nobody (N² messages at boot otherwise)
        self.receiver = IntervalReceiver(first=(0, 1))
        self.waiting: dict[int, list[Sync]] = {}  # per sender, made on first use (N² empty lists otherwise)
        self._queued: set[int] = set()  # senders whose waiting queue is not empty (so _drain scans only those)
        self._acks_moved: set[int] = set()  # peers whose acknowledgement changed since the last sync tick
        self.rejected_writes = 0
        self.rejected_reads = 0
        self.bytes_delta = 0  # since the last stats report
        self.bytes_full = 0
        self.total_bytes_delta = 0
        self.total_bytes_full = 0
        self._persisted_clock = clocks.zeros(num_nodes)
        # the interval messages made since the group counter was last at ``_intervals_at``, by start (immutable, so
        # the 1,023 peers of a write are sent one Sync, not 1,023 equal ones)
        self._intervals: dict[int, tuple[Sync, int]] = {}
        self._intervals_at = -1
        # _next's steps stand for _join's and _deliverable's own (a subclass that changes them takes the general path)
        self._plain = type(self)._join is CausalNode._join and type(self)._deliverable is CausalNode._deliverable

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _boot(self, fresh: bool = False) -> Effects:
        effects: Effects = [Persist(key=EPOCH_KEY, value=self.epoch),
                            _timer(SYNC_TIMER, self.config.sync_interval_s),
                            _timer(STATS_TIMER, self.config.stats_interval_s)]
        # group 0: the whole state of this incarnation; when fresh (epoch 0, empty) every peer holds it already
        # (see IntervalReceiver(first=...) above)
        (self.buffer.add_held if fresh else self.buffer.add)(self.grid.full_delta())
        held = self.buffer.counter if fresh else None  # what the buffer holds acknowledged of every peer now
        self.sent = [held] * self.num_nodes
        self.progress = [held] * self.num_nodes
        if fresh:
            return effects
        for peer in self.peers:
            effects.extend(self._push(peer))
        return effects

    def on_start(self, now: float) -> Effects:
        return self._boot(fresh=self.epoch == 0 and not self.grid.written_count and not self.grid.clock.any())

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        self.epoch = int(durable.values.get(EPOCH_KEY, -1)) + 1
        records = durable.records.get(GRID_TABLE, {})
        pixels = [(int(k[1:]), v) for k, v in records.items() if k.startswith("p")]
        if pixels:
            idx = np.array([i for i, _ in pixels], np.int64)
            rows = np.array([v for _, v in pixels], np.float64)
        else:
            idx, rows = np.zeros(0, np.int64), np.zeros((0, 5))
        clock = clocks.zeros(self.num_nodes)
        old = np.asarray(records.get(CLOCK_RECORD, []), np.int64)[:self.num_nodes]
        clock[:old.size] = old
        for k, v in records.items():
            if k.startswith(CLOCK_PREFIX) and k[1:].isdigit() and int(k[1:]) < self.num_nodes:
                clock[int(k[1:])] = max(int(clock[int(k[1:])]), int(v))
        self.grid.restore(idx, rows, clock)
        self._persisted_clock = self.grid.clock.copy()
        # what the replica holds again: the writes it persisted, observed now (a crash may have come between a
        # write becoming durable and its Observe("apply"), which ran after it)
        values = self.grid.f["value"]
        held = [Observe(what="observe", key=_PIXEL_KEYS[i], value=int(values[i]))
                for i in self.grid.written().tolist()]
        return [Annotate(name="recovered", attrs={"epoch": self.epoch, "pixels": len(pixels)}), *held,
                *self._boot()]

    # --------------------------------------------------------------------------------------------------- clients
    def _reply(self, request: ClientRequest, outcome: Outcome, value: Any = None, error: str | None = None) -> Reply:
        return Reply(client_id=request.client_id, request_id=request.request_id, outcome=outcome, value=value,
                     error=error, context=self.grid.clock.tolist() if outcome is Outcome.OK else None)

    def _pixel(self, key: str | None) -> int | None:
        match = _KEY.match(key or "")
        if match is None or int(match.group(1)) >= self.grid.pixels:
            return None
        return int(match.group(1))

    def _admit(self, context: Any) -> str | None:
        """None when this replica's clock covers the client's context; otherwise the reason to reject."""
        if context is None:
            return None
        try:
            ctx = np.asarray(context, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return f"bad-context: {context!r} is not a vector clock"
        if ctx.ndim != 1 or ctx.size > self.num_nodes:
            return f"bad-context: {context!r} is not a vector clock of {self.num_nodes} nodes"
        if clocks.leq(ctx, self.grid.clock):
            return None
        ctx = np.pad(ctx, (0, self.num_nodes - ctx.size))
        missing = [f"node {j}: {int(self.grid.clock[j]) + 1}..{int(ctx[j])}"
                   for j in np.flatnonzero(ctx > self.grid.clock)]
        return f"causal-order: the client has seen writes this replica has not applied ({'; '.join(missing)})"

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        pixel = self._pixel(request.key)
        if request.op not in (Operation.READ, Operation.WRITE):
            return [self._reply(request, Outcome.FAIL, error="unsupported: the grid serves read and write")]
        if pixel is None:
            return [self._reply(request, Outcome.FAIL, error=f"bad-key: {request.key!r} is not a pixel "
                                f"k0..k{self.grid.pixels - 1}")]
        reason = self._admit(request.context)
        if reason is not None:
            if request.op is Operation.WRITE:
                self.rejected_writes += 1
            else:
                self.rejected_reads += 1
            return [Annotate(name="rejected", attrs={"op": request.op.value, "key": request.key, "reason": reason}),
                    self._reply(request, Outcome.FAIL, error=reason)]
        x, y = pixel % self.grid.width, pixel // self.grid.width
        if request.op is Operation.READ:
            return [self._reply(request, Outcome.OK, value=self.grid.get(x, y))]
        value = request.value
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -(1 << 63) <= value < 1 << 63:
            return [self._reply(request, Outcome.FAIL, error=f"bad-value: {value!r} is not a 64-bit integer")]
        delta = self.grid.write_delta(x, y, int(value), node=self.node_id, t=float(now))
        changed = listed(self._join(delta))
        self.buffer.add(delta)
        return [self._persist(changed, self._clock_moved(self.grid.clock)), *self._observe(changed),
                self._reply(request, Outcome.OK), *self._push_all()]

    # -------------------------------------------------------------------------------------------- replication
    def _join(self, delta: GridDelta) -> np.ndarray:
        return self.grid.join(delta)

    def _persist(self, changed: list[int], moved: list[int]) -> PersistRecords:
        """The changed pixels and the clock entries that moved since the last persist (``moved``, from
        :meth:`_clock_moved`; record ``c{j}``: entry ``j``), so a write costs O(what changed), not O(N) (a
        1,024-entry clock per delivery at 1,024 replicas)."""
        clock = self.grid.clock
        # the grid's clock is read-only (PixelGrid makes every clock it takes so) and replaced when it changes:
        # holding it is holding its value
        self._persisted_clock = clock
        if len(changed) == 1 and len(moved) == 1:  # a delivery's usual step: one pixel and the sender's entry
            return _one_step(GRID_TABLE, changed[0], self.grid.entry(changed[0]), moved[0], clock.item(moved[0]))
        names, entry = _PIXEL_RECORDS, self.grid.entry
        put: dict[str, Any] = {names[i]: entry(i) for i in changed}  # (value, version, t, node, seq)
        records, value = _CLOCK_RECORDS, clock.item
        for j in moved:
            put[records[j]] = value(j)
        return PersistRecords(table=GRID_TABLE, put=put, handed_over=True,  # fresh tuples and ints, made here
                              size_bytes=len(changed) * ENTRY_BYTES + CLOCK_ENTRY_BYTES * len(moved))

    def _clock_moved(self, clock: np.ndarray) -> list[int]:
        """The clock entries that moved since the last persist: known to the grid when one join moved them."""
        persisted = self._persisted_clock
        if clock is persisted:
            return []
        moved = self.grid.moved_since(persisted)
        return (clock != persisted).nonzero()[0].tolist() if moved is None else listed(moved)

    def _observe(self, changed: list[int]) -> list[Observe]:
        entry = self.grid.entry  # (value, ...) as Python numbers; the pixel a join just wrote without a read
        return [_applied(i, entry(i)[0]) for i in changed]

    def _push(self, peer: int) -> Effects:
        """Send ``peer`` the interval from what was last sent (or the full state when that is unknown/collected)."""
        start = self.sent[peer]
        if start is None:
            start = 0
        if start < self.buffer.base:
            start = None
        elif start == 0 and self.buffer.counter > 1:
            # group 0 is this incarnation's state at boot, but the later groups' clocks also cover what was
            # delivered here after boot (a write made after a delivery saw it) and is in no own group: an interval
            # from 0 would claim those writes without carrying them. The full state carries them.
            start = None
        if start is not None and start >= self.buffer.counter:
            return []
        counter = self.buffer.counter
        if start is None:
            delta = self.grid.full_delta()
            message, size = Sync.of(self.epoch, start, counter, delta), HEADER_BYTES + delta.size_bytes
        else:
            message, size = self._interval(start)
        self.sent[peer] = counter
        self.bytes_delta += size
        self.bytes_full += self._full_state_bytes()
        return [Send(dst=peer, message=message, size_bytes=size)]

    def _full_state_bytes(self) -> int:
        """What a send would have cost as the full state (the baseline ``bytes_full`` counts against deltas)."""
        return HEADER_BYTES + self.grid.written_count * ENTRY_BYTES + 8 * self.num_nodes

    def _interval(self, start: int) -> tuple[Sync, int]:
        """The message of Δ[start, counter) and its size. It is the same for every peer sent it before the next
        group: one message for all."""
        counter = self.buffer.counter
        if self._intervals_at != counter:
            self._intervals, self._intervals_at = {}, counter
        made = self._intervals.get(start)
        if made is None:
            delta = self.buffer.span(start)
            made = self._intervals[start] = (Sync.of(self.epoch, start, counter, delta),
                                             HEADER_BYTES + delta.size_bytes)
        return made

    def _push_all(self) -> Effects:
        """:meth:`_push` to every peer, in peer order. The peers sent every group but the newest (after a write,
        usually all of them) get Δ[counter-1, counter), one message, in this loop without a call each."""
        counter, sent = self.buffer.counter, self.sent
        start = counter - 1  # (from 0 _push may send the full state instead: see there)
        if start < max(1, self.buffer.base):
            return [send for peer in self.peers for send in self._push(peer)]
        message, size = self._interval(start)
        me = self.node_id
        if sent.count(start) - (sent[me] == start) == len(self.peers):  # every peer: one Send each, as below
            self.sent = [counter] * len(sent)
            self.sent[me] = sent[me]
            self.bytes_delta += len(self.peers) * size
            self.bytes_full += len(self.peers) * self._full_state_bytes()
            return [Send(dst=peer, message=message, size_bytes=size) for peer in self.peers]
        effects: Effects = []
        common = 0
        for peer in self.peers:
            if sent[peer] == start:
                sent[peer] = counter
                effects.append(Send(dst=peer, message=message, size_bytes=size))
                common += 1
            else:
                effects.extend(self._push(peer))
        self.bytes_delta += common * size
        self.bytes_full += common * self._full_state_bytes()
        return effects

    def _deliverable(self, src: int, message: Sync, provided: np.ndarray | None = None) -> bool:
        """Causal delivery: the interval's clock is covered, on every entry but the sender's, by ``provided`` (this
        replica's clock, or that joined with intervals delivered together). A full state, and group 0 on its own
        (the sender's state at boot), carry their own predecessors; an interval from 0 that goes further does not
        (see :meth:`_push`) and is checked like any other."""
        start = message.start
        if start is None or (start == 0 and message.end == 1):
            return True
        need = message.clock
        if type(need) is not np.ndarray or need.dtype is not _INT64:  # (as sent, in the simulator: as is)
            need = np.asarray(need, np.int64)
        have = self.grid.clock if provided is None else provided
        if need.ndim == 1 and need.size == have.size and 0 <= src < need.size:  # without clocks.leq's checks
            delta = message.delta()
            if provided is None and need is delta.clock and self.grid.steps_to(need, src, delta.before(src)):
                return True  # ``have`` is ``need`` but one write of src's: the usual case, in one comparison
            # the entries the interval needs beyond ``have``: none but src's (the grid keeps the answer for the join)
            ahead = self.grid.ahead(need) if provided is None else (need > have).nonzero()[0]
            return not ahead.size or (ahead.size == 1 and ahead.item(0) == src)
        need = need.copy()
        if src < need.size:
            need[src] = 0
        return clocks.leq(need, have)

    def on_message(self, src: int, message: Any, now: float) -> Effects:
        if type(message) is Ack:
            return self._on_ack(src, message)
        if type(message) is not Sync or src == self.node_id or src not in self._ids:  # a peer's interval
            return []
        effects = self._next(src, message) if self._plain else None
        if effects is not None:
            pass
        elif not self.receiver.acceptable(src, message.epoch, message.start):
            return [Send(dst=src, message=Ack(epoch=message.epoch, held=self.receiver.held_for(src, message.epoch),
                                              rejected=True), size_bytes=HEADER_BYTES)]
        elif self._deliverable(src, message):
            effects = self._deliver(src, message)
        else:
            queue = self.waiting.setdefault(src, [])
            if all(m.end != message.end or m.epoch != message.epoch for m in queue):
                queue.append(message)
                del queue[:-self.config.max_waiting]
                self._queued.add(src)
            effects = []
        if self._queued:
            effects.extend(self._drain())
        return effects

    def _next(self, src: int, message: Sync) -> Effects | None:
        """:meth:`_deliver` of the usual interval in fewer steps, the same state and effects: the sender's next
        write after everything this replica holds (:meth:`PixelGrid.join_next`), extending the prefix held of the
        sender's incarnation, to a replica whose clock is persisted as it is. None, nothing done, otherwise."""
        start, epoch = message.start, message.epoch
        if not start or not self.receiver.extends(src, epoch, start):
            return None
        delta = message.delta()
        changed = self.grid.join_next(delta, src, self._persisted_clock)
        if changed is None:
            return None
        ack = _ack(src, epoch, self.receiver.joined(src, epoch, start, message.end))
        if not changed:  # (an older write: the clock's entry moved alone)
            return [self._persist(changed, [src]), ack]
        self._persisted_clock = clock = delta.clock  # (the grid's clock now)
        usual = message.usual  # (the same at every receiver: the pixel, its entry and the sender's clock entry)
        if usual is None:
            i = changed[0]
            stored = self.grid.entry(i)
            usual = (_one_step(GRID_TABLE, i, stored, src, clock.item(src)), _applied(i, stored[0]))
            message.keep(usual)
        return [*usual, ack]

    def _deliver(self, src: int, message: Sync) -> Effects:
        changed = listed(self._join(message.delta()))
        ack = _ack(src, message.epoch, self.receiver.joined(src, message.epoch, message.start, message.end))
        moved = self._clock_moved(self.grid.clock)
        if changed or moved:
            effects: Effects = [self._persist(changed, moved)]
            effects += self._observe(changed)
            effects.append(ack)
            return effects
        return [ack]

    def _drain(self) -> Effects:
        """Deliver waiting intervals whose predecessors are here — or arrive together: intervals of several senders
        may depend on each other (each sender's latest groups saw the other's), so the largest set of waiting
        intervals (the newest per sender) whose clocks are covered by this replica's clock joined with what the set
        itself brings is delivered at once; repeated until nothing moves."""
        effects: Effects = []
        while self._queued:
            chosen: dict[int, Sync] = {}
            for src in sorted(self._queued):  # in sender order, as a scan of every queue would visit them
                queue = self.waiting[src]
                queue[:] = [m for m in queue if self.receiver.acceptable(src, m.epoch, m.start)
                            and m.end > self.receiver.held_for(src, m.epoch)]
                if queue:
                    chosen[src] = max(queue, key=lambda m: m.end)
                else:
                    self._queued.discard(src)
            while chosen:
                provided = self.grid.clock.copy()
                for src, m in chosen.items():
                    if src < provided.size and src < len(m.clock):
                        provided[src] = max(provided[src], int(m.clock[src]))
                stuck = [src for src, m in chosen.items() if not self._deliverable(src, m, provided)]
                if not stuck:
                    break
                for src in stuck:
                    del chosen[src]
            if not chosen:
                return effects
            for src, m in chosen.items():
                self.waiting[src].remove(m)
                if not self.waiting[src]:
                    self._queued.discard(src)
                effects.extend(self._deliver(src, m))
        return effects

    def _on_ack(self, src: int, ack: Ack) -> Effects:
        if ack.epoch != self.epoch or src == self.node_id or src not in self._ids:
            return []
        if ack.rejected:
            self.buffer.ack(src, ack.held)
            self._acks_moved.add(src)
            self.sent[src] = ack.held
            return self._push(src)
        acked = self.buffer.acked[src]
        if acked is None or ack.held > acked:
            self.buffer.ack(src, ack.held)
            self._acks_moved.add(src)
        return []

    def on_timer(self, name: Any, now: float) -> Effects:
        if name == STATS_TIMER:
            effects: Effects = [_timer(STATS_TIMER, self.config.stats_interval_s)]
            if self.bytes_delta or self.bytes_full:
                effects.append(Observe(what="observe", key=None, value=[self.bytes_delta, self.bytes_full]))
                self.total_bytes_delta += self.bytes_delta
                self.total_bytes_full += self.bytes_full
                self.bytes_delta = self.bytes_full = 0
            return effects
        if name != SYNC_TIMER:
            return []
        effects = [_timer(SYNC_TIMER, self.config.sync_interval_s)]
        # Only peers that lag or whose acknowledgement moved since the last tick can be resent to or change
        # ``progress`` (every other peer has progress == acked and nothing pending), so the tick costs O(those),
        # not O(N); visited in peer order, as a scan of every peer would.
        touched = self.buffer.lagging | self._acks_moved if self._acks_moved else self.buffer.lagging
        self._acks_moved = set()
        for peer in sorted(touched):
            acked = self.buffer.acked[peer]
            if self.buffer.pending(peer) and acked == self.progress[peer]:
                self.sent[peer] = acked  # anti-entropy: no progress since the last tick, send again from the prefix
                effects.extend(self._push(peer))
            self.progress[peer] = acked
        effects.extend(self._drain())
        return effects

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []
