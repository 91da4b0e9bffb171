"""Log compaction by snapshots (§7): the :class:`Snapshots` part of a Raft node.

Rules:

* A node snapshots its state machine once ``snapshot_entries`` applied entries are held in its log: the snapshot is
  ``[last included index, its term, KVStore.snapshot()]`` (the applied state, client sessions included, so
  deduplication survives), persisted under ``snapshot``; then the log before it is compacted, in memory and on disk
  (``CompactLog``). Only applied, hence committed, entries are ever compacted, so no node discards what it might
  still have to truncate or send as an entry of an uncommitted suffix.
* A leader whose follower needs a compacted entry (its next index is at or below the compaction point) sends
  ``InstallSnapshot`` with its latest snapshot instead of entries. It occupies a flow-control slot like a batch
  (freed when an acknowledgement covers its index; resent after a loss, as a batch is), under a ``prev_log_index``
  of -1 that no rejection names, so a heartbeat's rejection meanwhile cannot reset it.
* A follower installs a snapshot beyond its commit index: its state machine becomes the snapshot's, commit index and
  last applied the snapshot's index; its log keeps the entries after that index if it holds the index with the
  snapshot's term (§7), and is emptied otherwise. It answers with the snapshot's index as its match index. An
  AppendEntries that starts inside a node's compacted prefix is taken from the compaction point on (the entries
  before it are committed, so they match).
* Durable order, so that a crash between any two writes recovers a consistent node: the snapshot first; then, if
  the log's suffix is dropped, a ``PersistLog`` that truncates the log after the snapshot's index (only when the
  log reaches it); then the ``CompactLog``. Recovery (:meth:`Snapshots._recover_log`) reads the snapshot and keeps
  the log's entries after its index, if the log starts there or holds that index with its term; otherwise none, and
  it writes the log again in that order.
"""

from __future__ import annotations

from typing import Any

from seedance.models.kv import KVStore
from seedance.models.protocols.contract import CompactLog, DurableState, Effects, NodeId, Persist, PersistLog, Send
from seedance.models.protocols.raft.log import RaftLog
from seedance.models.protocols.raft.messages import (
    APPEND_REPLY_BYTES, HEADER_BYTES, AppendEntriesReply, Entry, InstallSnapshot, value_size_bytes,
)
from seedance.models.protocols.raft.roles import FOLLOWER, LOG_KEY, SNAPSHOT_KEY

SNAPSHOT_SLOT = -1  # the prev_log_index an InstallSnapshot occupies its flow-control slot under (see the rules)


class Snapshots:
    """Mixin of :class:`~seedance.models.protocols.raft.node.RaftNode`: taking, sending and installing snapshots."""

    __slots__ = ()  # the node's slots hold its state (RaftNode.__slots__)

    _snapshot: list[Any] | None  # [index, term, state] of the newest snapshot (taken or installed), or None
    _compactions: list[Any]  # durable writes of snapshots, flushed after the log's writes (see _flush)

    def _maybe_snapshot(self) -> None:
        """After applying: a snapshot once ``snapshot_entries`` applied entries are held."""
        every = self.config.snapshot_entries
        if every and self.last_applied - self.log.offset >= every:
            index = self.last_applied
            term = self.log.term_at(index)
            self._install([index, term, self.kv.snapshot()], retained=True, reached=True)

    def _install(self, snapshot: list[Any], *, retained: bool, reached: bool, persisted: bool = False) -> None:
        """Adopt ``snapshot`` as the newest and compact the log up to it, with its durable writes in order (the
        snapshot's own write left out when it is ``persisted`` already)."""
        index, term, state = snapshot
        self._snapshot = snapshot
        self.log.compact(index, term)
        if not persisted:
            size = HEADER_BYTES + value_size_bytes(state)
            self._compactions.append(Persist(key=SNAPSHOT_KEY, value=snapshot, size_bytes=size))
        if not retained and reached:
            self._compactions.append(PersistLog(key=LOG_KEY, start=index, entries=()))
        self._compactions.append(CompactLog(key=LOG_KEY, first=index))

    def _snapshot_message(self, peer: NodeId) -> Send:
        """``peer`` needs entries this leader compacted: its newest snapshot, occupying a slot like a batch."""
        index, term, state = self._snapshot
        self._next[peer] = index + 1
        self._window[peer].append((SNAPSHOT_SLOT, index, self._beat))
        self._round_sent[peer] = self._read_seq
        message = InstallSnapshot(term=self.current_term, leader_id=self.node_id, last_index=index, last_term=term,
                                  state=state, read_seq=self._read_seq)
        return Send(dst=peer, message=message, size_bytes=HEADER_BYTES + value_size_bytes(state))

    def _on_install_snapshot(self, src: NodeId, m: InstallSnapshot, now: float) -> Effects:
        out: Effects = []
        if m.term < self.current_term:
            out.append(Send(dst=src, message=AppendEntriesReply(term=self.current_term, success=False,
                                                                read_seq=m.read_seq), size_bytes=APPEND_REPLY_BYTES))
            return out
        if m.term > self.current_term or self.role is not FOLLOWER:
            self._become_follower(m.term, out, now, m.leader_id)
        self.leader_id = m.leader_id
        self._last_heard = now
        if m.last_index > self.commit_index:
            log = self.log
            reached = log.last_index >= m.last_index
            retained = reached and log.term_at(m.last_index) == m.last_term
            self.kv = KVStore.restore(m.state)
            self.commit_index = self.last_applied = m.last_index
            self._install([m.last_index, m.last_term, m.state], retained=retained, reached=reached)
        out.append(Send(dst=src, message=AppendEntriesReply(term=self.current_term, success=True,
                                                            match_index=m.last_index, read_seq=m.read_seq),
                        size_bytes=APPEND_REPLY_BYTES))
        return self._flush(out)

    def _recover_log(self, durable: DurableState) -> Effects:
        """The log and state machine from what survived a crash (see the module's rules); the writes that make
        the durable log agree with them, if any."""
        entries = [Entry.from_plain(e) for e in durable.logs.get(LOG_KEY, ())]
        start = durable.log_starts.get(LOG_KEY, 0)
        snapshot = durable.values.get(SNAPSHOT_KEY)
        if snapshot is None:
            self.log = RaftLog(entries, offset=start)
            return []
        index, term, state = int(snapshot[0]), int(snapshot[1]), snapshot[2]
        self._snapshot = [index, term, state]
        self.kv = KVStore.restore(state)
        self.commit_index = self.last_applied = index
        held = index - start  # how many durable entries the snapshot covers
        reached = start + len(entries) >= index
        retained = held == 0 or (0 < held <= len(entries) and entries[held - 1].term == term)
        self.log = RaftLog(entries[held:] if retained else (), offset=index, offset_term=term)
        if held == 0 and retained:
            return []
        self._install(self._snapshot, retained=retained, reached=reached, persisted=True)
        writes, self._compactions = self._compactions, []
        return writes
