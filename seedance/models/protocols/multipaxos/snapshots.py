"""Log compaction by snapshots: the :class:`Snapshots` part of a Multi-Paxos replica.

Rules:

* A replica that has executed ``snapshot_slots`` slots beyond its last snapshot takes one: ``[executed,
  KVStore.snapshot()]`` (the state after every slot up to ``executed``, client sessions included, so deduplication
  survives), persisted under ``snapshot``. Then it drops its per-slot state up to that index: in memory (accepted
  and decided values) and on disk (the ``acc`` records, one ``PersistRecords`` delete). Only executed slots are
  compacted, and a replica executes a slot only once it knows the slot's value is chosen.
* Durable order, so that a crash between any two writes recovers a consistent replica: the snapshot first, then the
  delete (the runtime makes a write durable before any effect after it). Both go after the handler's other effects:
  nothing sent depends on them. Recovery (:meth:`Snapshots._recover_slots`) reads the snapshot (the kv store, the
  executed prefix), keeps the ``acc`` records above it and deletes those at or below it again (a crash between the
  two writes left them). A crash before the snapshot is durable leaves the previous snapshot and every record.
* A leader whose peer reports an executed prefix below the leader's compaction point sends it ``InstallSnapshot``
  instead of ``Decide`` (once per ``election_timeout_s_max`` per peer for one snapshot; a newer one goes at once);
  the slots above it go by ``Decide`` as before. A replica installs a snapshot beyond its executed prefix (from a leader whose
  ballot is not below its promise, or from a promise, below): its kv store becomes the snapshot's, its executed
  prefix the snapshot's index, and it compacts up to there as if it had taken the snapshot itself.
* An acceptor accepts a value for a slot at or below its snapshot like any other (its next snapshot deletes it):
  refusing would leave a leader that needs its vote waiting, and a vote it did not cast must not be counted.

Why phase 1 stays safe. Paxos's safety rests on P2c: a leader of ballot b proposes, for a slot s, the value
accepted at the highest ballot below b among a majority's reports for s, because if a value v was chosen in s at a
ballot below b, every majority holds an acceptor that reports v at the highest such ballot. Compaction removes
reports: an acceptor with snapshot index C no longer holds the values of slots ≤ C. So ``Prepare(b, low)`` is
answered with the values accepted in slots ≥ max(low, C + 1), and, when C ≥ low, with the snapshot itself
(``Promise.snapshot_index``, ``Promise.snapshot``). The candidate installs every snapshot beyond its executed prefix
as its promises arrive, and when it leads it proposes only for the slots above its executed prefix, so only for slots
above C* (the highest snapshot index among its promises) and at or above ``low``. No acceptor of the majority
compacted such a slot (one with C ≥ low has C ≤ C*, one with C < low compacted nothing at or above low), so each
reported every value it accepted there, and P2c's argument holds as without snapshots. The slots up
to its executed prefix are not proposed at all: each was chosen (a replica executes only chosen values, and a
snapshot holds only executed slots), and its value is in the state the leader now holds, which is the state every
correct replica reaches after executing the same chosen prefix. A leader therefore never proposes a no-op (or
anything) for a slot that was chosen and compacted: it could only do so for a slot no majority member reports and
its own state does not cover, which compaction never produces. Installing a snapshot changes no acceptor state
(promise, accepted values), so it cannot make a chosen value unchosen either.
"""

from __future__ import annotations

from typing import Any

from seedance.models.kv import KVStore
from seedance.models.protocols.contract import DurableState, Effects, NodeId, Persist, PersistRecords, Send
from seedance.models.protocols.multipaxos.messages import (
    Command, Decide, InstallSnapshot, SlotValue, state_bytes, values_bytes,
)

SNAPSHOT_KEY = "snapshot"
ACC_TABLE = "acc"


