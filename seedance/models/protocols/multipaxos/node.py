"""A Multi-Paxos replica (proposer, acceptor and learner in one node) as a sans-I/O node.

References: Lamport, "Paxos Made Simple" (2001) §2–§3 for the two phases and the multi-instance leader; van Renesse
& Altinbuken, "Paxos Made Moderately Complex" (ACM CSUR 2015) for the leader that runs phase 1 once for all slots
and then pipelines phase 2 ("scouts" and "commanders").

Rules this module keeps:

* Ballots are ``round * n + node_id``: totally ordered, unique per leader. An acceptor's ``promised`` ballot only
  grows; it is durable (``Persist`` key ``promised``) before any Promise or Accepted that depends on it leaves.
* Phase 1, once per leadership: a replica whose leader has been silent for a randomised election timeout picks a
  ballot above every one it has seen and sends ``Prepare(ballot, low)`` where ``low`` is its first unexecuted slot.
  An acceptor with ``promised <= ballot`` promises it and returns every value it accepted in slots ≥ low. With a
  majority of promises (its own included) the replica leads: for every slot from ``low`` to the highest reported,
  it proposes the value accepted at the **highest ballot** among the promises (Paxos Made Simple §2.2, P2c), or a
  no-op for a slot nobody reported (§3: gaps are filled with no-ops).
* Phase 2, pipelined: a leader gives each client command the next slot and sends ``Accept`` without waiting for
  earlier slots; ``max_batch`` > 1 packs up to that many slots into one Accept (batching; 1 = off, the default).
  An acceptor accepts only when ``ballot >= promised`` (an accept below the promise is refused with the higher
  ballot, which deposes the leader) and makes the accepted ``(ballot, command)`` durable in the ``acc``
  ``PersistRecords`` table (one record per slot) before its ``Accepted`` leaves. The leader writes its own accept in
  parallel with sending it and counts its own vote only when the runtime's durability notice arrives
  (``notify=("acc", ballot, first, last)``). A slot is chosen when a majority accepted it at the leader's ballot.
* Learning: the leader executes chosen slots in order and answers the client of each of its own slots. ``Accept``
  (a heartbeat when empty) carries the leader's ``commit`` (every slot ≤ commit is chosen); a replica that accepted
  slot s at that very ballot knows s's chosen value (one value per slot per ballot). A replica that lags (its
  executed prefix, reported in every Accepted, is below the commit) is sent the chosen values (``Decide``).
* Retransmission: every heartbeat the leader re-sends the slots not yet chosen to the acceptors that have not
  accepted them; a candidate re-sends Prepare to the acceptors that have not answered.
* Clients: a non-leader answers FAIL "not-leader" with the leader it believes in; reads go through the log like
  writes (linearizable without leases); the kv state machine deduplicates (client, request) pairs. A leader that is
  deposed answers its pending commands INFO "leadership-lost" (they may still be chosen under the next leader).
* Recovery: ``promised``, the snapshot and the ``acc`` table survive a crash; the kv store and the executed prefix
  restart from the snapshot and are rebuilt from the chosen values the leader sends.
* Compaction (:mod:`.snapshots`, where the safety argument is): a snapshot every ``snapshot_slots`` executed slots
  drops the per-slot state below it; a lagging replica gets ``InstallSnapshot``; a Promise carries an acceptor's
  snapshot to a candidate whose ``low`` it covers, and the new leader installs it instead of proposing those slots.
"""

from __future__ import annotations

import enum
from operator import attrgetter
from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.kv import KVStore, Result, validate
from seedance.models.protocols.contract import (
    Annotate, ClientRequest, CollectiveDone, DurableState, Effects, NodeId, Operation, Outcome, Persist, PersistRecords,
    Reply, Send, SetTimer,
)
from seedance.models.protocols.multipaxos.config import MultiPaxosConfig
from seedance.models.protocols.dispatch import Dispatching
from seedance.models.protocols.multipaxos.messages import (
    HEADER_BYTES, NOOP, Accept, Accepted, Command, Decide, InstallSnapshot, Prepare, Promise, SlotValue, state_bytes,
    values_bytes,
)
from seedance.models.protocols.multipaxos.snapshots import ACC_TABLE, Snapshots

