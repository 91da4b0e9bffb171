"""Causal consistency and convergence of a history (client events and replica events).

Causal consistency (Bouajjani, Enea, Guerraoui & Hamza, "On verifying causal consistency", POPL 2017). A history is
*differentiated* when no value is written twice to one key (seedance's workloads write fresh integers); then the
read-from relation ``wr`` (write → the reads returning its value) is known, and causal consistency is decided in
polynomial time by looking for the paper's bad patterns. With ``so`` the session order (the operations of one
process, in order) and ``co = (so ∪ wr)+`` the causal order:

* **CyclicCO** — ``co`` is cyclic (a read returns a value written causally after it);
* **WriteCOInitRead** — a read returns the initial value (null) of ``x`` although a write of ``x`` precedes it in
  ``co``;
* **ThinAirRead** — a read returns a value no write (that did not fail) wrote to that key;
* **WriteCORead** — ``r`` reads ``x`` from ``w1`` while another write ``w2`` of ``x`` has ``w1 <co w2 <co r`` (the read
  returns a value overwritten in its own causal past);
* **CyclicCF** — causal convergence (CCv): ``co ∪ cf`` is cyclic, where ``w2 cf w1`` when some read reads ``w1`` with
  ``w2 <co`` that read (``w2`` was arbitrated before ``w1``); no single arbitration order of writes explains the reads.

The first four are the paper's characterisation of CC; with CyclicCF it is CCv (Table 1 / Theorem 2 of the paper).
``co`` is represented by vector clocks over sessions (``vc[op][s]`` = how many operations of session ``s`` are in
``op``'s causal past), built in one topological pass; each read then looks, per session, only at the last write of
its key that its past contains (earlier ones are below it in ``so``), so a check is O(ops · sessions).

Which operations count: ok reads; writes that did not fail (``ok``, ``info`` and never-completed ones may have taken
effect); a read of a value that only a *failed* write wrote is a ThinAirRead. Values written more than once to one key
(the history is then not differentiated) are reported in ``duplicated_values`` and reads of them get no ``wr`` edge.

Convergence after heal (from replica events ``{"type": "replica", "f": "apply", ...}``, one per write a replica
applied, :class:`~seedance.models.protocols.contract.Observe`). A replica applies the writes of a key in the order of
the join (each install replaces a smaller entry), so the per-replica sequences of a key must all be chains of one
total order: a pair of writes installed in opposite orders by two replicas is **DivergentOrder**; a value applied
twice by one replica is **DuplicateApply**; a value no write wrote is **ThinAirApply**. The key's order is the union of
the chains (a topological order, ties by the time a write was first applied). A write *reached* a replica when the
replica applied it or a write after it (a keyed ``"observe"`` event, a recovered replica holding a value again,
counts as holding it, never as a second apply); its convergence time is when it reached the last of the ``nodes`` replicas,
minus its invoke time. The run **converged** when every acknowledged (ok) write invoked at least ``settle_s``
before the end of the history reached every replica — otherwise **NotConverged** (``LostWrite`` when no replica
ever applied it) — and the replicas' final values agree on every key whose last apply is older than ``settle_s``
(**Diverged**), i.e. every replica equals the join of all acknowledged writes.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.history.events import Event, EventType, Operation, ReplicaEvent

CC_PATTERNS = ("CyclicCO", "WriteCOInitRead", "ThinAirRead", "WriteCORead", "CyclicCF")
CONVERGENCE_PATTERNS = ("DivergentOrder", "DuplicateApply", "ThinAirApply", "LostWrite", "NotConverged", "Diverged")
MAX_REPORTED = 20  # anomalies listed (all are counted)


@dataclass(slots=True)
class Op:
    index: int  # position among operations (invoke order)
    process: int
    f: Operation
    key: str | None
    value: Any
    outcome: EventType  # ok / fail / info (info also for never-completed)
    invoke_s: float
    complete_s: float | None
    line: int  # line (1-based, in the event sequence given) of its invoke

    def describe(self) -> dict[str, Any]:
        return {"process": self.process, "f": self.f.value, "key": self.key, "value": self.value,
                "type": self.outcome.value, "time": self.invoke_s, "line": self.line}


def operations(events: Iterable[Any]) -> tuple[list[Op], list[ReplicaEvent]]:
    """Pair invokes with completions (client events) and collect replica events."""
    ops: list[Op] = []
    replicas: list[ReplicaEvent] = []
    pending: dict[int, Op] = {}
    for line, event in enumerate(events, start=1):
        if type(event) is ReplicaEvent:
            replicas.append(event)
            continue
        if event.type is EventType.INVOKE:
            op = Op(len(ops), event.process, event.f, event.key, event.value, EventType.INFO, event.time, None, line)
            ops.append(op)
            pending[event.process] = op
            continue
        op = pending.pop(event.process, None)
        if op is None:
            continue
        op.outcome = event.type
        op.complete_s = event.time
        if op.f is Operation.READ:
            op.value = event.value if event.type is EventType.OK else None
    return ops, replicas


class _Report:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.listed: list[dict[str, Any]] = []

    def add(self, kind: str, explanation: str, **ops: Any) -> None:
        self.counts[kind] += 1
        if len(self.listed) < MAX_REPORTED:
            self.listed.append({"type": kind, "explanation": explanation,
                                **{k: (v.describe() if isinstance(v, Op) else v) for k, v in ops.items()}})


def _topological(n: int, edges: list[tuple[int, int]]) -> list[int] | None:
    """A topological order of nodes 0..n-1 (stable: by node number among the ready ones), or None when cyclic."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = deque(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    while ready:
        a = ready.popleft()
        order.append(a)
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return order if len(order) == n else None


