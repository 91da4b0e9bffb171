"""Figures of the convergence experiment: one function DataFrame → Figure each (Agg backend, caller saves).

* :func:`gap_vs_bound` — theorem runs: seed-mean gap with its 95 % CI against the bound (and the wrong bound).
* :func:`gap_curves` — common-schedule runs: every compressor's mean gap per problem.
* :func:`time_to_accuracy_heatmap` — time to accuracy per fabric × compressor (blank: target not reached).
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from seedance.analysis import style  # noqa: E402


def gap_vs_bound(curves: pd.DataFrame) -> plt.Figure:
    """Small multiples, one per compressor: log-log gap E f(x̄_T) − f* vs T, the bound dashed, the wrong bound
    (compression term dropped) dotted."""
    style.apply()
    chosen = curves[curves.schedule == "theorem"]
    names = list(dict.fromkeys(chosen.compressor))
    columns = 4
    rows = max(1, math.ceil(len(names) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False, sharex=True)
    for ax, name in zip(axes.flat, names):
        part = chosen[chosen.compressor == name]
        ax.plot(part.horizon, part.gap_mean, color="C0", label="empirical mean")
        ax.fill_between(part.horizon, np.maximum(part.gap_ci_low, 1e-12), part.gap_ci_high, color="C0", alpha=0.3,
                        label="95% CI")
        ax.plot(part.horizon, part.bound, "--", color="C3", label="bound")
        if part.wrong_bound.notna().any():
            ax.plot(part.horizon, part.wrong_bound, ":", color="C2", label="bound w/o compression term")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("iterations T")
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("f(x̄_T) − f*")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle("Logistic regression: empirical gap vs the theorem's bound (theorem step sizes)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    return fig


def gap_curves(curves: pd.DataFrame) -> plt.Figure:
    """Common-schedule runs, one panel per problem: mean gap vs iterations for every compressor."""
    style.apply()
    chosen = curves[curves.schedule == "common"]
    problems = list(dict.fromkeys(chosen.problem))
    fig, axes = plt.subplots(1, len(problems), figsize=(5.5 * len(problems), 3.8), squeeze=False)
    for ax, problem in zip(axes.flat, problems):
        part = chosen[chosen.problem == problem]
        sns.lineplot(data=part, x="horizon", y="gap_mean", hue="compressor", ax=ax, linewidth=1,
                     palette=style.palette(part.compressor))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{problem}: common step sizes")
        ax.set_xlabel("iterations")
        ax.set_ylabel("mean gap" if problem == "logistic" else "mean f(x_t) − f_ref")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def time_to_accuracy_heatmap(rows: pd.DataFrame, problem: str = "logistic", schedule: str = "common") -> plt.Figure:
    """Fabric × compressor heatmap of time to accuracy (s, nominal model); blank cells never reached the target.
    Each fabric's fastest method is boxed red, its fastest compressor (local SGD aside) boxed white, dashed."""
    style.apply()
    chosen = rows[(rows.problem == problem) & (rows.schedule == schedule)]
    table = chosen.pivot(index="topology", columns="compressor", values="time_to_accuracy_s").astype(float)
    table = table.loc[list(dict.fromkeys(chosen.topology)), list(dict.fromkeys(chosen.compressor))]
    compressors_only = [j for j, name in enumerate(table.columns) if not name.startswith("local_sgd")]
    fig, ax = plt.subplots(figsize=(1.2 * table.shape[1] + 3, 0.6 * table.shape[0] + 2))
    sns.heatmap(np.log10(table), annot=table.round(1), fmt="g", cmap="viridis_r", ax=ax,
                cbar_kws={"label": "log10 time to accuracy (s)"})
    for i, (_, values) in enumerate(table.iterrows()):
        if values.notna().any():
            j = int(np.nanargmin(values.to_numpy()))
            ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, edgecolor="red", linewidth=2))
            subset = values.to_numpy()[compressors_only]
            if np.isfinite(subset).any():
                k = compressors_only[int(np.nanargmin(subset))]
                ax.add_patch(plt.Rectangle((k + 0.05, i + 0.05), 0.9, 0.9, fill=False, edgecolor="white",
                                           linestyle="--", linewidth=1.5))
    ax.set_xlabel("compressor (blank: target gap not reached)")
    ax.set_ylabel("fabric")
    ax.set_title(f"Time to accuracy, {problem} ({schedule} step sizes), nominal 1.3B-parameter gradient")
    fig.tight_layout()
    return fig
