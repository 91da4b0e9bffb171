"""Log Matching (§5.3) in the Raft monitor's full check: two logs that hold the same term at an index must hold
equal entries up to it.

The check chains each log's prefixes into hashes; a log's prefix equal to the first log's takes the first log's
hashes (found by list comparison) and is chained only from where it departs. The property test holds it against the
plain chained pass over every entry of every log, on logs that share entry objects, hold equal copies, depart at
random points and are compacted at different offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.models.protocols.raft import invariants
from seedance.models.protocols.raft.log import RaftLog
from seedance.models.protocols.raft.messages import Entry
from seedance.models.protocols.raft.node import Role


@dataclass(eq=False)  # hashed by identity, as the real nodes are
class Node:
    node_id: int
    log: RaftLog
    role: Role = Role.FOLLOWER
    current_term: int = 9
    commit_index: int = 0
    violations: list = field(default_factory=list)


def _plain_log_matching(nodes):
    """Every entry of every log chained, as the check did before it shared the first log's prefix."""
    first, pairs, base = {}, {}, max((node.log.offset for node in nodes), default=0)
    for node in nodes:
        chain = 0
        if node.log.last_index <= base:
            continue
        for index, entry in enumerate(islice(node.log, base - node.log.offset, None), start=base + 1):
            chain = hash((chain, invariants._chain(0, entry)))
            held = first.setdefault((index, entry.term), (chain, node))
            if held[0] != chain and held[1] is not node:
                pairs.setdefault((held[1], node), None)
    return [(a.node_id, b.node_id) for a, b in pairs]


def _entry(term, i, value=None):
    return Entry(term=term, client_id=1, request_id=i, op="write", key="k", value=i if value is None else value)


def test_logs_agreeing_on_a_term_but_not_before_it_are_reported():
    shared = [_entry(1, i) for i in range(6)]
    other = shared[:2] + [_entry(1, 2, value=99)] + shared[3:]  # index 3 differs, the terms all agree
    nodes = [Node(0, RaftLog(shared)), Node(1, RaftLog(list(shared))), Node(2, RaftLog(other))]
    assert invariants._log_matching(nodes) == [
        "Log Matching (§5.3): nodes 0 and 2 agree on term at index 6 but differ at index 3"]
    assert invariants._log_matching(nodes[:2]) == []


def test_logs_departing_in_a_later_term_are_not_a_violation():
    shared = [_entry(1, i) for i in range(4)]
    nodes = [Node(0, RaftLog(shared + [_entry(2, 4)])), Node(1, RaftLog(shared + [_entry(3, 4), _entry(3, 5)]))]
    assert invariants._log_matching(nodes) == []


@st.composite
def _logs(draw):
    length = draw(st.integers(1, 30))
    terms = sorted(draw(st.lists(st.integers(1, 4), min_size=length, max_size=length)))
    base = [_entry(t, i) for i, t in enumerate(terms)]
    nodes = []
    for node_id in range(draw(st.integers(1, 5))):
        entries = list(base[:draw(st.integers(0, length))])
        for i in draw(st.lists(st.integers(0, length - 1), max_size=3)):  # equal copies, other values
            if i < len(entries):
                entries[i] = _entry(entries[i].term, i, value=draw(st.sampled_from([i, 1000 + i])))
        tail_term = draw(st.integers(1, 6))
        entries += [_entry(max(tail_term, entries[-1].term if entries else 1), len(entries) + k)
                    for k in range(draw(st.integers(0, 4)))]
        offset = draw(st.integers(0, 3)) if len(entries) > 3 else 0
        log = RaftLog(entries[offset:], offset=offset, offset_term=entries[offset - 1].term if offset else 0)
        nodes.append(Node(node_id, log))
    return nodes


@settings(max_examples=300, deadline=None)
@given(_logs())
def test_the_shared_prefix_changes_nothing_the_check_finds(nodes):
    assert invariants._log_matching(nodes) == _expected(nodes)


def _expected(nodes):
    """The reports of the plain pass's pairs: each pair compared entry by entry below the highest index where both
    hold the same term."""
    base = max((node.log.offset for node in nodes), default=0)
    found = []
    for a_id, b_id in _plain_log_matching(nodes):
        a, b = nodes[a_id].log, nodes[b_id].log
        top = min(a.last_index, b.last_index)
        while top > base and a.term_at(top) != b.term_at(top):
            top -= 1
        for index in range(top, base, -1):
            if a.entry(index) != b.entry(index):
                found.append(f"Log Matching (§5.3): nodes {a_id} and {b_id} agree on term at index {top} but differ "
                             f"at index {index}")
                break
    return found
