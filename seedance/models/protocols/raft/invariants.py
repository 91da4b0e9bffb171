"""Raft's safety properties (Figure 3) as checks over a set of nodes, for unit tests, the simulator and campaigns.

* Election Safety (§5.2): at most one leader per term.
* Log Matching (§5.3): two logs with an entry of the same index and term are identical up to that index.
* Leader Completeness (§5.4): a leader's log holds every entry committed in an earlier (or its own) term. What
  counts is the term in which the entry was *committed*, not the entry's own term: a deposed leader of term 7 that
  has not yet heard of its successor may lack an entry of term 6 that the leader of term 9 committed. The commit
  term is taken as the current term of the node seen holding the entry committed (the smallest such term in
  :func:`check`; the observing node's term at first sight in :class:`Monitor`). That is never below the true commit
  term, so the check has no false alarms; observed after every step, it is exact.
* State Machine Safety (§5.4.3): no two nodes apply different entries at the same index.

:func:`check` looks at one instant. A crash wipes a node's volatile state, so some breaches are visible only over
time: :class:`Monitor` remembers every (term → leader) and (index → committed entry) it has seen and reports a breach
even if the evidence has since been lost. Each returns human-readable violation strings (empty: all hold).
Nodes are duck-typed: ``node_id``, ``role``, ``current_term``, ``log``, ``commit_index`` and ``violations``.

Log compaction (§7): entries up to a log's ``offset`` are in its node's snapshot, so the checks look at the entries
each log still holds: Log Matching from the highest offset of the logs compared, State Machine Safety and Leader
Completeness above the node's own offset (an entry a leader compacted was committed and applied). The monitor keeps
the committed entries above the lowest offset of the nodes it watches, so its memory follows the logs' (a node that
recovers from an older snapshot has its entries below that floor recorded again, not compared).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

from seedance.models.protocols.monitoring import NodeMonitor, progress
from seedance.models.protocols.raft.node import Role

LEADER = Role.LEADER  # a global: reading an Enum class's attribute goes through the metaclass (Python 3.11)


_PRUNE_EVERY = 4096  # the committed entries below the floor are forgotten each time this many more are committed


def _committed(node: Any, index: int) -> Any:
    return node.log.entry(index)


def check(nodes: Iterable[Any]) -> list[str]:
    """Violations of Raft's safety properties visible in the current state of ``nodes``."""
    nodes = list(nodes)
    found: list[str] = []
    for node in nodes:
        local = getattr(node, "check_invariants", None)
        found.extend(local() if local is not None else getattr(node, "violations", ()))
    leaders: dict[int, Any] = {}
    for node in nodes:
        if node.role is LEADER:
            other = leaders.setdefault(node.current_term, node)
            if other is not node:
                found.append(f"Election Safety (§5.2): nodes {other.node_id} and {node.node_id} both lead term "
                             f"{node.current_term}")
    found.extend(_log_matching(nodes))
    # State Machine Safety (§5.4.3) over committed prefixes, Leader Completeness (§5.4) for current leaders.
    reference: dict[int, tuple[Any, Any, int]] = {}
    for node in nodes:
        term = node.current_term
        top, first = min(node.commit_index, node.log.last_index), node.log.offset + 1
        for index, entry in enumerate(node.log.entries(first, top), start=first):
            seen = reference.setdefault(index, (entry, node.node_id, term))
            if seen[0] is not entry and seen[0] != entry:  # entries are often one shared object
                found.append(f"State Machine Safety (§5.4.3): index {index} committed as {seen[0]} on node "
                             f"{seen[1]} and as {entry} on node {node.node_id}")
            elif term < seen[2]:
                reference[index] = (entry, node.node_id, term)
    for leader in leaders.values():
        found.extend(_leader_completeness(leader, reference))
    return found


def _leader_completeness(leader: Any, committed: dict[int, tuple[Any, Any, int]],
                         indexes: Iterable[int] | None = None) -> list[str]:
    """The first entry committed by the leader's term (in index order; of ``indexes`` only, when given) that its
    log lacks."""
    term, log = leader.current_term, leader.log
    last, compacted = log.last_index, log.offset
    for index in sorted(committed) if indexes is None else indexes:
        seen = committed.get(index)
        if seen is None or index <= compacted:  # compacted: in its snapshot, committed and applied
            continue
        entry, where, commit_term = seen
        if commit_term > term:
            continue  # committed after this leader's term began: §5.4 says nothing about it
        if index > last or ((mine := log.entry(index)) is not entry and mine != entry):
            return [f"Leader Completeness (§5.4): leader {leader.node_id} of term {term} lacks "
                    f"entry {index} (term {entry.term}) committed by term {commit_term} on node {where}"]
    return []


