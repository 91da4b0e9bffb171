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

Convergence after heal (replica events): :mod:`seedance.history.convergence`; the operation records, the
report and the graph helpers both use: :mod:`seedance.history.anomalies`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.history.anomalies import MAX_REPORTED, Op, Report, a_cycle, operations, topological
from seedance.history.convergence import CONVERGENCE_PATTERNS, check_convergence
from seedance.history.events import Event, EventType, Operation, ReplicaEvent
from seedance.history.replica_log import ReplicaLog

CC_PATTERNS = ("CyclicCO", "WriteCOInitRead", "ThinAirRead", "WriteCORead", "CyclicCF")
__all__ = ["CC_PATTERNS", "CONVERGENCE_PATTERNS", "MAX_REPORTED", "Op", "check", "check_causal", "check_convergence",
           "operations", "run_summary"]


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



@dataclass(slots=True)
class _Graph:
    """The operations that take part in ``co`` (ok reads, writes that did not fail) as nodes 0..n-1, with the
    session order and read-from edges."""

    ops: list[Op]
    session: np.ndarray  # node -> its session (a process)
    position: np.ndarray  # node -> its position in its session (1-based)
    sessions: int
    edges: list[tuple[int, int]]  # so and wr
    source: dict[int, int]  # read node -> the write node it reads from


def check_causal(ops: Sequence[Op]) -> dict[str, Any]:
    """The bad patterns of CC and CCv in the client operations ``ops``; see the module docstring."""
    report = Report()
    graph, duplicated = _graph(ops, report)
    n = len(graph.ops)
    order = topological(n, graph.edges)
    if order is None:
        cycle = a_cycle(n, graph.edges)
        report.add("CyclicCO", "session order and read-from form a cycle (a read returns a value written causally "
                   "after it)", cycle=[graph.ops[i].describe() for i in cycle[:8]])
        return _causal_result(report, ops, duplicated)
    vc = _vector_clocks(graph, order)
    cf_src, cf_dst = _read_patterns(graph, vc, report)
    if cf_src and not report.counts.get("WriteCORead"):
        _cyclic_cf(graph, cf_src, cf_dst, report)
    return _causal_result(report, ops, duplicated)


def _graph(ops: Sequence[Op], report: Report) -> tuple[_Graph, set[tuple[Any, Any]]]:
    """The causal graph's nodes and so/wr edges, and the (key, value) pairs written more than once; ThinAirRead
    reported on the way."""
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
    return _Graph(graph_ops, session, position, len(counts), edges, source), duplicated


def _vector_clocks(graph: _Graph, order: list[int]) -> np.ndarray:
    """``vc[op][s]``: how many operations of session ``s`` are in ``op``'s causal past (one topological pass)."""
    n = len(graph.ops)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in graph.edges:
        preds[b].append(a)
    vc = np.zeros((n, graph.sessions), np.int32)
    session, position = graph.session, graph.position
    for i in order:
        row = vc[i]
        for p in preds[i]:
            np.maximum(row, vc[p], out=row)
        row[session[i]] = position[i]
    return vc


def _read_patterns(graph: _Graph, vc: np.ndarray, report: Report) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """WriteCOInitRead and WriteCORead, per read and session; the conflict edges ``w2 cf w1`` (sources, targets)."""
    graph_ops, session, position = graph.ops, graph.session, graph.position
    n = len(graph_ops)
    # per key: the writes of each session (positions in session order, graph nodes) and the reads
    writes_of: dict[Any, dict[int, tuple[list[int], list[int]]]] = defaultdict(dict)
    reads_of: dict[Any, list[int]] = defaultdict(list)
    for i, op in enumerate(graph_ops):
        if op.f is Operation.WRITE:
            lists = writes_of[op.key].setdefault(int(session[i]), ([], []))
            lists[0].append(int(position[i]))
            lists[1].append(i)
        elif op.value is None or i in graph.source:  # reads without a read-from source (thin air, duplicates) skipped
            reads_of[op.key].append(i)
    src_of = np.full(n, -1, np.int64)
    for r, w in graph.source.items():
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
    return cf_src, cf_dst


def _cyclic_cf(graph: _Graph, cf_src: list[np.ndarray], cf_dst: list[np.ndarray], report: Report) -> None:
    """CyclicCF: ``co`` with the conflict order read off the reads has a cycle."""
    n = len(graph.ops)
    src = np.concatenate([np.asarray([a for a, _ in graph.edges], np.int64), *cf_src])
    dst = np.concatenate([np.asarray([b for _, b in graph.edges], np.int64), *cf_dst])
    cycle = _cycle_nodes(n, src, dst)
    if cycle is not None:
        all_edges = list(zip(src.tolist(), dst.tolist()))
        sub = set(cycle.tolist())
        found = a_cycle(n, [(x, y) for x, y in all_edges if x in sub and y in sub])
        report.add("CyclicCF", "no single order of the writes explains the reads (causal order and the "
                   "conflict order read off the reads form a cycle)",
                   cycle=[graph.ops[i].describe() for i in found[:8]])


def _causal_result(report: Report, ops: Sequence[Op], duplicated: set) -> dict[str, Any]:
    return {"valid": not report.counts, "anomalies": report.listed, "counts": dict(report.counts),
            "ops": len(ops), "duplicated_values": len(duplicated)}


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


def run_summary(history: Sequence[Event], replicas: Sequence[ReplicaEvent] | ReplicaLog, nodes: int) -> dict[str, Any]:
    """The causal protocol's summary keys for ``sim run`` / ``real run`` (``ProtocolSpec.summarize``)."""
    ops, _ = operations(history)
    causal = check_causal(ops)
    conv = check_convergence(ops, replicas, nodes)
    if isinstance(replicas, ReplicaLog):  # a simulated run's log: its totals were counted as it was recorded
        stats = replicas.stats()
        delta, full = stats.delta_bytes, stats.full_bytes
    else:
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
