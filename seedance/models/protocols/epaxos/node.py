"""An EPaxos replica as a sans-I/O node (Moraru, Andersen & Kaminsky, "There Is More Consensus in Egalitarian
Parliaments", SOSP 2013; Figures 2 and 3 are the spec) with the recovery fix of Sutra ("On the correctness of
Egalitarian Paxos", IPL 2020, arXiv:1906.10917).

Rules this module keeps:

* Any replica leads the commands its clients send it, each in its own instance ``(replica, number)``.
* Phase 1 (PreAccept): the command leader computes attributes — ``seq`` above every interfering command it knows,
  ``deps[q]`` = the highest instance of replica q whose command interferes (shares a key; reads included) — and
  sends them to every peer. Each peer merges in what it knows and answers. Fast path: with ``fast quorum − 1``
  replies (the fast quorum counts the leader) whose attributes are *unchanged*, the leader commits at once. The
  fast quorum is ``F + ⌊(F+1)/2⌋`` (N = 2F + 1; §4.3, "optimized EPaxos"; ``fast_quorum="simple"``: 2F).
  Otherwise, with a majority, the slow path: the union of the attributes goes through Paxos-Accept at the
  instance's ballot, then commits.
* Batching (``max_batch`` > 1): the commands a replica receives before its zero-delay flush timer fires go into
  instances of up to ``max_batch`` commands (a :class:`Batch`); a batch interferes with every command on any of its
  keys, and executes its commands in order.
* Ballots per instance: ballot 0 belongs to the command leader; a recovering replica uses ``round * n + id``. Each
  replica keeps, per instance, the ballot it **promised** (``bal``) apart from the ballot at which it last
  **voted** (``vbal``, set by a pre-accept or an accept) — the fix of Sutra 2020: with one variable a Prepare
  overwrites the ballot at which the attributes were accepted, and recovery can adopt a stale value.
* Explicit prepare (Figure 3, recovery): a replica that waits on an instance that does not commit (its execution
  is blocked on it for a randomised timeout) runs Prepare at a higher ballot and, from a majority of replies, (1)
  commits a committed value; else (2) runs Paxos-Accept with the accepted value of the **highest vbal**; else (3)
  if the leader did not answer and at least ⌊(F+1)/2⌋ replies (F for the 2F quorum) are *witnesses* — they
  pre-accepted the leader's attributes unchanged at ballot 0, so the fast path may have committed them — then with
  F witnesses it runs Paxos-Accept with those attributes, and with fewer it runs **TryPreAccept** (below); else (4)
  if someone pre-accepted the command, restarts phase 1 with it at the new ballot (never a fast path); else (5)
  commits a no-op. Before that, a blocked replica asks its peers for commits it missed (``Fetch``).
* TryPreAccept (the optimized quorum's recovery at N ≥ 5; Moraru et al., technical report CMU-PDL-13-111; the
  authors' efficient/epaxos ``startRecoveryForInstance`` / ``handleTryPreAccept*`` behave alike): every replica that
  is not a witness is asked to pre-accept the witnessed attributes at the recovery ballot. It promises the ballot
  and refuses when it knows an interfering command that is neither among the dependencies nor depends on the
  instance (a *conflict*). Witnesses and acceptors reaching F (with the leader, which proposed the attributes, a
  majority that knows of no conflict) → Paxos-Accept of the attributes. The leader answering, a *committed*
  conflict (impossible had the fast path committed the attributes), or more than N − fast quorum replicas known not
  to be witnesses (no fast quorum can have held them) → phase 1 again. Otherwise (conflicts with uncommitted
  commands and replicas missing) recovery is **deferred**: the conflicting instances are recovered or commit, and a
  later recovery at a higher ballot decides; with every replica reachable it decides unless one holds the instance
  accepted.
* Durability: every change of an instance (promise, vote, commit) is a ``PersistRecords`` put in table ``inst``
  before any message that depends on it leaves; the executed state and the kv store are volatile and rebuilt by
  re-executing the committed instances after a crash.
* Execution (§4.4): a committed instance executes once every instance it may depend on is committed locally; the
  dependency graph of committed, unexecuted instances is split into strongly connected components (Tarjan 1972,
  iterative), executed in inverse topological order, and within a component by increasing ``seq`` (ties: replica,
  instance). Replicas thus apply interfering commands in the same order.
* Clients may talk to any replica (``routing="any"``); the command leader answers after executing the command
  (reads, writes and cas are linearizable that way, §4.6). A leader that learns its instance was committed with
  another command (a no-op by a recovery) answers INFO. Commit latency (propose → commit) and execution latency
  (commit → executed) of a leader's own commands are kept in ``latencies``.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress
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
from seedance.models.protocols.epaxos.config import EPaxosConfig
from seedance.models.protocols.dispatch import Dispatching
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
)
from seedance.models.protocols.multipaxos.messages import Command

NONE, PREACCEPTED, ACCEPTED, COMMITTED = 0, 1, 2, 3
TICK = "tick"
FLUSH = "flush"
TABLE = "inst"
NOOP = Command()

Iid = tuple[int, int]
Value = Command | Batch | None  # what an instance holds: one command, a batch of them, or a no-op (None)


def _parts(value: Value) -> tuple[Command, ...]:
    """The client commands of an instance's value, in execution order (none for a no-op)."""
    if value is None:
        return ()
    if type(value) is Batch:
        return value.commands
    return () if value.op is None else (value,)


