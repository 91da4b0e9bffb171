"""The one figure style of the project: every figure module draws with it (issue H item 4).

* :func:`apply` — seaborn's ``paper`` context on a white grid, the colour-blind-safe ``colorblind`` palette (the
  eight distinguishable colours of Wong, "Points of view: Color blindness", Nature Methods 8, 441 (2011), as
  seaborn ships them), TrueType fonts in PDFs (editable text), tight bounding boxes.
* :func:`color` — one fixed colour per protocol (raft, multipaxos, epaxos, causal/crdt, commit), per variant
  (buggy, fixed), per fabric preset and per reference series (published, seed, bound), the same in every figure;
  a name not in the table gets a colour derived from a hash of the name, so it too is stable across figures and
  runs. A protocol with a suffix (``multipaxos+batch``) keeps its protocol's colour and is told apart by
  :func:`line_style`.
* :func:`label` — axis labels with units, one wording per column name.
* :func:`save` — a figure as vector PDF and PNG, written atomically (a reader never sees half a file).
* :func:`ci_lines` / :func:`ci_bars` — draw ``<metric>_mean`` with its ``<metric>_lo``..``<metric>_hi`` confidence
  interval, the columns :func:`seedance.sweep.aggregate` writes.

Figures are :class:`matplotlib.figure.Figure` objects made by :func:`new_figure` (no pyplot state, Agg only).
Heavy packages (matplotlib, seaborn) load when a function here is first called, not on import.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# seaborn's "colorblind" palette (Wong 2011, reordered by seaborn), in its order.
PALETTE = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
           "#56b4e9")
BLUE, ORANGE, GREEN, VERMILION, PINK, BROWN, LIGHT_PINK, GREY, YELLOW, SKY = PALETTE
REFERENCE = "#000000"

# One colour per series name, everywhere. Names are matched lower-case, before any "+suffix" (see line_style).
COLORS: dict[str, str] = {
    # protocols
    "raft": BLUE, "multipaxos": ORANGE, "epaxos": GREEN, "causal": PINK, "crdt": PINK, "commit": BROWN,
    # validate-and-commit variants
    "buggy": VERMILION, "fixed": SKY,
    # fabric presets
    "dgx-a100": BLUE, "hgx-h100": GREEN, "pcie-8gpu": ORANGE, "mixed": PINK,
    # compressors (convergence study)
    "identity": GREY, "fp16": SKY, "fp32": GREY, "bf16": YELLOW, "top_k": GREEN, "random_k": ORANGE,
    "random_k_unbiased": LIGHT_PINK, "scaled_sign": BROWN, "qsgd": PINK, "local_sgd": BLUE,
    # runtimes
    "sim": BLUE, "real": VERMILION,
    # references: what a measurement is compared with
    "published": REFERENCE, "seed": REFERENCE, "bound": GREY, "model": BLUE, "nccl": BLUE, "alpha-beta": GREY,
}
# Second series of one protocol: same colour, another dash.
DASHES: dict[str, tuple[float, ...] | str] = {"": "-", "batch": "--", "background": ":", "bg": ":"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

# Axis labels with units, one wording per column (metrics of the paper's sweeps and of the older studies).
LABELS: dict[str, str] = {
    "throughput_ops_s": "throughput (ops/s)",
    "latency_ms_p50": "p50 latency (ms)",
    "latency_ms_p99": "p99 latency (ms)",
    "commit_latency_ms_p99": "p99 commit latency (ms)",
    "execution_latency_ms_p99": "p99 execution latency (ms)",
    "p50_ms": "p50 convergence (ms)",
    "p99_ms": "p99 convergence (ms)",
    "conflict_rate": "conflict rate (share of commands on one key)",
    "replicas": "replicas",
    "size_bytes": "message size (bytes)",
    "busbw_GBps": "bus bandwidth (GB/s)",
    "algbw_GBps": "algorithm bandwidth (GB/s)",
    "time_s": "time (s)",
    "time_us": "time (µs)",
    "recovery_s": "recovery time (s)",
    "recovery_s_mean": "recovery time (s)",
    "param_l2_deviation": "parameter L2 deviation between ranks",
    "time_to_accuracy_s": "time to accuracy (s)",
    "iterations_to_target": "iterations to target",
    "final_gap": "optimality gap f(x) − f*",
    "rss_mib": "resident memory (MiB)",
    "rss_period_mib": "rank 0 resident memory (MiB)",
    "rss_growth_mib": "memory growth (MiB)",
    "elapsed_s": "elapsed time (s)",
    "grid": "grid side (cells)",
    "writes_per_frame": "writes per frame",
    "messages_per_op": "messages per operation",
    "bytes_per_op": "bytes per operation (B)",
    "rel_error": "relative error (predicted / measured − 1)",
}


def apply() -> None:
    """Set the project's style (seaborn paper context, colour-blind palette, PDF fonts). Idempotent."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", palette=list(PALETTE), font_scale=1.0, rc={
        "pdf.fonttype": 42, "ps.fonttype": 42,  # TrueType: text stays text in the PDF
        "savefig.bbox": "tight", "savefig.dpi": 200, "figure.dpi": 100,
        "axes.titlesize": "medium", "legend.fontsize": "small", "legend.frameon": False,
        "lines.linewidth": 1.4, "lines.markersize": 4.5, "errorbar.capsize": 2.5,
    })


