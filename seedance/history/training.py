"""Summaries of validate-and-commit training runs, from the nodes' replica events (the same in both runtimes).

Every rank of :mod:`seedance.models.protocols.commit` reports what it does as ``Observe`` events (``vote``,
``commit``, ``alarm``, ``rollback``, ``resync``, ``offline``, ``false-offline``, ``leak``, ``split-view``, ``final``);
the simulator returns them as :class:`~seedance.history.events.ReplicaEvent` s and the real backend writes them to
each node's ``observations.jsonl``. :func:`summarize` turns them into the run's summary keys:

* ``steps`` (the fewest steps any rank finished), ``final_loss`` (mean of the ranks' last local losses);
* ``param_l2_deviation``: the largest L2 distance between two ranks' final parameters; ``replica_l2_max``: the
  largest between two ranks' parameters at any vote (same epoch and step) or at the end;
* ``commits`` (distinct committed (epoch, step)), ``rollbacks`` (distinct epochs entered by a rollback),
  ``alarms`` (votes that found a mismatch), ``global_resync`` (a full-parameter broadcast happened),
  ``recovery_s_mean`` (mean, over epochs, of the slowest rank's time from rollback to resumed training);
* ``false_alarms``: mismatch votes although the ranks' true parameter digests were all equal;
  ``false_convergence``: commits although the ranks' true parameter digests differed;
  ``false_offline``: offline verdicts about a rank that was never crashed (``crashed`` gives the ones that were);
* ``leaked_handles``: device-buffer handles beyond the protocol's persistent ones, summed over ranks at the end
  (``leaked`` overrides it with the runtime's own count);
* ``commit_overhead_pct``: time in validate-and-commit over the training time, mean over ranks;
* ``detected``: the run's checks saw something (an alarm, a false offline retracted, a leak, a split view, or an
  invariant-monitor breach).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _rows(events: Iterable[Any]) -> list[tuple[int, str, Any, float]]:
    out = []
    for e in events:
        if isinstance(e, Mapping):
            out.append((int(e["node"]), str(e["key"]), e.get("value"), float(e.get("time", 0.0))))
        else:
            out.append((int(e.node), str(e.key), e.value, float(e.time)))
    return out


def _max_pairwise(vectors: list[np.ndarray]) -> float:
    """The largest L2 distance between two of ``vectors`` (pairs of one shape); over distinct vectors only, so
    a thousand identical replicas cost one comparison, not half a million."""
    by_shape: dict[tuple[int, ...], list[np.ndarray]] = defaultdict(list)
    for v in vectors:
        by_shape[v.shape].append(v)
    best = 0.0
    for group in by_shape.values():
        if len(group) < 2:
            continue
        distinct = np.unique(np.stack(group).astype(np.float64).reshape(len(group), -1), axis=0)
        for a, b in itertools.combinations(distinct, 2):
            best = max(best, float(np.linalg.norm(a - b)))
    return best


@dataclass
class _Round:
    """One vote round (epoch, step), folded as its votes arrive: O(distinct replicas), not O(ranks)."""

    first: int  # the first voter (a second voter makes the round one of several ranks)
    several: bool = False
    agreed: bool = False  # some rank's vote agreed
    trues: set[tuple[Any, ...]] = field(default_factory=set)  # the ranks' true digests
    params: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)  # (shape, bytes) -> a distinct replica


@dataclass
class Tally:
    """The replica events of a training run, gathered by kind as they arrive (:meth:`add`): a run's summary in
    memory that grows with its rounds and distinct replicas, not with its ranks times its steps."""

    finals: dict[int, dict[str, Any]] = field(default_factory=dict)
    votes: dict[tuple[int, int], _Round] = field(default_factory=dict)
    commits: set[tuple[int, int]] = field(default_factory=set)
    alarm_rounds: set[tuple[int, int]] = field(default_factory=set)
    rollback_epochs: set[int] = field(default_factory=set)
    recovery: dict[int, float] = field(default_factory=dict)
    offline_peers: list[int] = field(default_factory=list)
    false_offline_seen: int = 0
    leaks: int = 0
    splits: int = 0
    missed: int = 0

    def add(self, node: int, key: str, value: Any) -> None:
        if key == "final":
            self.finals[node] = value
        elif key == "vote":
            self._vote(node, value)
        elif key == "commit":
            self.commits.add((value["epoch"], value["step"]))
        elif key == "alarm":
            self.alarm_rounds.add((value["epoch"], value["step"]))
        elif key == "rollback":
            self.rollback_epochs.add(value["epoch"])
        elif key == "resync":
            self.recovery[value["epoch"]] = max(self.recovery.get(value["epoch"], 0.0), float(value["recovery_s"]))
        elif key == "offline":
            self.offline_peers.append(int(value["peer"]))
        elif key == "false-offline":
            self.false_offline_seen += 1
        elif key == "leak":
            self.leaks += 1
        elif key == "split-view":
            self.splits += 1
        elif key == "injection-missed":
            self.missed += 1

    def _vote(self, node: int, value: Mapping[str, Any]) -> None:
        key = (value["epoch"], value["step"])
        round_ = self.votes.get(key)
        if round_ is None:
            round_ = self.votes[key] = _Round(first=node)
        elif node != round_.first:
            round_.several = True
        round_.agreed = round_.agreed or bool(value["agree"])
        if value.get("true") is not None:
            round_.trues.add(tuple(value["true"]))
        params = value.get("params")
        if params is not None:
            array = np.asarray(params)
            round_.params.setdefault((array.shape, array.tobytes()), array)


def _vote_checks(tally: Tally) -> tuple[int, int, float]:
    """False alarms (an alarm although every true digest agreed), false convergence (an agreeing vote over
    differing replicas) and the largest L2 distance between the replicas' parameters at a vote."""
    false_alarms = false_convergence = 0
    replica_l2 = 0.0
    for key, round_ in tally.votes.items():
        if key in tally.alarm_rounds and len(round_.trues) == 1 and round_.several:
            false_alarms += 1
        if round_.agreed and len(round_.trues) > 1:
            false_convergence += 1
        replica_l2 = max(replica_l2, _max_pairwise(list(round_.params.values())))
    return false_alarms, false_convergence, replica_l2


