"""Leader election (§5.2) with the election restriction (§5.4.1): the :class:`Elections` part of a Raft node.

Rules: a follower or candidate that hears from no leader for a randomized election timeout (drawn from the node's
injected generator) stands for the next term, votes for itself and asks every peer, re-asking silent peers every
heartbeat interval (§5.1: RPCs are retried); a server grants one vote per term, first come first served, and only
to a candidate whose log is at least as up to date as its own (last term, then last index); a majority makes the
candidate leader. Any message of a newer term turns a server into a follower of that term. Term and vote changes
are marked for persistence; :meth:`RaftNode._flush` writes them before anything is sent.
"""

from __future__ import annotations

from seedance.models.protocols.contract import Annotate, CancelTimer, Effects, NodeId, Send, SetTimer
from seedance.models.protocols.raft.messages import (
    REQUEST_VOTE_BYTES, REQUEST_VOTE_REPLY_BYTES, RequestVote, RequestVoteReply,
)
from seedance.models.protocols.raft.roles import (
    CANDIDATE, ELECTION, FLUSH, FOLLOWER, HEARTBEAT, LEADER, VOTE_RETRY, WRITE,
)


class Elections:
    """Mixin of :class:`~seedance.models.protocols.raft.node.RaftNode`: election timers, votes, role changes."""

    __slots__ = ()  # the node's slots hold its state (RaftNode.__slots__)

    def _draw_timeout(self) -> float:
        cfg = self.config
        return float(self.rng.uniform(cfg.election_timeout_s_min, cfg.election_timeout_s_max))

    def _arm_election(self, now: float) -> SetTimer:
        self._last_heard = now
        self._election_timeout_s = self._draw_timeout()
        return SetTimer(name=ELECTION, delay_s=self._election_timeout_s)

    def _on_election_timer(self, now: float) -> Effects:
        if self.role is LEADER:
            return []
        deadline = self._last_heard + self._election_timeout_s
        if now < deadline:
            return [SetTimer(name=ELECTION, delay_s=deadline - now)]
        return self._start_election(now)

    def _start_election(self, now: float) -> Effects:
        self.current_term += 1
        self.role = CANDIDATE
        self.voted_for = self.node_id
        self.leader_id = None
        self._hard_dirty = True
        self._votes = {self.node_id}
        self._vote_answered = set()
        out: Effects = [Annotate(name="election", attrs={"term": self.current_term}), self._arm_election(now)]
        if len(self._votes) >= self.quorum:
            self._become_leader(out)
            return self._flush(out)
        self._request_votes(self.peers, out)
        out.append(SetTimer(name=VOTE_RETRY, delay_s=self.config.heartbeat_s))
        return self._flush(out)

    def _request_votes(self, peers: tuple[NodeId, ...] | list[NodeId], out: Effects) -> None:
        request = RequestVote(term=self.current_term, candidate_id=self.node_id,
                              last_log_index=self.log.last_index, last_log_term=self.log.last_term)
        out.extend(Send(dst=p, message=request, size_bytes=REQUEST_VOTE_BYTES) for p in peers)

    def _on_vote_retry(self, now: float) -> Effects:
        """§5.1: RPCs are retried when no response comes in time — a lost RequestVote must not cost an election."""
        if self.role is not CANDIDATE:
            return []
        out: Effects = []
        self._request_votes([p for p in self.peers if p not in self._vote_answered], out)
        out.append(SetTimer(name=VOTE_RETRY, delay_s=self.config.heartbeat_s))
        return out

    def _log_up_to_date(self, last_log_term: int, last_log_index: int) -> bool:
        """§5.4.1: the candidate's log is at least as up to date as ours (compare last terms, then lengths)."""
        my_term = self.log.last_term
        return last_log_term > my_term or (last_log_term == my_term and last_log_index >= self.log.last_index)

    def _on_request_vote(self, src: NodeId, m: RequestVote, now: float) -> Effects:
        out: Effects = []
        if m.term > self.current_term:
            self._become_follower(m.term, out, now)
        granted = False
        if (m.term == self.current_term and self.voted_for in (None, m.candidate_id)
                and self._log_up_to_date(m.last_log_term, m.last_log_index)):
            granted = True
            if self.voted_for is None:
                self.voted_for = m.candidate_id
                self._hard_dirty = True
            self._last_heard = now  # granting a vote restarts the election timer (Figure 2, Followers)
        out.append(Send(dst=src, message=RequestVoteReply(term=self.current_term, vote_granted=granted),
                        size_bytes=REQUEST_VOTE_REPLY_BYTES))
        return self._flush(out)

    def _on_vote_reply(self, src: NodeId, m: RequestVoteReply, now: float) -> Effects:
        out: Effects = []
        if m.term > self.current_term:
            self._become_follower(m.term, out, now)
            return self._flush(out)
        if self.role is not CANDIDATE or m.term != self.current_term:
            return []
        self._vote_answered.add(src)
        if not m.vote_granted:
            return []
        self._votes.add(src)
        if len(self._votes) >= self.quorum:
            self._become_leader(out)
        return self._flush(out)

    def _become_follower(self, term: int, out: Effects, now: float, leader: NodeId | None = None) -> None:
        """Adopt ``term`` (newer than ours, or ours with a known ``leader``) and step down."""
        if term > self.current_term:
            self.current_term = term
            self.voted_for = None
            self._hard_dirty = True
        was_leader = self.role is LEADER
        self.role = FOLLOWER
        if was_leader:
            self.leader_id = leader
            out.append(CancelTimer(name=HEARTBEAT))
            out.append(self._arm_election(now))
            out.append(Annotate(name="stepped-down", attrs={"term": self.current_term}))
            self._fail_reads(out)
            self._abandon_pending(out)
            if self._buffered_from:
                self._buffered_from = 0
                out.append(CancelTimer(name=FLUSH))
            if self._unwritten_from:  # entries in our log must be durable before we act as a follower (§10.2.1)
                self._write_unwritten()
                out.append(CancelTimer(name=WRITE))

    def _become_leader(self, out: Effects) -> None:
        self.role = LEADER
        self.leader_id = self.node_id
        n = self.num_nodes
        self._reset_progress()
        self._acked_seq = [0] * n
        self._read_seq = self._confirmed_seq = 0
        self._append_noop()
        out.append(Annotate(name="became-leader", attrs={"term": self.current_term}))
        out.extend(self._replicate(p) for p in self.peers)  # the no-op goes out before it is durable (§10.2.1)
        out.append(SetTimer(name=HEARTBEAT, delay_s=self.config.heartbeat_s))
        out.append(SetTimer(name=WRITE, delay_s=0.0))

