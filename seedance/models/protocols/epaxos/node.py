"""An EPaxos replica as a sans-I/O node (Moraru, Andersen & Kaminsky, "There Is More Consensus in Egalitarian
Parliaments", SOSP 2013; Figures 2 and 3 are the spec) with the recovery fix of Sutra ("On the correctness of
Egalitarian Paxos", IPL 2020, arXiv:1906.10917).

Rules this module keeps:

* Any replica leads the commands its clients send it, each in its own instance ``(replica, number)``.
* Phase 1 (PreAccept): the command leader computes attributes — ``seq`` above every interfering command it knows,
  ``deps`` = for each replica q with one, the highest instance of q whose command interferes (shares a key; reads
  included), a sparse set of (q, instance) pairs (:mod:`~seedance.models.protocols.epaxos.deps`) — and sends them
  to every peer. Each peer merges in what it knows and answers. Fast path: with ``fast quorum − 1``
  replies (the fast quorum counts the leader) whose attributes are *unchanged*, the leader commits at once. The
  fast quorum is ``F + ⌊(F+1)/2⌋`` (N = 2F + 1; §4.3, "optimized EPaxos"; ``fast_quorum="simple"``: 2F).
  Otherwise, with a majority, the slow path: the union of the attributes goes through Paxos-Accept at the
  instance's ballot, then commits.
* Batching (``max_batch`` > 1): the commands a replica receives before its zero-delay flush timer fires go into
  instances of up to ``max_batch`` commands (a :class:`Batch`); a batch interferes with every command on any of its
  keys, and executes its commands in order.
* Ballots, explicit prepare and TryPreAccept (recovery of an instance that does not commit):
  :mod:`~seedance.models.protocols.epaxos.recovery`.
* Durability: every change of an instance (promise, vote, commit) is a ``PersistRecords`` put in table ``inst``
  before any message that depends on it leaves; the executed state and the kv store are rebuilt after a crash from
  the latest snapshot and by re-executing the committed instances it does not reflect. Snapshots, and forgetting
  the instances every replica's snapshot reflects: :mod:`~seedance.models.protocols.epaxos.snapshots`.
* Commit (a decision acted upon once durable) and execution (§4.4, the dependency graph's strongly connected
  components): :mod:`~seedance.models.protocols.epaxos.execution`. The instance record and the values it holds:
  :mod:`~seedance.models.protocols.epaxos.instance`.
* Clients may talk to any replica (``routing="any"``); the command leader answers after executing the command
  (reads, writes and cas are linearizable that way, §4.6). A leader that learns its instance was committed with
  another command (a no-op by a recovery) answers INFO. Commit latency (propose → commit) and execution latency
  (commit → executed) of a leader's own commands are kept in ``latencies`` (the latest 131,072).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.kv import KVStore, Result, validate
from seedance.models.protocols.contract import (
    Annotate,
    ClientRequest,
    CollectiveDone,
    DurableState,
    Effects,
    NodeId,
    Operation,
    Outcome,
    PersistRecords,
    Reply,
    Send,
    SetTimer,
)
from seedance.models.protocols.dispatch import Dispatching
from seedance.models.protocols.epaxos.attributes import Attributes
from seedance.models.protocols.epaxos.config import EPaxosConfig
from seedance.models.protocols.epaxos.deps import NO_DEPS, Deps, union, wire_bytes
from seedance.models.protocols.epaxos.execution import Execution
from seedance.models.protocols.epaxos.instance import (
    ACCEPTED,
    COMMITTED,
    NONE,
    NOOP,
    PREACCEPTED,
    TABLE,
    Coordination,
    Iid,
    Instance,
    Value,
    _decoded,
    _keys,
    _reply,
    _size,
)
from seedance.models.protocols.epaxos.latency import LatencySamples
from seedance.models.protocols.epaxos.messages import (
    HEADER_BYTES,
    Accept,
    AcceptReply,
    Batch,
    Commit,
    Fetch,
    PreAccept,
    PreAcceptReply,
    Prepare,
    PrepareReply,
    TryPreAccept,
    TryPreAcceptReply,
    Watermark,
)
from seedance.models.protocols.epaxos.recovery import Recovery
from seedance.models.protocols.epaxos.snapshots import Snapshots
from seedance.models.protocols.multipaxos.messages import Command

TICK = "tick"
FLUSH = "flush"
LATENCY_SAMPLES = 1 << 17


class EPaxosNode(Snapshots, Recovery, Execution, Attributes, Dispatching):
    """One EPaxos replica driving a :class:`~seedance.models.kv.KVStore`."""

    # every attribute in a slot, no instance dict: past 30 attributes CPython stops sharing an instance dict's keys,
    # and then a method call on the node is not specialised (each looks its name up in the dict first)
    __slots__ = ('node_id', 'num_nodes', 'peers', 'rng', 'config', 'f', 'fast_quorum', 'recovery_agreed', 'instances',
                 'next_instance', 'conf', '_known_flat', 'key_seq', 'committed_prefix', 'kv', 'results', '_unexec',
                 '_blocked', '_missing', '_fetched', 'coords', 'pending', '_queue', '_key_instances', 'try_preaccepts',
                 'try_preaccept_outcomes', '_committed_at', 'latencies', 'fast_commits', 'slow_commits', 'recoveries',
                 'commit_log', 'exec_log', 'violations', '_max_ballot', '_writes', '_notify', '_unmarked',
                 'executed_prefix', '_above', 'snapshot_prefix', '_snapshot_above', '_since_snapshot', '_every',
                 '_reported', 'forgotten', '_forgot', 'snapshot_key_counts', 'commit_base', 'exec_base',
                 'exec_base_counts', '_log_cut', '_watermark_ticks', '_holes')

    # inputs by type / name (seedance.models.protocols.dispatch): on_message and on_timer
    MESSAGE_HANDLERS = {PreAccept: "_on_preaccept", PreAcceptReply: "_on_preaccept_reply", Accept: "_on_accept",
                        AcceptReply: "_on_accept_reply", Commit: "_on_commit", Prepare: "_on_prepare",
                        PrepareReply: "_on_prepare_reply", Fetch: "_on_fetch", TryPreAccept: "_on_try_preaccept",
                        TryPreAcceptReply: "_on_try_preaccept_reply", Watermark: "_on_watermark"}
    TIMER_HANDLERS = {TICK: "_on_tick", FLUSH: "_on_flush"}

    def __init__(self, node_id: NodeId, num_nodes: int, rng: np.random.Generator,
                 config: EPaxosConfig | Mapping[str, Any] | None = None) -> None:
        self.node_id = node_id
        self.num_nodes = n = num_nodes
        self.peers = tuple(p for p in range(n) if p != node_id)
        self.rng = rng
        self.config = config if isinstance(config, EPaxosConfig) else EPaxosConfig.from_mapping(config)
        self.f = f = (n - 1) // 2
        if self.config.fast_quorum == "simple":
            self.fast_quorum, self.recovery_agreed = 2 * f, f
        else:
            self.fast_quorum, self.recovery_agreed = f + (f + 1) // 2, (f + 1) // 2
        self.fast_quorum = max(self.fast_quorum, f + 1)
        self.instances: dict[Iid, Instance] = {}
        self.next_instance = 1
        self.conf: dict[Any, dict[int, int]] = {}  # key -> {replica: its highest instance on that key}
        self._known_flat: dict[Any, list[Any]] = {}  # key -> conf[key] in the canonical form (attributes.py)
        self.key_seq: dict[Any, int] = {}
        self.committed_prefix = [0] * n
        self.kv = KVStore()
        self.results: dict[tuple[int, int], Result] = {}
        self._unexec: dict[Any, dict[int, list[int]]] = {}  # key -> replica -> its committed unexecuted numbers
        self._blocked: dict[Iid, set[Iid]] = {}  # missing instance -> committed instances waiting on it
        self._missing: dict[Iid, tuple[float, float]] = {}  # missing -> (first seen, recovery timeout)
        self._fetched: dict[Iid, float] = {}
        self.coords: dict[Iid, Coordination] = {}
        self.pending: dict[Iid, list[tuple[int, int, float]]] = {}  # own instance -> (client, request, proposed at)
        self._queue: list[tuple[Command, float]] = []  # batching: commands waiting for the flush timer
        self._key_instances: dict[Any, set[Iid]] = {}  # key -> instances known to touch it (TryPreAccept's check)
        self.try_preaccepts = 0
        self.try_preaccept_outcomes = {"accept": 0, "restart": 0, "defer": 0}
        self._committed_at: dict[Iid, float] = {}
        # (commit latency, execution latency) of own commands: the latest LATENCY_SAMPLES, 16 bytes each (latency.py)
        self.latencies = LatencySamples(LATENCY_SAMPLES)
        self.fast_commits = 0
        self.slow_commits = 0
        self.recoveries = 0
        self.commit_log: list[tuple[Iid, Any]] = []  # for monitors: (instance, (command, seq, deps))
        self.exec_log: list[tuple[Any, Iid]] = []  # (key, instance) in execution order
        self.violations: list[str] = []
        self._max_ballot = 0
        self._writes: dict[str, Any] = {}
        self._notify: list[Iid] = []  # own decisions in this call's write: acted upon once durable
        self._unmarked: set[Iid] = set()
        self._init_snapshots()

    # ================================================================================================ inputs
    def on_start(self, now: float) -> Effects:
        return [SetTimer(name=TICK, delay_s=self.config.heartbeat_s)]

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        committed = []
        covered, stale = self._restore(durable)  # the snapshot (seedance/models/protocols/epaxos/snapshots.py)
        for name, plain in durable.records.get(TABLE, {}).items():
            q, i = (int(x) for x in name.split("."))
            if i <= self.forgotten[q]:
                continue
            inst = Instance.from_plain(plain, self.num_nodes, name)
            self.instances[(q, i)] = inst
            self._max_ballot = max(self._max_ballot, inst.bal)
            if q == self.node_id:
                self.next_instance = max(self.next_instance, i + 1)
            if inst.command is not None and inst.status >= PREACCEPTED:
                self._register((q, i), inst.command, inst.seq)
            if inst.status == COMMITTED and self._covered((q, i), covered):
                inst.executed = True
            elif inst.status == COMMITTED:
                committed.append((q, i))
        self._walk_committed_prefix()
        out: Effects = [*stale, SetTimer(name=TICK, delay_s=self.config.heartbeat_s),
                        Annotate(name="recovered", attrs={"instances": len(self.instances),
                                                          "committed": len(committed)})]
        for iid in sorted(committed):
            self._mark_committed(iid, now)
        self._execute(sorted(committed, reverse=True), out, now)
        # our own instances that did not commit lost their coordination with the crash: recover them after the
        # usual wait (no one else may know them, so no one else would ever be blocked on them)
        for iid, inst in sorted(self.instances.items()):
            if iid[0] == self.node_id and inst.status != COMMITTED and iid not in self._missing:
                self._missing[iid] = (now, self._recovery_timeout())
        return self._emit(out)

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        problem = validate(request.op, request.value)
        if problem:
            return [Reply(client_id=request.client_id, request_id=request.request_id, outcome=Outcome.FAIL,
                          error=problem)]
        done = self.results.get((request.client_id, request.request_id))
        if done is not None:
            return [_reply(request.client_id, request.request_id, done)]
        op = request.op.value if isinstance(request.op, Operation) else str(request.op)
        command = Command(client_id=request.client_id, request_id=request.request_id, op=op, key=request.key,
                          value=request.value)
        if self.config.max_batch == 1:
            out: Effects = []
            self._propose([(command, now)], out, now)
            return self._emit(out)
        armed = bool(self._queue)
        self._queue.append((command, now))
        return [] if armed else [SetTimer(name=FLUSH, delay_s=0.0)]

    def _on_flush(self, now: float) -> Effects:
        """Batching: every command received since the timer was armed, ``max_batch`` per instance."""
        queue, self._queue = self._queue, []
        out: Effects = []
        size = self.config.max_batch
        for k in range(0, len(queue), size):
            self._propose(queue[k:k + size], out, now)
        return self._emit(out)

    def _propose(self, commands: list[tuple[Command, float]], out: Effects, now: float) -> None:
        """Phase 1 as command leader for a new instance holding ``commands`` (one: the command itself)."""
        value: Value = commands[0][0] if len(commands) == 1 else Batch(commands=tuple(c for c, _ in commands))
        iid = (self.node_id, self.next_instance)
        self.next_instance += 1
        seq, deps = self._attributes(value, iid, 0, NO_DEPS)
        inst = Instance(status=PREACCEPTED, command=value, seq=seq, deps=deps, bal=0, vbal=0, agreed=True)
        self.instances[iid] = inst
        self._register(iid, value, seq)
        self._persist(iid)
        self.pending[iid] = [(c.client_id, c.request_id, at) for c, at in commands]
        self.coords[iid] = Coordination(phase="preaccept", ballot=0, command=value, seq=seq, deps=deps,
                                        sent_s=now, started_s=now)
        message = PreAccept(ballot=0, replica=iid[0], instance=iid[1], command=value, seq=seq, deps=deps)
        size = _size(value, deps)  # once, not per peer
        out.extend(Send(dst=p, message=message, size_bytes=size) for p in self.peers)
        if self.num_nodes == 1:
            self._commit(iid, value, seq, deps, out, now)

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []

    # ================================================================================================ phase 1
    def _on_preaccept(self, src: NodeId, m: PreAccept, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        ballot, proposed_seq, proposed = m.ballot, m.seq, m.deps
        if inst is None:  # the common case: the first we hear of the instance
            command = m.command
            seq, deps = self._attributes(command, iid, proposed_seq, proposed)
            changed = seq != proposed_seq or deps != proposed
            inst = self.instances[iid] = Instance(PREACCEPTED, command, seq, deps, ballot, ballot,
                                                  ballot == 0 and not changed)
            self._register(iid, command, seq)
            self._write(iid, inst)
            self._drop_coordination(iid, ballot)
        elif inst.status == COMMITTED:
            return [self._commit_message(src, iid, inst)]
        elif ballot < inst.bal:
            return [Send(dst=src, message=PreAcceptReply(ballot=ballot, replica=m.replica, instance=m.instance,
                                                         ok=False, promised=inst.bal), size_bytes=HEADER_BYTES)]
        elif inst.status >= PREACCEPTED and inst.vbal == ballot:  # a duplicate
            seq, deps = inst.seq, inst.deps
            changed = seq != proposed_seq or deps != proposed
        else:
            command = m.command
            seq, deps = self._attributes(command, iid, proposed_seq, proposed)
            changed = seq != proposed_seq or deps != proposed
            inst.status, inst.command, inst.seq, inst.deps = PREACCEPTED, command, seq, deps
            inst.bal = inst.vbal = ballot
            inst.agreed = ballot == 0 and not changed
            self._register(iid, command, seq)
            self._write(iid, inst)
            self._drop_coordination(iid, ballot)
        reply = PreAcceptReply(ballot=ballot, replica=m.replica, instance=m.instance, ok=True, promised=inst.bal,
                               seq=seq, deps=deps, changed=changed)
        return self._emit([Send(dst=src, message=reply, size_bytes=HEADER_BYTES + wire_bytes(deps))])

    def _reply_to(self, iid: Any, phase: str, src: NodeId, m: Any) -> Any:
        """The coordination a reply of ``phase`` at ``m.ballot`` belongs to, with the reply recorded; None when it is
        stale, or a refusal (which raises our ballot floor and abandons the coordination if outbid)."""
        coord = self.coords.get(iid)
        if coord is None or coord.phase != phase or coord.ballot != m.ballot:
            return None
        if not m.ok:
            self._max_ballot = max(self._max_ballot, m.promised)
            if m.promised > coord.ballot:
                del self.coords[iid]
            return None
        coord.replies[src] = m
        return coord

    def _on_preaccept_reply(self, src: NodeId, m: PreAcceptReply, now: float) -> Effects:
        iid = (m.replica, m.instance)
        coord = self._reply_to(iid, "preaccept", src, m)
        if coord is None:
            return []
        count = len(coord.replies)
        if count < self.f or count < self.fast_quorum - 1 and coord.ballot == 0:
            return []  # no decision yet (_decide_preaccept's first tests, without its calls)
        out: Effects = []
        self._decide_preaccept(iid, coord, out, now, waited=False)
        return self._emit(out)

    def _fast_path_ok(self, coord: Coordination) -> bool:
        """Fast path: a fast quorum (the leader and ``fast_quorum - 1`` replies) holds the unchanged attributes."""
        unchanged = sum(1 for r in coord.replies.values() if not r.changed)
        return unchanged >= self.fast_quorum - 1

    def _decide_preaccept(self, iid: Iid, coord: Coordination, out: Effects, now: float, *, waited: bool) -> None:
        replies = coord.replies
        if coord.ballot == 0 and len(replies) >= self.fast_quorum - 1 and self._fast_path_ok(coord):
            self.fast_commits += 1
            self._commit(iid, coord.command, coord.seq, coord.deps, out, now)
            return
        if len(replies) < self.f:
            return
        if coord.ballot == 0 and len(replies) < self.fast_quorum - 1 and not waited:
            return  # the fast path may still come (N >= 7)
        # the union of the replies' attributes: a reply holding the coordination's own set adds nothing, and equal
        # sets merge alike, so each distinct other set is merged once, pair by pair
        seq, deps = coord.seq, coord.deps
        changed = set()
        for r in replies.values():
            if r.seq > seq:
                seq = r.seq
            if r.changed or r.deps != deps:
                changed.add(r.deps)
        if changed:
            deps = union(deps, changed)
        self._start_accept(iid, coord.ballot, coord.command, seq, deps, out, now)

    # ================================================================================================ phase 2
    def _coordinate(self, iid: Iid, phase: str, ballot: int, command: Value, seq: int, deps: Deps,
                    out: Effects, now: float) -> None:
        """Vote for (command, seq, deps) at ``ballot`` here and run ``phase`` ("accept" or "preaccept") for it."""
        inst = self.instances.get(iid)
        if inst is None:
            inst = self.instances[iid] = Instance()
        inst.status = ACCEPTED if phase == "accept" else PREACCEPTED
        inst.command, inst.seq, inst.deps = command, seq, deps
        inst.bal = max(inst.bal, ballot)
        inst.vbal = ballot
        inst.agreed = False
        self._register(iid, command, seq)
        self._persist(iid)
        self.coords[iid] = Coordination(phase=phase, ballot=ballot, command=command, seq=seq, deps=deps,
                                        sent_s=now, started_s=now)
        kind = Accept if phase == "accept" else PreAccept
        message = kind(ballot=ballot, replica=iid[0], instance=iid[1], command=command or NOOP, seq=seq, deps=deps)
        size = _size(command, deps)
        out.extend(Send(dst=p, message=message, size_bytes=size) for p in self.peers)

    def _start_accept(self, iid: Iid, ballot: int, command: Value, seq: int, deps: Deps,
                      out: Effects, now: float) -> None:
        self._coordinate(iid, "accept", ballot, command, seq, deps, out, now)
        if self.f == 0:
            self.slow_commits += 1
            self._commit(iid, command, seq, deps, out, now)

    def _on_accept(self, src: NodeId, m: Accept, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        ballot = m.ballot
        if inst is None:
            inst = self.instances[iid] = Instance()
        elif inst.status == COMMITTED:
            return [self._commit_message(src, iid, inst)]
        elif ballot < inst.bal:
            return [Send(dst=src, message=AcceptReply(ballot=ballot, replica=m.replica, instance=m.instance,
                                                      ok=False, promised=inst.bal), size_bytes=HEADER_BYTES)]
        command, seq = m.command, m.seq
        if type(command) is Command and command.op is None and command.client_id is None:
            command = None  # the no-op travels as an empty Command (_decoded)
        # registered already (_registered) when pre-accepted or accepted here with that very object at seq or above
        registered = inst.status != NONE and inst.command is command and inst.seq >= seq
        inst.status, inst.command, inst.seq, inst.deps = ACCEPTED, command, seq, m.deps
        inst.bal = inst.vbal = ballot
        inst.agreed = False
        if not registered:
            self._register(iid, command, seq)
        self._write(iid, inst)
        coord = self.coords.get(iid)  # _drop_coordination
        if coord is not None and coord.ballot < ballot:
            del self.coords[iid]
        reply = AcceptReply(ballot=ballot, replica=m.replica, instance=m.instance, ok=True, promised=inst.bal)
        return self._emit([Send(dst=src, message=reply, size_bytes=HEADER_BYTES)])

    def _on_accept_reply(self, src: NodeId, m: AcceptReply, now: float) -> Effects:
        iid = (m.replica, m.instance)
        coord = self._reply_to(iid, "accept", src, m)
        if coord is None:
            return []
        if len(coord.replies) < self.f:
            return []
        out: Effects = []
        self.slow_commits += 1
        self._commit(iid, coord.command, coord.seq, coord.deps, out, now)
        return self._emit(out)

    # =================================================================================================== tick
    def _on_tick(self, now: float) -> Effects:
        out: Effects = [SetTimer(name=TICK, delay_s=self.config.heartbeat_s)]
        hb = self.config.heartbeat_s
        for iid, coord in list(self.coords.items()):
            if now - coord.sent_s < 2 * hb:
                continue
            if coord.phase == "preaccept" and coord.ballot == 0 and len(coord.replies) >= self.f:
                self._decide_preaccept(iid, coord, out, now, waited=True)
                if self.coords.get(iid) is not coord:
                    continue
            if coord.phase == "trypreaccept" and now - coord.started_s >= 4 * hb:
                self._decide_tpa(iid, coord, out, now, timed_out=True)
                continue
            coord.sent_s = now
            inst = self.instances.get(iid)
            if coord.phase == "prepare":
                message: Any = Prepare(ballot=coord.ballot, replica=iid[0], instance=iid[1])
            elif coord.phase == "trypreaccept":
                message = TryPreAccept(ballot=coord.ballot, replica=iid[0], instance=iid[1],
                                       command=coord.command or NOOP, seq=coord.seq, deps=coord.deps)
            elif coord.phase == "preaccept":
                message = PreAccept(ballot=coord.ballot, replica=iid[0], instance=iid[1], command=coord.command,
                                    seq=coord.seq, deps=coord.deps)
            else:
                message = Accept(ballot=coord.ballot, replica=iid[0], instance=iid[1],
                                 command=coord.command or NOOP, seq=coord.seq, deps=coord.deps)
            size = _size(coord.command, coord.deps) if inst is not None else HEADER_BYTES
            out.extend(Send(dst=p, message=message, size_bytes=size) for p in self.peers if p not in coord.replies)
        # commits we miss: first ask the peers, then recover the instance ourselves
        fetch: dict[int, int] = {}
        started = 0
        for iid, (first, timeout) in sorted(self._missing.items()):
            inst = self.instances.get(iid)
            if inst is not None and inst.status == COMMITTED or iid[1] <= self.forgotten[iid[0]]:
                del self._missing[iid]
                continue
            waited = now - first
            if waited >= hb and now - self._fetched.get(iid, -1.0) >= 2 * hb:
                self._fetched[iid] = now
                fetch[iid[0]] = min(fetch.get(iid[0], iid[1]), iid[1])
            if waited >= timeout and iid not in self.coords and started < 8:
                started += 1
                self._missing[iid] = (now, timeout)
                self._start_recovery(iid, now, out)
        for q, first in fetch.items():
            message = Fetch(replica=q, first=first, last=first + self.config.fetch_batch - 1)
            out.extend(Send(dst=p, message=message, size_bytes=HEADER_BYTES) for p in self.peers)
        self._tick_snapshots(out, now)
        return self._emit(out)

    # ================================================================================================ helpers
    def _recovery_timeout(self) -> float:
        """A recovery timeout drawn uniformly in [election_timeout_s_min, election_timeout_s_max): the value
        ``rng.uniform(lo, hi)`` gives bit for bit (numpy computes ``lo + (hi - lo) * u`` from the same next double
        ``u``, which ``rng.random()`` returns), without the array conversions and checks ``uniform`` makes of its
        bounds on every call."""
        lo = self.config.election_timeout_s_min
        return lo + (self.config.election_timeout_s_max - lo) * self.rng.random()

    def _persist(self, iid: Iid) -> None:
        self._write(iid, self.instances[iid])

    def _write(self, iid: Iid, inst: Instance) -> None:
        """Stage the record of ``inst`` (the instance ``iid``) for this call's durable write."""
        name = inst.name
        if not name:  # made once per instance (it is written at each phase)
            name = inst.name = f"{iid[0]}.{iid[1]}"
        self._writes[name] = inst.plain()

    def _emit(self, out: Effects) -> Effects:
        """This call's instance writes, in one durable step, before everything else it returns."""
        if not self._writes:
            return out
        put, self._writes = self._writes, {}
        notify = None
        if self._notify:
            notify = ("commit", tuple(self._notify))
            self._notify = []
        # put was made for this write alone and its values (Instance.plain) are immutable: handed over, not copied
        return [PersistRecords(table=TABLE, put=put, size_bytes=32 + 48 * len(put), notify=notify,
                               handed_over=True)] + out

    def __repr__(self) -> str:
        return (f"EPaxosNode({self.node_id}, instances={len(self.instances)}, next={self.next_instance}, "
                f"coords={len(self.coords)})")


