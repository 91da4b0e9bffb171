"""The seed's verification command (``make test-consensus``) and the memory soak (``seedance real soak``).

``test-consensus`` runs real data-parallel training under the validate-and-commit protocol
(:mod:`seedance.models.protocols.commit`) on ``ranks`` processes (GPUs when CUDA is available, one per rank; CPU
processes on gloo otherwise) for a wall-clock duration, with the real backend's seeded faults (crash and restart
from the checkpoint, pause, partition) over the first 60 % of it and, optionally, one of the seed's scenarios
F1–F8 (buggy or fixed) injected every ``inject_period`` steps throughout. Then it checks the run
(:func:`check_run`) and, with the memory monitor on, the ranks' memory (:mod:`seedance.monitor.memory`), and writes
``report.json``, ``figure.pdf``/``.png`` and ``commits.trace.json`` (commits and rollbacks, Chrome trace format).

Check levels:

* ``basic`` — digests at commits: every commit of a step carries one parameter digest (across ranks and epochs);
  no commit of replicas whose true digests differ (false convergence); no vote where ranks at the same epoch, step
  and view hold different parameters unless an injected state fault explains it (F1 is the only scenario that
  corrupts a replica by design; a divergence the protocol then catches is expected, any other is not); no false
  consistency alarm; no false offline verdict the faults do not explain; no leaked buffer handle or leak alarm; no
  split view; every rank finished, with identical final parameters.
* ``full`` — ``basic`` plus the replica L2 distance at every commit (from the parameters each rank reports with its
  vote; must be 0), the protocol-history checks (every commit follows an agreeing vote of the same rank, epoch and
  step whose rows are identical; each rank's commits move forward — epochs never decrease, steps increase within
  an epoch; every rollback returns to a step that rank committed; every resync adopts a committed step), and the
  memory monitor's verdicts when it is on. The commit protocol has no client operations, so there is no client
  history to check for linearizability; the report says so.

A violation fails the run (exit status 1) and is named in the report's ``causes``.

The run itself (its inputs, the real training, the files it writes) is
:mod:`seedance.experiments.consensus_check`.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

LEVELS = ("basic", "full")
SCENARIO_NAMES = ("F1", "F2", "F3", "F4", "F6", "F7", "F8")  # F5 is simulator-only (see training_run)
REAL_FAULTS = ("crash", "pause", "partition")
STATE_FAULTS = {"F1"}  # scenarios whose injection corrupts a replica's state on purpose (the protocol must catch it)


# ------------------------------------------------------------------------------------------------- reading
def read_events(run_dir: Path, world: int) -> list[dict[str, Any]]:
    events = []
    for rank in range(world):
        path = Path(run_dir) / f"node-{rank}" / "state" / "observations.jsonl"
        if not path.exists():
            continue
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the torn last line of a killed rank
                events.append({"node": int(record["node"]), "key": record["key"], "value": record.get("value"),
                               "time": float(record.get("time", 0.0))})
    events.sort(key=lambda e: e["time"])
    return events


# -------------------------------------------------------------------------------------------------- checks
def _check(name: str, violations: list[str], detail: str) -> dict[str, Any]:
    return {"name": name, "ok": not violations, "detail": detail, "violations": violations[:20],
            "violation_count": len(violations)}


def _l2(a: Any, b: Any) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(x - y)) if x.shape == y.shape else math.inf


def check_run(events: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], *, level: str, scenario: str,
              variant: str, world: int, nemesis: Sequence[str] = (), tolerance: float = 1e-6) -> list[dict[str, Any]]:
    """The checks of ``level`` over a run's replica events and its training summary (see the module docstring)."""
    votes, commits = _votes_and_commits(events)
    checks = _digest_checks(commits, summary, world)
    checks.append(_divergence_check(votes, scenario))
    checks += _summary_checks(summary, world, nemesis, tolerance)
    if level == "basic":
        return checks
    checks.append(_replica_l2_check(votes, commits, tolerance))
    checks.append(_check("protocol_history", history_violations(events, votes), "commit after an agreeing vote; "
                         "monotone commits; rollbacks and resyncs to committed steps"))
    return checks


