"""Leader Completeness (§5.4) is judged by the term in which an entry was committed, not the entry's own term.

A deposed leader that has not heard of its successor may lack an entry of an old term that the successor committed
in a later term: §5.4 only promises the entry to leaders of *later* terms than the commit. Found by the simulator's
leader-isolation faults, where the old check raised false alarms on correct Raft.
"""

from dataclasses import dataclass, field

from seedance.models.protocols.raft import invariants
from seedance.models.protocols.raft.log import RaftLog
from seedance.models.protocols.raft.messages import Entry
from seedance.models.protocols.raft.node import Role


@dataclass
class Snapshot:
    """What the invariant checks read of a node (they are duck-typed over these fields)."""

    node_id: int
    role: Role
    current_term: int
    log: RaftLog
    commit_index: int
    violations: list = field(default_factory=list)


def _entries(*terms):
    return [Entry(term=t, client_id=1, request_id=i, op="write", key="k", value=i) for i, t in enumerate(terms)]


def test_a_deposed_leader_may_lack_an_entry_its_successor_committed_later():
    successor = Snapshot(0, Role.LEADER, 9, RaftLog(_entries(1, 6, 9)), commit_index=3)
    deposed = Snapshot(1, Role.LEADER, 7, RaftLog(_entries(1, 7)), commit_index=1)
    monitor = invariants.Monitor()
    assert monitor.observe([successor, deposed]) == []
    assert not [v for v in invariants.check([successor, deposed]) if v.startswith("Leader Completeness")]


def test_a_later_leader_lacking_a_committed_entry_is_a_violation():
    committer = Snapshot(0, Role.FOLLOWER, 6, RaftLog(_entries(1, 6)), commit_index=2)
    later = Snapshot(1, Role.LEADER, 8, RaftLog(_entries(1, 8)), commit_index=1)
    monitor = invariants.Monitor()
    assert any(v.startswith("Leader Completeness") for v in monitor.observe([committer, later]))
    assert any(v.startswith("Leader Completeness") for v in invariants.check([committer, later]))


def test_the_monitor_remembers_the_commit_term_at_first_sight():
    """Seen committed in term 6, the entry is owed to the leader of term 8 even after the witness moved on."""
    monitor = invariants.Monitor()
    assert monitor.observe([Snapshot(0, Role.FOLLOWER, 6, RaftLog(_entries(1, 6)), commit_index=2)]) == []
    later = Snapshot(1, Role.LEADER, 8, RaftLog(_entries(1, 8)), commit_index=1)
    witness_now = Snapshot(0, Role.FOLLOWER, 8, RaftLog(_entries(1, 6)), commit_index=2)
    assert any(v.startswith("Leader Completeness") for v in monitor.observe([witness_now, later]))
