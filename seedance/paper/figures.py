"""The paper's figures: each a function from the results DataFrame of one sweep (``load_results``) to a Figure.

A figure reads nothing but its frame: it keeps the runs with ``status == "ok"``, aggregates across seeds with
:func:`seedance.sweep.aggregate` (mean and bootstrap 95 % CI) and draws with :mod:`seedance.analysis.style` (one
colour per protocol, variant and preset everywhere; CIs as bands or error bars). Every number drawn is a mean of
rows of that frame.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from seedance.analysis import style

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

FRAME_MS = 1000.0 / 60.0
TRAINING = "training traffic"


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The runs that completed (a failed run has no metrics)."""
    return df[df["status"] == "ok"].copy() if "status" in df.columns else df.copy()


def with_background(df: pd.DataFrame) -> pd.DataFrame:
    """``background`` (a list, stored as JSON text) as a flag ``training`` (True when any traffic ran)."""
    def flag(value: Any) -> bool:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return bool(value.strip())
        return bool(value)

    out = df.copy()
    out["training"] = out["background"].map(flag) if "background" in out.columns else False
    return out


def series(df: pd.DataFrame, name: str, flag: str = "training", suffix: str = "background") -> pd.DataFrame:
    """A ``series`` column: the protocol name, with ``+background`` when ``flag`` is set (same colour, dotted)."""
    out = df.copy()
    out["series"] = [f"{p}+{suffix}" if f else str(p) for p, f in zip(out[name], out[flag])]
    return out


def with_config(data: pd.DataFrame) -> pd.DataFrame:
    """The rows with their workload's name (``config``; results written before it had one: ``clients=N``)."""
    if "config" in data:
        return data
    return data.assign(config=[f"clients={int(c)}" for c in data["clients"]])