Commits = list[tuple[int, int, int, tuple[int, ...], float]]  # (rank, epoch, step, digest, time)
Votes = dict[tuple[int, int], dict[int, dict[str, Any]]]  # (epoch, step) -> rank -> the vote's value


def _votes_and_commits(events: Sequence[Mapping[str, Any]]) -> tuple[Votes, Commits]:
    """The votes by (epoch, step) and rank, and the commits as (rank, epoch, step, digest, time)."""
    votes: dict[tuple[int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    commits: list[tuple[int, int, int, tuple[int, ...], float]] = []
    for e in events:
        v = e["value"]
        if e["key"] == "vote":
            votes[(v["epoch"], v["step"])][e["node"]] = v
        elif e["key"] == "commit":
            commits.append((e["node"], v["epoch"], v["step"], tuple(v["digest"]), e["time"]))
    return votes, commits


def _digest_checks(commits: Commits, summary: Mapping[str, Any], world: int) -> list[dict[str, Any]]:
    """basic: one digest per committed (epoch, step) and per step; no commit of replicas whose digests differ."""
    checks = []
    bad: list[str] = []
    by_round: dict[tuple[int, int], set] = defaultdict(set)
    by_step: dict[int, set] = defaultdict(set)
    for _node, epoch, step, digest, _t in commits:
        by_round[(epoch, step)].add(digest)
        by_step[step].add(digest)
    bad += [f"commit of epoch {e} step {s} with {len(d)} different digests" for (e, s), d in by_round.items()
            if len(d) > 1]
    bad += [f"step {s} committed with {len(d)} different digests (across epochs)" for s, d in by_step.items()
            if len(d) > 1]
    checks.append(_check("digests_at_commits", bad, f"{len(commits)} commits by {world} ranks, "
                         f"{len(by_round)} distinct (epoch, step)"))
    checks.append(_check("no_false_convergence", [f"{summary['false_convergence']} commits of replicas whose true "
                                                  "digests differ"] if summary["false_convergence"] else [],
                         "votes that agreed although the ranks' parameters differed"))
    return checks


def _divergence_check(votes: Votes, scenario: str) -> dict[str, Any]:
    """Divergence at votes (same epoch, step and view), explained only by an injected state fault."""
    explained = scenario in STATE_FAULTS
    divergent: list[str] = []
    l2_max = 0.0
    for (epoch, step), by_node in sorted(votes.items()):
        groups: dict[tuple[int, ...], list[dict[str, Any]]] = defaultdict(list)
        for value in by_node.values():
            groups[tuple(value.get("view") or ())].append(value)
        for view, members in groups.items():
            digests = {tuple(m["true"]) for m in members if m.get("true") is not None}
            if len(digests) <= 1:
                continue
            params = [m["params"] for m in members if m.get("params") is not None]
            l2 = max((_l2(a, b) for a, b in itertools.combinations(params, 2)), default=math.nan)
            if math.isfinite(l2):
                l2_max = max(l2_max, l2)
            divergent.append(f"epoch {epoch} step {step} view {list(view)}: {len(digests)} different parameter "
                             f"digests" + (f", L2 {l2:.3g}" if math.isfinite(l2) else ""))
    unexplained = [] if explained else divergent
    detail = (f"{len(divergent)} votes with diverged replicas"
              + (f" (largest L2 {l2_max:.3g})" if divergent and l2_max else "")
              + (f"; explained: scenario {scenario} corrupts a replica on purpose and the protocol must catch it"
                 if explained and divergent else ""))
    return _check("no_unexplained_divergence", [f"unexplained replica divergence at {d}" for d in unexplained],
                  detail)


def _summary_checks(summary: Mapping[str, Any], world: int, nemesis: Sequence[str],
                    tolerance: float) -> list[dict[str, Any]]:
    """basic: no false alarm, false offline verdict, leaked handle or split view; identical final replicas."""
    checks = []
    checks.append(_check("no_false_alarm", [f"{summary['false_alarms']} false consistency alarms (mismatched votes "
                                            "of identical replicas)"] if summary["false_alarms"] else [],
                         "a vote that failed although the ranks' parameters were identical"))
    pauses = bool({"pause", "partition"} & set(nemesis))
    retracted = summary.get("false_offline_retracted", 0)
    checks.append(_check("no_false_offline", ([f"{summary['false_offline']} offline verdicts about live ranks"]
                                              if summary["false_offline"] else [])
                         + ([f"{retracted} offline verdicts retracted (the rank was alive)"]
                            if retracted and not pauses else []),
                         f"{summary.get('offline_verdicts', 0)} offline verdicts, {retracted} retracted"
                         + (" (pauses and partitions explain retractions)" if pauses else "")))
    leak = []
    if summary["leaked_handles"]:
        leak.append(f"{summary['leaked_handles']} buffer handles leaked (protocol accounting at the end)")
    if summary.get("leak_alarms"):
        leak.append(f"{summary['leak_alarms']} leak alarms (live handles grew at three commits in a row)")
    checks.append(_check("no_leaked_handles", leak, "the protocol's own handle accounting"))
    checks.append(_check("no_split_view", [f"{summary['split_views']} split views"] if summary["split_views"] else [],
                         "two commits of one step with different states"))
    end = []
    if not summary.get("finished"):
        end.append(f"the run did not finish ({summary['ranks_finished']} of {world} ranks reported final "
                   "parameters at one epoch)")
    if not math.isfinite(summary["param_l2_deviation"]) or summary["param_l2_deviation"] > tolerance:
        end.append(f"final parameters differ: L2 {summary['param_l2_deviation']:.3g} > {tolerance:g}")
    checks.append(_check("final_replicas_identical", end, f"final L2 {summary['param_l2_deviation']:.3g}, "
                         f"{summary['ranks_finished']}/{world} ranks"))
    return checks


def _replica_l2_check(votes: Votes, commits: Commits, tolerance: float) -> dict[str, Any]:
    """full: the replicas' L2 distance at every commit (from the parameters each rank sent with its vote)."""
    rounds = sorted({(e, s) for _, e, s, _, _ in commits})
    l2s = []
    bad = []
    missing = 0
    for epoch, step in rounds:
        params = [v["params"] for v in votes.get((epoch, step), {}).values() if v.get("params") is not None]
        if len(params) < 2:
            missing += 1
            continue
        l2 = max(_l2(a, b) for a, b in itertools.combinations(params, 2))
        l2s.append(l2)
        if not l2 <= tolerance:
            bad.append(f"commit of epoch {epoch} step {step}: replica L2 {l2:.3g}")
    return _check("replica_l2_at_commits", bad, f"{len(l2s)} commits checked, max L2 {max(l2s, default=0.0):.3g}"
                  + (f" ({missing} with fewer than two ranks' parameters)" if missing else ""))


def history_violations(events: Sequence[Mapping[str, Any]],
                       votes: Mapping[tuple[int, int], Mapping[int, Mapping[str, Any]]]) -> list[str]:
    """The protocol-history rules of ``full`` (see the module docstring)."""
    bad: list[str] = []
    last: dict[int, tuple[int, int]] = {}
    committed: dict[int, set[int]] = defaultdict(set)
    all_committed: set[int] = set()
    for e in events:
        node, key, v = e["node"], e["key"], e["value"]
        if key == "vote" and v.get("agree"):  # its checkpoint may be durable although a crash lost the commit event
            committed[node].add(v["step"])
        elif key == "commit":
            epoch, step = v["epoch"], v["step"]
            vote = votes.get((epoch, step), {}).get(node)
            if vote is None or not vote.get("agree"):
                bad.append(f"rank {node} committed epoch {epoch} step {step} without an agreeing vote")
            elif len({tuple(r[:5]) for r in vote.get("rows", [])}) > 1:
                bad.append(f"rank {node} committed epoch {epoch} step {step} on differing vote rows")
            prev = last.get(node)
            if prev is not None and (epoch < prev[0] or (epoch == prev[0] and step <= prev[1])):
                bad.append(f"rank {node} committed epoch {epoch} step {step} after epoch {prev[0]} step {prev[1]}")
            last[node] = (epoch, step)
            committed[node].add(step)
            all_committed.add(step)
        elif key == "rollback":
            to = v.get("to_step", -1)
            if to >= 0 and to not in committed[node]:
                bad.append(f"rank {node} rolled back to step {to}, which it never committed (nor voted to commit)")
        elif key == "resync":
            if v["step"] not in all_committed:
                bad.append(f"rank {node} resynced to step {v['step']}, which no rank committed")
            committed[node].add(v["step"])
    return bad


# ------------------------------------------------------------------------------------------------ artifacts
def commit_trace_records(events: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Trace records (:mod:`seedance.tracing`) of the commits (vote → durable commit spans), rollbacks (rollback →
    resync spans) and alarms of a run's replica events."""
    records: list[tuple[Any, ...]] = []
    voted: dict[tuple[int, int, int], float] = {}
    rolled: dict[int, tuple[float, dict[str, Any]]] = {}
    for e in events:
        node, key, v, t = e["node"], e["key"], e["value"], e["time"]
        if key == "vote":
            voted[(node, v["epoch"], v["step"])] = t
            if not v.get("agree"):
                records.append((t, "annotate", node, "alarm", {"epoch": v["epoch"], "step": v["step"]}))
        elif key == "commit":
            start = voted.pop((node, v["epoch"], v["step"]), t)
            records.append((start, "span", node, f"commit {v['step']}", "commit", t - start,
                            {"epoch": v["epoch"], "step": v["step"], "live_handles": v.get("live_handles")}))
        elif key == "rollback":
            rolled[node] = (t, v)
        elif key == "resync":
            start, cause = rolled.pop(node, (t, {}))
            records.append((start, "span", node, f"rollback to {v['step']}", "rollback", t - start,
                            {"epoch": v["epoch"], "reason": cause.get("reason"), "root": v.get("root"),
                             "from_step": cause.get("from_step")}))
        elif key in ("offline", "false-offline", "leak", "split-view"):
            records.append((t, "annotate", node, key, dict(v)))
    for node, (start, cause) in rolled.items():  # a rollback without its resync (the run ended first)
        records.append((start, "annotate", node, "rollback", dict(cause)))
    records.sort(key=lambda r: float(r[0]))
    return records


def figure(events: Sequence[Mapping[str, Any]], samples: Mapping[int, Any], mem: Mapping[str, Any] | None,
           stem: Path, world: int) -> list[Path]:
    """Memory per rank over time with the fitted line (and live handles), and the commit/rollback timeline."""
    from matplotlib.figure import Figure

    from seedance.analysis.figures_cost import save_figure
    from seedance.monitor import memory

    panels = 3 if mem else 1
    fig = Figure(figsize=(8, 2.6 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
    colors = [f"C{r % 10}" for r in range(world)]
    if mem:
        rss = memory.series(samples, "rss")
        handles = memory.series(samples, "handles")
        for rank in range(world):
            t, y = rss.get(rank, ([], []))
            axes[0].plot(t, [v / 2**20 for v in y], ".", ms=2, color=colors[rank], label=f"rank {rank}")
            result = mem["ranks"].get(str(rank), {}).get("rss")
            if result:
                f = result["fit"]
                t0, t1 = f["t_from"], f["t_to"]
                axes[0].plot([t0, t1], [(f["intercept"] + f["slope"] * x) / 2**20 for x in (t0, t1)], "--",
                             color="black", lw=1.5,
                             label=f"fit r{rank}: {f['slope'] / 1024:+.2f} KiB/s{' LEAK' if f['leak'] else ''}")
            th, yh = handles.get(rank, ([], []))
            axes[1].step(th, yh, where="post", color=colors[rank], label=f"rank {rank}")
        values = sorted(v / 2**20 for _, ys in rss.values() for v in ys)
        if values:  # the steady range: a process's first sample (before its imports) would flatten the plot
            median = values[len(values) // 2]
            kept = [v for v in values if v >= 0.8 * median]
            axes[0].set_ylim(min(kept) - 0.5, max(kept) + 0.5)
        axes[0].set_ylabel("RSS (MiB)")
        axes[0].set_title("memory per rank (dashed: the least-squares fit over the window the verdict uses)")
        axes[0].legend(fontsize="x-small", ncol=2)
        axes[1].set_ylabel("live buffer handles")
        axes[1].legend(fontsize="x-small", ncol=4)
    ax = axes[-1]
    for rank in range(world):
        times = [e["time"] for e in events if e["node"] == rank and e["key"] == "commit"]
        ax.step(times, range(1, len(times) + 1), where="post", color=colors[rank], label=f"rank {rank} commits")
        rb = [e["time"] for e in events if e["node"] == rank and e["key"] == "rollback"]
        if rb:
            counts = [sum(1 for t in times if t <= x) for x in rb]
            ax.plot(rb, counts, "x", color=colors[rank], ms=6, label=f"rank {rank} rollbacks ({len(rb)})")
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("commits")
    ax.set_title("commits and rollbacks")
    ax.legend(fontsize="x-small", ncol=2)
    return save_figure(fig, stem)


def _verdict_word(fit: Mapping[str, Any]) -> str:
    if not fit.get("judged", True):
        return f"not judged (window {fit['span_s']:.0f} s after the warm-up: too short)"
    return "LEAK" if fit["leak"] else "no leak"


def report_lines(report: Mapping[str, Any]) -> list[str]:
    """The report as text (what the command prints without --json)."""
    from seedance.monitor.memory import table_lines

    tr = report["training"]
    opts = report["options"]
    lines = [f"{report['command']}: {report['device']}, {opts['duration_s']:g} s"
             + (f", level {opts['level']}, memcheck {'on' if opts['memcheck'] else 'off'}, nemesis "
                f"{','.join(opts['nemesis']) or 'none'}" if "level" in opts else "")
             + f", scenario {opts['scenario'] or 'none'} ({opts['variant']}), seed {opts.get('seed', 0)}",
             f"  steps {tr['steps']}, commits {tr['commits']}, rollbacks {tr['rollbacks']}, alarms {tr['alarms']}, "
             f"replica L2 max {tr['replica_l2_max']:.3g}, final L2 {tr['param_l2_deviation']:.3g}, leaked handles "
             f"{tr['leaked_handles']}, finished {tr['finished']}, wall {tr['wall_s']:.0f} s"]
    for check in report.get("checks", []):
        lines.append(f"  [{'ok' if check['ok'] else 'FAIL'}] {check['name']}: {check['detail']}"
                     + (f" — {check['violation_count']} violations" if not check["ok"] else ""))
    mem = report.get("memory")
    if mem:
        lines.append("  memory (RSS) per period:")
        lines += ["    " + line for line in table_lines(mem)]
        for rank, result in mem["ranks"].items():
            if "rss" not in result:
                continue
            f = result["rss"]["fit"]
            counts = ", ".join(f"{k} {result[k]['first']}->{result[k]['last']}" for k in ("handles", "fds", "threads")
                               if k in result)
            late = f.get("last_third")
            late_text = f", last third {late['slope'] / 1024:+.3f} KiB/s" if late else ""
            lines.append(f"    rank {rank}: slope {f['slope'] / 1024:+.3f} KiB/s (95% CI {f['ci'][0] / 1024:+.3f}.."
                         f"{f['ci'][1] / 1024:+.3f}){late_text}, drift {f['drift_pct']:+.3f} %, "
                         f"{_verdict_word(f)}; {counts}")
            if "heap" in result:  # live C allocations beside RSS: flat here and rising RSS is memory retained
                h = result["heap"]["fit"]
                lines.append(f"    rank {rank}: heap in use (malloc) {result['heap']['mean'] / 2**20:.2f} MiB, slope "
                             f"{h['slope'] / 1024:+.3f} KiB/s (95% CI {h['ci'][0] / 1024:+.3f}..{h['ci'][1] / 1024:+.3f}),"
                             f" drift {h['drift_pct']:+.3f} %, {_verdict_word(h)}")
    for leak, when in (report.get("detected") or {}).items():
        lines.append(f"  {leak} leak first detected at {when['at_s']:.0f} s, after {when['after_commits']} commits")
    load = report["load_average"]
    lines.append(f"  load average: {load['start'][0]:.2f} at start, {load['end'][0]:.2f} at the end")
    if report["passed"]:
        lines.append("PASS")
    else:
        lines.append("FAIL: " + "; ".join(report["causes"][:6]))
    if report.get("reproduce"):
        lines.append(f"  reproduce: {report['reproduce']}")
    lines.append(f"  wrote {', '.join(report['artifacts'])}")
    return lines