def _base(name: Any) -> tuple[str, str]:
    text = str(name).strip().lower()
    base, _, suffix = text.partition("+")
    return base.strip(), suffix.strip()


def color(name: Any) -> str:
    """The fixed colour of a series name (protocol, variant, preset, runtime, reference; see :data:`COLORS`)."""
    base, _ = _base(name)
    if base in COLORS:
        return COLORS[base]
    for key in sorted(COLORS, key=len, reverse=True):  # "raft + allreduce:1GiB@0.2", "dgx-a100 4n"
        if any(base.startswith(key + sep) for sep in (" ", "-", "_", ":", "(")):
            return COLORS[key]
    digest = int.from_bytes(hashlib.sha256(base.encode()).digest()[:4], "big")
    return PALETTE[digest % len(PALETTE)]


def palette(names: Iterable[Any]) -> dict[Any, str]:
    """``{name: colour}`` for seaborn's ``palette=`` (hue order kept)."""
    return {name: color(name) for name in dict.fromkeys(names)}


def line_style(name: Any) -> str:
    """The dash of a series: solid for a protocol, dashed for ``+batch``, dotted for ``+background``."""
    _, suffix = _base(name)
    style = DASHES.get(suffix, "-.")
    return style if isinstance(style, str) else "-"


def marker(index: int) -> str:
    return MARKERS[index % len(MARKERS)]


def label(column: str) -> str:
    """The axis label (with unit) of a column; the column name itself when it has none."""
    for suffix in ("_mean", "_lo", "_hi"):
        if column.endswith(suffix) and column.removesuffix(suffix) in LABELS:
            return LABELS[column.removesuffix(suffix)]
    return LABELS.get(column, column.replace("_", " "))


WIDTHS = {"column": 3.5, "full": 7.16}  # inches: one column and the full width of a two-column paper


def new_figure(ncols: int = 1, nrows: int = 1, *, width: str | float = "full", aspect: float = 0.62,
               sharey: bool = False, sharex: bool = False) -> tuple[Figure, Any]:
    """A styled figure with a grid of axes (always a 2-D array); ``aspect`` is each panel's height / width."""
    from matplotlib.figure import Figure

    apply()
    inches = WIDTHS[width] if isinstance(width, str) else float(width)
    height = inches / max(1, ncols) * aspect * nrows
    figure = Figure(figsize=(inches, max(1.8, height) + 0.5), layout="constrained")  # + room for a legend below
    axes = figure.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)
    return figure, axes


