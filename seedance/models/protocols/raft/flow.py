"""The leader's per-follower replication progress and flow control: the :class:`FlowControl` part of a Raft node.

Raft's paper leaves flow control to the implementation (§5.3: "the leader retries AppendEntries indefinitely");
this module is etcd/raft's ``Progress`` and ``Inflights`` in miniature. Per follower the leader keeps

* ``_match``: the highest index the follower acknowledged (§5.3's matchIndex);
* ``_next``: the next index to send (nextIndex; advanced on send, so several batches may be pipelined);
* ``_acked_next``: the probe point — where to resend from after a loss: ``match + 1`` once an acknowledgement has
  come, the leader's last index + 1 on election (§5.3's optimistic start), or what a rejection taught;
* ``_window``: the AppendEntries *carrying entries* that are in flight, oldest first, each as (its
  ``prev_log_index``, the last index it carries, the heartbeat number when it was sent); at most ``max_inflight``.

Rules:

1. Only messages carrying entries occupy the window. A heartbeat, or a ReadIndex round (§6.4), sent while the
   window is full carries no entries and starts at the probe point (``prev_log_index = acked_next - 1``), which the
   follower holds: it can never be rejected for entries still on their way, and it occupies nothing.
2. A slot is freed by an acknowledgement that covers it (``match_index >=`` its last index), never by counting
   replies: a duplicated or reordered reply frees nothing that is still in flight, so duplicates cannot open the
   window for more sends (the storm of a counting window).
3. A rejection names the ``prev_log_index`` it rejects (``reject_index``). It is acted on — window emptied,
   ``_next`` moved back to the follower's conflict point, the batch from there sent — only if it is news: above
   ``_match`` and the ``prev_log_index`` of a message in the window or of the probe point. Acting on it replaces
   both, so a duplicate or an older rejection changes nothing.
4. Loss: at every heartbeat, a window is presumed lost — emptied, ``_next`` reset to the probe point, and the
   heartbeat resends — if the follower has sent no reply at all since the previous heartbeat (it is cut off or its
   replies are), or if its oldest message has been out for a whole heartbeat interval without being acknowledged
   although replies do come (that message alone was lost). So a lost message costs at most two heartbeat
   intervals, once; the window never stays full.
5. A ReadIndex round reaches each follower once (``_round_sent``): in the next message to it, or in an empty one
   sent at once when nothing is in flight to it.
"""

from __future__ import annotations

from collections import deque

from seedance.models.protocols.contract import Effects, NodeId, Send, SetTimer
from seedance.models.protocols.raft.messages import HEADER_BYTES, AppendEntries, AppendEntriesReply
from seedance.models.protocols.raft.roles import HEARTBEAT, LEADER


class FlowControl:
    """Mixin of :class:`~seedance.models.protocols.raft.node.RaftNode`: what each follower has, what to send next."""

    __slots__ = ()  # the node's slots hold its state (RaftNode.__slots__)

    def _reset_progress(self) -> None:
        """A new leader's view of its followers (§5.3: nextIndex starts just after the leader's last entry)."""
        n, last = self.num_nodes, self.log.last_index
        self._next = [last + 1] * n
        self._acked_next = [last + 1] * n
        self._match = [0] * n
        self._window: list[deque[tuple[int, int, int]]] = [deque() for _ in range(n)]
        self._round_sent = [0] * n
        self._heard = [False] * n  # a reply came since the last heartbeat
        self._beat = 0

    def _has_unsent(self, peer: NodeId) -> bool:
        return self._next[peer] <= self._sendable_last()

    def _window_open(self, peer: NodeId) -> bool:
        return len(self._window[peer]) < self.config.max_inflight

    def _replicate(self, peer: NodeId) -> Send:
        """One AppendEntries to ``peer``: its next batch if there is one and the window has room (pipelining),
        else an empty one from the probe point (heartbeat, read round) that occupies no slot (rule 1)."""
        log, config, window = self.log, self.config, self._window[peer]
        first = self._next[peer]
        room = len(window) < config.max_inflight
        if first <= log.offset and room:
            return self._snapshot_message(peer)  # it needs entries compacted away (.snapshots)
        buffered = self._buffered_from  # _sendable_last, without its call
        sendable = buffered - 1 if buffered else log.last_index
        if first <= sendable and room:
            last = first + config.max_batch_entries - 1
            if last > sendable:
                last = sendable
            entries, size = log.batch(first, last)  # every follower at ``first`` shares the batch
            size += HEADER_BYTES
            prev = first - 1
            self._next[peer] = last + 1
            window.append((prev, last, self._beat))
        else:
            entries, size = (), HEADER_BYTES
            prev = self._acked_next[peer] - 1
            if prev < log.offset:  # the probe point was compacted: the offset, which every node holds committed
                prev = log.offset
        self._round_sent[peer] = self._read_seq
        message = AppendEntries(term=self.current_term, leader_id=self.node_id, prev_log_index=prev,
                                prev_log_term=log.term_at(prev), entries=entries,
                                leader_commit=self.commit_index, read_seq=self._read_seq)
        return Send(dst=peer, message=message, size_bytes=size)

    def _on_heartbeat(self, now: float) -> Effects:
        if self.role is not LEADER:
            return []
        self._beat += 1
        out: Effects = []
        for peer in self.peers:
            window = self._window[peer]
            if window and (not self._heard[peer] or window[0][2] <= self._beat - 2):  # presumed lost (rule 4)
                window.clear()
                self._next[peer] = self._acked_next[peer]
            self._heard[peer] = False
            out.append(self._replicate(peer))
        out.append(SetTimer(name=HEARTBEAT, delay_s=self.config.heartbeat_s))
        return out

    def _on_append_reply(self, src: NodeId, m: AppendEntriesReply, now: float) -> Effects:
        if m.term > self.current_term:
            out: Effects = []
            self._become_follower(m.term, out, now)
            return self._flush(out)
        if self.role is not LEADER or m.term != self.current_term:
            return []
        out = []
        self._heard[src] = True
        if m.read_seq > self._acked_seq[src]:
            self._acked_seq[src] = m.read_seq
            if m.read_seq > self._confirmed_seq:
                self._confirm_reads(out)
        window = self._window[src]
        if m.success:
            if m.match_index > self._match[src]:
                self._match[src] = m.match_index
                if m.match_index > self.commit_index:
                    self._advance_commit(out)
            match = self._match[src]
            while window and window[0][1] <= match:  # rule 2: freed by coverage, not by counting replies
                window.popleft()
            if self._next[src] <= match:
                self._next[src] = match + 1
            if self._acked_next[src] <= match:
                self._acked_next[src] = match + 1
        elif m.reject_index > self._match[src] and (m.reject_index == self._acked_next[src] - 1 or any(
                slot[0] == m.reject_index for slot in window)):  # rule 3: news
            self._next[src] = max(self._match[src] + 1, min(m.conflict_index, self._next[src]))
            self._acked_next[src] = self._next[src]
            window.clear()
        buffered = self._buffered_from  # _has_unsent and _window_open, without their calls
        sendable = buffered - 1 if buffered else self.log.last_index
        if (self._next[src] <= sendable and len(window) < self.config.max_inflight) or \
                (self._round_sent[src] < self._read_seq and not window):
            out.append(self._replicate(src))  # more entries, or a read round this peer has not been sent (rule 5)
        return self._flush(out)
