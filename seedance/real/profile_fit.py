"""Fits of a host profile's parts from what ``seedance real profile`` recorded: amortised wake-ups, the shared
disk's stalls, garbage collections, recovery per entry, connection set-up, fsyncs that allocate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seedance.models.host import ITEM_KINDS, DiskStallProfile, Empirical, EntryCosts, GcProfile, LogNormal


def fsync_grow_kind(run_within: list[float], run_grow: list[float], probe_within: list[float],
                    probe_grow: list[float], min_samples: int = 50) -> tuple[Empirical | LogNormal, str]:
    """The allocating fsync's distribution: the run's own allocating fsyncs where it had ``min_samples`` of them,
    else the run's others shifted by the probe's step (median allocating - median within); and which it was."""
    if len(run_grow) >= min_samples:
        return Empirical.fit(run_grow), "run"
    step = max(0.0, float(np.median(probe_grow)) - float(np.median(probe_within))) if probe_grow else 0.0
    if not run_within:
        return LogNormal.fit([x + step for x in probe_within] if probe_within else probe_grow), "probe"
    base = Empirical.fit(run_within)
    return Empirical(base.p, tuple(x + step for x in base.s)), "run shifted by the probe's step"


def fit_recovery(empty: tuple[list[float], list[float]], populated: tuple[list[float], list[float]],
                 entries: float) -> dict[str, Any]:
    """``restart`` (wall) and ``restart_cpu`` from the restarts on an empty log, and ``recover_per_entry_s``: the
    restarts' extra CPU per recovered log entry on a populated one (medians; 0 when it was not larger)."""
    out: dict[str, Any] = {"restart": LogNormal.fit(empty[0])}
    if empty[1]:
        out["restart_cpu"] = LogNormal.fit(empty[1])
    if empty[1] and populated[1] and entries > 0:
        out["recover_per_entry_s"] = max(0.0, (float(np.median(populated[1])) - float(np.median(empty[1])))
                                         / entries)
    return out


def fit_connects(samples: list[float]) -> dict[str, LogNormal | None]:
    """``connect`` and ``accept`` from the set-up times of connections opened at once (the clients' first requests):
    the k-th fastest took about base + k * accept (least squares over the sorted times, both >= 0); ``connect`` is
    the spread of the base (the times less their queueing), ``accept`` the serial part per set-up."""
    if not samples:
        return {"connect": None, "accept": None}
    times = np.sort(np.asarray(samples, dtype=float))
    if times.size < 3:
        return {"connect": LogNormal.fit(times), "accept": None}
    rank = np.arange(times.size, dtype=float)
    slope, _ = np.polyfit(rank, times, 1)
    accept = max(0.0, float(slope))
    return {"connect": LogNormal.fit(np.maximum(times - accept * rank, 1e-6)), "accept": LogNormal(accept)}


def fit_amortisation(periods: list[Any]) -> tuple[float, float]:
    """``(wake_s, per_item_s)`` of busy periods ``(cpu_ns, items, ...)``: CPU = wake + per_item * items, by
    non-negative least squares weighted by 1 / items; (0, mean CPU per item) when there are too few periods."""
    from scipy.optimize import nnls

    data = np.asarray([p[:2] for p in periods if p[1] > 0], dtype=float).reshape(-1, 2)
    if len(data) < 10 or len(np.unique(data[:, 1])) < 2:
        return 0.0, float(data[:, 0].sum() / max(data[:, 1].sum(), 1) / 1e9) if len(data) else 0.0
    cpu, items = data[:, 0] / 1e9, data[:, 1]
    weight = 1.0 / np.sqrt(items)
    (wake, per_item), _ = nnls(np.column_stack([np.ones_like(items), items]) * weight[:, None], cpu * weight)
    return float(wake), float(per_item)


