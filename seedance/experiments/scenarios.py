"""The seed's impact table for F1–F8, both variants, simulated and (where this machine allows) real:
``seedance experiment failure-scenarios``.

Rows (one per scenario × variant × runtime; a runtime's seeds are aggregated): ``recovery_s_mean`` (mean over the
runs that recovered), ``global_resync`` (share of runs with a full-parameter broadcast), ``param_l2_deviation`` (the
largest end-of-run L2 distance between two ranks), ``replica_l2_max`` (the largest at any vote), ``detected`` (share
of runs whose checks saw the failure), ``false_alarms`` / ``false_offline`` / ``false_convergence`` /
``leaked_handles`` (totals over the runs), ``runs``. The seed reports two rows (F1: 8.2 s, no resync, 3.7e-3; F4:
42 ms, resync, 1.1e-5); ``summary["seed_rows"]`` repeats them beside ours.

Real runs: every scenario but F5 (a partition during a collective is injected by the simulator only); ``quick`` runs
F2, F3 and F8 for real (3 ranks, 30 steps) and 2 simulator seeds, in about a minute here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seedance.experiments.training_run import real_train, sim_train
from seedance.models.protocols.commit.scenarios import SCENARIOS, VARIANTS

ROW_FIELDS = ("scenario", "variant", "runtime", "runs", "recovery_s_mean", "global_resync", "param_l2_deviation",
              "replica_l2_max", "detected", "false_alarms", "false_offline", "false_convergence", "leaked_handles")
SEED_ROWS = [
    {"scenario": "F1", "recovery_s_mean": 8.2, "global_resync": False, "param_l2_deviation": 3.7e-3},
    {"scenario": "F4", "recovery_s_mean": 0.042, "global_resync": True, "param_l2_deviation": 1.1e-5},
]
REAL_SCENARIOS = ("F1", "F2", "F3", "F4", "F6", "F7", "F8")
QUICK_REAL = ("F2", "F3", "F8")


def aggregate(runs: list[dict[str, Any]], scenario: str, variant: str, runtime: str) -> dict[str, Any]:
    recoveries = [r["recovery_s_mean"] for r in runs if r["recovery_s_mean"] is not None]
    return {
        "scenario": scenario, "variant": variant, "runtime": runtime, "runs": len(runs),
        "recovery_s_mean": float(np.mean(recoveries)) if recoveries else None,
        "global_resync": float(np.mean([bool(r["global_resync"]) for r in runs])),
        "param_l2_deviation": float(max(r["param_l2_deviation"] for r in runs)),
        "replica_l2_max": float(max(r["replica_l2_max"] for r in runs)),
        "detected": float(np.mean([bool(r["detected"]) for r in runs])),
        "false_alarms": int(sum(r["false_alarms"] for r in runs)),
        "false_offline": int(sum(r["false_offline"] for r in runs)),
        "false_convergence": int(sum(r["false_convergence"] for r in runs)),
        "leaked_handles": int(sum(r["leaked_handles"] for r in runs)),
    }


def run(*, quick: bool, out: str | Path, seed: int = 0, real: bool = True,
        progress: Callable[[str], None] | None = None, seeds: int | None = None) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [seed + k for k in range(seeds or (2 if quick else 5))]
    rows: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        for variant in VARIANTS:
            if progress:
                progress(f"sim {scenario} {variant}")
            runs = [sim_train(world=4, steps=60, commit_every=10, scenario=scenario, variant=variant, seed=s)
                    for s in seeds]
            rows.append(aggregate(runs, scenario, variant, "sim"))
    if real:
        for scenario in (QUICK_REAL if quick else REAL_SCENARIOS):
            for variant in VARIANTS:
                if progress:
                    progress(f"real {scenario} {variant}")
                result = real_train(world=3, steps=30, commit_every=10, scenario=scenario, variant=variant,
                                    seed=seed, out=out / "real" / f"{scenario}-{variant}", timeout_s=240)
                rows.append(aggregate([result], scenario, variant, "real"))
    fixed = [r for r in rows if r["variant"] == "fixed"]
    buggy = [r for r in rows if r["variant"] == "buggy"]
    summary = {
        "seeds": seeds, "quick": quick,
        "fixed_clean": all(r["param_l2_deviation"] <= 1e-6 and not (r["false_alarms"] or r["false_offline"]
                                                                    or r["false_convergence"] or r["leaked_handles"])
                           for r in fixed),
        "buggy_detected": all(r["detected"] == 1.0 for r in buggy),
        "seed_rows": SEED_ROWS,
    }
    artifacts = save(rows, summary, out)
    return {"rows": rows, "summary": summary, "artifacts": artifacts}


def _fmt(value: Any) -> str:
    if value is None:
        return "--"
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.2g}" if abs(value) < 1e-2 or abs(value) >= 1e3 else f"{value:.3g}"
    return str(value)


def save(rows: list[dict[str, Any]], summary: dict[str, Any], out: Path) -> dict[str, str]:
    import csv

    paths = {"csv": out / "failure_scenarios.csv", "tex": out / "failure_scenarios.tex",
             "json": out / "summary.json", "png": out / "failure_scenarios.png", "pdf": out / "failure_scenarios.pdf"}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in ROW_FIELDS})
    head = ["scen.", "variant", "runtime", "recovery (s)", "resync", "L2 dev.", "L2 max", "detected", "false al.",
            "false off.", "false conv.", "leaked"]
    keys = ["scenario", "variant", "runtime", "recovery_s_mean", "global_resync", "param_l2_deviation",
            "replica_l2_max", "detected", "false_alarms", "false_offline", "false_convergence", "leaked_handles"]
    lines = [r"\begin{tabular}{lll" + "r" * (len(head) - 3) + "}", r"\toprule", " & ".join(head) + r" \\",
             r"\midrule"]
    lines += [" & ".join(_fmt(row[k]) for k in keys) + r" \\" for row in rows]
    lines += [r"\midrule"]
    lines += [f"{r['scenario']} & seed & A100 & {_fmt(r['recovery_s_mean'])} & {'yes' if r['global_resync'] else 'no'}"
              f" & {_fmt(r['param_l2_deviation'])} & & & & & & \\\\" for r in SEED_ROWS]
    lines += [r"\bottomrule", r"\end{tabular}"]
    paths["tex"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths["json"].write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n", encoding="utf-8")
    _figure(rows, paths["png"], paths["pdf"])
    return {k: str(v) for k, v in paths.items()}


def _figure(rows: list[dict[str, Any]], png: Path, pdf: Path) -> None:
    from matplotlib.figure import Figure

    from seedance.analysis import style

    style.apply()
    names = list(SCENARIOS)
    fig = Figure(figsize=(10.0, 3.4), constrained_layout=True)
    series = [(runtime, variant, style.color(variant)) for runtime in ("sim", "real") for variant in ("buggy", "fixed")]
    floor, width = 1e-9, 0.2
    panels = [("replica_l2_max", "largest replica L2 at any vote"), ("param_l2_deviation", "replica L2 at the end")]
    for p, (key, label) in enumerate(panels):
        ax = fig.add_subplot(1, 2, p + 1)
        for k, (runtime, variant, color) in enumerate(series):
            xs, ys, marks = [], [], []
            for i, name in enumerate(names):
                row = next((r for r in rows if r["scenario"] == name and r["variant"] == variant
                            and r["runtime"] == runtime), None)
                if row is None:
                    continue
                xs.append(i + (k - 1.5) * width)
                ys.append(max(row[key], floor))
                marks.append(variant == "buggy" and row["detected"] >= 1.0)
            ax.bar(xs, ys, width, color=color, label=f"{runtime} {variant}", hatch="//" if runtime == "real" else None,
                   edgecolor="white", linewidth=0.5)
            if p == 0:
                for x, y, m in zip(xs, ys, marks):
                    if m:
                        ax.text(x, y * 1.6, "d", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylim(floor / 2, 10)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label + " (1e-9 = identical)")
        if p == 0:
            ax.set_title("d: the buggy variant's failure was detected", fontsize=9)
            ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.savefig(png, dpi=150)
    fig.savefig(pdf)