def _keys(value: Value) -> tuple[Any, ...]:
    """The keys ``value`` touches: it interferes with every command on any of them."""
    if value is None:
        return ()
    if type(value) is Batch:
        return tuple(dict.fromkeys(c.key for c in value.commands))
    return () if value.op is None else (value.key,)


def _decoded(value: Command | Batch) -> Value:
    """A value off the wire: the no-op travels as an empty Command."""
    return None if type(value) is Command and value.op is None and value.client_id is None else value


def _value_plain(value: Value) -> Any:
    if value is None:
        return None
    if type(value) is Batch:
        return {"batch": [c.to_plain() for c in value.commands]}
    return value.to_plain()


def _value_from_plain(data: Any) -> Value:
    if data is None:
        return None
    if isinstance(data, dict):
        return Batch(commands=tuple(Command.from_plain(c) for c in data["batch"]))
    return Command.from_plain(data)


@dataclass(slots=True)
class Instance:
    status: int = NONE
    command: Value = None
    seq: int = 0
    deps: tuple[int, ...] = ()
    bal: int = 0  # the highest ballot promised
    vbal: int = -1  # the ballot of the last pre-accept / accept vote (Sutra 2020)
    agreed: bool = False  # pre-accepted at ballot 0 with the leader's attributes unchanged
    executed: bool = False  # volatile

    def plain(self) -> list[Any]:
        return [self.status, _value_plain(self.command), self.seq, list(self.deps), self.bal, self.vbal, self.agreed]

    @classmethod
    def from_plain(cls, data: Any) -> Instance:
        status, command, seq, deps, bal, vbal, agreed = data
        return cls(status=int(status), command=_value_from_plain(command),
                   seq=int(seq), deps=tuple(int(d) for d in deps), bal=int(bal), vbal=int(vbal), agreed=bool(agreed))


@dataclass(slots=True)
class Coordination:
    """A phase this replica runs for one instance: as its command leader (ballot 0) or as a recoverer."""

    phase: str  # "preaccept" | "accept" | "prepare" | "trypreaccept"
    ballot: int
    command: Value = None
    seq: int = 0
    deps: tuple[int, ...] = ()
    replies: dict[int, Any] = field(default_factory=dict)
    sent_s: float = 0.0
    started_s: float = 0.0
    witnesses: set[int] = field(default_factory=set)  # TryPreAccept: pre-accepted the leader's attributes at 0
    others: set[int] = field(default_factory=set)  # TryPreAccept: known not to have


def _size(command: Value, n: int) -> int:
    return HEADER_BYTES + 8 * n + (command.size_bytes if command is not None else 0)


