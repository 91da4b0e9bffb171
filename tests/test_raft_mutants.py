"""Planted bugs are caught: each mutant breaks a safety property in a constructed scenario; correct Raft does not."""

from __future__ import annotations

import pytest

from raft_harness import Cluster
from raft_mutants import MUTANTS, NoLogCheckVoteRaft, OldTermCommitRaft, VoteBeforePersistRaft
from seedance.models.protocols.raft import RaftNode, Role
from seedance.models.protocols.raft.messages import AppendEntries, RequestVote, RequestVoteReply


def _to(*dsts):
    return lambda src, dst, m: dst in dsts


def figure8(node_class) -> Cluster:
    """The scenario of Figure 8 (§5.4.2), with each leader's §8 no-op as its entry and batches of one entry.

    S1..S5 are nodes 0..4; a term-1 leader first commits index 1 everywhere.
    (a) S1 leads term 2 and replicates index 2 to S2 only.
    (b) S1 crashes; S5 leads term 3 with votes of S3, S4 and itself, and appends its own index 2.
    (c) S1 restarts, leads term 4 and replicates its term-2 entry at index 2 to S3: index 2 is now on a majority
        (S1, S2, S3) — and S1 crashes before its term-4 entry reaches S3.
    (d) S5 stands again and wins (its last term 3 beats term 2) and overwrites index 2 everywhere.
    """
    c = Cluster(5, seed=0, node_class=node_class, config={"max_batch_entries": 1}).start()
    c.elect(1)  # term 1 (before the figure starts): everyone holds index 1, committed
    c.fire(1, "heartbeat")
    c.deliver_all()
    c.crash(1)
    c.recover(1)
    c.elect(0, where=lambda s, d, m: not (isinstance(m, AppendEntries) and d not in (1,)))  # (a) term 2
    c.drop()
    assert c.nodes[0].role is Role.LEADER and c.nodes[1].log.last_index == 2 and c.nodes[2].log.last_index == 1
    c.crash(0)  # (b)
    c.elect(4, where=lambda s, d, m: isinstance(m, (RequestVote, RequestVoteReply)) and d in (2, 3, 4))
    c.drop()
    assert c.nodes[4].role is Role.LEADER and c.nodes[4].log.term_at(2) == 3
    c.crash(4)
    c.recover(0)  # (c)
    for _ in range(10):
        if c.nodes[0].role is Role.LEADER:
            break
        c.fire(0, "election")
        c.deliver_all(where=lambda s, d, m: not isinstance(m, AppendEntries) and d in (0, 1, 2))
    c.drop()
    assert c.nodes[0].current_term == 4
    # S1's heartbeat: S2 takes the term-4 entry; S3 lacks index 2, reports its conflict index and gets index 2
    # (batches of one) — the term-4 entry that would follow it to S3 is held back.
    c.fire(0, "heartbeat")
    c.deliver_all(where=lambda s, d, m: {s, d} <= {0, 1, 2} and not (
        isinstance(m, AppendEntries) and d == 2 and c.nodes[2].log.last_index >= 2))
    c.drop()
    assert c.nodes[2].log.term_at(2) == 2  # the term-2 entry is on S1, S2, S3: a majority
    c.crash(0)
    c.recover(4)  # (d)
    for _ in range(10):
        if c.nodes[4].role is Role.LEADER:
            break
        c.fire(4, "election")
        c.deliver_all(where=lambda s, d, m: d in (1, 2, 3, 4))
    c.fire(4, "heartbeat")
    c.deliver_all(where=lambda s, d, m: d in (1, 2, 3, 4))
    c.fire(4, "heartbeat")
    c.deliver_all(where=lambda s, d, m: d in (1, 2, 3, 4))
    return c


def test_figure8_correct_raft_never_commits_an_old_term_entry_by_counting():
    """§5.4.2: S1 must not commit index 2 (term 2) in term 4 though a majority stores it; S5 may overwrite it."""
    c = figure8(RaftNode)
    assert c.violations == [] and c.check() == []
    assert all(n.log.term_at(2) == 3 for n in c.nodes.values())  # S5's entry won, and nothing committed was lost


def test_figure8_old_term_commit_mutant_loses_a_committed_entry():
    c = figure8(OldTermCommitRaft)
    assert any("committed" in v for v in c.violations), c.violations
    assert any(v.startswith(("State Machine Safety", "Leader Completeness")) or "truncating committed" in v
               for v in c.violations)


def stale_candidate(node_class) -> Cluster:
    """Node 2 misses a committed write; after the leader crashes node 2 asks node 1 for its vote (§5.4.1)."""
    c = Cluster(3, seed=1, node_class=node_class).start()
    c.elect(0)
    c.isolate(2)
    c.request(0, "write", "k", "committed")
    c.deliver_all()
    assert c.reply_to(1, 1).outcome.value == "ok"
    c.heal()
    c.crash(0)
    c.elect(2)
    c.fire(2, "heartbeat") if c.nodes[2].role is Role.LEADER else None
    c.deliver_all()
    return c


def test_election_restriction_keeps_a_stale_candidate_out():
    c = stale_candidate(RaftNode)
    assert c.nodes[2].role is not Role.LEADER and c.violations == [] and c.check() == []


def test_vote_without_log_check_mutant_elects_a_leader_missing_committed_entries():
    c = stale_candidate(NoLogCheckVoteRaft)
    assert c.nodes[2].role is Role.LEADER
    assert any(v.startswith("Leader Completeness") for v in c.violations), c.violations


def double_vote(node_class) -> Cluster:
    """Node 2 votes for node 0 in term 1, crashes and recovers; node 1 then asks it for a vote in term 1 (§5.2)."""
    c = Cluster(3, seed=2, node_class=node_class).start()
    c.fire(0, "election")
    c.drop(_to(1))
    c.deliver(_to(2))  # node 2 grants its term-1 vote to node 0 ...
    c.crash(2)  # ... and crashes before/after persisting it
    c.recover(2)
    c.fire(1, "election")  # node 1 stands in term 1 as well
    c.deliver_all(where=lambda s, d, m: not isinstance(m, AppendEntries))
    return c


def test_correct_raft_remembers_its_vote_across_a_crash():
    c = double_vote(RaftNode)
    assert len(c.leaders()) == 1 and c.violations == [] and c.durability_errors == []


def test_vote_before_persist_mutant_elects_two_leaders_in_one_term():
    c = double_vote(VoteBeforePersistRaft)
    assert [n.node_id for n in c.leaders()] == [0, 1] and {n.current_term for n in c.leaders()} == {1}
    assert any(v.startswith("Election Safety") for v in c.violations), c.violations
    assert c.durability_errors  # the generic persistence check flags the vote sent before it was durable


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_specs_build_their_class(name):
    import numpy as np
    node = MUTANTS[name].factory(0, 3, np.random.default_rng(0), {})
    assert isinstance(node, RaftNode) and type(node) is not RaftNode
