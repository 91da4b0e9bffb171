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

    collectives = list(dict.fromkeys(frame["collective"]))
    figure = Figure(figsize=(5.5 * len(collectives), 4.2), layout="constrained")
    axes_list = figure.subplots(1, len(collectives), squeeze=False)[0]
    palette = sns.color_palette("colorblind", n_colors=max(1, frame["topology"].nunique()))
    for axes, collective in zip(axes_list, collectives):
        data = frame[frame["collective"] == collective]
        sns.lineplot(
            data=data, x="size_bytes", y="busbw_GBps", hue="topology", style="topology", markers=True, dashes=False,
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
    """Write ``stem.pdf`` and ``stem.png``; return the paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".pdf"), stem.with_suffix(".png")]
    for path in paths:
        figure.savefig(path, dpi=150)
    return paths


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
