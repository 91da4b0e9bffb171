"""Convergence after heal (from replica events ``{"type": "replica", "f": "apply", ...}``, one per write a replica
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
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from seedance.history.anomalies import Op, Report, a_cycle, topological
from seedance.history.events import EventType, Operation, ReplicaEvent
from seedance.history.replica_log import ReplicaLog, is_apply

CONVERGENCE_PATTERNS = ("DivergentOrder", "DuplicateApply", "ThinAirApply", "LostWrite", "NotConverged", "Diverged")
Chain = list[tuple[float, Any]]  # (time, value) a replica installed, in order


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
    order = topological(len(values), sorted(edges))
    if order is None:
        cycle = a_cycle(len(values), sorted(edges))
        # fall back to first-applied order so convergence is still measured
        return {v: i for i, v in enumerate(values)}, [values[i] for i in cycle]
    return {values[i]: r for r, i in enumerate(order)}, []



def check_convergence(ops: Sequence[Op], replicas: Sequence[ReplicaEvent] | ReplicaLog, nodes: int | None = None, *,
                      settle_s: float = 0.1, end_s: float | None = None, times: bool = False,
                      batch_rows: int | None = None) -> dict[str, Any]:
    """Convergence of the replicas (see the module docstring): anomalies, ``converged`` and per-write times.

    ``replicas`` is a sequence of events or a :class:`~seedance.history.replica_log.ReplicaLog`; a log is checked
    in groups of consecutive keys of at most about ``batch_rows`` applies each (None: the log's default), its rows
    read back per group, so the check holds one group's chains at a time. The counts, times and verdict are those
    of the log's events; only the order in which anomalies are listed can differ, group by group."""
    report = Report()
    if isinstance(replicas, ReplicaLog):
        stats = replicas.stats()
        counts, last, top = stats.applies_per_key, stats.last_time, stats.max_node
    else:
        rows = [(e.node, e.f, e.key, e.value, e.time, k) for k, e in enumerate(replicas)]
        counts = Counter(key for _, f, key, _, _, _ in rows if is_apply(f, key))
        last = max((row[4] for row in rows), default=None)
        top = max((row[0] for row in rows if is_apply(row[1], row[2])), default=-1)
    if nodes is None:
        nodes = top + 1
    if end_s is None:
        end_s = max([op.complete_s or op.invoke_s for op in ops] + ([last] if last is not None else []), default=0.0)
    written: dict[Any, dict[Any, Op]] = defaultdict(dict)
    for op in ops:
        if op.f is Operation.WRITE and op.outcome is not EventType.FAIL:
            written[op.key].setdefault(op.value, op)
    times_ms: list[float] = []
    horizon = end_s - settle_s
    keys = sorted(set(written) | set(counts), key=repr)
    groups = replicas.by_keys(keys, counts, batch_rows) if isinstance(replicas, ReplicaLog) else [(keys, rows)]
    for group, chosen in groups:
        chains = _chains(chosen, written, report)
        for key in group:
            _converge_key(key, chains.get(key, {}), written.get(key, {}), nodes, horizon, report, times_ms)
    arr = np.asarray(times_ms)
    return {"converged": not report.counts, "anomalies": report.listed, "counts": dict(report.counts),
            "writes_measured": int(arr.size), "nodes": nodes, "settle_s": settle_s,
            "convergence_ms_p50": float(np.percentile(arr, 50)) if arr.size else None,
            "convergence_ms_p99": float(np.percentile(arr, 99)) if arr.size else None,
            "convergence_ms_max": float(arr.max()) if arr.size else None,
            **({"times_ms": arr.tolist()} if times else {})}


def _chains(rows: list[tuple[Any, ...]], written: dict[Any, dict[Any, Op]],
            report: Report) -> dict[Any, dict[int, Chain]]:
    """Each replica's installs per key, in order (DuplicateApply and ThinAirApply reported on the way), from rows
    ``(node, f, key, value, time, position)`` (those that are no apply, :func:`is_apply`, left out)."""
    chains: dict[Any, dict[int, Chain]] = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[int, Any, Any]] = set()
    none: dict[Any, Op] = {}
    for node, f, key, value, time_s, _ in rows:
        if f != "apply" and (f != "observe" or key is None):  # not is_apply(f, key), inline (a call per row)
            continue
        mark = (node, key, value)
        if f == "observe":  # a replica holds this value again (after recovery): no new apply
            chain = chains[key][node]
            seen.add(mark)
            if not chain or chain[-1][1] != value:
                chain.append((time_s, value))
            continue
        if mark in seen:
            report.add("DuplicateApply", f"node {node} applied {key}={value!r} twice", node=node,
                       key=key, value=value, time=time_s)
            continue
        seen.add(mark)
        if value not in written.get(key, none):
            report.add("ThinAirApply", f"node {node} applied {key}={value!r}, which no write wrote",
                       node=node, key=key, value=value, time=time_s)
        chains[key][node].append((time_s, value))
    return chains


def _converge_key(key: Any, per_node: dict[int, Chain], written: dict[Any, Op], nodes: int, horizon: float,
                  report: Report, times_ms: list[float]) -> None:
    """One key: its order (DivergentOrder), each acknowledged write's convergence time (or LostWrite,
    NotConverged) into ``times_ms``, and the replicas' final values (Diverged)."""
    first_seen: dict[Any, float] = {}
    for chain in per_node.values():
        for t, v in chain:
            if v not in first_seen or t < first_seen[v]:
                first_seen[v] = t
    rank, cycle = _rank_order(list(per_node.values()), first_seen) if first_seen else ({}, [])
    if cycle:
        report.add("DivergentOrder", f"replicas installed writes of {key} in opposite orders",
                   key=key, values=cycle[:8])
    reach = _reach(per_node, rank)
    for value, op in written.items():
        if op.outcome is not EventType.OK:
            continue
        r = rank.get(value)
        if r is None:
            if op.invoke_s <= horizon:
                report.add("LostWrite", f"acknowledged write {key}={value!r} was applied by no replica", write=op)
            continue
        latest = -np.inf
        missing = []
        get, first_at, nothing = reach.get, bisect.bisect_left, ((), ())  # (a node per replica: N per write)
        for node in range(nodes):
            ts, best = get(node, nothing)
            k = first_at(best, r)
            if k == len(best):
                missing.append(node)
            elif ts[k] > latest:
                latest = ts[k]
        if missing:
            if op.invoke_s <= horizon:
                report.add("NotConverged", f"acknowledged write {key}={value!r} never reached node(s) "
                           f"{missing}", write=op, nodes=missing)
            continue
        times_ms.append((latest - op.invoke_s) * 1e3)
    finals = {node: chain[-1] for node, chain in per_node.items() if chain}
    if finals and max(t for t, _ in finals.values()) <= horizon:
        values = {v for _, v in finals.values()}
        if len(values) > 1 or (len(finals) < nodes and written):
            report.add("Diverged", f"replicas end with different values of {key}", key=key,
                       finals={str(n): v for n, (_, v) in sorted(finals.items())})


def _reach(per_node: dict[int, Chain], rank: dict[Any, int]) -> dict[int, tuple[list[float], list[int]]]:
    """Per node: the running maximum rank installed, with its time (the chain is increasing when consistent)."""
    reach: dict[int, tuple[list[float], list[int]]] = {}
    get = rank.get
    for node, chain in per_node.items():
        best = []
        top = -1
        for _, v in chain:
            r = get(v, -1)
            if r > top:
                top = r
            best.append(top)
        reach[node] = ([t for t, _ in chain], best)
    return reach