def summarize(events: Iterable[Any] | Tally, *, world: int, crashed: Iterable[int] = (), leaked: int | None = None,
              monitor_breaches: int = 0, keep_params: bool = False) -> dict[str, Any]:
    """The run's summary keys (module doc) from its replica events, or from a :class:`Tally` they were fed to."""
    if isinstance(events, Tally):
        tally = events
    else:
        tally = Tally()
        for node, key, value, _t in _rows(events):
            tally.add(node, key, value)
    crashed = set(crashed)
    false_offline = sum(1 for peer in tally.offline_peers if peer not in crashed)
    finals = tally.finals
    false_alarms, false_convergence, replica_l2 = _vote_checks(tally)
    final_params = [np.asarray(f["params"]) for f in finals.values() if f.get("params") is not None]
    deviation = _max_pairwise(final_params) if len(final_params) > 1 else 0.0
    replica_l2 = max(replica_l2, deviation)
    losses = [f["loss"] for f in finals.values() if f.get("loss") is not None]
    overheads = [100.0 * f["commit_time_s"] / f["train_time_s"] for f in finals.values()
                 if f.get("train_time_s")]
    if leaked is None:
        leaked = int(sum(f.get("leaked_handles", 0) for f in finals.values()))
    recoveries = list(tally.recovery.values())
    return {
        "world_size": world,
        "ranks_finished": len(finals),
        "steps": min((int(f["step"]) for f in finals.values()), default=0),
        "final_loss": float(np.mean(losses)) if losses else None,
        "replica_l2_max": replica_l2,
        "param_l2_deviation": deviation,
        "commits": len(tally.commits),
        "rollbacks": len(tally.rollback_epochs),
        "alarms": len(tally.alarm_rounds),
        "global_resync": bool(tally.recovery),
        "recovery_s_mean": float(np.mean(recoveries)) if recoveries else None,
        "commit_overhead_pct": float(np.mean(overheads)) if overheads else None,
        "train_time_s": float(np.mean([f["train_time_s"] for f in finals.values() if f.get("train_time_s")]))
        if finals else None,
        "false_alarms": false_alarms,
        "false_convergence": false_convergence,
        "offline_verdicts": len(tally.offline_peers),
        "false_offline": false_offline,
        "false_offline_retracted": tally.false_offline_seen,
        "leaked_handles": int(leaked),
        "leak_alarms": tally.leaks,
        "split_views": tally.splits,
        "monitor_breaches": int(monitor_breaches),
        "injections_missed": tally.missed,  # a real collective beat its injected deadline (F2): that injection did not
        # bite; the checks: the protocol's own (alarm, retracted verdict, leak, split view), the invariant monitor,
        # and the same replica check run on the replica events after the run (commits of differing replicas)
        "detected": bool(tally.alarm_rounds or tally.false_offline_seen or tally.leaks or tally.splits
                         or monitor_breaches or false_convergence),
        **({"final_params": {str(n): f.get("params") for n, f in sorted(finals.items())}} if keep_params else {}),
    }


def clean(summary: Mapping[str, Any], *, tolerance: float = 1e-6) -> list[str]:
    """What makes a run not clean (the bar for fixed variants): empty when it is."""
    problems = []
    if not math.isfinite(summary["param_l2_deviation"]) or summary["param_l2_deviation"] > tolerance:
        problems.append(f"param_l2_deviation {summary['param_l2_deviation']:.3g} > {tolerance:g}")
    for key in ("false_alarms", "false_convergence", "false_offline", "leaked_handles", "monitor_breaches"):
        if summary[key]:
            problems.append(f"{key} = {summary[key]}")
    if summary["ranks_finished"] < summary["world_size"]:
        problems.append(f"only {summary['ranks_finished']} of {summary['world_size']} ranks finished")
    return problems


def _unhash(value: Any) -> Any:
    """Undo :class:`~seedance.history.events.ReplicaEvent`'s hashable form for this protocol's values (objects
    became tuples of (name, value) pairs, lists became tuples)."""
    if isinstance(value, tuple):
        if value and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in value):
            return {k: _unhash(v) for k, v in value}
        return [_unhash(v) for v in value]
    return value


def run_summary(history: Any, replicas: Iterable[Any], nodes: int) -> dict[str, Any]:
    """``ProtocolSpec.summarize`` of the commit protocol: the training keys of a ``sim run`` / ``real run``."""
    events = [{"node": e.node, "key": e.key, "value": _unhash(e.value), "time": e.time} for e in replicas]
    return {"training": summarize(events, world=nodes)}