def _a_cycle(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Some cycle of a cyclic graph (node ids, in order)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
    color = [0] * n
    parent = [-1] * n
    for root in range(n):
        if color[root]:
            continue
        stack = [(root, iter(succ[root]))]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
            elif color[nxt] == 0:
                color[nxt] = 1
                parent[nxt] = node
                stack.append((nxt, iter(succ[nxt])))
            elif color[nxt] == 1:
                cycle = [node]
                while cycle[-1] != nxt:
                    cycle.append(parent[cycle[-1]])
                return cycle[::-1]
    return []


def _cycle_nodes(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """The nodes of one strongly connected component with a cycle (Tarjan, in scipy), or None when acyclic."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if n == 0 or src.size == 0:
        return None
    loops = src == dst
    if loops.any():
        return src[loops][:1]
    graph = coo_matrix((np.ones(src.size, np.int8), (src, dst)), shape=(n, n)).tocsr()
    _count, labels = connected_components(graph, directed=True, connection="strong")
    sizes = np.bincount(labels)
    big = np.flatnonzero(sizes > 1)
    return None if big.size == 0 else np.flatnonzero(labels == big[0])


def check_causal(ops: Sequence[Op]) -> dict[str, Any]:
    """The bad patterns of CC and CCv in the client operations ``ops``; see the module docstring."""
    report = _Report()
    reads = [op for op in ops if op.f is Operation.READ and op.outcome is EventType.OK]
    writes = [op for op in ops if op.f is Operation.WRITE and op.outcome is not EventType.FAIL]
    failed = {(op.key, op.value) for op in ops if op.f is Operation.WRITE and op.outcome is EventType.FAIL}
    by_value: dict[tuple[Any, Any], Op] = {}
    duplicated: set[tuple[Any, Any]] = set()
    for w in writes:
        k = (w.key, w.value)
        if k in by_value:
            duplicated.add(k)
        else:
            by_value[k] = w
    graph_ops = [op for op in ops if (op.f is Operation.READ and op.outcome is EventType.OK) or
                 (op.f is Operation.WRITE and op.outcome is not EventType.FAIL)]
    node_of = {op.index: i for i, op in enumerate(graph_ops)}
    n = len(graph_ops)
    # sessions: processes; position of each op in its session (1-based)
    session_ids: dict[int, int] = {}
    session = np.zeros(n, np.int64)
    position = np.zeros(n, np.int64)
    counts: list[int] = []
    edges: list[tuple[int, int]] = []
    last_in_session: dict[int, int] = {}
    for i, op in enumerate(graph_ops):
        s = session_ids.setdefault(op.process, len(session_ids))
        if s == len(counts):
            counts.append(0)
        counts[s] += 1
        session[i], position[i] = s, counts[s]
        if op.process in last_in_session:
            edges.append((last_in_session[op.process], i))
        last_in_session[op.process] = i
    source: dict[int, int] = {}  # read node -> write node
    for i, op in enumerate(graph_ops):
        if op.f is not Operation.READ or op.value is None:
            continue
        k = (op.key, op.value)
        if k in duplicated:
            continue
        w = by_value.get(k)
        if w is None:
            why = "only a write that failed wrote it" if k in failed else "no write wrote it"
            report.add("ThinAirRead", f"read of {op.key}={op.value!r}: {why}", read=op)
            continue
        source[i] = node_of[w.index]
        edges.append((node_of[w.index], i))
    order = _topological(n, edges)
    if order is None:
        cycle = _a_cycle(n, edges)
        report.add("CyclicCO", "session order and read-from form a cycle (a read returns a value written causally "
                   "after it)", cycle=[graph_ops[i].describe() for i in cycle[:8]])
        return _causal_result(report, ops, duplicated)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        preds[b].append(a)
    S = len(counts)
    vc = np.zeros((n, S), np.int32)
    for i in order:
        row = vc[i]
        for p in preds[i]:
            np.maximum(row, vc[p], out=row)
        row[session[i]] = position[i]
    # per key: the writes of each session (positions in session order, graph nodes) and the reads
    writes_of: dict[Any, dict[int, tuple[list[int], list[int]]]] = defaultdict(dict)
    reads_of: dict[Any, list[int]] = defaultdict(list)
    for i, op in enumerate(graph_ops):
        if op.f is Operation.WRITE:
            lists = writes_of[op.key].setdefault(int(session[i]), ([], []))
            lists[0].append(int(position[i]))
            lists[1].append(i)
        elif op.value is None or i in source:  # reads without a read-from source (thin air, duplicates) skipped
            reads_of[op.key].append(i)
    src_of = np.full(n, -1, np.int64)
    for r, w in source.items():
        src_of[r] = w
    cf_src: list[np.ndarray] = []
    cf_dst: list[np.ndarray] = []
    for key, reads in reads_of.items():
        sessions_w = writes_of.get(key)
        if not sessions_w:
            continue
        r = np.asarray(reads, np.int64)
        w1 = src_of[r]
        for s, (positions, nodes) in sessions_w.items():
            # the last write of the key by session s in each read's causal past (earlier ones are below it in so)
            k = np.searchsorted(np.asarray(positions), vc[r, s], side="right") - 1
            has = k >= 0
            if not has.any():
                continue
            w2 = np.asarray(nodes, np.int64)[np.maximum(k, 0)]
            init = has & (w1 < 0)
            for j in np.flatnonzero(init)[:1].tolist():
                report.add("WriteCOInitRead", f"read of {key} returns the initial value although a write of {key} "
                           "precedes it causally", read=graph_ops[int(r[j])], write=graph_ops[int(w2[j])])
            other = has & (w1 >= 0) & (w2 != w1)
            if not other.any():
                continue
            a, b, rr = w2[other], w1[other], r[other]
            cf_src.append(a)
            cf_dst.append(b)
            later = vc[a, session[b]] >= position[b]  # w1 <co w2 <co r: the read returns an overwritten value
            for j in np.flatnonzero(later)[:MAX_REPORTED].tolist():
                read = graph_ops[int(rr[j])]
                report.add("WriteCORead", f"read of {key} returns {read.value!r} although a write of "
                           f"{graph_ops[int(a[j])].value!r} that causally follows it precedes the read",
                           read=read, write=graph_ops[int(b[j])], later_write=graph_ops[int(a[j])])
            extra = int(later.sum()) - MAX_REPORTED
            if extra > 0:  # counted, not listed
                report.counts["WriteCORead"] += extra
    if cf_src and not report.counts.get("WriteCORead"):
        src = np.concatenate([np.asarray([a for a, _ in edges], np.int64), *cf_src])
        dst = np.concatenate([np.asarray([b for _, b in edges], np.int64), *cf_dst])
        cycle = _cycle_nodes(n, src, dst)
        if cycle is not None:
            all_edges = list(zip(src.tolist(), dst.tolist()))
            sub = set(cycle.tolist())
            found = _a_cycle(n, [(x, y) for x, y in all_edges if x in sub and y in sub])
            report.add("CyclicCF", "no single order of the writes explains the reads (causal order and the "
                       "conflict order read off the reads form a cycle)",
                       cycle=[graph_ops[i].describe() for i in found[:8]])
    return _causal_result(report, ops, duplicated)


def _causal_result(report: _Report, ops: Sequence[Op], duplicated: set) -> dict[str, Any]:
    return {"valid": not report.counts, "anomalies": report.listed, "counts": dict(report.counts),
            "ops": len(ops), "duplicated_values": len(duplicated)}


def _rank_order(chains: list[list[tuple[float, Any]]], first_seen: dict[Any, float]) -> tuple[dict[Any, int], list]:
    """A total order of a key's values consistent with every replica's chain (ties: first applied first); the pairs
    installed in opposite orders when the chains conflict."""
    values = sorted(first_seen, key=lambda v: (first_seen[v], repr(v)))
    ids = {v: i for i, v in enumerate(values)}
    edges = set()
    for chain in chains:
        for (_, a), (_, b) in zip(chain, chain[1:]):
            if a != b:
                edges.add((ids[a], ids[b]))
    order = _topological(len(values), sorted(edges))
    if order is None:
        cycle = _a_cycle(len(values), sorted(edges))
        # fall back to first-applied order so convergence is still measured
        return {v: i for i, v in enumerate(values)}, [values[i] for i in cycle]
    return {values[i]: r for r, i in enumerate(order)}, []


def check_convergence(ops: Sequence[Op], replicas: Sequence[ReplicaEvent], nodes: int | None = None, *,
                      settle_s: float = 0.1, end_s: float | None = None, times: bool = False) -> dict[str, Any]:
    """Convergence of the replicas (see the module docstring): anomalies, ``converged`` and per-write times."""
    report = _Report()
    applies = [e for e in replicas if e.f == "apply" or (e.f == "observe" and e.key is not None)]
    if nodes is None:
        nodes = max((e.node for e in applies), default=-1) + 1
    if end_s is None:
        end_s = max([op.complete_s or op.invoke_s for op in ops] + [e.time for e in replicas], default=0.0)
    written: dict[Any, dict[Any, Op]] = defaultdict(dict)
    for op in ops:
        if op.f is Operation.WRITE and op.outcome is not EventType.FAIL:
            written[op.key].setdefault(op.value, op)
    chains: dict[Any, dict[int, list[tuple[float, Any]]]] = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[int, Any, Any]] = set()
    for e in applies:
        if e.f == "observe":  # a replica holds this value again (after recovery): no new apply
            chain = chains[e.key][e.node]
            seen.add((e.node, e.key, e.value))
            if not chain or chain[-1][1] != e.value:
                chain.append((e.time, e.value))
            continue
        if (e.node, e.key, e.value) in seen:
            report.add("DuplicateApply", f"node {e.node} applied {e.key}={e.value!r} twice", node=e.node,
                       key=e.key, value=e.value, time=e.time)
            continue
        seen.add((e.node, e.key, e.value))
        if e.value not in written.get(e.key, {}):
            report.add("ThinAirApply", f"node {e.node} applied {e.key}={e.value!r}, which no write wrote",
                       node=e.node, key=e.key, value=e.value, time=e.time)
        chains[e.key][e.node].append((e.time, e.value))
    times_ms: list[float] = []
    horizon = end_s - settle_s
    for key in sorted(set(written) | set(chains), key=repr):
        per_node = chains.get(key, {})
        first_seen: dict[Any, float] = {}
        for chain in per_node.values():
            for t, v in chain:
                if v not in first_seen or t < first_seen[v]:
                    first_seen[v] = t
        rank, cycle = _rank_order(list(per_node.values()), first_seen) if first_seen else ({}, [])
        if cycle:
            report.add("DivergentOrder", f"replicas installed writes of {key} in opposite orders",
                       key=key, values=cycle[:8])
        # per node: the running maximum rank installed, with its time (the chain is increasing when consistent)
        reach: dict[int, tuple[list[float], list[int]]] = {}
        for node, chain in per_node.items():
            ts, best = [], []
            top = -1
            for t, v in chain:
                top = max(top, rank.get(v, -1))
                ts.append(t)
                best.append(top)
            reach[node] = (ts, best)
        for value, op in written.get(key, {}).items():
            if op.outcome is not EventType.OK:
                continue
            r = rank.get(value)
            if r is None:
                if op.invoke_s <= horizon:
                    report.add("LostWrite", f"acknowledged write {key}={value!r} was applied by no replica", write=op)
                continue
            latest = -np.inf
            missing = []
            for node in range(nodes):
                ts, best = reach.get(node, ([], []))
                k = bisect.bisect_left(best, r)
                if k == len(best):
                    missing.append(node)
                else:
                    latest = max(latest, ts[k])
            if missing:
                if op.invoke_s <= horizon:
                    report.add("NotConverged", f"acknowledged write {key}={value!r} never reached node(s) "
                               f"{missing}", write=op, nodes=missing)
                continue
            times_ms.append((latest - op.invoke_s) * 1e3)
        finals = {node: chain[-1] for node, chain in per_node.items() if chain}
        if finals and max(t for t, _ in finals.values()) <= horizon:
            values = {v for _, v in finals.values()}
            if len(values) > 1 or (len(finals) < nodes and written.get(key)):
                report.add("Diverged", f"replicas end with different values of {key}", key=key,
                           finals={str(n): v for n, (_, v) in sorted(finals.items())})
    arr = np.asarray(times_ms)
    return {"converged": not report.counts, "anomalies": report.listed, "counts": dict(report.counts),
            "writes_measured": int(arr.size), "nodes": nodes, "settle_s": settle_s,
            "convergence_ms_p50": float(np.percentile(arr, 50)) if arr.size else None,
            "convergence_ms_p99": float(np.percentile(arr, 99)) if arr.size else None,
            "convergence_ms_max": float(arr.max()) if arr.size else None,
            **({"times_ms": arr.tolist()} if times else {})}


def check(events: Iterable[Any], *, nodes: int | None = None, settle_s: float = 0.1) -> dict[str, Any]:
    """``seedance check causal``: causal consistency (CC + CyclicCF) and, with replica events, convergence.

    ``valid`` is True when no anomaly of either kind was found."""
    start = time.perf_counter()
    ops, replicas = operations(events)
    causal = check_causal(ops)
    out: dict[str, Any] = {"valid": causal["valid"], "anomalies": list(causal["anomalies"]),
                           "counts": dict(causal["counts"]), "ops": len(ops),
                           "duplicated_values": causal["duplicated_values"]}
    if replicas:
        conv = check_convergence(ops, replicas, nodes, settle_s=settle_s)
        out["valid"] = out["valid"] and conv["converged"]
        out["anomalies"] = (out["anomalies"] + conv["anomalies"])[:MAX_REPORTED]
        out["counts"].update(conv["counts"])
        out["convergence"] = {k: v for k, v in conv.items() if k not in ("anomalies", "counts")}
    out["elapsed_s"] = time.perf_counter() - start
    return out


def run_summary(history: Sequence[Event], replicas: Sequence[ReplicaEvent], nodes: int) -> dict[str, Any]:
    """The causal protocol's summary keys for ``sim run`` / ``real run`` (``ProtocolSpec.summarize``)."""
    ops, _ = operations(history)
    causal = check_causal(ops)
    conv = check_convergence(ops, replicas, nodes)
    delta = full = 0
    for e in replicas:
        if e.f == "observe" and e.key is None and isinstance(e.value, tuple) and len(e.value) == 2:
            delta += int(e.value[0])
            full += int(e.value[1])
    rejected = sum(1 for op in ops if op.f is Operation.WRITE and op.outcome is EventType.FAIL)
    return {
        "convergence_ms_p50": conv["convergence_ms_p50"], "convergence_ms_p99": conv["convergence_ms_p99"],
        "converged": conv["converged"], "causal_violations": sum(causal["counts"].values()),
        "rejected_writes": rejected, "bytes_delta": delta, "bytes_full_state": full,
        "delta_to_full_ratio": delta / full if full else None,
        "causal": {"valid": causal["valid"], "counts": causal["counts"], "anomalies": causal["anomalies"][:5],
                   "convergence": {k: v for k, v in conv.items() if k != "anomalies"},
                   "convergence_anomalies": conv["anomalies"][:5]},
    }
