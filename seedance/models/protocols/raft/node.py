"""A Raft server as a sans-I/O node (Ongaro & Ousterhout 2014, extended version; Figure 2 is the spec).

Rules this module keeps, with the section that states them:

* Leader election (§5.2): a follower that hears from no leader for a randomized election timeout (drawn from the
  injected generator) becomes a candidate of the next term and asks for votes, re-asking peers that have not
  answered every heartbeat interval (§5.1: RPCs are retried); one vote per term, first come first served; a
  majority makes a leader, which then sends AppendEntries as heartbeats.
* Election restriction (§5.4.1): a vote goes only to a candidate whose log is at least as up to date (last term, then
  last index) as the voter's.
* Log replication (§5.3): AppendEntries carries ``prev_log_index/term``; a follower whose log does not match rejects
  and reports where its conflicting term starts; a matching follower deletes a conflicting suffix (never a matching
  one: reordered, stale messages cannot truncate) and appends.
* Commit rule (§5.4.2): the leader commits index N only if a majority stores N **and** entry N is of the leader's
  current term; earlier entries are then committed indirectly.
* Persistence (Figure 2, "Persistent state ... updated on stable storage before responding to RPCs"): currentTerm
  and votedFor go in one :class:`Persist` (key ``hard_state``), the log in :class:`PersistLog` (key ``log``). Every
  handler collects its sends and replies, then :meth:`_flush` puts all durable writes of that call first, so no
  Send or Reply can depend on state that a crash would lose.
* Recovery: ``on_recover`` restores term, vote and log; commitIndex and lastApplied are volatile and start at 0; the
  state machine is rebuilt by re-applying entries as the leader's commit index is learned.
* Log compaction (§7, :mod:`.snapshots`): a snapshot of the state machine once ``snapshot_entries`` applied entries
  are held, the log before it compacted; a follower that needs compacted entries gets ``InstallSnapshot``.
* A leader appends a no-op entry at the start of its term (§8), so it commits an entry of its term promptly.
* Group commit, and the leader's write in parallel with replication (Ongaro's thesis, §10.2.1: the leader may
  write to its disk in parallel with replicating to the followers, and counts itself toward a majority only once
  its own write is durable): a leader appends a client's entry in memory and arms a zero-delay ``flush`` timer;
  requests the runtime hands it before that timer fires share the flush. The flush sends the entries to the
  followers and arms a zero-delay ``write`` timer; the write (a later input, so a runtime that makes a turn's
  writes durable before that turn's sends has already sent them) is one PersistLog of everything unwritten that
  asks for a durability notice: ``on_persisted(("log", term, index))`` comes once it is durable (both runtimes,
  through the shared engine, and the test harness), and only then does the leader count its own copy. Conservatively, the leader also never commits
  past its own durable index, so a client Reply always follows the local write. Followers still persist before
  acknowledging; everything but a leader's AppendEntries waits for the whole log to be durable.
* Client interaction (§8): non-leaders answer FAIL "not-leader" with a leader hint (nothing was appended); a leader
  appends the command, and replies when the entry is applied; the state machine deduplicates (client, request)
  pairs. A leader that steps down answers its pending requests INFO "leadership-lost" at once (indeterminate: the
  entries may still commit under the next leader, or be overwritten — Figure 8 shows both can happen), so clients
  move on instead of waiting for entries no one may ever commit; a crashed node forgets, and the client times out
  (INFO too).
* Flow control (:mod:`.flow`): per follower at most ``max_inflight`` AppendEntries carrying entries are in flight;
  heartbeats and read rounds never occupy that window, a slot is freed only by an acknowledgement covering it, and
  a window unacknowledged for a whole heartbeat interval is presumed lost and resent — so neither loss nor
  duplicated replies can leave it full or open it wider.
* Linearizable reads (§6.4, §8): with ``reads="readindex"`` the leader records its commit index as the read index once
  it has committed an entry of its term, confirms leadership with a round of heartbeats acknowledged by a majority
  (reads arriving during a round share the next one; a round rides on the replication stream where an
  AppendEntries is already in flight), then answers from its state machine; with ``reads="log"`` reads are log
  entries like writes.

Per-message work is O(entries carried): the log is sliced, never copied, and commit counting sorts one value per node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from operator import attrgetter
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
    Persist,
    PersistLog,
    Reply,
    Send,
    SetTimer,
)
from seedance.models.protocols.raft.config import RaftConfig
from seedance.models.protocols.dispatch import Dispatching
from seedance.models.protocols.raft.log import RaftLog
from seedance.models.protocols.raft.messages import (
    APPEND_REPLY_BYTES,
    AppendEntries,
    AppendEntriesReply,
    Entry,
    InstallSnapshot,
    RequestVote,
    RequestVoteReply,
    command_entry,
)
from seedance.models.protocols.raft.election import Elections
from seedance.models.protocols.raft.flow import FlowControl
from seedance.models.protocols.raft.quorum import committed_index, majority
from seedance.models.protocols.raft.reads import ReadIndex
from seedance.models.protocols.raft.snapshots import Snapshots
from seedance.models.protocols.raft.roles import (
    ELECTION, FLUSH, FOLLOWER, LOG_NOTICE, HARD_STATE_KEY, HEARTBEAT, LEADER, LOG_KEY, VOTE_RETRY, WRITE, Role,
)

_OP_NAMES = {op: op.value for op in Operation}
# enum members as globals (reading an Enum class's attribute costs several global reads: see .roles)
_READ, _WRITE, _FAIL = Operation.READ, Operation.WRITE, Outcome.FAIL
_SIZE = attrgetter("size_bytes")


class RaftNode(Dispatching, Elections, FlowControl, ReadIndex, Snapshots):
    """One Raft server driving a :class:`~seedance.models.kv.KVStore`."""

    # inputs by type / name (seedance.models.protocols.dispatch): on_message and on_timer
    MESSAGE_HANDLERS = {AppendEntries: "_on_append_entries", AppendEntriesReply: "_on_append_reply",
                        RequestVote: "_on_request_vote", RequestVoteReply: "_on_vote_reply",
                        InstallSnapshot: "_on_install_snapshot"}
    TIMER_HANDLERS = {HEARTBEAT: "_on_heartbeat", ELECTION: "_on_election_timer", VOTE_RETRY: "_on_vote_retry",
                      FLUSH: "_on_flush", WRITE: "_on_write"}

    # Slots, not an instance dict: with more than 30 attributes CPython 3.11 gives an instance a real dict, and no
    # method call on it is specialised any more (a subclass without slots, such as a test's mutant, still works)
    __slots__ = ("_acked_next", "_acked_seq", "_beat", "_buffered_from", "_compactions", "_confirmed_seq",
                 "_election_timeout_s", "_hard_dirty", "_heard", "_last_heard", "_log_writes", "_match", "_next",
                 "_pending", "_read_seq", "_reads", "_reads_blocked", "_round_sent", "_snapshot", "_unwritten_from",
                 "_vote_answered", "_votes", "_window", "commit_index", "config", "current_term", "kv",
                 "last_applied", "leader_id", "log", "node_id", "num_nodes", "peers", "quorum", "rng", "role",
                 "violations", "voted_for")

    def __init__(self, node_id: NodeId, num_nodes: int, rng: np.random.Generator,
                 config: RaftConfig | Mapping[str, Any] | None = None) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.peers = tuple(p for p in range(num_nodes) if p != node_id)
        self.rng = rng
        self.config = config if isinstance(config, RaftConfig) else RaftConfig.from_mapping(config)
        self.quorum = majority(num_nodes)
        # persistent state (Figure 2)
        self.current_term = 0
        self.voted_for: NodeId | None = None
        self.log = RaftLog()
        # volatile state
        self.commit_index = 0
        self.last_applied = 0
        self.kv = KVStore()
        self.role = FOLLOWER
        self.leader_id: NodeId | None = None
        self.violations: list[str] = []  # local invariant breaches (only mutants produce any)
        self._votes: set[NodeId] = set()
        self._vote_answered: set[NodeId] = set()  # peers that answered this candidacy's RequestVote
        self._last_heard = 0.0
        self._election_timeout_s = 0.0
        self._hard_dirty = False
        self._log_writes: list[PersistLog] = []
        self._snapshot: list[Any] | None = None  # [index, term, state] of the newest snapshot (.snapshots)
        self._compactions: list[Any] = []  # its durable writes, after the log's in _flush
        # leader state, one slot per node id (reinitialised on election): see FlowControl
        self._reset_progress()
        self._pending: dict[int, tuple[int, int, int]] = {}  # log index -> (term, client_id, request_id)
        self._buffered_from = 0  # first client entry appended but not yet sent (0: none) — group commit
        self._unwritten_from = 0  # first leader entry appended but not yet in a PersistLog (0: none) — §10.2.1
        # ReadIndex state (§6.4)
        self._read_seq = 0  # last heartbeat round started
        self._confirmed_seq = 0  # last round acknowledged by a majority
        self._acked_seq = [0] * num_nodes
        self._reads: deque[tuple[int, ClientRequest]] = deque()  # (round, request); read index <= commit
        self._reads_blocked: list[ClientRequest] = []  # waiting for an entry of this term to commit

    # ================================================================================================ inputs
    def on_start(self, now: float) -> Effects:
        return [self._arm_election(now)]

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        hard = durable.values.get(HARD_STATE_KEY)
        if hard is not None:
            self.current_term, self.voted_for = int(hard[0]), hard[1]
        writes = self._recover_log(durable)
        return [*writes, self._arm_election(now), Annotate(name="recovered", attrs={
            "term": self.current_term, "log_length": self.log.last_index})]

    def on_persisted(self, token: Any, now: float) -> Effects:
        """The runtime's durability notice for a leader's own log write (``("log", term, index)``)."""
        if isinstance(token, tuple) and len(token) == 3 and token[0] == LOG_NOTICE:
            return self._on_durable(int(token[1]), int(token[2]))
        return []

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        if self.role is not LEADER:
            return [self._not_leader(request)]
        op = request.op
        problem = None if op is _READ or op is _WRITE else validate(op, request.value)  # those two are well formed
        if problem:
            return [Reply(client_id=request.client_id, request_id=request.request_id, outcome=_FAIL,
                          error=problem)]
        cached = self.kv.cached(request.client_id, request.request_id)
        if cached is not None:
            return [self._reply(request.client_id, request.request_id, cached)]
        out: Effects = []
        if (op is _READ or op == _READ) and self.config.reads == "readindex":
            self._read_index(request, out)
            return self._flush(out)
        op_name = _OP_NAMES.get(op) or str(op)  # an Operation's value (a dict look-up: Enum.value is a property)
        entry = command_entry(self.current_term, request.client_id, request.request_id, op_name, request.key,
                              request.value)
        index = self.log.append(entry)
        self._pending[index] = (self.current_term, request.client_id, request.request_id)
        if not self._unwritten_from:
            self._unwritten_from = index
        if not self._buffered_from:  # group commit: requests queued behind this one join the same write
            self._buffered_from = index
            out.append(SetTimer(name=FLUSH, delay_s=0.0))
        return out

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []

    # ============================================================================================ replication
    def _append_noop(self) -> None:
        """§8: a new leader appends a blank entry of its term, so that it commits one promptly."""
        self._append_own(Entry(term=self.current_term))

    def _on_flush(self, now: float) -> Effects:
        """Send the buffered client entries (before they are durable, §10.2.1), then write them in a later input."""
        if not self._buffered_from:
            return []
        self._buffered_from = 0
        out: Effects = []
        if self.role is LEADER:
            last, following = self._sendable_last(), self._next  # a send moves only its own peer's next index
            for peer in self.peers:
                if following[peer] <= last and self._window_open(peer):  # it has unsent entries, and room
                    out.append(self._replicate(peer))
        if self._unwritten_from:
            out.append(SetTimer(name=WRITE, delay_s=0.0))
        return self._flush(out)

    def _on_write(self, now: float) -> Effects:
        """One PersistLog of every unwritten entry, asking for a durability notice (``on_persisted``)."""
        if not self._unwritten_from or self.role is not LEADER:
            return []
        self._write_unwritten(notify=True)
        return self._flush([])

    def _write_unwritten(self, notify: bool = False) -> int:
        first, last = self._unwritten_from, self.log.last_index
        entries = self.log.entries(first, last)
        self._log_writes.append(PersistLog(key=LOG_KEY, start=first - 1, entries=tuple(entries),  # Entry objects
                                           size_bytes=sum(map(_SIZE, entries)),
                                           notify=(LOG_NOTICE, self.current_term, last) if notify else None))
        self._unwritten_from = 0
        return last

    def _on_durable(self, term: int, index: int) -> Effects:
        """Our log is durable up to ``index`` (written in ``term``): count our own copy toward a majority."""
        if self.role is not LEADER or term != self.current_term or index <= self._match[self.node_id]:
            return []
        self._match[self.node_id] = index
        out: Effects = []
        if index > self.commit_index:
            self._advance_commit(out)
        return self._flush(out)

    def _sendable_last(self) -> int:
        """The last index the leader may send: everything flushed, durable or not (§10.2.1)."""
        return self._buffered_from - 1 if self._buffered_from else self.log.last_index

    def _append_own(self, entry: Entry) -> int:
        index = self.log.append(entry)
        if not self._unwritten_from:
            self._unwritten_from = index
        return index

    def _on_append_entries(self, src: NodeId, m: AppendEntries, now: float) -> Effects:
        out: Effects = []
        term = m.term
        if term < self.current_term:
            out.append(Send(dst=src, message=AppendEntriesReply(term=self.current_term, success=False,
                                                                read_seq=m.read_seq),
                            size_bytes=APPEND_REPLY_BYTES))
            return out
        if term > self.current_term or self.role is not FOLLOWER:
            self._become_follower(term, out, now, m.leader_id)
        self.leader_id = m.leader_id
        self._last_heard = now
        log = self.log
        prev, prev_term, entries = m.prev_log_index, m.prev_log_term, m.entries
        offset = log.offset
        if prev < offset:  # it starts inside the compacted prefix: committed there, so taken from the offset on
            drop = min(offset - prev, len(entries))
            if drop:
                prev, prev_term, entries = prev + drop, entries[drop - 1].term, entries[drop:]
            if prev < offset:  # nothing past the offset: it matches what the snapshot holds
                prev, prev_term = offset, log.offset_term
        last = log.last_index
        if prev > last:
            reply = AppendEntriesReply(term=self.current_term, success=False, conflict_index=last + 1,
                                       reject_index=m.prev_log_index, read_seq=m.read_seq)
        elif log.term_at(prev) != prev_term:
            reply = AppendEntriesReply(term=self.current_term, success=False,
                                       conflict_index=log.first_index_of_term(prev), reject_index=m.prev_log_index,
                                       read_seq=m.read_seq)
        else:
            count = len(entries)
            if count:
                self._store_entries(prev, entries, last)
            match = prev + count
            sent = m.prev_log_index + len(m.entries)
            if sent > match:
                match = sent
            commit = self.commit_index
            if m.leader_commit > commit and match > commit:
                self.commit_index = m.leader_commit if m.leader_commit < match else match
                self._apply(out)
            reply = AppendEntriesReply(term=self.current_term, success=True, match_index=match,
                                       read_seq=m.read_seq)
        out.append(Send(dst=src, message=reply, size_bytes=APPEND_REPLY_BYTES))
        return self._flush(out)

    def _store_entries(self, prev: int, entries: tuple[Entry, ...], last: int) -> None:
        """§5.3: ``entries`` follow ``prev``, which matches: skip those held already, delete a conflicting suffix
        (never a matching one), append the rest and mark them for the disk."""
        log = self.log
        count, index, k = len(entries), prev + 1, 0
        while k < count and index <= last and log.term_at(index) == entries[k].term:
            index += 1
            k += 1
        if k == count:
            return
        if index <= last:
            if index <= self.commit_index:
                self.violations.append(
                    f"node {self.node_id}: truncating committed index {index} (commit {self.commit_index})"
                )
            log.truncate(index - 1)
        new = tuple(entries[k:])
        log.extend(new)
        if self.commit_index > log.last_index:  # only after a breach recorded above (mutants)
            self.commit_index = self.last_applied = log.last_index
        self._log_writes.append(PersistLog(key=LOG_KEY, start=index - 1, entries=new, size_bytes=sum(map(_SIZE, new))))

    # ================================================================================================ commit
    def _may_commit(self, index: int) -> bool:
        """§5.4.2: only an entry of the current term is committed by counting replicas."""
        return self.log.term_at(index) == self.current_term

    def _advance_commit(self, out: Effects) -> None:
        """Commit what a majority stores durably (§5.3, §5.4.2), never past our own durable copy (so every Reply
        follows the local write; §10.2.1 would allow committing on a majority of followers alone)."""
        own = self._match[self.node_id]
        if own <= self.commit_index:  # the candidate below is at most our own durable index: nothing to commit
            return
        candidate = committed_index(self._match)
        if candidate > own:
            candidate = own
        if candidate > self.commit_index and self._may_commit(candidate):
            self.commit_index = candidate
            self._apply(out)
            if self._reads_blocked:
                blocked, self._reads_blocked = self._reads_blocked, []
                for request in blocked:
                    self._read_index(request, out)

    def _apply(self, out: Effects) -> None:
        """Apply the entries up to the commit index; the leader replies for those it appended."""
        index, top = self.last_applied, self.commit_index
        if index < top and not self._pending:  # a follower (or a leader with no client waiting): no replies
            self.kv.apply_commands(self.log.entries(index + 1, top))
            self.last_applied = top
        elif index < top:
            apply, pending = self.kv.apply, self._pending
            for entry in self.log.entries(index + 1, top):
                index += 1
                result = None
                if entry.op is not None:
                    result = apply(entry.client_id, entry.request_id, entry.op, entry.key, entry.value)
                if pending:
                    waiting = pending.pop(index, None)
                    if waiting is not None:
                        out.append(self._answer(index, entry, result, waiting))
            self.last_applied = top
        self._maybe_snapshot()

    def _answer(self, index: int, entry: Entry, result: Result | None, waiting: tuple[int, int, int]) -> Reply:
        """The Reply to the client whose command the leader appended at ``index`` (now applied as ``entry``)."""
        term, client_id, request_id = waiting
        if result is not None and entry.term == term and entry.client_id == client_id \
                and entry.request_id == request_id:
            return Reply(client_id=client_id, request_id=request_id, outcome=result.outcome, value=result.value,
                         error=result.error)
        # a leader never loses its own entries while it leads: only a broken node gets here
        self.violations.append(f"node {self.node_id}: index {index} applied another entry than the one it "
                               f"appended for ({client_id}, {request_id})")
        return Reply(client_id=client_id, request_id=request_id, outcome=Outcome.INFO, error="superseded")

    def _abandon_pending(self, out: Effects) -> None:
        """A deposed leader's pending requests: their entries may or may not commit later — INFO, now."""
        for _, client_id, request_id in self._pending.values():
            out.append(Reply(client_id=client_id, request_id=request_id, outcome=Outcome.INFO,
                             error="leadership-lost"))
        self._pending.clear()

    # ================================================================================================ helpers
    def _not_leader(self, request: ClientRequest) -> Reply:
        return Reply(client_id=request.client_id, request_id=request.request_id, outcome=_FAIL,
                     error="not-leader", leader_hint=self.leader_id)

    @staticmethod
    def _reply(client_id: int, request_id: int, result: Result) -> Reply:
        return Reply(client_id=client_id, request_id=request_id, outcome=result.outcome, value=result.value,
                     error=result.error)

    def _hard_state(self) -> list[Any]:
        return [self.current_term, self.voted_for]

    def _flush(self, out: Effects) -> Effects:
        """Durable writes of this call first (term/vote, then log), then everything else in order (Figure 2)."""
        if not self._hard_dirty and not self._log_writes and not self._compactions:
            return out
        head: Effects = []
        if self._hard_dirty:
            head.append(Persist(key=HARD_STATE_KEY, value=self._hard_state(), size_bytes=16))
            self._hard_dirty = False
        if self._log_writes:
            head.extend(self._log_writes)
            self._log_writes = []
        if self._compactions:  # a snapshot and the compaction after it (.snapshots): after the log's writes
            head.extend(self._compactions)
            self._compactions = []
        head.extend(out)
        return head

    def check_invariants(self) -> list[str]:
        """This node's local invariants (Figure 2's state relations); cross-node ones are in :mod:`.invariants`."""
        found = list(self.violations)
        if not self.last_applied <= self.commit_index <= self.log.last_index:
            found.append(f"node {self.node_id}: lastApplied {self.last_applied} <= commitIndex {self.commit_index} "
                         f"<= last log index {self.log.last_index} does not hold")
        if self.role is LEADER and self.voted_for != self.node_id:
            found.append(f"node {self.node_id}: leader of term {self.current_term} did not vote for itself")
        if self.log.last_term > self.current_term:
            found.append(f"node {self.node_id}: log holds term {self.log.last_term} > currentTerm {self.current_term}")
        return found

    def __repr__(self) -> str:
        return (f"RaftNode({self.node_id}, {self.role.value}, term={self.current_term}, "
                f"log={self.log.last_index}, commit={self.commit_index})")
