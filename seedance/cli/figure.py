"""``seedance figure``: figures for papers, PDF and PNG (seed §2.4).

``seedance figure fabric --out DIR [--nodes N] [--presets a,b]`` writes, for the chosen presets, the predicted
allreduce bus bandwidth against size (8 B to 8 GiB, doubling; auto algorithm) as ``busbw_allreduce.{pdf,png}``
and each preset's bandwidth matrix as ``bandwidth_<preset>.{pdf,png}``.

``seedance figure validation --out DIR [--data DIR]`` draws, for every published nccl-tests curve of
``tests/data/nccl`` (or ``--data``), the NCCL model and the alpha-beta model against the published busbw, with the
predicted/measured time ratio, as ``validation_<curve>.{pdf,png}``, and writes ``validation.json`` (per-curve median
|error|, largest ratio, largest error at ≥ 256 MiB).
"""

from __future__ import annotations

from pathlib import Path

import click

from seedance.models.topology.checks import check_topology_spec
from seedance.cli._common import emit_json, json_option
from seedance import validation as validation_rules
from seedance.cli._progress import Progress, progress_option
from seedance.errors import SpecError

CURVE_SIZES = "8B:8GiB"


def parse_presets(spec: str | None) -> list[str]:
    """Preset names from ``a,b`` (default: all), each checked."""
    from seedance.models.topology import preset_names

    names = preset_names()
    if spec is None:
        return names
    chosen = [p.strip() for p in spec.split(",")]
    for name in chosen:
        if name not in names:
            raise SpecError("presets", f"unknown preset {name!r}", "a comma-separated list of " + ", ".join(names))
    return validation_rules.no_duplicates("--presets", chosen, "preset")


def preset_topologies(names: list[str], nodes: int | None) -> dict:
    """``{label: Topology}`` with ``nodes`` servers each (default: each preset's own); a count below a preset's
    minimum (``mixed``: 2) or above the device ceiling is an error, as in ``topology show``."""
    from seedance.models.topology import load

    topologies = {}
    for name in names:
        check_topology_spec("topology", name, nodes)
        topology = load(name, nodes=nodes)
        topologies[f"{name} {topology.num_hosts}n"] = topology
    return topologies


@click.group("figure")
def command() -> None:
    """Figures (PDF and PNG)."""


@command.command("fabric")
@click.option("--out", "out_dir", default="out/figures", show_default=True, type=click.Path(file_okay=False))
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Servers per preset cluster (>= 1).")
@click.option("--presets", "presets_spec", default=None, metavar="A,B", help="Presets to draw (default: all).")
@json_option
@progress_option
def fabric(out_dir: str, nodes: int | None, presets_spec: str | None, as_json: bool,
           show_progress: bool | None) -> None:
    """busbw-vs-size curves (allreduce, predicted) per preset and the bandwidth heatmaps."""
    from seedance.analysis.figures_cost import write_fabric_figures
    from seedance.models.units import parse_size_range

    names = parse_presets(presets_spec)
    for name in names:
        check_topology_spec("topology", name, nodes)
    validation_rules.check_writable_dir("--out", out_dir)
    steps = Progress(show_progress, "figure fabric")
    steps.phase(f"building {len(names)} preset cluster(s)")
    topologies = preset_topologies(names, nodes)
    steps.phase(f"predicting and drawing into {out_dir}")
    _, files = write_fabric_figures(topologies, Path(out_dir), parse_size_range(CURVE_SIZES))
    steps.done()
    if as_json:
        emit_json({"files": [str(f) for f in files]})
        return
    for file in files:
        click.echo(str(file))


@command.command("validation")
@click.option("--out", "out_dir", default="out/figures", show_default=True, type=click.Path(file_okay=False))
@click.option("--data", "data_dir", default=None, type=click.Path(file_okay=False),
              help="Directory with curves.yaml and nccl-tests outputs (default: tests/data/nccl).")
@json_option
def validation(out_dir: str, data_dir: str | None, as_json: bool) -> None:
    """Cost model vs published nccl-tests curves, one figure per curve."""
    from seedance.analysis.figures_cost import write_validation_figures

    validation_rules.check_writable_dir("--out", out_dir)
    summaries, files = write_validation_figures(Path(out_dir), data_dir)
    if as_json:
        emit_json({"curves": summaries, "files": [str(f) for f in files]})
        return
    for entry in summaries:
        s = entry["nccl"]
        click.echo(f"{entry['curve']:<28} median |err| {s['median_abs_rel_error']:6.1%}  max ratio "
                   f"{s['max_ratio']:5.2f}  >=256MiB {s['max_abs_rel_error_ge_256MiB']:6.1%}"
                   f"  (alpha-beta median {entry['alpha_beta']['median_abs_rel_error']:6.1%})")
    for file in files:
        click.echo(str(file))
