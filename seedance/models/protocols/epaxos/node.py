"""An EPaxos replica as a sans-I/O node (Moraru, Andersen & Kaminsky, "There Is More Consensus in Egalitarian
Parliaments", SOSP 2013; Figures 2 and 3 are the spec) with the recovery fix of Sutra ("On the correctness of
Egalitarian Paxos", IPL 2020, arXiv:1906.10917).

Rules this module keeps:

* Any replica leads the commands its clients send it, each in its own instance ``(replica, number)``.
* Phase 1 (PreAccept): the command leader computes attributes — ``seq`` above every interfering command it knows,
  ``deps[q]`` = the highest instance of replica q whose command interferes (same key; reads included) — and sends
  them to every peer. Each peer merges in what it knows and answers. Fast path: with ``fast quorum − 1`` replies
  (the fast quorum counts the leader) whose attributes are *unchanged*, the leader commits at once. The fast
  quorum is ``F + ⌊(F+1)/2⌋`` (N = 2F + 1; §4.3, "optimized EPaxos") where that equals 2F (N = 3), and 2F (the
  simplified EPaxos) for N ≥ 5: with the smaller optimized quorum, recovering a possibly fast-committed instance
  needs the paper's TryPreAccept step (a replica that pre-accepted the leader's attributes may be the only witness,
  while a conflicting command committed elsewhere without a dependency on it), which this node does not implement,
  so ``fast_quorum="optimized"`` is refused for N ≥ 5. Otherwise, with a majority, the slow path: the union of the
  attributes goes through Paxos-Accept at the instance's ballot, then commits.
* Ballots per instance: ballot 0 belongs to the command leader; a recovering replica uses ``round * n + id``. Each
  replica keeps, per instance, the ballot it **promised** (``bal``) apart from the ballot at which it last
  **voted** (``vbal``, set by a pre-accept or an accept) — the fix of Sutra 2020: with one variable a Prepare
  overwrites the ballot at which the attributes were accepted, and recovery can adopt a stale value.
* Explicit prepare (Figure 3, recovery): a replica that waits on an instance that does not commit (its execution
  is blocked on it for a randomised timeout) runs Prepare at a higher ballot and, from a majority of replies, (1)
  commits a committed value; else (2) runs Paxos-Accept with the accepted value of the **highest vbal**; else (3)
  if at least ``fast quorum − F`` replies (⌊(F+1)/2⌋, or F for 2F) pre-accepted the leader's unchanged attributes at
  ballot 0 and the leader did not answer, runs Paxos-Accept with those (the fast path may have committed them);
  else (4) if someone pre-accepted the command, restarts phase 1 with it at the new ballot (never a fast path);
  else (5) commits a no-op. Before that, a blocked replica asks its peers for commits it missed (``Fetch``).
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.errors import SpecError
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
from seedance.models.protocols.epaxos.messages import (
    HEADER_BYTES,
    Accept,
    AcceptReply,
    Commit,
    Fetch,
    PreAccept,
    PreAcceptReply,
    Prepare,
    PrepareReply,
)
from seedance.models.protocols.multipaxos.messages import Command

NONE, PREACCEPTED, ACCEPTED, COMMITTED = 0, 1, 2, 3
TICK = "tick"
TABLE = "inst"
NOOP = Command()

Iid = tuple[int, int]


@dataclass(slots=True)
class Instance:
    status: int = NONE
    command: Command | None = None
    seq: int = 0
    deps: tuple[int, ...] = ()
    bal: int = 0  # the highest ballot promised
    vbal: int = -1  # the ballot of the last pre-accept / accept vote (Sutra 2020)
    agreed: bool = False  # pre-accepted at ballot 0 with the leader's attributes unchanged
    executed: bool = False  # volatile

    def plain(self) -> list[Any]:
        return [self.status, None if self.command is None else self.command.to_plain(), self.seq, list(self.deps),
                self.bal, self.vbal, self.agreed]

    @classmethod
    def from_plain(cls, data: Any) -> Instance:
        status, command, seq, deps, bal, vbal, agreed = data
        return cls(status=int(status), command=None if command is None else Command.from_plain(command),
                   seq=int(seq), deps=tuple(int(d) for d in deps), bal=int(bal), vbal=int(vbal), agreed=bool(agreed))


@dataclass(slots=True)
class Coordination:
    """A phase this replica runs for one instance: as its command leader (ballot 0) or as a recoverer."""

    phase: str  # "preaccept" | "accept" | "prepare"
    ballot: int
    command: Command | None = None
    seq: int = 0
    deps: tuple[int, ...] = ()
    replies: dict[int, Any] = field(default_factory=dict)
    sent_s: float = 0.0
    started_s: float = 0.0


def _size(command: Command | None, n: int) -> int:
    return HEADER_BYTES + 8 * n + (command.size_bytes if command is not None else 0)


class EPaxosNode:
    """One EPaxos replica driving a :class:`~seedance.models.kv.KVStore`."""

    def __init__(self, node_id: NodeId, num_nodes: int, rng: np.random.Generator,
                 config: EPaxosConfig | Mapping[str, Any] | None = None) -> None:
        self.node_id = node_id
        self.num_nodes = n = num_nodes
        self.peers = tuple(p for p in range(n) if p != node_id)
        self.rng = rng
        self.config = config if isinstance(config, EPaxosConfig) else EPaxosConfig.from_mapping(config)
        self.f = f = (n - 1) // 2
        optimized, simple = f + (f + 1) // 2, 2 * f
        if self.config.fast_quorum == "optimized" and optimized != simple:
            raise SpecError("epaxos.fast_quorum", f"the optimized fast quorum ({optimized} of {n}) needs the "
                            "TryPreAccept step of recovery, which this node does not implement",
                            f"'simple' ({simple} of {n}) or 'auto'")
        if self.config.fast_quorum == "optimized" or (self.config.fast_quorum == "auto" and optimized == simple):
            self.fast_quorum, self.recovery_agreed = optimized, (f + 1) // 2
        else:
            self.fast_quorum, self.recovery_agreed = simple, f
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
        self.pending: dict[Iid, tuple[int, int, float]] = {}  # own instance -> (client, request, proposed at)
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
        return self._emit(out)

    def on_message(self, src: NodeId, m: Any, now: float) -> Effects:
        kind = type(m)
        if kind is PreAccept:
            return self._on_preaccept(src, m, now)
        if kind is PreAcceptReply:
            return self._on_preaccept_reply(src, m, now)
        if kind is Accept:
            return self._on_accept(src, m, now)
        if kind is AcceptReply:
            return self._on_accept_reply(src, m, now)
        if kind is Commit:
            return self._on_commit(m, now)
        if kind is Prepare:
            return self._on_prepare(src, m, now)
        if kind is PrepareReply:
            return self._on_prepare_reply(src, m, now)
        if kind is Fetch:
            return self._on_fetch(src, m, now)
        return []

    def on_timer(self, name: Any, now: float) -> Effects:
        if name == TICK:
            return self._on_tick(now)
        return []

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
        iid = (self.node_id, self.next_instance)
        self.next_instance += 1
        seq, deps = self._attributes(command, iid, 0, (0,) * self.num_nodes)
        inst = Instance(status=PREACCEPTED, command=command, seq=seq, deps=deps, bal=0, vbal=0, agreed=True)
        self.instances[iid] = inst
        self._register(iid, command, seq)
        self._persist(iid)
        self.pending[iid] = (request.client_id, request.request_id, now)
        self.coords[iid] = Coordination(phase="preaccept", ballot=0, command=command, seq=seq, deps=deps,
                                        sent_s=now, started_s=now)
        out: Effects = []
        message = PreAccept(ballot=0, replica=iid[0], instance=iid[1], command=command, seq=seq, deps=deps)
        out.extend(Send(dst=p, message=message, size_bytes=_size(command, self.num_nodes)) for p in self.peers)
        if self.num_nodes == 1:
            self._commit(iid, command, seq, deps, out, now)
        return self._emit(out)

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []

    # ============================================================================================= attributes
    def _attributes(self, command: Command | None, iid: Iid, seq: int,
                    deps: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """Merge what this replica knows of commands interfering with ``command`` into (seq, deps)."""
        if command is None or command.op is None:
            return seq, deps
        known = self.conf.get(command.key)
        if known is None:
            return max(seq, 1), deps
        merged = list(deps)
        for q, top in enumerate(known):
            if top > merged[q] and (q, top) != iid:
                merged[q] = top
        return max(seq, 1 + self.key_seq.get(command.key, 0)), tuple(merged)

    def _register(self, iid: Iid, command: Command | None, seq: int) -> None:
        if command is None or command.op is None:
            return
        known = self.conf.get(command.key)
        if known is None:
            known = self.conf[command.key] = [0] * self.num_nodes
        if iid[1] > known[iid[0]]:
            known[iid[0]] = iid[1]
        if seq > self.key_seq.get(command.key, 0):
            self.key_seq[command.key] = seq

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
    def _start_accept(self, iid: Iid, ballot: int, command: Command | None, seq: int, deps: tuple[int, ...],
                      out: Effects, now: float) -> None:
        inst = self.instances.setdefault(iid, Instance())
        inst.status, inst.command, inst.seq, inst.deps = ACCEPTED, command, seq, deps
        inst.bal = max(inst.bal, ballot)
        inst.vbal = ballot
        inst.agreed = False
        self._register(iid, command, seq)
        self._persist(iid)
        self.coords[iid] = Coordination(phase="accept", ballot=ballot, command=command, seq=seq, deps=deps,
                                        sent_s=now, started_s=now)
        message = Accept(ballot=ballot, replica=iid[0], instance=iid[1], command=command or NOOP, seq=seq, deps=deps)
        out.extend(Send(dst=p, message=message, size_bytes=_size(command, self.num_nodes)) for p in self.peers)
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
        command = None if m.command.op is None and m.command.client_id is None else m.command
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
    def _commit(self, iid: Iid, command: Command | None, seq: int, deps: tuple[int, ...], out: Effects,
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

    def _commit_local(self, iid: Iid, command: Command | None, seq: int, deps: tuple[int, ...], now: float,
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
        if inst.command is not None and inst.command.op is not None:
            lists = self._unexec.get(inst.command.key)
            if lists is None:
                lists = self._unexec[inst.command.key] = [[] for _ in range(self.num_nodes)]
            bisect.insort(lists[q], i)
        self._missing.pop(iid, None)
        if iid in self.pending:
            self._committed_at[iid] = now

    def _commit_message(self, dst: int, iid: Iid, inst: Instance) -> Send:
        message = Commit(replica=iid[0], instance=iid[1], command=inst.command or NOOP, seq=inst.seq, deps=inst.deps)
        return Send(dst=dst, message=message, size_bytes=_size(inst.command, self.num_nodes))

    def _on_commit(self, m: Commit, now: float) -> Effects:
        iid = (m.replica, m.instance)
        command = None if m.command.op is None and m.command.client_id is None else m.command
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
        agreed = [r for node, r in pre if r.agreed and r.vballot == 0 and node != leader]
        if leader not in replies and agreed and len(agreed) >= self.recovery_agreed:
            self._start_accept(iid, ballot, agreed[0].command, agreed[0].seq, agreed[0].deps, out, now)
            return
        if pre:
            best = max((r for _, r in pre), key=lambda r: r.vballot)
            command = best.command
            seq, deps = self._attributes(command, iid, best.seq, best.deps)
            inst = self.instances.setdefault(iid, Instance())
            inst.status, inst.command, inst.seq, inst.deps = PREACCEPTED, command, seq, deps
            inst.bal = max(inst.bal, ballot)
            inst.vbal = ballot
            inst.agreed = False
            self._register(iid, command, seq)
            self._persist(iid)
            self.coords[iid] = Coordination(phase="preaccept", ballot=ballot, command=command, seq=seq, deps=deps,
                                            sent_s=now, started_s=now)
            message = PreAccept(ballot=ballot, replica=iid[0], instance=iid[1], command=command, seq=seq, deps=deps)
            out.extend(Send(dst=p, message=message, size_bytes=_size(command, self.num_nodes)) for p in self.peers)
            return
        self._start_accept(iid, ballot, None, 0, (0,) * self.num_nodes, out, now)

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
        """Committed, unexecuted instances ``iid`` depends on; or the first instance not committed here."""
        inst = self.instances[iid]
        command = inst.command
        if command is None or command.op is None:
            return [], None
        lists = self._unexec.get(command.key)
        found: list[Iid] = []
        for q, top in enumerate(inst.deps):
            if top <= 0:
                continue
            if self.committed_prefix[q] < top:
                return [], (q, self.committed_prefix[q] + 1)
            if lists is not None:
                numbers = lists[q]
                for i in numbers[: bisect.bisect_right(numbers, top)]:
                    if (q, i) != iid:
                        found.append((q, i))
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
        command = inst.command
        result = None
        if command is not None and command.op is not None:
            lists = self._unexec[command.key]
            numbers = lists[iid[0]]
            del numbers[bisect.bisect_left(numbers, iid[1])]
            self.exec_log.append((command.key, iid))
            pair = (command.client_id, command.request_id)
            result = self.results.get(pair) if command.client_id is not None else None
            if result is None:
                result = self.kv.apply(None, command.request_id, command.op, command.key, command.value)
                if command.client_id is not None:
                    self.results[pair] = result
        waiting = self.pending.pop(iid, None)
        if waiting is not None:
            client_id, request_id, proposed = waiting
            committed = self._committed_at.pop(iid, now)
            if result is not None and command.client_id == client_id and command.request_id == request_id:
                self.latencies.append((committed - proposed, now - committed))
                out.append(_reply(client_id, request_id, result))
            else:
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
            coord.sent_s = now
            inst = self.instances.get(iid)
            if coord.phase == "prepare":
                message: Any = Prepare(ballot=coord.ballot, replica=iid[0], instance=iid[1])
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