def fit_amortisation_by_kind(periods: list[Any], wake_s: float | None = None) -> dict[str, Any] | None:
    """The busy periods' CPU as ``wake + sum over kinds of cost_k * items_k`` (non-negative least squares, weighted
    by 1 / items as :func:`fit_amortisation`): a check of the pooled fit, whose per-item cost is one average over
    every kind, so a mix of cheap and costly items at different loads can move CPU into ``wake``. Kinds that never
    occur are left out; None without kind counts (an older runtime) or with too few periods. With ``wake_s`` given
    (the direct probe's, :func:`measure_wake`), only the costs per kind are fitted, to what the periods leave."""
    from scipy.optimize import nnls

    rows = [(p[0], p[1], p[4]) for p in periods if len(p) > 4 and p[1] > 0]
    if len(rows) < 10:
        return None
    cpu = np.asarray([r[0] for r in rows], dtype=float) / 1e9
    items = np.asarray([r[1] for r in rows], dtype=float)
    kinds = np.asarray([r[2] for r in rows], dtype=float)
    used = [k for k in range(kinds.shape[1]) if kinds[:, k].any()]
    weight = 1.0 / np.sqrt(items)
    if wake_s is None:
        design = np.column_stack([np.ones_like(items), kinds[:, used]])
        coef, _ = nnls(design * weight[:, None], cpu * weight)
    else:
        per_kind, _ = nnls(kinds[:, used] * weight[:, None], (cpu - wake_s) * weight)
        coef = np.concatenate([[wake_s], per_kind])
    return {"wake_s": float(coef[0]), "per_kind_s": {ITEM_KINDS[k]: float(c) for k, c in zip(used, coef[1:])},
            "items": {ITEM_KINDS[k]: int(kinds[:, k].sum()) for k in used}}


STALL_FACTOR = 20.0  # an fsync this many times its kind's median is held by the device's stall, not its service


def split_stalls(syncs: Sequence[Sequence[int]], seconds: float, exclude: set[int] | frozenset[int] = frozenset(),
                 ) -> tuple[set[int], DiskStallProfile | None, dict[str, Any]]:
    """The shared disk's stalls in the profile runs' fsyncs (every node's ``syncs`` records, pooled; their end on
    the monotonic clock that every process shares): an fsync over :data:`STALL_FACTOR` times the median of its kind
    (within the file's last block, or allocating a new one) was held by the device; such fsyncs whose intervals
    overlap, of any node, are one stall, as long as their union. Here 7 of 17,153 fsyncs took 39-94 ms against a
    median of 0.34 ms and a 99.9th percentile of 2.1 ms: three stalls, two of them seen by all three nodes at once.
    Returns the records' indices that a stall held (the service-time fits leave them out), the stalls as a process
    (``seconds``: the runs' load time; None where the records have no clock, an older runtime) and a record."""
    timed = [i for i, s in enumerate(syncs) if len(s) > 6 and s[2] > 0 and s[6] > 0]
    if not timed or seconds <= 0:
        return set(), None, {"events": None}
    medians = {}
    for grow in (False, True):
        walls = [syncs[i][2] for i in timed if bool(syncs[i][4]) == grow]
        if walls:
            medians[grow] = float(np.median(walls))
    stalled = sorted((syncs[i][6] - syncs[i][2], syncs[i][6], i) for i in timed
                     if syncs[i][2] > STALL_FACTOR * medians[bool(syncs[i][4])] and i not in exclude)
    events: list[list[float]] = []  # [begin, end] in ns, merged where they overlap
    for begin, end, _ in stalled:
        if events and begin <= events[-1][1]:
            events[-1][1] = max(events[-1][1], end)
        else:
            events.append([begin, end])
    durations = tuple(float((end - begin) / 1e9) for begin, end in events)
    record = {"events": len(events), "fsyncs_held": len(stalled), "seconds": float(seconds),
              "durations_s": list(durations), "factor": STALL_FACTOR,
              "medians_s": {("grow" if k else "within"): v / 1e9 for k, v in medians.items()}}
    return ({i for _, _, i in stalled}, DiskStallProfile(len(events) / seconds, durations) if events else None,
            record)


def add_gc(into: list[Any], data: dict[str, Any]) -> None:
    """Pool one process's recorded collections (``seedance.real.runtime.GcPauses``) into [pauses (s), items,
    processes]: the process itself is one more (items handled, its collections in order as (generation, s))."""
    recorded = data.get("gc")
    if recorded and data.get("items"):
        into[0].extend(p[1] / 1e9 for p in recorded.get("pauses", []))
        into[1] += int(data["items"])
        into[2].append((int(data["items"]), [(int(p[0]), p[1] / 1e9) for p in recorded.get("pauses", [])]))


