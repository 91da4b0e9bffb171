"""Linearizable reads by ReadIndex (§6.4): the :class:`ReadIndex` part of a Raft node.

Rules: a leader serves a read only after (1) an entry of its own term has committed, so its commit index is at least
every committed index (§8's no-op makes this prompt); (2) it records its commit index as the read index; (3) a
majority has acknowledged an AppendEntries sent after the read arrived (heartbeat round ``read_seq``), proving it
was still leader; (4) its state machine has applied the read index (immediate here: commits are applied at once).
Reads arriving during a round share the next one; a deposed leader's pending reads fail (reads have no effect).
"""

from __future__ import annotations

from seedance.models.protocols.contract import ClientRequest, Effects, Outcome, Reply
from seedance.models.protocols.raft.quorum import committed_index

_OK = Outcome.OK  # a global: reading an Enum class's attribute costs more (see .roles)


class ReadIndex:
    """Mixin of :class:`~seedance.models.protocols.raft.node.RaftNode`: ReadIndex rounds."""

    __slots__ = ()  # the node's slots hold its state (RaftNode.__slots__)

    def _read_index(self, request: ClientRequest, out: Effects) -> None:
        if self.log.term_at(self.commit_index) != self.current_term:
            self._reads_blocked.append(request)  # no entry of this term committed yet: commit index may be stale
            return
        if self.quorum == 1:
            out.append(self._read_reply(request))
            return
        if self._confirmed_seq < self._read_seq:  # a round is in flight: join the next one
            self._reads.append((self._read_seq + 1, request))
            return
        self._reads.append((self._start_read_round(out), request))

    def _start_read_round(self, out: Effects) -> int:
        """Start heartbeat round ``read_seq + 1``: idle peers get an AppendEntries now; a peer with one in flight
        gets the round in the AppendEntries its acknowledgement triggers (piggybacked on replication)."""
        self._read_seq += 1
        self._acked_seq[self.node_id] = self._read_seq
        out.extend(self._replicate(p) for p in self.peers if not self._window[p])
        return self._read_seq

    def _confirm_reads(self, out: Effects) -> None:
        confirmed = committed_index(self._acked_seq)
        if confirmed <= self._confirmed_seq:
            return
        self._confirmed_seq = confirmed
        reads = self._reads
        while reads and reads[0][0] <= confirmed:
            out.append(self._read_reply(reads.popleft()[1]))
        if reads:  # reads that arrived during the confirmed round
            self._start_read_round(out)

    def _read_reply(self, request: ClientRequest) -> Reply:
        return Reply(client_id=request.client_id, request_id=request.request_id, outcome=_OK,
                     value=self.kv.read(request.key))

    def _fail_reads(self, out: Effects) -> None:
        """Pending reads of a deposed leader had no effect: a definite FAIL."""
        for _, request in self._reads:
            out.append(self._not_leader(request))
        for request in self._reads_blocked:
            out.append(self._not_leader(request))
        self._reads.clear()
        self._reads_blocked = []

