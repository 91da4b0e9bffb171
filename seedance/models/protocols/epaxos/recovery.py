"""EPaxos recovery: explicit prepare (SOSP 2013, Figure 3) with separate promised and voted ballots (Sutra, IPL
2020), and TryPreAccept for the optimized fast quorum (technical report CMU-PDL-13-111). Methods of
:class:`~seedance.models.protocols.epaxos.node.EPaxosNode`.

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
"""

from __future__ import annotations


from seedance.models.protocols.contract import Annotate, Effects, NodeId, Send
from seedance.models.protocols.epaxos.deps import NO_DEPS, Deps, as_dict, dep_of
from seedance.models.protocols.epaxos.instance import (
    ACCEPTED,
    COMMITTED,
    NONE,
    NOOP,
    PREACCEPTED,
    Coordination,
    Iid,
    Instance,
    Value,
    _decoded,
    _keys,
    _size,
)
from seedance.models.protocols.epaxos.messages import (
    HEADER_BYTES,
    Prepare,
    PrepareReply,
    TryPreAccept,
    TryPreAcceptReply,
)


class Recovery:
    """Explicit prepare and TryPreAccept for an instance this replica waits on (a mixin of the node: it uses the
    node's instances, coordinations, attributes and phase-2 and commit steps)."""

    __slots__ = ()

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
        return self._emit([Send(dst=src, message=reply, size_bytes=_size(inst.command, inst.deps))])

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
        self._start_accept(iid, ballot, None, 0, NO_DEPS, out, now)

    def _restart_phase1(self, iid: Iid, ballot: int, command: Value, seq: int, deps: Deps, out: Effects,
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
                             deps: Deps, out: Effects, now: float) -> None:
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
        out.extend(Send(dst=p, message=message, size_bytes=_size(command, deps))
                   for p in self.peers if p not in coord.replies)

    def _tpa_conflict(self, iid: Iid, command: Value, deps: Deps) -> tuple[Iid, bool] | None:
        """An instance this replica knows that interferes with ``command``, is not covered by ``deps`` and does not
        depend on ``iid`` — (it, committed?), a committed one first; None when there is none. Such an instance
        means the attributes cannot have been committed on the fast path unless it is itself never committed with
        what this replica holds (SOSP'13 §4.5: two interfering committed commands, one depends on the other)."""
        keys = _keys(command)
        found: tuple[Iid, bool] | None = None
        seen: set[Iid] = set()
        leader, number = iid
        covered = as_dict(deps)
        for key in keys:
            for other in sorted(self._key_instances.get(key, ())):
                q, j = other
                if other == iid or other in seen or j <= covered.get(q, 0):
                    continue
                seen.add(other)
                inst = self.instances.get(other)
                if inst is None or inst.status == NONE or key not in _keys(inst.command):
                    continue
                if dep_of(inst.deps, leader) >= number:
                    continue
                if inst.status == COMMITTED:
                    return other, True
                if found is None:
                    found = (other, False)
        return found

    def _try_preaccept_here(self, iid: Iid, ballot: int, command: Value, seq: int, deps: Deps) -> TryPreAcceptReply:
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
            for other in conflicts:
                if other not in self._missing and self.instances.get(other, Instance()).status != COMMITTED:
                    self._missing[other] = (now, self._recovery_timeout())
            return True
        return False

    def _drop_coordination(self, iid: Iid, ballot: int) -> None:
        """A higher ballot for ``iid`` reached us: a phase we ran at a lower one is over."""
        coord = self.coords.get(iid)
        if coord is not None and coord.ballot < ballot:
            del self.coords[iid]