class EPaxosNode(Dispatching):
    """One EPaxos replica driving a :class:`~seedance.models.kv.KVStore`."""

    # inputs by type / name (seedance.models.protocols.dispatch): on_message and on_timer
    MESSAGE_HANDLERS = {PreAccept: "_on_preaccept", PreAcceptReply: "_on_preaccept_reply", Accept: "_on_accept",
                        AcceptReply: "_on_accept_reply", Commit: "_on_commit", Prepare: "_on_prepare",
                        PrepareReply: "_on_prepare_reply", Fetch: "_on_fetch", TryPreAccept: "_on_try_preaccept",
                        TryPreAcceptReply: "_on_try_preaccept_reply"}
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
        self.conf: dict[Any, list[int]] = {}  # key -> highest instance of each replica on that key
        self.key_seq: dict[Any, int] = {}
        self.committed_prefix = [0] * n
        self.kv = KVStore()
        self.results: dict[tuple[int, int], Result] = {}
        self._unexec: dict[Any, list[list[int]]] = {}  # key -> per replica sorted committed unexecuted numbers
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
        self.latencies: list[tuple[float, float]] = []  # (commit latency, execution latency) of own commands
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

    # ================================================================================================ inputs
    def on_start(self, now: float) -> Effects:
        return [SetTimer(name=TICK, delay_s=self.config.heartbeat_s)]

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        committed = []
        for name, plain in durable.records.get(TABLE, {}).items():
            q, i = (int(x) for x in name.split("."))
            inst = Instance.from_plain(plain)
            self.instances[(q, i)] = inst
            self._max_ballot = max(self._max_ballot, inst.bal)
            if q == self.node_id:
                self.next_instance = max(self.next_instance, i + 1)
            if inst.command is not None and inst.status >= PREACCEPTED:
                self._register((q, i), inst.command, inst.seq)
            if inst.status == COMMITTED:
                committed.append((q, i))
        out: Effects = [SetTimer(name=TICK, delay_s=self.config.heartbeat_s),
                        Annotate(name="recovered", attrs={"instances": len(self.instances),
                                                          "committed": len(committed)})]
        for iid in sorted(committed):
            self._mark_committed(iid, now)
        self._execute(sorted(committed, reverse=True), out, now)
        # our own instances that did not commit lost their coordination with the crash: recover them after the
        # usual wait (no one else may know them, so no one else would ever be blocked on them)
        lo, hi = self.config.election_timeout_s_min, self.config.election_timeout_s_max
        for iid, inst in sorted(self.instances.items()):
            if iid[0] == self.node_id and inst.status != COMMITTED and iid not in self._missing:
                self._missing[iid] = (now, float(self.rng.uniform(lo, hi)))
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
        seq, deps = self._attributes(value, iid, 0, (0,) * self.num_nodes)
        inst = Instance(status=PREACCEPTED, command=value, seq=seq, deps=deps, bal=0, vbal=0, agreed=True)
        self.instances[iid] = inst
        self._register(iid, value, seq)
        self._persist(iid)
        self.pending[iid] = [(c.client_id, c.request_id, at) for c, at in commands]
        self.coords[iid] = Coordination(phase="preaccept", ballot=0, command=value, seq=seq, deps=deps,
                                        sent_s=now, started_s=now)
        message = PreAccept(ballot=0, replica=iid[0], instance=iid[1], command=value, seq=seq, deps=deps)
        out.extend(Send(dst=p, message=message, size_bytes=_size(value, self.num_nodes)) for p in self.peers)
        if self.num_nodes == 1:
            self._commit(iid, value, seq, deps, out, now)

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []

    # ============================================================================================= attributes
    def _attributes(self, command: Value, iid: Iid, seq: int,
                    deps: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """Merge what this replica knows of commands interfering with ``command`` (on any of its keys) into
        (seq, deps)."""
        keys = _keys(command)
        if not keys:
            return seq, deps
        merged = list(deps)
        for key in keys:
            known = self.conf.get(key)
            if known is None:
                seq = max(seq, 1)
                continue
            own, before = iid[0], merged[iid[0]] if iid[0] < len(merged) else None
            merged = list(map(max, merged, known))  # in C; the instance itself is no dependency of its own:
            if before is not None and known[own] == iid[1]:
                merged[own] = before  # its own slot keeps what it had
            seq = max(seq, 1 + self.key_seq.get(key, 0))
        return seq, tuple(merged)

    def _register(self, iid: Iid, command: Value, seq: int) -> None:
        for key in _keys(command):
            known = self.conf.get(key)
            if known is None:
                known = self.conf[key] = [0] * self.num_nodes
            if iid[1] > known[iid[0]]:
                known[iid[0]] = iid[1]
            if seq > self.key_seq.get(key, 0):
                self.key_seq[key] = seq
            self._key_instances.setdefault(key, set()).add(iid)

    # ================================================================================================ phase 1
    def _on_preaccept(self, src: NodeId, m: PreAccept, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        if inst is not None and inst.status == COMMITTED:
            return [self._commit_message(src, iid, inst)]
        if inst is not None and m.ballot < inst.bal:
            return [Send(dst=src, message=PreAcceptReply(ballot=m.ballot, replica=m.replica, instance=m.instance,
                                                         ok=False, promised=inst.bal), size_bytes=HEADER_BYTES)]
        if inst is not None and inst.status >= PREACCEPTED and inst.vbal == m.ballot:  # a duplicate
            seq, deps = inst.seq, inst.deps
        else:
            seq, deps = self._attributes(m.command, iid, m.seq, m.deps)
            inst = inst or Instance()
            self.instances[iid] = inst
            inst.status, inst.command, inst.seq, inst.deps = PREACCEPTED, m.command, seq, deps
            inst.bal = inst.vbal = m.ballot
            inst.agreed = m.ballot == 0 and (seq, deps) == (m.seq, m.deps)
            self._register(iid, m.command, seq)
            self._persist(iid)
            self._drop_coordination(iid, m.ballot)
        reply = PreAcceptReply(ballot=m.ballot, replica=m.replica, instance=m.instance, ok=True, promised=inst.bal,
                               seq=seq, deps=deps, changed=(seq, deps) != (m.seq, m.deps))
        return self._emit([Send(dst=src, message=reply, size_bytes=HEADER_BYTES + 8 * self.num_nodes)])

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
        seq, deps = coord.seq, list(coord.deps)
        for r in replies.values():
            seq = max(seq, r.seq)
            deps = [max(a, b) for a, b in zip(deps, r.deps)]
        self._start_accept(iid, coord.ballot, coord.command, seq, tuple(deps), out, now)

    # ================================================================================================ phase 2
    def _coordinate(self, iid: Iid, phase: str, ballot: int, command: Value, seq: int, deps: tuple[int, ...],
                    out: Effects, now: float) -> None:
        """Vote for (command, seq, deps) at ``ballot`` here and run ``phase`` ("accept" or "preaccept") for it."""
        inst = self.instances.setdefault(iid, Instance())
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
        out.extend(Send(dst=p, message=message, size_bytes=_size(command, self.num_nodes)) for p in self.peers)

    def _start_accept(self, iid: Iid, ballot: int, command: Value, seq: int, deps: tuple[int, ...],
                      out: Effects, now: float) -> None:
        self._coordinate(iid, "accept", ballot, command, seq, deps, out, now)
        if self.f == 0:
            self.slow_commits += 1
            self._commit(iid, command, seq, deps, out, now)

    def _on_accept(self, src: NodeId, m: Accept, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        if inst is not None and inst.status == COMMITTED:
            return [self._commit_message(src, iid, inst)]
        if inst is not None and m.ballot < inst.bal:
            return [Send(dst=src, message=AcceptReply(ballot=m.ballot, replica=m.replica, instance=m.instance,
                                                      ok=False, promised=inst.bal), size_bytes=HEADER_BYTES)]
        inst = inst or Instance()
        self.instances[iid] = inst
        command = _decoded(m.command)
        inst.status, inst.command, inst.seq, inst.deps = ACCEPTED, command, m.seq, m.deps
        inst.bal = inst.vbal = m.ballot
        inst.agreed = False
        self._register(iid, command, m.seq)
        self._persist(iid)
        self._drop_coordination(iid, m.ballot)
        reply = AcceptReply(ballot=m.ballot, replica=m.replica, instance=m.instance, ok=True, promised=inst.bal)
        return self._emit([Send(dst=src, message=reply, size_bytes=HEADER_BYTES)])

    def _on_accept_reply(self, src: NodeId, m: AcceptReply, now: float) -> Effects:
        iid = (m.replica, m.instance)
        coord = self._reply_to(iid, "accept", src, m)
        if coord is None:
            return []
        out: Effects = []
        if len(coord.replies) >= self.f:
            self.slow_commits += 1
            self._commit(iid, coord.command, coord.seq, coord.deps, out, now)
        return self._emit(out)

    # ================================================================================================= commit
    def _commit(self, iid: Iid, command: Value, seq: int, deps: tuple[int, ...], out: Effects,
                now: float) -> None:
        """This replica decided ``iid`` (as its coordinator): write the commit with a durability notice; the commit
        takes effect — Commit messages, execution, the monitors' view — only once the write has landed
        (:meth:`on_persisted`), so a decision a crash erases was never acted upon."""
        self.coords.pop(iid, None)
        if not self._commit_local(iid, command, seq, deps, now, mark=False):
            return
        self._unmarked.add(iid)
        self._notify.append(iid)

    def on_persisted(self, token: Any, now: float) -> Effects:
        if not (isinstance(token, tuple) and len(token) == 2 and token[0] == "commit"):
            return []
        out: Effects = []
        for q, i in token[1]:
            iid = (q, i)
            if iid not in self._unmarked:
                continue
            self._unmarked.discard(iid)
            self._mark_committed(iid, now)
            inst = self.instances[iid]
            out.extend(self._commit_message(p, iid, inst) for p in self.peers)
            self._execute([iid, *self._blocked.pop(iid, ())], out, now)
        return self._emit(out)

    def _commit_local(self, iid: Iid, command: Value, seq: int, deps: tuple[int, ...], now: float,
                      *, mark: bool = True) -> bool:
        inst = self.instances.setdefault(iid, Instance())
        if inst.status == COMMITTED:
            return False
        inst.status, inst.command, inst.seq, inst.deps = COMMITTED, command, seq, deps
        self._register(iid, command, seq)
        self._persist(iid)
        if mark:
            self._mark_committed(iid, now)
        return True

    def _mark_committed(self, iid: Iid, now: float) -> None:
        inst = self.instances[iid]
        self.commit_log.append((iid, (inst.command, inst.seq, inst.deps)))
        q, i = iid
        prefix = self.committed_prefix[q]
        while True:
            nxt = self.instances.get((q, prefix + 1))
            if nxt is None or nxt.status != COMMITTED or (q, prefix + 1) in self._unmarked:
                break
            prefix += 1
        self.committed_prefix[q] = prefix
        for key in _keys(inst.command):
            lists = self._unexec.get(key)
            if lists is None:
                lists = self._unexec[key] = [[] for _ in range(self.num_nodes)]
            bisect.insort(lists[q], i)
        self._missing.pop(iid, None)
        if iid in self.pending:
            self._committed_at[iid] = now

    def _commit_message(self, dst: int, iid: Iid, inst: Instance) -> Send:
        message = Commit(replica=iid[0], instance=iid[1], command=inst.command or NOOP, seq=inst.seq, deps=inst.deps)
        return Send(dst=dst, message=message, size_bytes=_size(inst.command, self.num_nodes))

    def _on_commit(self, src: NodeId, m: Commit, now: float) -> Effects:
        iid = (m.replica, m.instance)
        command = _decoded(m.command)
        out: Effects = []
        self.coords.pop(iid, None)
        if self._commit_local(iid, command, m.seq, m.deps, now):
            self._execute([iid, *self._blocked.pop(iid, ())], out, now)
        return self._emit(out)

    def _on_fetch(self, src: NodeId, m: Fetch, now: float) -> Effects:
        out: Effects = []
        for i in range(m.first, m.last + 1):
            inst = self.instances.get((m.replica, i))
            if inst is not None and inst.status == COMMITTED:
                out.append(self._commit_message(src, (m.replica, i), inst))
        return out

    # =============================================================================================== recovery
    def _reported_ballot(self, inst: Instance) -> int:
        """The ballot a PrepareReply says the reported attributes were voted at: the last vote's (Sutra 2020)."""
        return inst.vbal

    def _start_recovery(self, iid: Iid, now: float, out: Effects) -> None:
        inst = self.instances.setdefault(iid, Instance())
        n = self.num_nodes
        ballot = (max(self._max_ballot, inst.bal) // n + 1) * n + self.node_id
        self._max_ballot = ballot
        self.recoveries += 1
        coord = Coordination(phase="prepare", ballot=ballot, sent_s=now, started_s=now)
        self.coords[iid] = coord
        coord.replies[self.node_id] = self._prepare_reply(iid, inst, ballot)
        self._persist(iid)
        out.append(Annotate(name="recover-instance", attrs={"replica": iid[0], "instance": iid[1], "ballot": ballot}))
        message = Prepare(ballot=ballot, replica=iid[0], instance=iid[1])
        out.extend(Send(dst=p, message=message, size_bytes=HEADER_BYTES) for p in self.peers)

    def _prepare_reply(self, iid: Iid, inst: Instance, ballot: int) -> PrepareReply:
        """Promise ``ballot`` for ``iid`` (the caller persists) and report what this replica holds."""
        reported = self._reported_ballot(inst)
        inst.bal = max(inst.bal, ballot)
        return PrepareReply(ballot=ballot, replica=iid[0], instance=iid[1], ok=True, promised=inst.bal,
                            status=inst.status, command=inst.command, seq=inst.seq, deps=inst.deps,
                            vballot=reported, agreed=inst.agreed)

    def _on_prepare(self, src: NodeId, m: Prepare, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        self._max_ballot = max(self._max_ballot, m.ballot)
        if inst is not None and inst.status != COMMITTED and m.ballot < inst.bal:
            return [Send(dst=src, message=PrepareReply(ballot=m.ballot, replica=m.replica, instance=m.instance,
                                                       ok=False, promised=inst.bal), size_bytes=HEADER_BYTES)]
        inst = inst or Instance()
        self.instances[iid] = inst
        reply = self._prepare_reply(iid, inst, m.ballot)
        if inst.status != COMMITTED:
            self._persist(iid)
            self._drop_coordination(iid, m.ballot)
        return self._emit([Send(dst=src, message=reply, size_bytes=_size(inst.command, self.num_nodes))])

    def _on_prepare_reply(self, src: NodeId, m: PrepareReply, now: float) -> Effects:
        iid = (m.replica, m.instance)
        coord = self._reply_to(iid, "prepare", src, m)
        if coord is None:
            return []
        if len(coord.replies) < self.f + 1:
            return []
        out: Effects = []
        self._decide_recovery(iid, coord, out, now)
        return self._emit(out)

    def _decide_recovery(self, iid: Iid, coord: Coordination, out: Effects, now: float) -> None:
        """Figure 3 with Sutra's fix: the accepted value of the highest vote ballot wins."""
        replies = coord.replies
        ballot = coord.ballot
        for r in replies.values():
            if r.status == COMMITTED:
                self._commit(iid, r.command, r.seq, r.deps, out, now)
                return
        accepted = [r for _, r in sorted(replies.items()) if r.status == ACCEPTED]
        if accepted:
            best = max(accepted, key=lambda r: r.vballot)  # first of the highest, in replica order
            self._start_accept(iid, ballot, best.command, best.seq, best.deps, out, now)
            return
        leader = iid[0]
        pre = [(node, r) for node, r in sorted(replies.items()) if r.status == PREACCEPTED]
        agreed = [node for node, r in pre if r.agreed and r.vballot == 0 and node != leader]
        if leader not in replies and agreed and len(agreed) >= self.recovery_agreed:
            self._recover_agreed(iid, coord, agreed, replies[agreed[0]], out, now)
            return
        if pre:
            best = max((r for _, r in pre), key=lambda r: r.vballot)
            self._restart_phase1(iid, ballot, _decoded(best.command), best.seq, best.deps, out, now)
            return
        self._start_accept(iid, ballot, None, 0, (0,) * self.num_nodes, out, now)

    def _restart_phase1(self, iid: Iid, ballot: int, command: Value, seq: int, deps: tuple[int, ...], out: Effects,
                        now: float) -> None:
        """Recovery found no evidence of a fast commit: phase 1 again for ``command`` at ``ballot`` (never a fast
        path), with the attributes merged with what this replica knows."""
        seq, deps = self._attributes(command, iid, seq, deps)
        self._coordinate(iid, "preaccept", ballot, command, seq, deps, out, now)

    # ======================================================================== recovery of the optimized quorum
    def _recover_agreed(self, iid: Iid, coord: Coordination, witnesses: list[int], value: PrepareReply,
                        out: Effects, now: float) -> None:
        """The prepare replies hold ``witnesses`` (≥ ⌊(F+1)/2⌋ replicas, not the leader, that pre-accepted the
        leader's attributes unchanged at ballot 0): the fast path may have committed those attributes. With F
        witnesses they are safe to accept as they are (with the leader, a majority knew the command with them).
        With fewer (the optimized quorum at N ≥ 5), TryPreAccept first establishes that."""
        command = _decoded(value.command)
        if len(witnesses) >= self.f:
            self._start_accept(iid, coord.ballot, command, value.seq, value.deps, out, now)
            return
        self._start_try_preaccept(iid, coord, witnesses, command, value.seq, value.deps, out, now)

    def _start_try_preaccept(self, iid: Iid, prepare: Coordination, witnesses: list[int], command: Value, seq: int,
                             deps: tuple[int, ...], out: Effects, now: float) -> None:
        """TryPreAccept (technical report CMU-PDL-13-111; efficient/epaxos ``bcastTryPreAccept``): ask every replica
        that is not a witness to pre-accept the witnessed attributes at our ballot. Decided in :meth:`_decide_tpa`."""
        ballot = prepare.ballot
        self.try_preaccepts += 1
        coord = Coordination(phase="trypreaccept", ballot=ballot, command=command, seq=seq, deps=deps, sent_s=now,
                             started_s=now, witnesses=set(witnesses),
                             others={node for node in prepare.replies if node not in witnesses})
        coord.replies = {node: prepare.replies[node] for node in witnesses}
        self.coords[iid] = coord
        out.append(Annotate(name="try-pre-accept", attrs={"replica": iid[0], "instance": iid[1], "ballot": ballot,
                                                          "witnesses": len(witnesses)}))
        if self.node_id not in coord.witnesses:
            coord.replies[self.node_id] = self._try_preaccept_here(iid, ballot, command, seq, deps)
            self._persist(iid)
        if self._decide_tpa(iid, coord, out, now):
            return
        message = TryPreAccept(ballot=ballot, replica=iid[0], instance=iid[1], command=command or NOOP, seq=seq,
                               deps=deps)
        out.extend(Send(dst=p, message=message, size_bytes=_size(command, self.num_nodes))
                   for p in self.peers if p not in coord.replies)

    def _tpa_conflict(self, iid: Iid, command: Value, deps: tuple[int, ...]) -> tuple[Iid, bool] | None:
        """An instance this replica knows that interferes with ``command``, is not covered by ``deps`` and does not
        depend on ``iid`` — (it, committed?), a committed one first; None when there is none. Such an instance
        means the attributes cannot have been committed on the fast path unless it is itself never committed with
        what this replica holds (SOSP'13 §4.5: two interfering committed commands, one depends on the other)."""
        keys = _keys(command)
        found: tuple[Iid, bool] | None = None
        seen: set[Iid] = set()
        leader, number = iid
        for key in keys:
            for other in sorted(self._key_instances.get(key, ())):
                q, j = other
                if other == iid or other in seen or j <= deps[q]:
                    continue
                seen.add(other)
                inst = self.instances.get(other)
                if inst is None or inst.status == NONE or key not in _keys(inst.command):
                    continue
                if inst.deps and inst.deps[leader] >= number:
                    continue
                if inst.status == COMMITTED:
                    return other, True
                if found is None:
                    found = (other, False)
        return found

    def _try_preaccept_here(self, iid: Iid, ballot: int, command: Value, seq: int,
                            deps: tuple[int, ...]) -> TryPreAcceptReply:
        """This replica's answer to TryPreAccept at ``ballot`` (the caller persists): promise the ballot, then say
        whether it is a witness, pre-accepts the attributes, or knows a conflicting command."""
        inst = self.instances.setdefault(iid, Instance())
        base = {"ballot": ballot, "replica": iid[0], "instance": iid[1]}
        if ballot < inst.bal:
            return TryPreAcceptReply(**base, ok=False, promised=inst.bal)
        inst.bal = ballot
        self._max_ballot = max(self._max_ballot, ballot)
        if inst.status >= ACCEPTED:  # neither evidence: it voted at a ballot above 0 since
            return TryPreAcceptReply(**base, ok=True, promised=ballot)
        if inst.status == PREACCEPTED and inst.agreed and inst.vbal == 0 and (inst.seq, inst.deps) == (seq, deps):
            return TryPreAcceptReply(**base, ok=True, promised=ballot, witness=True)
        conflict = self._tpa_conflict(iid, command, deps)
        if conflict is not None:
            return TryPreAcceptReply(**base, ok=True, promised=ballot, conflict=conflict[0],
                                     conflict_committed=conflict[1])
        inst.status, inst.command, inst.seq, inst.deps = PREACCEPTED, command, seq, deps
        inst.vbal = ballot
        inst.agreed = False
        self._register(iid, command, seq)
        self._drop_coordination(iid, ballot)
        return TryPreAcceptReply(**base, ok=True, promised=ballot, preaccepted=True)

    def _on_try_preaccept(self, src: NodeId, m: TryPreAccept, now: float) -> Effects:
        iid = (m.replica, m.instance)
        inst = self.instances.get(iid)
        if inst is not None and inst.status == COMMITTED:
            return [] if iid in self._unmarked else [self._commit_message(src, iid, inst)]
        reply = self._try_preaccept_here(iid, m.ballot, _decoded(m.command), m.seq, m.deps)
        if reply.ok:
            self._persist(iid)
        return self._emit([Send(dst=src, message=reply, size_bytes=HEADER_BYTES)])

    def _on_try_preaccept_reply(self, src: NodeId, m: TryPreAcceptReply, now: float) -> Effects:
        iid = (m.replica, m.instance)
        coord = self._reply_to(iid, "trypreaccept", src, m)
        if coord is None:
            return []
        out: Effects = []
        self._decide_tpa(iid, coord, out, now)
        return self._emit(out)

    def _decide_tpa(self, iid: Iid, coord: Coordination, out: Effects, now: float, *, timed_out: bool = False) -> bool:
        """TryPreAccept's outcome, once it is known (True: decided; the coordination is over):

        * witnesses + replicas that pre-accepted reach F: with the command leader they are a majority that holds the
          attributes and knows no conflicting command, so any interfering command that commits later depends on
          this one or is among its dependencies — Paxos-Accept them (safe whether or not the fast path committed);
        * the leader answered (it did not commit, and has promised our ballot: it never will on the fast path), a
          conflicting command is committed (the fast path cannot have committed these attributes), or more than
          N − fast quorum replicas are known not to be witnesses (no fast quorum can have held the attributes):
          phase 1 again;
        * otherwise, once every replica answered or the wait ran out: defer — the instance stays blocked, the
          conflicting commands are recovered or commit, and a later recovery (higher ballot) decides
          (efficient/epaxos defers the same way to avoid livelock)."""
        leader = iid[0]
        ayes, noes, conflicts = set(coord.witnesses), set(coord.others), []
        restart = False
        for node, r in coord.replies.items():
            if type(r) is not TryPreAcceptReply:
                continue
            if node == leader:
                restart = True
            elif r.witness:
                ayes.add(node)
            elif r.preaccepted:
                ayes.add(node)
                noes.add(node)
            elif r.conflict:
                noes.add(node)
                restart = restart or r.conflict_committed
                conflicts.append((r.conflict[0], r.conflict[1]))
        if not restart and len(ayes) >= self.f:
            self.try_preaccept_outcomes["accept"] += 1
            self._start_accept(iid, coord.ballot, coord.command, coord.seq, coord.deps, out, now)
            return True
        if restart or len(noes) > self.num_nodes - self.fast_quorum:
            self.try_preaccept_outcomes["restart"] += 1
            self._restart_phase1(iid, coord.ballot, coord.command, coord.seq, coord.deps, out, now)
            return True
        if timed_out or sum(1 for node in coord.replies if node != leader) >= self.num_nodes - 1:
            del self.coords[iid]
            self.try_preaccept_outcomes["defer"] += 1
            out.append(Annotate(name="recovery-deferred", attrs={"replica": iid[0], "instance": iid[1],
                                                                 "conflicts": len(conflicts)}))
            lo, hi = self.config.election_timeout_s_min, self.config.election_timeout_s_max
            for other in conflicts:
                if other not in self._missing and self.instances.get(other, Instance()).status != COMMITTED:
                    self._missing[other] = (now, float(self.rng.uniform(lo, hi)))
            return True
        return False

    def _drop_coordination(self, iid: Iid, ballot: int) -> None:
        """A higher ballot for ``iid`` reached us: a phase we ran at a lower one is over."""
        coord = self.coords.get(iid)
        if coord is not None and coord.ballot < ballot:
            del self.coords[iid]

    # ============================================================================================== execution
    def _execute(self, candidates: list[Iid], out: Effects, now: float) -> None:
        work = list(candidates)
        while work:
            iid = work.pop()
            inst = self.instances.get(iid)
            if inst is None or inst.status != COMMITTED or inst.executed:
                continue
            missing = self._run_scc(iid, out, now)
            if missing is not None:
                self._blocked.setdefault(missing, set()).add(iid)
                if missing not in self._missing:
                    lo, hi = self.config.election_timeout_s_min, self.config.election_timeout_s_max
                    self._missing[missing] = (now, float(self.rng.uniform(lo, hi)))

    def _edges(self, iid: Iid) -> tuple[list[Iid], Iid | None]:
        """Committed, unexecuted instances ``iid`` depends on; or the first instance not committed here.

        In the order of replica, key, then instance number. Only the replicas with unexecuted instances on a key
        are visited (``compress`` skips the empty lists in C), and the committed-prefix test runs in C unless a
        dependency is missing: the cost follows the instances waiting, not the number of replicas."""
        inst = self.instances[iid]
        keys = _keys(inst.command)
        if not keys:
            return [], None
        deps, prefix = inst.deps, self.committed_prefix
        if not all(map(operator.le, deps, prefix)):  # prefix >= 0, so prefix < top means a positive top
            for q, top in enumerate(deps):
                if prefix[q] < top:
                    return [], (q, prefix[q] + 1)
        found: list[Iid] = []
        tables = [lists for lists in map(self._unexec.get, keys) if lists is not None]
        if len(tables) == 1:
            lists = tables[0]
            replicas: Any = compress(range(len(deps)), lists)
        else:
            replicas = sorted({q for lists in tables for q in compress(range(len(deps)), lists)})
        for q in replicas:
            top = deps[q]
            for lists in tables:
                numbers = lists[q]
                if numbers and numbers[0] <= top:
                    for i in numbers[: bisect.bisect_right(numbers, top)]:
                        if (q, i) != iid:
                            found.append((q, i))
        if len(keys) > 1:
            found = list(dict.fromkeys(found))
        return found, None

    def _run_scc(self, start: Iid, out: Effects, now: float) -> Iid | None:
        """Tarjan's SCC algorithm (iterative) from ``start``; execute every component, dependencies first.
        Returns the missing instance that blocks ``start`` (nothing is executed then), or None."""
        index: dict[Iid, int] = {}
        low: dict[Iid, int] = {}
        on_stack: set[Iid] = set()
        stack: list[Iid] = []
        components: list[list[Iid]] = []
        counter = 0
        edges0, missing = self._edges(start)
        if missing is not None:
            return missing
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work: list[tuple[Iid, list[Iid], int]] = [(start, edges0, 0)]
        while work:
            v, edges, k = work[-1]
            if k < len(edges):
                work[-1] = (v, edges, k + 1)
                w = edges[k]
                if w not in index:
                    w_edges, missing = self._edges(w)
                    if missing is not None:
                        return missing
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, w_edges, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                components.append(component)
        for component in components:
            component.sort(key=lambda x: (self.instances[x].seq, x[0], x[1]))
            for iid in component:
                self._apply(iid, out, now)
        return None

    def _apply(self, iid: Iid, out: Effects, now: float) -> None:
        inst = self.instances[iid]
        inst.executed = True
        for key in _keys(inst.command):
            numbers = self._unexec[key][iid[0]]
            del numbers[bisect.bisect_left(numbers, iid[1])]
            self.exec_log.append((key, iid))
        results: dict[tuple[Any, int], Result] = {}
        for command in _parts(inst.command):
            pair = (command.client_id, command.request_id)
            result = self.results.get(pair) if command.client_id is not None else None
            if result is None:
                result = self.kv.apply(None, command.request_id, command.op, command.key, command.value)
                if command.client_id is not None:
                    self.results[pair] = result
            results[pair] = result
        waiting = self.pending.pop(iid, None)
        if waiting is not None:
            committed = self._committed_at.pop(iid, now)
            for client_id, request_id, proposed in waiting:
                result = results.get((client_id, request_id))
                if result is not None:
                    self.latencies.append((committed - proposed, now - committed))
                    out.append(_reply(client_id, request_id, result))
                else:  # the instance was committed with something else (a recovery's no-op)
                    out.append(Reply(client_id=client_id, request_id=request_id, outcome=Outcome.INFO,
                                     error="superseded"))

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
            size = _size(coord.command, self.num_nodes) if inst is not None else HEADER_BYTES
            out.extend(Send(dst=p, message=message, size_bytes=size) for p in self.peers if p not in coord.replies)
        # commits we miss: first ask the peers, then recover the instance ourselves
        fetch: dict[int, int] = {}
        started = 0
        for iid, (first, timeout) in sorted(self._missing.items()):
            inst = self.instances.get(iid)
            if inst is not None and inst.status == COMMITTED:
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
        return self._emit(out)

    # ================================================================================================ helpers
    def _persist(self, iid: Iid) -> None:
        self._writes[f"{iid[0]}.{iid[1]}"] = self.instances[iid].plain()

    def _emit(self, out: Effects) -> Effects:
        """This call's instance writes, in one durable step, before everything else it returns."""
        if not self._writes:
            return out
        put, self._writes = self._writes, {}
        notify = None
        if self._notify:
            notify = ("commit", tuple(self._notify))
            self._notify = []
        return [PersistRecords(table=TABLE, put=put, size_bytes=32 + 48 * len(put), notify=notify)] + out

    def __repr__(self) -> str:
        return (f"EPaxosNode({self.node_id}, instances={len(self.instances)}, next={self.next_instance}, "
                f"coords={len(self.coords)})")


def _reply(client_id: int, request_id: int, result: Result) -> Reply:
    return Reply(client_id=client_id, request_id=request_id, outcome=result.outcome, value=result.value,
                 error=result.error)