def log_scale(ax: Axes, which: str = "both", base: float = 10) -> None:
    """Log axes labelled in plain numbers (1, 10, 200): minor ticks labelled only on an axis shorter than a decade
    or so, where there would otherwise be one label or none. Base 2 (sizes) labels in binary units: 512, 4K, 16M."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    for name in ("x", "y") if which == "both" else (which,):
        getattr(ax, f"set_{name}scale")("log", base=base)
        axis = getattr(ax, f"{name}axis")
        axis.set_major_formatter(FuncFormatter(binary_label) if base == 2 else LogFormatter(base=base))
        axis.set_minor_formatter(LogFormatter(base=base, labelOnlyBase=False, minor_thresholds=(1, 0.5)))


def binary_label(value: float, _position: Any = None) -> str:
    """A size in binary units for a tick: 512, 1K, 64K, 16M, 4G (a fraction of a unit keeps one decimal)."""
    for unit, scale in (("T", 2 ** 40), ("G", 2 ** 30), ("M", 2 ** 20), ("K", 2 ** 10)):
        if value >= scale:
            amount = value / scale
            return f"{amount:.0f}{unit}" if amount == round(amount) else f"{amount:.1f}{unit}"
    return f"{value:g}"


def save(figure: Figure, stem: str | os.PathLike[str]) -> list[Path]:
    """Write ``stem.pdf`` (vector) and ``stem.png``, each atomically; return both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix in (".pdf", ".png"):
        path = stem.with_name(stem.name + suffix)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        figure.savefig(partial, format=suffix[1:], dpi=200)
        os.replace(partial, path)
        paths.append(path)
    return paths


def _interval(frame: pd.DataFrame, metric: str) -> tuple[Any, Any, Any]:
    mean = frame[f"{metric}_mean"].to_numpy(dtype=float)
    lo = frame[f"{metric}_lo"].to_numpy(dtype=float) if f"{metric}_lo" in frame else mean
    hi = frame[f"{metric}_hi"].to_numpy(dtype=float) if f"{metric}_hi" in frame else mean
    return mean, lo, hi


def ci_lines(ax: Axes, frame: pd.DataFrame, *, x: str, metric: str, hue: str, band: bool = True,
             hue_order: Sequence[Any] | None = None) -> None:
    """One line per ``hue`` value through ``<metric>_mean`` against ``x``, its CI as a band (or error bars)."""
    import numpy as np

    names = list(hue_order) if hue_order is not None else list(dict.fromkeys(frame[hue]))
    for k, name in enumerate(names):
        part = frame[frame[hue] == name].sort_values(x)
        if part.empty:
            continue
        xs = part[x].to_numpy(dtype=float)
        mean, lo, hi = _interval(part, metric)
        style = dict(color=color(name), linestyle=line_style(name), marker=marker(k), label=str(name))
        if band:
            ax.plot(xs, mean, **style)
            ax.fill_between(xs, lo, hi, color=color(name), alpha=0.2, linewidth=0)
        else:
            ax.errorbar(xs, mean, yerr=[np.maximum(mean - lo, 0), np.maximum(hi - mean, 0)], **style)
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(metric))


def ci_bars(ax: Axes, frame: pd.DataFrame, *, x: str, metric: str, hue: str, order: Sequence[Any] | None = None,
            hue_order: Sequence[Any] | None = None) -> None:
    """Grouped bars of ``<metric>_mean`` per ``x`` category, one bar per ``hue`` value, CI as error bars."""
    import numpy as np

    cats = list(order) if order is not None else list(dict.fromkeys(frame[x]))
    names = list(hue_order) if hue_order is not None else list(dict.fromkeys(frame[hue]))
    width = 0.8 / max(1, len(names))
    for k, name in enumerate(names):
        part = frame[frame[hue] == name].set_index(x).reindex(cats)
        mean, lo, hi = _interval(part.reset_index(), metric)
        positions = np.arange(len(cats)) - 0.4 + width * (k + 0.5)
        ok = np.isfinite(mean)
        ax.bar(positions[ok], mean[ok], width, color=color(name), label=str(name),
               hatch="//" if line_style(name) != "-" else None, edgecolor="white", linewidth=0.5)
        err = np.vstack([np.maximum(mean - lo, 0), np.maximum(hi - mean, 0)])[:, ok]
        ax.errorbar(positions[ok], mean[ok], yerr=err, fmt="none", ecolor="black", elinewidth=0.8)
    ax.set_xticks(np.arange(len(cats)), [str(c) for c in cats])
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(metric))
