"""The paper's tables (DataFrame → LaTeX, booktabs) and headline numbers (DataFrame → dict), one pair per item.

Like the figures, each reads only the results DataFrame of its sweep, keeps the ``ok`` runs and aggregates across
seeds with :func:`seedance.sweep.aggregate`: a cell is ``mean [lo, hi]`` (95 % bootstrap CI) or the mean alone
when every seed agreed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from seedance.paper.figures import FRAME_MS, cluster, memory_case, ok_rows, series, with_background, with_config

if TYPE_CHECKING:
    import pandas as pd


def _aggregate(df: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    from seedance.sweep import aggregate

    return aggregate(df, by=by, metrics=metrics)


def tex(text: Any) -> str:
    """Plain text safe inside LaTeX."""
    out = str(text)
    for char, escaped in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                          ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"),
                          ("^", r"\textasciicircum{}")):
        out = out.replace(char, escaped)
    return out


def number(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (thousands separated), ``--`` when missing."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "--"
    if not math.isfinite(x):
        return "--"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    if abs(x) < 1e-3:
        return f"{x:.{max(digits - 1, 0)}e}"
    return f"{x:.{digits}g}"


def cell(row: Any, metric: str, digits: int = 3) -> str:
    """``mean [lo, hi]`` of an aggregated row (the mean alone when the interval is a point)."""
    mean, lo, hi = (getattr(row, f"{metric}_{s}") if not isinstance(row, dict) else row[f"{metric}_{s}"]
                    for s in ("mean", "lo", "hi"))
    if number(lo, digits) == number(hi, digits):
        return number(mean, digits)
    return f"{number(mean, digits)} [{number(lo, digits)}, {number(hi, digits)}]"


def booktabs(header: Sequence[str], rows: Sequence[Sequence[str]], align: str, *, groups: Sequence[int] = ()) -> str:
    """A booktabs tabular: header cells are LaTeX already; ``groups``: row indices before which a gap is put."""
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    for k, row in enumerate(rows):
        if k in groups and k:
            lines.append(r"\addlinespace")
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _group_starts(keys: Sequence[Any]) -> list[int]:
    return [k for k in range(1, len(keys)) if keys[k] != keys[k - 1]]


# ------------------------------------------------------------------------------------------------ protocols
def protocols(df: pd.DataFrame) -> str:
    data = series(with_background(ok_rows(df)), "protocol")
    metrics = ["throughput_ops_s", "latency_ms_p50", "latency_ms_p99", "messages_per_op", "linearizable"]
    table = _aggregate(data, ["nodes", "protocol", "training", "conflict_rate"], metrics)
    rows = [[str(int(r.nodes)), tex(r.protocol), "yes" if r.training else "no", number(r.conflict_rate),
             cell(r, "throughput_ops_s"), cell(r, "latency_ms_p50"), cell(r, "latency_ms_p99"),
             number(r.messages_per_op_mean), number(r.linearizable_mean)] for r in table.itertuples()]
    header = ["replicas", "protocol", "training", "conflict", "throughput (ops/s)", "p50 (ms)", "p99 (ms)",
              "msgs/op", "linearizable"]
    return booktabs(header, rows, "rllrrrrrr", groups=_group_starts([(r[0], r[1]) for r in rows]))


def protocols_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = series(with_background(ok_rows(df)), "protocol")
    smallest = data["nodes"].min()
    table = _aggregate(data[data["nodes"] == smallest], ["protocol", "training", "conflict_rate"],
                       ["throughput_ops_s", "latency_ms_p99"])
    out: dict[str, Any] = {"replicas": int(smallest)}
    for r in table.itertuples():
        key = f"{r.protocol}{' +training' if r.training else ''} @conflict {r.conflict_rate:g}"
        out[key] = {"throughput_ops_s": _round(r.throughput_ops_s_mean), "p99_ms": _round(r.latency_ms_p99_mean)}
    return out


# ------------------------------------------------------------------------------------------------ scenarios
SCENARIO_METRICS = ["detected", "recovery_s_mean", "global_resync", "param_l2_deviation", "false_alarms",
                    "leaked_handles"]


def scenarios(df: pd.DataFrame) -> str:
    data = ok_rows(df)
    table = _aggregate(data, ["scenario", "variant"], SCENARIO_METRICS)
    rows = [[tex(r.scenario), tex(r.variant), str(int(r.n)), number(r.detected_mean), cell(r, "recovery_s_mean"),
             number(r.global_resync_mean), cell(r, "param_l2_deviation"), number(r.false_alarms_mean),
             number(r.leaked_handles_mean)] for r in table.itertuples()]
    header = ["scenario", "variant", "runs", "detected", "recovery (s)", "resync", "L2 deviation", "false alarms",
              "leaked"]
    return booktabs(header, rows, "llrrrrrrr", groups=_group_starts([r[0] for r in rows]))


def scenarios_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = ok_rows(df)
    table = _aggregate(data, ["scenario", "variant"], ["detected", "param_l2_deviation", "false_alarms"])
    fixed, buggy = table[table["variant"] == "fixed"], table[table["variant"] == "buggy"]
    return {
        "buggy_detected_share": _round(buggy["detected_mean"].mean()),
        "fixed_max_l2_deviation": _round(fixed["param_l2_deviation_mean"].max()),
        "buggy_max_l2_deviation": _round(buggy["param_l2_deviation_mean"].max()),
        "fixed_false_alarms": _round(fixed["false_alarms_mean"].sum()),
        "runs": int(len(data)),
    }


# -------------------------------------------------------------------------------------------------- fabrics
def fabrics(df: pd.DataFrame) -> str:
    data = ok_rows(df)
    data["cluster"] = [cluster(t, n) for t, n in zip(data["topology"], data["nodes"])]
    largest = data["size_bytes"].max()
    part = data[data["size_bytes"] == largest]
    table = _aggregate(part, ["cluster", "collective"], ["busbw_GBps", "time_s", "num_devices"])
    algorithms = part.groupby(["cluster", "collective"])["algorithm_used"].first()
    rows = [[tex(r.cluster.replace("+", ", ")), tex(r.collective), number(r.num_devices_mean),
             tex(algorithms.get((r.cluster, r.collective), "")), number(r.time_s_mean * 1e3),
             number(r.busbw_GBps_mean)] for r in table.itertuples()]
    header = ["cluster", "collective", "GPUs", "algorithm", "time (ms)", "busbw (GB/s)"]
    return booktabs(header, rows, "llrlrr", groups=_group_starts([r[0] for r in rows]))


def fabrics_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = ok_rows(df)
    data["cluster"] = [cluster(t, n) for t, n in zip(data["topology"], data["nodes"])]
    largest = data["size_bytes"].max()
    part = data[(data["size_bytes"] == largest) & (data["collective"] == "allreduce")]
    return {"size_bytes": int(largest), **{f"allreduce busbw GB/s {c}": _round(v) for c, v in
                                            part.groupby("cluster")["busbw_GBps"].mean().items()}}


# ---------------------------------------------------------------------------------------------- convergence
def convergence(df: pd.DataFrame) -> str:
    data = ok_rows(df)
    table = _aggregate(data, ["fabric", "compressor"], ["time_to_accuracy_s", "iterations_to_target", "reached"])
    rows = [[tex(r.fabric), tex(r.compressor), cell(r, "iterations_to_target"), number(r.reached_mean),
             cell(r, "time_to_accuracy_s")] for r in table.itertuples()]
    header = ["fabric", "compressor", "iterations", "reached", "time to accuracy (s)"]
    return booktabs(header, rows, "llrrr", groups=_group_starts([r[0] for r in rows]))


def convergence_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = ok_rows(df)
    table = _aggregate(data, ["fabric", "compressor"], ["time_to_accuracy_s"])
    best = {}
    for fabric, group in table.groupby("fabric", sort=False):
        group = group.dropna(subset=["time_to_accuracy_s_mean"])
        if not group.empty:
            top = group.sort_values("time_to_accuracy_s_mean").iloc[0]
            best[f"fastest on {fabric}"] = f"{top['compressor']} ({_round(top['time_to_accuracy_s_mean'])} s)"
    winners = {v.split(" (")[0] for v in best.values()}
    return {**best, "ranking_differs_across_fabrics": len(winners) > 1}


# ---------------------------------------------------------------------------------------------------- pixel
def pixel(df: pd.DataFrame) -> str:
    data = ok_rows(df)
    data["training"] = data["background"].astype(str).str.lower().isin(("true", "1"))
    table = _aggregate(data, ["protocol", "training", "writes_per_frame"], ["p50_ms", "p99_ms", "within_one_frame"])
    rows = [[tex(r.protocol), "yes" if r.training else "no", str(int(r.writes_per_frame)), cell(r, "p50_ms"),
             cell(r, "p99_ms"), number(r.within_one_frame_mean)] for r in table.itertuples()]
    header = ["protocol", "training", "writes/frame", "p50 (ms)", "p99 (ms)", r"p99 $<$ 16.7 ms"]
    return booktabs(header, rows, "llrrrr", groups=_group_starts([(r[0], r[1]) for r in rows]))


def pixel_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = ok_rows(df)
    data["training"] = data["background"].astype(str).str.lower().isin(("true", "1"))
    table = _aggregate(data, ["protocol", "training"], ["p99_ms", "bytes_delta", "bytes_full_state"])
    out: dict[str, Any] = {"frame_ms": _round(FRAME_MS)}
    for r in table.itertuples():
        out[f"{r.protocol}{' +training' if r.training else ''} p99_ms"] = _round(r.p99_ms_mean)
    causal = table[table["protocol"] == "causal"]
    if not causal.empty and causal["bytes_full_state_mean"].sum() > 0:
        ratio = causal["bytes_delta_mean"].sum() / causal["bytes_full_state_mean"].sum()
        out["delta / full-state bytes"] = _round(ratio)
    return out


# -------------------------------------------------------------------------------------------- sim vs real
SVR = ("throughput_ops_s", "latency_ms_p50", "latency_ms_p99")


def sim_vs_real(df: pd.DataFrame) -> str:
    data = ok_rows(df)
    metrics = [f"{s}_{m}" for m in SVR for s in ("real", "sim")] + [f"rel_error_{m}" for m in SVR]
    data = with_config(data)
    table = _aggregate(data, ["protocol", "config", "held_out"], metrics)
    rows = [[tex(r.protocol), tex(r.config), "held out" if str(r.held_out).lower() in ("true", "1") else "fitted",
             *[cell(r, f"{s}_{m}") for m in SVR for s in ("real", "sim")],
             *[number(100 * getattr(r, f"rel_error_{m}_mean"), 2) for m in SVR]] for r in table.itertuples()]
    header = ["protocol", "workload", "", "real ops/s", "sim ops/s", "real p50 (ms)", "sim p50 (ms)", "real p99 (ms)",
              r"sim p99 (ms)", r"err ops (\%)", r"err p50 (\%)", r"err p99 (\%)"]
    return booktabs(header, rows, "lrl" + "r" * 9)


def sim_vs_real_headline(df: pd.DataFrame) -> dict[str, Any]:
    import numpy as np

    data = ok_rows(df)
    out: dict[str, Any] = {"runs": int(len(data))}
    held = data[data["held_out"].astype(str).str.lower().isin(("true", "1"))]
    for m in SVR:
        values = held[f"rel_error_{m}"].astype(float).abs()
        out[f"median |error| {m} (held out)"] = _round(float(np.nanmedian(values))) if values.notna().any() else None
    return out


# ----------------------------------------------------------------------------------------------------- nccl
def nccl(df: pd.DataFrame) -> str:
    data = nccl_errors(df)
    rows = [[tex(r.curve), tex(r.model), str(int(r.rows)), f"{100 * r.median_abs_error:.1f}", f"{r.max_ratio:.2f}"]
            for r in data.itertuples()]
    header = ["curve", "model", "rows", r"median $|$error$|$ (\%)", "max ratio"]
    return booktabs(header, rows, "llrrr", groups=_group_starts([r[0] for r in rows]))


def nccl_errors(df: pd.DataFrame) -> pd.DataFrame:
    """Per curve and model: rows compared, the median |predicted/measured − 1| and the largest ratio either way."""
    import numpy as np
    import pandas as pd

    data = ok_rows(df)
    data = data[data["present"].astype(str).str.lower().isin(("true", "1"))]
    records = []
    for (curve, model), group in data.groupby(["curve", "model"], sort=False):
        ratio = group["ratio"].astype(float).to_numpy()
        records.append({"curve": curve, "model": model, "rows": len(group),
                        "median_abs_error": float(np.median(np.abs(ratio - 1.0))),
                        "max_ratio": float(np.max(np.maximum(ratio, 1.0 / ratio)))})
    return pd.DataFrame(records, columns=["curve", "model", "rows", "median_abs_error", "max_ratio"])


def nccl_headline(df: pd.DataFrame) -> dict[str, Any]:
    errors = nccl_errors(df)
    return {f"{r.curve} {r.model}: median |error|": f"{100 * r.median_abs_error:.1f} %" for r in errors.itertuples()}


# --------------------------------------------------------------------------------------------------- memory
def memory(df: pd.DataFrame) -> str:
    data = memory_case(ok_rows(df))
    periods = sorted(c.removeprefix("rss_p").removesuffix("_mib") for c in data.columns
                     if c.startswith("rss_p") and c.endswith("_mib"))
    metrics = [f"rss_p{k}_mib" for k in periods] + [f"fluctuation_p{k}_pct" for k in periods] + [
        "rss_drift_pct", "rss_slope_kib_s", "handles_growth", "leak"]
    table = _aggregate(data, ["case"], metrics)
    rows = [[tex(r.case), str(int(r.n)),
             *[f"{number(getattr(r, f'rss_p{k}_mib_mean'))} "
               f"$\\pm${number(getattr(r, f'fluctuation_p{k}_pct_mean'), 2)}\\%" for k in periods],
             cell(r, "rss_drift_pct", 2), cell(r, "rss_slope_kib_s"), number(r.handles_growth_mean),
             number(r.leak_mean)] for r in table.itertuples()]
    header = ["case", "runs", *[f"period {k} RSS (MiB)" for k in periods], r"drift (\%)", "slope (KiB/s)",
              "handles growth", "leak flagged"]
    return booktabs(header, rows, "lr" + "r" * (len(periods) + 4))


def memory_headline(df: pd.DataFrame) -> dict[str, Any]:
    data = memory_case(ok_rows(df))
    table = _aggregate(data, ["case"], ["max_fluctuation_pct", "rss_drift_pct", "handles_growth", "leak"])
    out: dict[str, Any] = {}
    for r in table.itertuples():
        out[r.case] = {"fluctuation_pct": _round(r.max_fluctuation_pct_mean, 3),
                       "rss_drift_pct": _round(r.rss_drift_pct_mean, 3),
                       "handles_growth": _round(r.handles_growth_mean, 3), "leak_flagged": _round(r.leak_mean, 3)}
    return out


def _round(value: Any, digits: int = 4) -> Any:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return value
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")