class Snapshots:
    """Mixin of :class:`~seedance.models.protocols.multipaxos.node.MultiPaxosNode`: taking, sending, installing and
    recovering snapshots."""

    __slots__ = ()  # the node's slots hold its state (MultiPaxosNode.__slots__)

    snapshot_index: int  # every slot up to it is in the snapshot (0: none taken or installed)
    _snapshot: list[Any] | None  # [index, state] of the newest snapshot, or None
    _compactions: list[Any]  # its durable writes, after the handler's other effects (see _emit)
    _snapshot_sent: dict[NodeId, tuple[int, float]]  # peer -> (index, time) of the last InstallSnapshot sent to it
    decided_base: int  # how many decided_log entries were dropped from its front (see _trim_learned)
    _learned_cut: int  # decided_log entries before this were learned before the last snapshot

    def _maybe_snapshot(self) -> None:
        """After executing: a snapshot once ``snapshot_slots`` slots were executed beyond the last one."""
        every = self.config.snapshot_slots
        if every and self.executed - self.snapshot_index >= every:
            self._compact(self.executed, self.kv.snapshot())

    def _compact(self, index: int, state: Any, *, persisted: bool = False) -> None:
        """Adopt ``[index, state]`` as the newest snapshot and drop the per-slot state up to ``index``, with its
        durable writes in order (the snapshot's own left out when it is ``persisted`` already)."""
        self._snapshot = [index, state]
        self.snapshot_index = index
        gone = [s for s in self.accepted if s <= index]
        for s in gone:
            del self.accepted[s]
        for s in [s for s in self.decided if s <= index]:
            del self.decided[s]
        self._trim_learned()
        if not persisted:
            self._compactions.append(Persist(key=SNAPSHOT_KEY, value=self._snapshot, size_bytes=state_bytes(state)))
        if gone:
            self._compactions.append(PersistRecords(table=ACC_TABLE, delete=tuple(str(s) for s in gone),
                                                    size_bytes=16 * len(gone)))

    def _trim_learned(self) -> None:
        """Drop the ``decided_log`` entries learned before the previous snapshot: a monitor that observes the node
        after every input has seen them long since. ``decided_base`` counts them, so positions stay stable."""
        cut = self._learned_cut
        if cut:
            del self.decided_log[:cut]
            self.decided_base += cut
        self._learned_cut = len(self.decided_log)

    def _install(self, index: int, state: Any) -> bool:
        """Take another replica's snapshot of the chosen prefix up to ``index`` if it is beyond ours."""
        if index <= self.executed:
            return False
        self.kv = KVStore.restore(state)
        self.executed = index
        self._compact(index, state)
        return True

    def _on_install_snapshot(self, src: NodeId, m: InstallSnapshot, now: float) -> Effects:
        if m.ballot < self.promised:
            return []
        out: Effects = []
        if m.index > self.executed:
            if self.role != "follower":  # a leader or candidate of a lower ballot: a higher one leads
                self._step_down(out, now)
            self._install(m.index, m.state)
            self._execute(out)  # decided slots just above the snapshot, if any
        return self._emit(out)

    def _catch_up(self, peer: NodeId, executed: int, now: float, out: Effects) -> None:
        """``peer`` executed only up to ``executed`` (below our commit): chosen values from there, or our snapshot
        when it needs slots we compacted."""
        if executed < self.snapshot_index:
            index, state = self._snapshot
            last = self._snapshot_sent.get(peer)
            if last is None or last[0] != index or now - last[1] >= self.config.election_timeout_s_max:
                self._snapshot_sent[peer] = (index, now)
                out.append(Send(dst=peer, message=InstallSnapshot(ballot=self.ballot, index=index, state=state),
                                size_bytes=state_bytes(state)))
            return
        first = executed + 1
        last = min(self._commit, executed + self.config.catchup_batch)
        values = tuple(SlotValue(slot=s, ballot=self.ballot, command=self.decided[s]) for s in range(first, last + 1))
        out.append(Send(dst=peer, message=Decide(ballot=self.ballot, values=values), size_bytes=values_bytes(values)))

    def _promised_snapshot(self, low: int) -> dict[str, Any]:
        """The Promise fields that hand a candidate whose ``low`` is at or below our snapshot that snapshot."""
        if self._snapshot is None or self.snapshot_index < low:
            return {}
        return {"snapshot_index": self.snapshot_index, "snapshot": self._snapshot[1]}

    def _recover_slots(self, durable: DurableState) -> Effects:
        """The snapshot and the accepted values above it from what survived a crash; the delete of the ``acc``
        records it covers, if a crash between the snapshot and its delete left some."""
        snapshot = durable.values.get(SNAPSHOT_KEY)
        if snapshot is not None:
            index, state = int(snapshot[0]), snapshot[1]
            self.kv = KVStore.restore(state)
            self.executed = self.snapshot_index = index
            self._snapshot = [index, state]
        stale = []
        for slot, (ballot, plain) in durable.records.get(ACC_TABLE, {}).items():
            if int(slot) > self.snapshot_index:
                self.accepted[int(slot)] = (int(ballot), Command.from_plain(plain))
            else:
                stale.append(slot)
        if not stale:
            return []
        return [PersistRecords(table=ACC_TABLE, delete=tuple(stale), size_bytes=16 * len(stale))]