def _log_matching(nodes: list[Any]) -> list[str]:
    """Log Matching (§5.3) over every pair in one pass per log (O(nodes · log), not O(nodes² · log)).

    Two logs holding the same term at an index must hold identical prefixes up to it: each log's prefixes are
    chained into hashes, the first log seen holding (index, term) sets the hash every other must match, and a
    mismatching pair is compared entry by entry (at the highest index where both hold the same term) for the report.
    The prefix a log shares with the first log (equal entries, found by list comparisons, which take shared entry
    objects by identity) has the first log's hashes and keys, so each later log is chained from where it departs.
    """
    first: dict[tuple[int, int], tuple[int, Any]] = {}  # (index, term) -> (prefix hash, the node that set it)
    pairs: dict[tuple[Any, Any], None] = {}
    hashes: dict[int, int] = {}  # id(entry) -> its hash: the logs mostly share entry objects (all alive meanwhile)
    base = max((node.log.offset for node in nodes), default=0)  # below it some log holds only its snapshot
    reference: list[Any] | None = None  # the first log's entries above base
    chains: list[int] = []  # the first log's prefix hash after each of them
    for node in nodes:
        if node.log.last_index <= base:
            continue
        entries = list(islice(node.log, base - node.log.offset, None))
        if reference is None:
            reference, start, chain = entries, 0, 0
        else:
            start = _shared_prefix(reference, entries)
            chain = chains[start - 1] if start else 0
        for offset in range(start, len(entries)):
            entry = entries[offset]
            h = hashes.get(id(entry))
            if h is None:
                h = hashes[id(entry)] = _chain(0, entry)
            chain = hash((chain, h))
            if entries is reference:
                chains.append(chain)
            held = first.setdefault((base + 1 + offset, entry.term), (chain, node))
            if held[0] != chain and held[1] is not node:
                pairs.setdefault((held[1], node), None)
    found: list[str] = []
    for a, b in pairs:
        top = min(a.log.last_index, b.log.last_index)
        while top > base and a.log.term_at(top) != b.log.term_at(top):
            top -= 1
        for index in range(top, base, -1):
            if a.log.entry(index) != b.log.entry(index):
                found.append(f"Log Matching (§5.3): nodes {a.node_id} and {b.node_id} agree on term at index "
                             f"{top} but differ at index {index}")
                break
    return found


def _shared_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading entries ``a`` and ``b`` have equal (list comparisons in C: equal prefixes only grow)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo] holds, a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _chain(chain: int, entry: Any) -> int:
    try:
        return hash((chain, entry))
    except TypeError:  # a command value that is not hashable (a list): its text stands in
        return hash((chain, repr(entry)))


def _state(node: Any, max_committed: int) -> tuple[Any, ...]:
    top, last = node.commit_index, node.log.last_index  # the commit index as _examine takes it
    return (node.role, node.current_term, top if top < last else last, max_committed,
            len(getattr(node, "violations", ())))


