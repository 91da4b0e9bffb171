"""Figures of a fabric: the effective bandwidth matrix ``B`` as a heatmap (seed §2.4).

Compute, then render: :func:`bandwidth_frame` turns a Topology into a tidy DataFrame (one row per ordered device
pair), :func:`bandwidth_heatmap` draws that frame. Figures are built on :class:`matplotlib.figure.Figure` directly,
so no pyplot state or interactive backend is touched.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from seedance.models.topology import Topology

ANNOTATE_MAX_DEVICES = 16  # above this, cells are too small for numbers


def bandwidth_frame(topology: Topology) -> pd.DataFrame:
    """Tidy rows ``src, dst, bandwidth_GBps, latency_us, src_host, dst_host`` for every ordered pair src != dst.

    ``attrs`` carries the topology's ``name`` and ``num_devices``.
    """
    n = topology.num_devices
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    frame = pd.DataFrame({
        "src": src,
        "dst": dst,
        "bandwidth_GBps": topology.bandwidth_GBps[src, dst],
        "latency_us": topology.latency_us[src, dst],
        "src_host": topology.host_of[src],
        "dst_host": topology.host_of[dst],
    })
    frame.attrs.update(name=topology.name, num_devices=n)
    return frame


def bandwidth_heatmap(data: Topology | pd.DataFrame) -> Figure:
    """Heatmap of ``B`` (GB/s per direction, log colour scale; diagonal blank; server boundaries drawn)."""
    import seaborn as sns  # heavy; only needed here

    from seedance.analysis import style

    style.apply()
    frame = bandwidth_frame(data) if isinstance(data, Topology) else data
    n = int(frame.attrs.get("num_devices", max(frame["src"].max(), frame["dst"].max()) + 1))
    matrix = frame.pivot(index="src", columns="dst", values="bandwidth_GBps").reindex(index=range(n), columns=range(n))
    size = min(12.0, 3.0 + 0.35 * n)
    figure = Figure(figsize=(size + 1.5, size), layout="constrained")
    axes = figure.add_subplot()
    values = matrix.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    low, high = float(finite.min()), float(finite.max())
    norm = LogNorm(vmin=low, vmax=high) if high > low else None
    sns.heatmap(
        matrix, ax=axes, cmap="viridis", norm=norm, square=True,
        annot=n <= ANNOTATE_MAX_DEVICES, fmt=".3g", annot_kws={"fontsize": 7},
        cbar_kws={"label": "effective bandwidth (GB/s per direction)"},
        xticklabels=n <= 64, yticklabels=n <= 64,
    )
    colorbar = axes.collections[0].colorbar
    if colorbar is not None:
        colorbar.ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        colorbar.ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    hosts = frame.drop_duplicates("src").set_index("src")["src_host"].reindex(range(n)).to_numpy()
    for boundary in np.flatnonzero(np.diff(hosts) != 0) + 1:
        axes.axhline(boundary, color="white", linewidth=1.2)
        axes.axvline(boundary, color="white", linewidth=1.2)
    axes.set_xlabel("destination device")
    axes.set_ylabel("source device")
    axes.set_title(f"{frame.attrs.get('name', 'topology')}: bandwidth matrix B")
    return figure