def gc_held(syncs: Sequence[Sequence[int]], pauses: Sequence[Sequence[int]]) -> set[int]:
    """The indices of one process's fsync records (``seedance.real.durability.Durability._synced``) whose span, from the
    loop's submit to the loop having the result, overlaps one of its own older-generation collections
    (``GcPauses``: generation, wall ns, start ns; older records without the start: none). The simulator draws the
    collections apart (``gc``); a hand-over, a write + fsync or a hand-back that a collection held (the thread
    needs the interpreter's lock before and after its syscall) would otherwise draw it a second time, in these
    distributions' tails: a profiled leader's 12 ms full collection had put the hand-over's largest quantile at
    12.5-15 ms, and the simulator then stalled every client 10-17 ms one to three times per 3 s run."""
    spans = sorted((p[2], p[2] + p[1]) for p in pauses if len(p) > 2 and p[2] > 0)
    if not spans:
        return set()
    held = set()
    for i, s in enumerate(syncs):
        if len(s) < 7 or s[6] <= 0:
            continue
        begin, end = s[6] - s[2] - s[5], s[6] + s[1]
        if any(b < end and begin < e for b, e in spans):
            held.add(i)
    return held


def entry_costs(send_s: float, recv_s: float, carried: dict[str, int]) -> EntryCosts | None:
    """Per-entry costs with the profile run's mean entries per message (received, sent) as their zero point."""
    if not carried.get("messages_in") or not carried.get("messages_out"):
        return None
    return EntryCosts(send_s=send_s, recv_s=recv_s, mean_in=carried["entries_in"] / carried["messages_in"],
                      mean_out=carried["entries_out"] / carried["messages_out"])


def fit_gc(pauses_s: list[float], items: int,
           processes: list[tuple[int, list[tuple[int, float]]]] | None = None) -> GcProfile | None:
    """A process kind's older-generation collections: their rate per handled item and their pauses' quantiles;
    None when none were recorded.

    With ``processes`` (each process's items handled and its collections in order, as (generation, s)) in which a
    full collection (generation 2) ran, those are apart (:class:`GcProfile`). Every profile run here: each leader
    handled 16-19k items and had 4-7 older collections, the 6th (when it came) its one full one, 14-20 ms against
    0.5-3.8 ms; each follower handled ~3k items and had 3. So a process makes a few collections whatever it handles
    (its start) and then more per item: a line ``collections = start + rate x items`` fitted over the processes
    (least squares) gives the per-item ``rate``, and the first full collection is the ``(position - start)``-th
    of those drawn per item. One rate pooled over all of them (collections / items) had the simulated leader
    collect ~1.6x as often as the real one, and so reach its full collection early; its full ones fell on
    followers and on restarted nodes as often as on a long-lived leader. The period between full collections is
    the interpreter's (generation 2 runs once ``threshold2`` generation-1 collections have passed: 12 for the
    default thresholds; the nodes run this interpreter)."""
    if not pauses_s or items <= 0:
        return None
    pooled = GcProfile(min(1.0, len(pauses_s) / items), Empirical.fit(pauses_s))
    processes = [(n, seq) for n, seq in (processes or []) if n > 0]
    fulls = [s for _, seq in processes for gen, s in seq if gen >= 2]
    young = [s for _, seq in processes for gen, s in seq if gen < 2]
    counts = np.array([len(seq) for _, seq in processes], dtype=float)
    handled = np.array([n for n, _ in processes], dtype=float)
    if not fulls or not young or len(processes) < 2 or np.ptp(handled) <= 0:
        return pooled
    slope, start = np.polyfit(handled, counts, 1)
    if slope <= 0:
        return pooled
    import gc

    firsts = [next(i for i, (gen, _) in enumerate(seq) if gen >= 2) + 1
              for _, seq in processes if any(gen >= 2 for gen, _ in seq)]
    first = max(1, int(round(float(np.median(firsts)) - max(0.0, float(start)))))
    return GcProfile(min(1.0, float(slope)), Empirical.fit(young), Empirical.fit(fulls), first,
                     gc.get_threshold()[2] + 2)


def sync_cpus(total_s: float | None, inside_s: float | None) -> dict[str, LogNormal | None]:
    """``sync_cpu`` (before the fsync's wait) and ``fsync_cpu`` (inside it) from the storage thread's CPU per fsync
    and the part of it measured inside the timed write + fsync (absent: all of it before, as older profiles)."""
    if total_s is None:
        return {"sync_cpu": None}
    if inside_s is None:
        return {"sync_cpu": LogNormal(total_s)}
    inside = min(inside_s, total_s)
    return {"sync_cpu": LogNormal(total_s - inside), "fsync_cpu": LogNormal(inside)}