class Monitor(NodeMonitor):
    """Remembers leaders per term and committed entries per index across observations (crashes included).

    :meth:`observe_node` examines one node after it has handled an input, with work proportional to what changed:
    its role and term (Election Safety), the entries its commit index newly covers (State Machine Safety, checked
    against the entry first seen committed at each index), and, when entries are newly committed, Leader
    Completeness of each node last seen leading (a handful: its log has not changed since it was last observed).
    :meth:`finish` adds :func:`check` (the pairwise Log Matching comparison) over the final state.
    """

    def __init__(self) -> None:
        super().__init__()
        self.leaders: dict[int, int] = {}  # term -> node id
        # index -> (entry, node id that first showed it committed, that node's term then)
        self.committed: dict[int, tuple[Any, Any, int]] = {}
        # per node id (the node object kept, so a new incarnation is told apart): progress already recorded
        self._scanned: dict[Any, tuple[Any, int]] = {}  # -> (node, commit index recorded)
        self._leader_scanned: dict[Any, tuple[Any, int]] = {}  # -> (node, committed index checked in its term)
        self._leader_term: dict[Any, int] = {}  # node id -> the term its _leader_scanned mark belongs to
        self._live_leaders: dict[Any, Any] = {}  # node id -> node, for nodes last seen leading (and not crashed)
        self._max_committed = 0
        self._floor = 0  # committed entries at or below it are forgotten (the lowest offset of the watched logs)
        # node id -> (node, what its last observation saw): the same again finds nothing new (see _observe)
        self._seen: dict[Any, tuple[Any, tuple[Any, ...]]] = {}

    def _observe(self, node: Any) -> list[str]:
        # Most inputs change none of what _examine looks at (role, term, commit index within the log, the newest
        # committed index, the node's own breaches): examined again unchanged, every check there would repeat the
        # last one (its breaches already reported, its progress marks already at that state), so it is skipped.
        top, last = node.commit_index, node.log.last_index  # the commit index as _examine takes it
        state = (node.role, node.current_term, top if top < last else last, self._max_committed,
                 len(getattr(node, "violations", ())))
        held = self._seen.get(node.node_id)
        if held is not None and held[0] is node and held[1] == state:
            return []
        found = self._examine(node)
        self._seen[node.node_id] = (node, _state(node, self._max_committed))
        return found

    def _examine(self, node: Any) -> list[str]:
        found = self._local_news(node) if getattr(node, "violations", None) else []
        node_id = node.node_id
        leading = node.role is LEADER
        if leading:
            leader = self.leaders.setdefault(node.current_term, node_id)
            if leader != node_id:
                found.append(f"Election Safety (§5.2): nodes {leader} and {node_id} both led term "
                             f"{node.current_term}")
            self._live_leaders[node_id] = node
        elif node_id in self._live_leaders:
            del self._live_leaders[node_id]
        held = self._scanned.get(node_id)
        start = held[1] if held is not None and held[0] is node else 0
        top, last = node.commit_index, node.log.last_index
        if last < top:
            top = last
        if top > start:
            self._record_commits(node, start, top, found)
            self._scanned[node_id] = (node, top)
            for leader in self._live_leaders.values():
                found.extend(self._check_leader(leader))
        elif leading:
            mark = self._leader_scanned.get(node_id)  # checked already up to the newest committed index?
            if mark is None or mark[1] < self._max_committed or mark[0] is not node \
                    or self._leader_term.get(node_id) != node.current_term:
                found.extend(self._check_leader(node))
        return found

    def _record_commits(self, node: Any, start: int, top: int, found: list[str]) -> None:
        committed, node_id, term = self.committed, node.node_id, node.current_term
        start = max(start, node.log.offset)  # a snapshot's entries are compacted: not seen here
        if top > self._max_committed and top // _PRUNE_EVERY != self._max_committed // _PRUNE_EVERY:
            self._prune()
        for index, entry in enumerate(node.log.entries(start + 1, top), start=start + 1):
            seen = committed.get(index)
            if seen is None:
                committed[index] = (entry, node_id, term)
                if index > self._max_committed:
                    self._max_committed = index
            elif seen[0] is not entry and seen[0] != entry:  # entries are often one shared object
                found.append(f"State Machine Safety (§5.4.3): index {index} committed as {seen[0]} on node "
                             f"{seen[1]} and as {entry} on node {node_id}")

    def _prune(self) -> None:
        """Forget the committed entries every watched log has compacted (see the module's docstring)."""
        floor = min((held[0].log.offset for held in self._scanned.values()), default=0)
        for index in range(self._floor + 1, floor + 1):
            self.committed.pop(index, None)
        self._floor = max(self._floor, floor)

    def _check_leader(self, node: Any) -> list[str]:
        """Leader Completeness of ``node`` (leading now) against the entries committed since it was last checked."""
        if node.role is not LEADER:  # observe(live_nodes) only: it stepped down since, and is seen next
            return []
        node_id = node.node_id
        start = progress(self._leader_scanned, node_id, node)
        if self._leader_term.get(node_id) != node.current_term:
            start = 0
        if start >= self._max_committed:
            return []
        self._leader_scanned[node_id] = (node, self._max_committed)
        self._leader_term[node_id] = node.current_term
        return _leader_completeness(node, self.committed, range(start + 1, self._max_committed + 1))

    def forget(self, node_id: Any) -> None:
        for table in (self._live_leaders, self._scanned, self._leader_scanned, self._local, self._seen):
            table.pop(node_id, None)

    def _check(self, nodes: list[Any]) -> list[str]:
        return check(nodes)