def _aggregate(df: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    from seedance.sweep import aggregate

    return aggregate(df, by=by, metrics=metrics)


def log_if_positive(ax: Any, values: Any, which: str = "y") -> None:
    """Log scale when some value is positive (a log axis of no positive data cannot be drawn): a study whose runs
    all missed their target still gets its figure, on a linear axis."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if (np.isfinite(x) & (x > 0)).any():
        style.log_scale(ax, which)


def _legend(figure: Figure, axes: Any) -> None:
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)))


# ------------------------------------------------------------------------------------------------ protocols
def protocols(df: pd.DataFrame) -> Figure:
    """Throughput (left) and p99 latency (right, log) against the conflict rate; a row per replica count; a line
    per protocol, dotted with training traffic."""
    data = series(with_background(ok_rows(df)), "protocol")
    table = _aggregate(data, ["nodes", "series", "conflict_rate"], ["throughput_ops_s", "latency_ms_p99"])
    counts = sorted(table["nodes"].unique())
    figure, axes = style.new_figure(2, len(counts), sharex=True, aspect=0.7)
    order = sorted(table["series"].unique(), key=lambda s: (s.split("+")[0], "+" in s))
    for i, n in enumerate(counts):
        part = table[table["nodes"] == n]
        for j, metric in enumerate(("throughput_ops_s", "latency_ms_p99")):
            style.ci_lines(axes[i, j], part, x="conflict_rate", metric=metric, hue="series", hue_order=order)
            axes[i, j].set_title(f"{int(n)} replicas", fontsize="small")
        log_if_positive(axes[i, 1], part["latency_ms_p99_mean"])
    _legend(figure, axes)
    return figure


# ------------------------------------------------------------------------------------------------ scenarios
def scenarios(df: pd.DataFrame) -> Figure:
    """Per scenario F1–F8: the parameter L2 deviation between ranks at the end (log) and the share of runs whose
    failure was detected, buggy vs fixed."""
    data = ok_rows(df)
    table = _aggregate(data, ["scenario", "variant"], ["param_l2_deviation", "detected"])
    order = sorted(table["scenario"].unique())
    figure, axes = style.new_figure(1, 2, aspect=0.3)
    floor = 1e-12  # a deviation of exactly 0 on a log axis
    shown = table.copy()
    for column in ("param_l2_deviation_mean", "param_l2_deviation_lo", "param_l2_deviation_hi"):
        shown[column] = shown[column].clip(lower=floor)
    style.ci_bars(axes[0, 0], shown, x="scenario", metric="param_l2_deviation", hue="variant", order=order,
                  hue_order=["buggy", "fixed"])
    style.log_scale(axes[0, 0], "y")
    axes[0, 0].set_ylabel(f"parameter L2 deviation (floor {floor:g})")
    style.ci_bars(axes[1, 0], table, x="scenario", metric="detected", hue="variant", order=order,
                  hue_order=["buggy", "fixed"])
    axes[1, 0].set_ylabel("runs whose failure was detected (share)")
    axes[1, 0].set_ylim(0, 1.05)
    _legend(figure, axes)
    return figure


# ------------------------------------------------------------------------------------------------- fabrics
def cluster(topology: Any, nodes: Any) -> str:
    """A preset and its server count as a series name: the preset's colour; several servers dash-dotted."""
    n = 1 if nodes is None or nodes != nodes else int(nodes)
    return str(topology) if n == 1 else f"{topology}+{n} servers"


def fabrics(df: pd.DataFrame) -> Figure:
    """Predicted busbw against size, a line per preset cluster, a panel per collective (log-log)."""
    data = ok_rows(df)
    data["cluster"] = [cluster(t, n) for t, n in zip(data["topology"], data["nodes"])]
    table = _aggregate(data, ["collective", "cluster", "size_bytes"], ["busbw_GBps"])
    collectives = list(dict.fromkeys(data["collective"]))
    figure, axes = style.new_figure(len(collectives), 1, aspect=0.8, sharey=True)
    for ax, collective in zip(axes[0], collectives):
        style.ci_lines(ax, table[table["collective"] == collective], x="size_bytes", metric="busbw_GBps",
                       hue="cluster", band=False)
        ax.set_xscale("log", base=2)
        style.log_scale(ax, "y")
        ax.set_title(collective)
    _legend(figure, axes)
    return figure


# --------------------------------------------------------------------------------------------- convergence
def convergence(df: pd.DataFrame) -> Figure:
    """Time to accuracy per fabric (groups) and compressor (bars), mean over seeds with its CI (log axis)."""
    data = ok_rows(df)
    table = _aggregate(data, ["fabric", "compressor"], ["time_to_accuracy_s", "iterations_to_target"])
    figure, axes = style.new_figure(1, 2, aspect=0.32)
    fabrics_order = list(dict.fromkeys(data["fabric"]))
    style.ci_bars(axes[0, 0], table, x="fabric", metric="time_to_accuracy_s", hue="compressor",
                  order=fabrics_order)
    log_if_positive(axes[0, 0], table["time_to_accuracy_s_mean"])
    axes[0, 0].set_xticks(axes[0, 0].get_xticks(), [f.split(" (")[0] + "\n(" + f.split(" (")[1] if " (" in f
                                                    else f for f in fabrics_order], fontsize="x-small")
    iterations = table.drop_duplicates("compressor")
    style.ci_bars(axes[1, 0], iterations.assign(all="every fabric"), x="all", metric="iterations_to_target",
                  hue="compressor")
    axes[1, 0].set_xlabel("")
    _legend(figure, axes)
    return figure


# --------------------------------------------------------------------------------------------------- pixel
def pixel(df: pd.DataFrame) -> Figure:
    """p99 convergence (causal) or write latency (Raft, a lower bound of its convergence) against writes per frame,
    with and without training traffic; one frame (16.7 ms) dashed."""
    data = ok_rows(df)
    data["training"] = data["background"].astype(str).str.lower().isin(("true", "1"))
    data = series(data, "protocol")
    table = _aggregate(data, ["series", "writes_per_frame"], ["p99_ms", "p50_ms"])
    figure, axes = style.new_figure(2, 1, aspect=0.75, sharey=True)
    for ax, metric in zip(axes[0], ("p50_ms", "p99_ms")):
        style.ci_lines(ax, table, x="writes_per_frame", metric=metric, hue="series", band=False)
        ax.axhline(FRAME_MS, color=style.GREY, linestyle="--", linewidth=0.9, label="one frame (16.7 ms)")
        ax.set_ylabel(f"{metric[:3]} convergence or write latency (ms)")
        ax.set_xscale("log", base=2)
        style.log_scale(ax, "y")
    _legend(figure, axes)
    return figure


# --------------------------------------------------------------------------------------------- sim vs real
def sim_vs_real(df: pd.DataFrame) -> Figure:
    """Predicted (simulator) against measured (real processes) throughput and p99 latency per workload, with
    CIs on both axes; the diagonal is a perfect prediction. Held-out workloads are filled; the profile's own
    (fitted) workload is hollow and labelled so: it shows reproducibility, not prediction."""
    import numpy as np

    data = ok_rows(df)
    metrics = [f"{side}_{m}" for m in ("throughput_ops_s", "latency_ms_p99") for side in ("real", "sim")]
    table = _aggregate(with_config(data), ["protocol", "config", "held_out"], metrics)
    figure, axes = style.new_figure(2, 1, aspect=1.0)
    for ax, metric in zip(axes[0], ("throughput_ops_s", "latency_ms_p99")):
        for k, row in enumerate(table.itertuples()):
            real = [getattr(row, f"real_{metric}_{s}") for s in ("mean", "lo", "hi")]
            sim = [getattr(row, f"sim_{metric}_{s}") for s in ("mean", "lo", "hi")]
            held = str(row.held_out).lower() in ("true", "1")
            colour = style.color(row.protocol)
            ax.errorbar([real[0]], [sim[0]], xerr=[[max(real[0] - real[1], 0)], [max(real[2] - real[0], 0)]],
                        yerr=[[max(sim[0] - sim[1], 0)], [max(sim[2] - sim[0], 0)]], color=colour,
                        marker=style.marker(k), markerfacecolor=colour if held else "none", linestyle="none",
                        label=f"{row.protocol}, {row.config}" + ("" if held else " (fitted: reproducibility)"))
        values = table[[f"{s}_{metric}_{q}" for s in ("real", "sim") for q in ("lo", "hi")]].to_numpy(dtype=float)
        finite = values[np.isfinite(values) & (values > 0)]
        if finite.size:
            lo, hi = finite.min() / 1.5, finite.max() * 1.5
            ax.plot([lo, hi], [lo, hi], color=style.GREY, linewidth=0.8, linestyle="--", label="prediction = measured")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            style.log_scale(ax)
        ax.set_xlabel("measured " + style.label(metric))
        ax.set_ylabel("predicted " + style.label(metric))
    _legend(figure, axes)
    return figure


# ---------------------------------------------------------------------------------------------------- nccl
def nccl(df: pd.DataFrame) -> Figure:
    """Per published curve: measured busbw (black dots) and the predictions of the NCCL model and the alpha-beta
    model against size."""
    data = ok_rows(df)
    data = data[data["present"].astype(str).str.lower().isin(("true", "1"))]
    curves = list(dict.fromkeys(data["curve"]))
    cols = min(2, max(1, len(curves)))
    rows = -(-len(curves) // cols)
    figure, axes = style.new_figure(cols, rows, aspect=0.75, sharex=True)
    for ax, curve in zip(axes.flat, curves):
        part = data[data["curve"] == curve]
        measured = _aggregate(part[part["model"] == part["model"].iloc[0]], ["size_bytes"], ["measured_busbw_GBps"])
        ax.plot(measured["size_bytes"], measured["measured_busbw_GBps_mean"], "o", color=style.color("published"),
                markersize=3, label="published (nccl-tests)")
        predicted = _aggregate(part, ["model", "size_bytes"], ["predicted_busbw_GBps"])
        style.ci_lines(ax, predicted, x="size_bytes", metric="predicted_busbw_GBps", hue="model", band=False)
        ax.set_xscale("log", base=2)
        style.log_scale(ax, "y")
        ax.set_title(curve, fontsize="small")
        ax.set_ylabel(style.label("busbw_GBps"))
    for ax in list(axes.flat)[len(curves):]:
        ax.set_visible(False)
    _legend(figure, axes)
    return figure


# -------------------------------------------------------------------------------------------------- memory
def memory_case(df: pd.DataFrame) -> pd.DataFrame:
    """A ``case`` column: ``fixed`` (no fault) or ``buggy F8`` (variant first: it picks the colour)."""
    out = df.copy()
    out["case"] = [str(v) if s in (None, "none", "") else f"{v} {s}" for v, s in zip(out["variant"], out["scenario"])]
    return out


def memory(df: pd.DataFrame) -> Figure:
    """Rank 0's mean RSS in each of the three periods after warm-up (left) and the largest growth of live
    device-buffer handles over the ranks (right), per case; CIs over seeds."""
    data = memory_case(ok_rows(df))
    periods = sorted(c for c in data.columns if c.startswith("rss_p") and c.endswith("_mib"))
    long = data.melt(id_vars=["case", "seed"], value_vars=periods, var_name="period",
                     value_name="rss_period_mib")
    long["period"] = long["period"].str.extract(r"rss_p(\d+)_mib")[0].astype(int)
    table = _aggregate(long, ["case", "period"], ["rss_period_mib"])
    figure, axes = style.new_figure(2, 1, aspect=0.8)
    style.ci_lines(axes[0, 0], table, x="period", metric="rss_period_mib", hue="case", band=False)
    axes[0, 0].set_xticks(sorted(table["period"].unique()))
    axes[0, 0].set_xlabel("period (equal thirds of the run after warm-up)")
    growth = _aggregate(data, ["case"], ["handles_growth", "fds_growth", "threads_growth"])
    rows = []
    for r in growth.itertuples():
        for kind in ("handles", "fds", "threads"):
            rows.append({"case": r.case, "count": kind, **{f"growth_{s}": getattr(r, f"{kind}_growth_{s}")
                                                          for s in ("mean", "lo", "hi")}})
    import pandas as pd

    style.ci_bars(axes[0, 1], pd.DataFrame(rows), x="count", metric="growth", hue="case")
    axes[0, 1].set_ylabel("growth of the floor (count)")
    axes[0, 1].set_xlabel("")
    _legend(figure, axes)
    return figure
