"""Predicted collective performance as tidy tables and figures (seed §2.4; nccl-tests' columns).

Compute, then render: :func:`cost_frame` evaluates the cost model (:mod:`seedance.models.cost`) over topologies ×
collectives × sizes into one tidy DataFrame; :func:`busbw_curves` draws bus bandwidth against size (log-x), one
line per topology, one panel per collective; :func:`save_figure` writes PDF and PNG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from seedance.models.cost import best_algorithms, bus_bandwidth_factor, collective_times, fabric_of
from seedance.models.topology import Topology
from seedance.models.units import human_size

COLUMNS = (
    "topology", "num_devices", "collective", "algorithm", "size_bytes", "time_s", "algbw_GBps", "busbw_GBps",
)


def cost_frame(
    topologies: Mapping[str, Topology],
    collectives: Sequence[str],
    sizes_bytes: Sequence[int],
    *,
    algorithm: str = "auto",
) -> pd.DataFrame:
    """One row per (topology label, collective, size): the predicted time, algbw and busbw, and the algorithm used."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    parts = []
    for label, topology in topologies.items():
        n = fabric_of(topology).num_devices
        for collective in collectives:
            times = collective_times(collective, sizes, topology, algorithm=algorithm)
            chosen = best_algorithms(collective, sizes, topology) if algorithm == "auto" else [algorithm] * len(sizes)
            with np.errstate(divide="ignore"):
                algbw = np.where(times > 0, sizes / np.where(times > 0, times, 1.0) / 1e9, np.inf)
            parts.append(pd.DataFrame({
                "topology": label, "num_devices": n, "collective": collective, "algorithm": chosen,
                "size_bytes": np.asarray(sizes_bytes, dtype=np.int64), "time_s": times, "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus_bandwidth_factor(collective, n),
            }))
    return pd.concat(parts, ignore_index=True)[list(COLUMNS)] if parts else pd.DataFrame(columns=COLUMNS)


def busbw_curves(frame: pd.DataFrame) -> Figure:
    """Bus bandwidth (GB/s) against size (log2 x axis), a line per topology, a panel per collective."""
    import seaborn as sns  # heavy; only needed here

    from seedance.analysis import style

    style.apply()
    collectives = list(dict.fromkeys(frame["collective"]))
    figure = Figure(figsize=(5.5 * len(collectives), 4.2), layout="constrained")
    axes_list = figure.subplots(1, len(collectives), squeeze=False)[0]
    palette = style.palette(frame["topology"])  # one colour per preset everywhere; server counts by dash
    for axes, collective in zip(axes_list, collectives):
        data = frame[frame["collective"] == collective]
        sns.lineplot(
            data=data, x="size_bytes", y="busbw_GBps", hue="topology", style="topology", markers=True, dashes=True,
            palette=palette, ax=axes,
        )
        axes.set_xscale("log", base=2)
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: human_size(value)))
        axes.set_xlabel("size")
        axes.set_ylabel("bus bandwidth (GB/s)")
        axes.set_title(f"{collective} (predicted, alpha-beta model)")
        axes.grid(True, which="major", alpha=0.3)
        axes.legend(title=None, fontsize="small")
    return figure


def save_figure(figure: Figure, stem: Path) -> list[Path]:
    """Write ``stem.pdf`` and ``stem.png`` (the project's one way: :func:`seedance.analysis.style.save`)."""
    from seedance.analysis import style

    return style.save(figure, stem)


def write_fabric_figures(
    topologies: Mapping[str, Topology], out_dir: Path, sizes_bytes: Sequence[int], *, collective: str = "allreduce"
) -> tuple[pd.DataFrame, list[Path]]:
    """busbw-vs-size curves of ``collective`` over all ``topologies`` and one B heatmap per topology (PDF + PNG).

    Returns the curves' frame and the files written.
    """
    from seedance.analysis.figures_fabric import bandwidth_heatmap  # owned by the topology side; heavy imports

    frame = cost_frame(topologies, [collective], sizes_bytes)
    files = save_figure(busbw_curves(frame), out_dir / f"busbw_{collective}")
    for label, topology in topologies.items():
        files += save_figure(bandwidth_heatmap(topology), out_dir / f"bandwidth_{_slug(label)}")
    return frame, files


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def validation_figure(curve, nccl_table, alpha_beta_table=None) -> Figure:
    """Model against published nccl-tests for one curve: busbw vs size (top) and predicted/measured time (bottom)."""
    from seedance.analysis import style
    from seedance.models.cost import bus_bandwidth_factor

    style.apply()
    n = curve.topology.num_devices
    factor = bus_bandwidth_factor(curve.collective, n)
    figure = Figure(figsize=(6.4, 5.6), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    size = nccl_table["size_bytes"].to_numpy(dtype=float)
    measured = size / (nccl_table["measured_us"].to_numpy() * 1e3) * factor
    top.plot(size, measured, "o", color=style.color("published"), markersize=3.5, label="published (nccl-tests)")
    top.plot(size, size / (nccl_table["predicted_us"].to_numpy() * 1e3) * factor, "-", color=style.color("nccl"),
             label="nccl model")
    bottom.plot(size, nccl_table["ratio"], "-", color=style.color("nccl"), label="nccl model")
    if alpha_beta_table is not None:
        top.plot(size, size / (alpha_beta_table["predicted_us"].to_numpy() * 1e3) * factor, ":",
                 color=style.color("alpha-beta"), label="alpha-beta")
        bottom.plot(size, alpha_beta_table["ratio"], ":", color=style.color("alpha-beta"), label="alpha-beta")
    for axes in (top, bottom):
        axes.set_xscale("log", base=2)
        axes.grid(True, which="major", alpha=0.3)
    top.set_yscale("log")
    top.set_ylabel("busbw (GB/s)")
    top.set_title(f"{curve.id}: {curve.collective}, {n} GPUs")
    top.legend(fontsize=8)
    bottom.set_yscale("log")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    for bound in (1 / 1.5, 1.5):
        bottom.axhline(bound, color="grey", linewidth=0.6, linestyle="--")
    bottom.set_ylabel("predicted / measured time")
    bottom.set_xlabel("size (bytes)")
    return figure


def write_validation_figures(out_dir, data_dir=None) -> tuple[list[dict], list]:
    """One validation figure per published curve (PDF and PNG) plus ``validation.json``; returns (summaries, files)."""
    import json
    from pathlib import Path

    from seedance.models.cost import published

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries, files = [], []
    for curve in published.curves(data_dir):
        table = published.compare(curve)
        reference = published.compare(curve, model="alpha-beta")
        figure = validation_figure(curve, table, reference)
        files += save_figure(figure, out / f"validation_{curve.id}")
        summaries.append({"curve": curve.id, "collective": curve.collective, "hardware": curve.hardware,
                          "targets": curve.targets, "nccl": published.summary(table),
                          "alpha_beta": published.summary(reference)})
    path = out / "validation.json"
    path.write_text(json.dumps({"curves": summaries}, indent=2, sort_keys=True) + "\n")
    files.append(path)
    return summaries, files