ELECTION = "election"
HEARTBEAT = "heartbeat"
FLUSH = "flush"
RETRY = "prepare-retry"
PROMISED_KEY = "promised"
ACC_NOTICE = "acc"


class Role(str, enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


# enum members as globals: in Python 3.11 reading an Enum class's attribute goes through the Enum metaclass's
# __getattr__ hook, several times the cost of reading a global
FOLLOWER, CANDIDATE, LEADER = Role.FOLLOWER, Role.CANDIDATE, Role.LEADER
_FAIL, _INFO = Outcome.FAIL, Outcome.INFO


def majority(num_nodes: int) -> int:
    return num_nodes // 2 + 1


class MultiPaxosNode(Snapshots, Dispatching):
    """One Multi-Paxos replica driving a :class:`~seedance.models.kv.KVStore`."""

    # inputs by type / name (seedance.models.protocols.dispatch): on_message and on_timer
    MESSAGE_HANDLERS = {Accept: "_on_accept", Accepted: "_on_accepted", Prepare: "_on_prepare",
                        Promise: "_on_promise", Decide: "_on_decide", InstallSnapshot: "_on_install_snapshot"}
    TIMER_HANDLERS = {HEARTBEAT: "_on_heartbeat", ELECTION: "_on_election_timer", FLUSH: "_on_flush",
                      RETRY: "_on_retry"}
    # Slots, not an instance dict: with more than 30 attributes CPython 3.11 gives an instance a real dict, and no
    # method call on it is specialised any more (a subclass without slots, such as a test's mutant, still works)
    __slots__ = ("_acks", "_commit", "_compactions", "_durable_writes", "_last_heard", "_learned_cut", "_low",
                 "_next_slot", "_pending", "_promises", "_proposals", "_snapshot", "_snapshot_sent", "_timeout_s",
                 "_unsent", "accepted", "ballot", "config", "decided", "decided_base", "decided_log", "executed", "kv",
                 "leader_id", "node_id", "num_nodes", "peers", "promised", "quorum", "rng", "role", "snapshot_index",
                 "violations")

    def __init__(self, node_id: NodeId, num_nodes: int, rng: np.random.Generator,
                 config: MultiPaxosConfig | Mapping[str, Any] | None = None) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.peers = tuple(p for p in range(num_nodes) if p != node_id)
        self.rng = rng
        self.config = config if isinstance(config, MultiPaxosConfig) else MultiPaxosConfig.from_mapping(config)
        self.quorum = majority(num_nodes)
        # acceptor state (durable)
        self.promised = 0
        self.accepted: dict[int, tuple[int, Command]] = {}  # slot -> (ballot, command)
        # learner state (volatile)
        self.decided: dict[int, Command] = {}
        self.decided_log: list[tuple[int, Command]] = []  # (slot, command) in the order learned (for monitors)
        self.decided_base = self._learned_cut = 0  # decided_log's dropped front (.snapshots)
        self.executed = 0
        self.kv = KVStore()
        self.snapshot_index = 0  # compaction (.snapshots): the slots up to it are in the snapshot
        self._snapshot: list[Any] | None = None
        self._compactions: list[Any] = []
        self._snapshot_sent: dict[NodeId, tuple[int, float]] = {}
        # proposer state
        self.role = FOLLOWER
        self.ballot = 0  # the ballot this node leads or stands for
        self.leader_id: NodeId | None = None
        self.violations: list[str] = []
        self._last_heard = 0.0
        self._timeout_s = 0.0
        self._promises: dict[NodeId, tuple[SlotValue, ...]] = {}
        self._low = 1
        self._proposals: dict[int, Command] = {}  # slot -> command proposed at self.ballot, not yet chosen
        self._acks: dict[int, set[NodeId]] = {}
        self._pending: dict[int, tuple[int, int]] = {}  # slot -> (client_id, request_id)
        self._next_slot = 1
        self._commit = 0  # leader: every slot <= commit is chosen (and in self.decided)
        self._unsent: list[int] = []
        self._durable_writes: list[Any] = []

    # the convention the simulator's leader-targeted faults read (seedance.sim.triggers.leader_term)
    @property
    def current_term(self) -> int:
        return self.ballot if self.role is LEADER else self.promised

    # ================================================================================================ inputs
    def on_start(self, now: float) -> Effects:
        return [self._arm_election(now)]

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        self.promised = int(durable.values.get(PROMISED_KEY, 0) or 0)
        writes = self._recover_slots(durable)
        return [*writes, self._arm_election(now), Annotate(name="recovered", attrs={
            "promised": self.promised, "accepted": len(self.accepted), "snapshot": self.snapshot_index})]

    def on_persisted(self, token: Any, now: float) -> Effects:
        """Our own accept of slots first..last at ``ballot`` is durable: count our vote."""
        if not (isinstance(token, tuple) and len(token) == 4 and token[0] == ACC_NOTICE):
            return []
        _, ballot, first, last = token
        if self.role is not LEADER or ballot != self.ballot:
            return []
        out: Effects = []
        for slot in range(first, last + 1):
            self._ack(slot, self.node_id)
        self._advance(out)
        return self._emit(out)

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        if self.role is not LEADER:
            hint = self.leader_id if self.leader_id != self.node_id else None
            return [Reply(client_id=request.client_id, request_id=request.request_id, outcome=_FAIL,
                          error="not-leader", leader_hint=hint)]
        problem = validate(request.op, request.value)
        if problem:
            return [Reply(client_id=request.client_id, request_id=request.request_id, outcome=_FAIL,
                          error=problem)]
        cached = self.kv.cached(request.client_id, request.request_id)
        if cached is not None:
            return [_reply(request.client_id, request.request_id, cached)]
        op = request.op.value if isinstance(request.op, Operation) else str(request.op)
        command = Command(client_id=request.client_id, request_id=request.request_id, op=op, key=request.key,
                          value=request.value)
        slot = self._next_slot
        self._next_slot += 1
        self._proposals[slot] = command
        self._acks[slot] = set()
        self._pending[slot] = (request.client_id, request.request_id)
        out: Effects = []
        if not self._unsent:
            out.append(SetTimer(name=FLUSH, delay_s=0.0))
        self._unsent.append(slot)
        return out

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []

    # ================================================================================================ phase 1
    def _arm_election(self, now: float) -> SetTimer:
        lo, hi = self.config.election_timeout_s_min, self.config.election_timeout_s_max
        self._timeout_s = float(self.rng.uniform(lo, hi))
        self._last_heard = now
        return SetTimer(name=ELECTION, delay_s=self._timeout_s)

    def _on_election_timer(self, now: float) -> Effects:
        if self.role is LEADER:
            return []
        waited = now - self._last_heard
        if waited < self._timeout_s:
            return [SetTimer(name=ELECTION, delay_s=self._timeout_s - waited)]
        return self._stand(now)

    def _stand(self, now: float) -> Effects:
        """Phase 1a over every slot from our first unexecuted one."""
        n = self.num_nodes
        round_ = max(self.promised, self.ballot) // n + 1
        self.ballot = round_ * n + self.node_id
        self.promised = self.ballot
        self.role = CANDIDATE
        self.leader_id = None
        self._low = self.executed + 1
        self._promises = {self.node_id: self._accepted_from(self._low)}
        out: Effects = [Persist(key=PROMISED_KEY, value=self.promised, size_bytes=16), self._arm_election(now),
                        Annotate(name="prepare", attrs={"ballot": self.ballot, "low": self._low})]
        message = Prepare(ballot=self.ballot, low=self._low)
        out.extend(Send(dst=p, message=message, size_bytes=HEADER_BYTES) for p in self.peers)
        out.append(SetTimer(name=RETRY, delay_s=self.config.heartbeat_s))
        return out

    def _on_retry(self, now: float) -> Effects:
        if self.role is not CANDIDATE:
            return []
        message = Prepare(ballot=self.ballot, low=self._low)
        out: Effects = [Send(dst=p, message=message, size_bytes=HEADER_BYTES) for p in self.peers
                        if p not in self._promises]
        out.append(SetTimer(name=RETRY, delay_s=self.config.heartbeat_s))
        return out

    def _accepted_from(self, low: int) -> tuple[SlotValue, ...]:
        return tuple(SlotValue(slot=s, ballot=b, command=c) for s, (b, c) in sorted(self.accepted.items())
                     if s >= low)

    def _on_prepare(self, src: NodeId, m: Prepare, now: float) -> Effects:
        out: Effects = []
        if m.ballot < self.promised:
            out.append(Send(dst=src, message=Promise(ballot=m.ballot, ok=False, promised=self.promised),
                            size_bytes=HEADER_BYTES))
            return out
        if m.ballot > self.promised:
            self._raise_promise(m.ballot, out, now)
        accepted = self._accepted_from(max(m.low, self.snapshot_index + 1))
        snapshot = self._promised_snapshot(m.low)
        size = values_bytes(accepted) + (state_bytes(snapshot["snapshot"]) if snapshot else 0)
        out.append(Send(dst=src, message=Promise(ballot=m.ballot, ok=True, promised=self.promised,
                                                 accepted=accepted, **snapshot), size_bytes=size))
        return self._emit(out)

    def _raise_promise(self, ballot: int, out: Effects, now: float) -> None:
        """Promise ``ballot`` (durably, before anything that follows): step down if we led or stood for less."""
        self.promised = ballot
        self._durable_writes.append(Persist(key=PROMISED_KEY, value=ballot, size_bytes=16))
        if self.role is not FOLLOWER and ballot != self.ballot:
            self._step_down(out, now)
        self.leader_id = ballot % self.num_nodes
        self._last_heard = now

    def _on_promise(self, src: NodeId, m: Promise, now: float) -> Effects:
        if self.role is not CANDIDATE or m.ballot != self.ballot:
            return []
        out: Effects = []
        if not m.ok:
            if m.promised > self.promised:
                self.promised = m.promised  # in memory only: a higher promise is always safe to hold
                self._step_down(out, now)
            return self._emit(out)
        self._promises[src] = m.accepted
        if m.snapshot_index and self._install(m.snapshot_index, m.snapshot):
            self._execute(out)
        if len(self._promises) >= self.quorum:
            self._lead(out, now)
        return self._emit(out)

    def _choose(self, candidates: list[SlotValue]) -> SlotValue:
        """P2c: the value accepted at the highest ballot among a majority's promises."""
        return max(candidates, key=lambda v: v.ballot)

    def _lead(self, out: Effects, now: float) -> None:
        by_slot: dict[int, list[SlotValue]] = {}
        for values in self._promises.values():
            for v in values:
                by_slot.setdefault(v.slot, []).append(v)
        top = max([self.executed, *by_slot])
        low = self.executed + 1  # the slots up to it are chosen: ours, or in a snapshot a promise carried
        self.role = LEADER
        self.leader_id = self.node_id
        self._proposals, self._acks, self._pending, self._unsent = {}, {}, {}, []
        for slot in range(low, top + 1):
            found = by_slot.get(slot)
            self._proposals[slot] = self._choose(found).command if found else NOOP
            self._acks[slot] = set()
        self._next_slot = top + 1
        self._commit = self.executed
        out.append(Annotate(name="became-leader", attrs={"ballot": self.ballot, "recovered": top - low + 1}))
        self._send_slots(list(range(low, top + 1)), out, chunk=max(self.config.max_batch, 256))
        out.append(SetTimer(name=HEARTBEAT, delay_s=self.config.heartbeat_s))
        if not self._proposals:
            self._heartbeat_sends(out)

    def _step_down(self, out: Effects, now: float) -> None:
        if self.role is LEADER:
            for client_id, request_id in self._pending.values():
                out.append(Reply(client_id=client_id, request_id=request_id, outcome=_INFO,
                                 error="leadership-lost"))
        self._pending, self._proposals, self._acks, self._unsent = {}, {}, {}, []
        self.role = FOLLOWER
        out.append(self._arm_election(now))

    # ================================================================================================ phase 2
    def _on_flush(self, now: float) -> Effects:
        if self.role is not LEADER or not self._unsent:
            self._unsent = []
            return []
        slots, self._unsent = self._unsent, []
        out: Effects = []
        self._send_slots([s for s in slots if s in self._proposals], out, chunk=self.config.max_batch)
        return self._emit(out)

    def _send_slots(self, slots: list[int], out: Effects, *, chunk: int) -> None:
        """Phase 2a for ``slots`` (ascending, contiguous runs): to every peer, then our own accept, written in
        parallel and counted when durable."""
        for k in range(0, len(slots), chunk):
            part = slots[k:k + chunk]
            values = tuple(SlotValue(slot=s, ballot=self.ballot, command=self._proposals[s]) for s in part)
            message = Accept(ballot=self.ballot, values=values, commit=self._commit)
            size = values_bytes(values)
            out.extend(Send(dst=p, message=message, size_bytes=size) for p in self.peers)
            for s, v in zip(part, values):
                self.accepted[s] = (self.ballot, v.command)
            # one write per contiguous run, each with its own notice
            run_start = 0
            for i in range(1, len(part) + 1):
                if i == len(part) or part[i] != part[i - 1] + 1:
                    run = part[run_start:i]
                    out.append(PersistRecords(
                        table=ACC_TABLE, put={str(s): (self.ballot, self._proposals[s].to_plain()) for s in run},
                        size_bytes=size, notify=(ACC_NOTICE, self.ballot, run[0], run[-1]), handed_over=True))
                    run_start = i

    def _accepts_below_promise(self, ballot: int) -> bool:
        """An acceptor refuses a ballot below its promise (Paxos Made Simple §2.2, P1a)."""
        return ballot < self.promised

    def _on_accept(self, src: NodeId, m: Accept, now: float) -> Effects:
        out: Effects = []
        if self._accepts_below_promise(m.ballot):
            out.append(Send(dst=src, message=Accepted(ballot=m.ballot, ok=False, promised=self.promised),
                            size_bytes=HEADER_BYTES))
            return out
        if m.ballot > self.promised:
            self._raise_promise(m.ballot, out, now)
        elif self.role is not FOLLOWER and m.ballot != self.ballot:
            self._step_down(out, now)
        self.leader_id = m.ballot % self.num_nodes
        self._last_heard = now
        slots: tuple[int, ...] = ()
        if m.values:
            put = {}
            for v in m.values:
                self.accepted[v.slot] = (m.ballot, v.command)
                put[str(v.slot)] = (m.ballot, v.command.to_plain())
            self._durable_writes.append(PersistRecords(table=ACC_TABLE, put=put, handed_over=True,  # built here
                                                       size_bytes=values_bytes(m.values)))
            slots = tuple(map(_slot_of, m.values))  # in C: no generator per Accept
        for slot in range(self.executed + 1, min(m.commit, self.executed + self.config.catchup_batch) + 1):
            if slot not in self.decided:
                held = self.accepted.get(slot)
                if held is not None and held[0] == m.ballot:
                    self._learn(slot, held[1])
        self._execute(out)
        out.append(Send(dst=src, message=Accepted(ballot=m.ballot, ok=True, promised=self.promised,
                                                  slots=slots, executed=self.executed),
                        size_bytes=HEADER_BYTES + 8 * len(m.values)))
        return self._emit(out)

    def _on_accepted(self, src: NodeId, m: Accepted, now: float) -> Effects:
        if self.role is not LEADER or m.ballot != self.ballot:
            return []
        out: Effects = []
        if not m.ok:
            if m.promised > self.ballot:
                self.promised = max(self.promised, m.promised)
                self._step_down(out, now)
            return self._emit(out)
        for slot in m.slots:
            self._ack(slot, src)
        self._advance(out)
        if not m.slots and m.executed < self._commit:  # a heartbeat reply from a lagging replica
            self._catch_up(src, m.executed, now, out)
        return self._emit(out)

    def _ack(self, slot: int, node: NodeId) -> None:
        acks = self._acks.get(slot)
        if acks is None:
            return
        acks.add(node)
        if len(acks) >= self.quorum:
            del self._acks[slot]
            self._learn(slot, self._proposals.pop(slot))

    def _advance(self, out: Effects) -> None:
        while self._commit + 1 in self.decided:
            self._commit += 1
        self._execute(out)

    def _on_decide(self, src: NodeId, m: Decide, now: float) -> Effects:
        if m.ballot < self.promised:
            return []
        for v in m.values:
            if v.slot > self.executed and v.slot not in self.decided:
                self._learn(v.slot, v.command)
        out: Effects = []
        self._execute(out)
        return self._emit(out)

    # ================================================================================================ learner
    def _learn(self, slot: int, command: Command) -> None:
        self.decided[slot] = command
        self.decided_log.append((slot, command))

    def _execute(self, out: Effects) -> None:
        decided, kv = self.decided, self.kv
        while self.executed + 1 in decided:
            self.executed += 1
            slot = self.executed
            command = decided[slot]
            result = None
            if command.op is not None:
                result = kv.apply(command.client_id, command.request_id, command.op, command.key, command.value)
            waiting = self._pending.pop(slot, None) if self._pending else None
            if waiting is not None:
                client_id, request_id = waiting
                if result is not None and command.client_id == client_id and command.request_id == request_id:
                    out.append(_reply(client_id, request_id, result))
                else:  # a leader's own slot holds another command only after a safety breach (mutants)
                    self.violations.append(f"node {self.node_id}: slot {slot} chose another command than the one it "
                                           f"proposed for ({client_id}, {request_id})")
                    out.append(Reply(client_id=client_id, request_id=request_id, outcome=_INFO,
                                     error="superseded"))
        self._maybe_snapshot()

    # ============================================================================================== heartbeat
    def _on_heartbeat(self, now: float) -> Effects:
        if self.role is not LEADER:
            return []
        out: Effects = []
        self._heartbeat_sends(out)
        # re-send what is not chosen yet to the acceptors that have not accepted it (lost Accept or Accepted)
        if self._acks:
            unsent = set(self._unsent)
            waiting = [(s, acks) for s, acks in sorted(self._acks.items()) if s not in unsent]  # sorted once
            for peer in self.peers:
                slots = [s for s, acks in waiting if peer not in acks]
                for k in range(0, len(slots), 256):
                    values = tuple(SlotValue(slot=s, ballot=self.ballot, command=self._proposals[s])
                                   for s in slots[k:k + 256])
                    out.append(Send(dst=peer, message=Accept(ballot=self.ballot, values=values, commit=self._commit),
                                    size_bytes=values_bytes(values)))
        out.append(SetTimer(name=HEARTBEAT, delay_s=self.config.heartbeat_s))
        return self._emit(out)

    def _heartbeat_sends(self, out: Effects) -> None:
        message = Accept(ballot=self.ballot, values=(), commit=self._commit)
        out.extend(Send(dst=p, message=message, size_bytes=HEADER_BYTES) for p in self.peers)

    # ================================================================================================ helpers
    def _emit(self, out: Effects) -> Effects:
        """This call's durable writes first (promise, then accepted records), then the rest in order, then a
        snapshot's writes (.snapshots: nothing sent waits for them)."""
        if self._compactions:
            out, self._compactions = out + self._compactions, []
        if not self._durable_writes:
            return out
        head, self._durable_writes = self._durable_writes, []
        return head + out

    def check_invariants(self) -> list[str]:
        return list(self.violations)

    def __repr__(self) -> str:
        return (f"MultiPaxosNode({self.node_id}, {self.role.value}, ballot={self.ballot}, promised={self.promised}, "
                f"executed={self.executed})")


_slot_of = attrgetter("slot")


def _reply(client_id: int, request_id: int, result: Result) -> Reply:
    return Reply(client_id=client_id, request_id=request_id, outcome=result.outcome, value=result.value,
                 error=result.error)
