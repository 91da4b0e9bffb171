"""``seedance topology``: list presets, show a cluster's matrices, draw its bandwidth heatmap (seed §2.4).

A topology is named by a preset (``seedance topology list``) or a path to a YAML/JSON file in the matrix or
link-graph form (see :mod:`seedance.models.topology`). ``--nodes N`` (N >= 1) sets the server count of a preset.
``show --json`` prints ``bandwidth_GBps`` with ``null`` on the diagonal (JSON has no infinity; a device has no link
to itself) and ``latency_us`` with 0 on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from seedance.models.topology.checks import check_topology_spec
from seedance import validation
from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import Progress, progress_option
from seedance.models.topology import PRESETS, preset_names  # light: names and descriptions only

if TYPE_CHECKING:  # numpy and the routing code load inside the commands that build a topology
    import numpy as np

    from seedance.models.topology import Topology

TABLE_MAX_DEVICES = 32  # human output prints whole matrices up to this size, a summary above it

nodes_option = click.option(
    "--nodes", type=click.IntRange(min=1), default=None,
    help="Servers in a preset cluster (>= 1; default 1, or 2 for 'mixed'). Presets only.",
)
spec_argument = click.argument("spec", metavar="NAME|FILE")


@click.group("topology")
def command() -> None:
    """Clusters: presets, files, their bandwidth and latency matrices."""


@command.command("list")
@json_option
def list_presets(as_json: bool) -> None:
    """List the preset clusters."""
    if as_json:
        emit_json({"presets": preset_names()})
        return
    width = max(map(len, PRESETS))
    for name, spec in PRESETS.items():
        click.echo(f"{name:<{width}}  {spec.description}")


def _matrix_json(matrix: np.ndarray, diagonal: float | None) -> list[list[float | None]]:
    rows = matrix.tolist()
    for i, row in enumerate(rows):
        row[i] = diagonal
    return rows


def _table(matrix: np.ndarray, title: str) -> str:
    n = matrix.shape[0]
    cells = [["-" if i == j else f"{matrix[i, j]:.4g}" for j in range(n)] for i in range(n)]
    width = max(4, max(len(c) for row in cells for c in row))
    head = " " * 5 + " ".join(f"{j:>{width}}" for j in range(n))
    body = [f"{i:>4} " + " ".join(f"{c:>{width}}" for c in row) for i, row in enumerate(cells)]
    return "\n".join([title, head, *body])


def _summary(topology: Topology) -> str:
    import numpy as np

    off = ~np.eye(topology.num_devices, dtype=bool)
    same = (topology.host_of[:, None] == topology.host_of[None, :]) & off
    lines = []
    for label, mask in (("within a server", same), ("across servers", off & ~same)):
        if mask.any():
            b, lat = topology.bandwidth_GBps[mask], topology.latency_us[mask]
            lines.append(
                f"  {label:<16} bandwidth {b.min():.4g}..{b.max():.4g} GB/s,"
                f" latency {lat.min():.4g}..{lat.max():.4g} µs"
            )
    return "\n".join(lines)


@command.command("show")
@spec_argument
@nodes_option
@json_option
def show(spec: str, nodes: int | None, as_json: bool) -> None:
    """Print a cluster's bandwidth (GB/s per direction) and latency (µs) matrices."""
    from seedance.models.topology import load

    check_topology_spec("topology", spec, nodes)
    topology = load(spec, nodes=nodes)
    if as_json:
        emit_json({
            "name": topology.name,
            "num_devices": topology.num_devices,
            "num_hosts": topology.num_hosts,
            "host_of": topology.host_of.tolist(),
            "device_kinds": list(topology.device_kinds),
            "source": topology.source,
            "bandwidth_GBps": _matrix_json(topology.bandwidth_GBps, None),
            "latency_us": _matrix_json(topology.latency_us, 0.0),
        })
        return
    kinds = ", ".join(sorted(set(topology.device_kinds)))
    click.echo(f"{topology.name}: {topology.num_devices} devices ({kinds}) on {topology.num_hosts} server(s)")
    click.echo(_summary(topology))
    if topology.num_devices > TABLE_MAX_DEVICES:
        click.echo(f"(matrices of more than {TABLE_MAX_DEVICES} devices are not printed; use --json)")
        return
    click.echo(_table(topology.bandwidth_GBps, "bandwidth_GBps (row: source, column: destination)"))
    click.echo(_table(topology.latency_us, "latency_us"))


@command.command("heatmap")
@spec_argument
@nodes_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/figures", show_default=True,
              help="Directory for <name>-bandwidth.pdf and .png.")
@json_option
@progress_option
def heatmap(spec: str, nodes: int | None, out_dir: str, as_json: bool, show_progress: bool | None) -> None:
    """Draw the bandwidth matrix as a heatmap (PDF and PNG)."""
    from seedance.models.topology import load

    check_topology_spec("topology", spec, nodes)
    validation.check_writable_dir("--out", out_dir)
    steps = Progress(show_progress, "topology heatmap")
    steps.phase(f"building {spec}")
    topology = load(spec, nodes=nodes)
    steps.phase(f"drawing {topology.num_devices}x{topology.num_devices} heatmap")
    from seedance.analysis.figures_fabric import bandwidth_heatmap  # seaborn is slow to import: only when drawing

    figure = bandwidth_heatmap(topology)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in topology.name)
    files = [directory / f"{stem}-bandwidth.{suffix}" for suffix in ("pdf", "png")]
    steps.phase(f"writing {len(files)} files to {out_dir}")
    for file in files:
        figure.savefig(file, dpi=150)
    steps.done()
    if as_json:
        emit_json({"name": topology.name, "num_devices": topology.num_devices, "files": [str(f) for f in files]})
    else:
        for file in files:
            click.echo(str(file))
