"""``seedance report``: the main job (``make run``) — the paper suite on its embedded default, and the cost tables.

Two sections, run in order, each writing under ``--out``:

* ``cost`` — for every preset (1 and 4 servers; ``mixed`` 2 and 4) the predicted time, algbw and busbw of each
  collective at a few sizes with the auto algorithm (``cost.csv``, ``cost.tex``), and the figures of ``seedance
  figure fabric`` (allreduce busbw against size, bandwidth heatmaps). A few seconds.
* ``paper`` — every item of the paper (:mod:`seedance.paper.suite`: protocol comparison, failure scenarios,
  communication cost on fabrics, convergence, pixel vs consensus, sim vs real, memory stability, model vs
  published nccl-tests), each a
  sweep of ``paper/specs/<item>.yaml`` in its quick size by default (``--full``: the paper's size, what ``make paper``
  runs). Per item: ``<item>/results.parquet`` (one row per run), ``figures/<item>.{pdf,png}``, ``tables/<item>.tex``.
  Sweeps resume: rerunning into the same ``--out`` runs only what is missing.

Then ``macros.tex`` (every number of ``paper/paper.tex`` as a macro, from the runs: :mod:`seedance.paper.macros`)
and ``sizes.tex`` (each item's quick and full size), ``summary.json`` (spec, each section's summary and files,
:func:`seedance.provenance.run_metadata`) and ``report.html`` (one page: headline numbers, figures, failed runs
with their reproduce commands, provenance). The human output ends with the headline numbers of each experiment
and the paths of the figures and of report.html; ``--json`` prints one object instead. Exit status 1 when a run
failed or an item could not be drawn (each listed with the command that reproduces it), 2 on bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from seedance.models.topology.checks import check_topology_spec
from seedance import validation
from seedance.cli._common import emit_json, json_option, to_json
from seedance.cli._progress import Progress, progress_option

DEFAULT_SPEC: dict[str, Any] = {
    "cost": {
        "presets": [["dgx-a100", 1], ["dgx-a100", 4], ["hgx-h100", 1], ["hgx-h100", 4], ["pcie-8gpu", 1],
                    ["pcie-8gpu", 4], ["mixed", 2], ["mixed", 4]],
        "collectives": ["allreduce", "reducescatter", "allgather", "broadcast", "alltoall", "sendrecv"],
        "table_sizes": ["8B", "64KiB", "1MiB", "64MiB", "1GiB"],
        "curve_sizes": "8B:8GiB",
        "heatmap_presets": [["dgx-a100", 1], ["hgx-h100", 1], ["pcie-8gpu", 1], ["mixed", 2]],
        "algorithm": "auto",
    },
    "paper": {"suite": "quick", "items": ["protocols", "scenarios", "fabrics", "convergence", "pixel", "sim-vs-real",
                                          "memory", "nccl"], "workers": 2},
}


@dataclass(frozen=True, kw_only=True)
class SectionResult:
    summary: dict[str, Any]
    files: list[Path]
    lines: list[str] = field(default_factory=list)  # the human summary printed on stdout
    items: list[Any] = field(default_factory=list)  # the paper section's ItemResults (for report.html)


@dataclass(frozen=True, kw_only=True)
class Section:
    name: str
    run: Callable[[dict[str, Any], Path, Progress], SectionResult]  # (its spec, output directory, progress)


def _label(name: str, nodes: int) -> str:
    return f"{name} {nodes}n"


def cost_section(spec: dict[str, Any], out: Path, steps: Progress | None = None) -> SectionResult:
    """Predicted collective performance on every preset (seed §2.4)."""
    from seedance.analysis.figures_cost import busbw_curves, cost_frame, save_figure
    from seedance.analysis.figures_fabric import bandwidth_heatmap
    from seedance.models.cost import ring_channels, ring_order
    from seedance.models.topology import load
    from seedance.models.units import format_size, parse_size, parse_size_range

    topologies = {_label(name, nodes): load(name, nodes=nodes) for name, nodes in _presets(spec, "presets")}
    sizes = [parse_size(s) for s in spec["table_sizes"]]
    frame = cost_frame(topologies, spec["collectives"], sizes, algorithm=spec["algorithm"])
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "cost.csv"
    frame.to_csv(csv_path, index=False)
    tex_path = out / "cost.tex"
    tex_path.write_text(latex_table(frame, largest=max(sizes)), encoding="utf-8")
    figures = out / "figures"
    curve_frame = cost_frame(topologies, ["allreduce"], parse_size_range(spec["curve_sizes"]))
    figure_files = save_figure(busbw_curves(curve_frame), figures / "busbw_allreduce")
    for name, nodes in _presets(spec, "heatmap_presets"):
        label = _label(name, nodes)
        topology = topologies.get(label) or load(name, nodes=nodes)
        figure_files += save_figure(bandwidth_heatmap(topology), figures / f"bandwidth_{name}_{nodes}n")
    largest = frame[frame["size_bytes"] == max(sizes)]
    allreduce = largest[largest["collective"] == "allreduce"]
    headline = {
        row.topology: {"algorithm": row.algorithm, "busbw_GBps": round(float(row.busbw_GBps), 2)}
        for row in allreduce.itertuples()
    }
    peak = curve_frame.groupby("topology")["busbw_GBps"].max().round(2).to_dict()
    rings = {}
    for label, topology in topologies.items():
        ring = ring_order(topology)
        rings[label] = {
            "bottleneck_GBps": ring.bottleneck_GBps, "upper_bound_GBps": ring.upper_bound_GBps, "exact": ring.exact,
            "method": ring.method, "channels": len(ring_channels(topology)), "order": list(ring.order),
        }
    lines = [f"cost: {len(frame)} predictions ({len(topologies)} clusters × {len(spec['collectives'])} collectives × "
             f"{len(sizes)} sizes) -> {csv_path}, {tex_path}"]
    lines += [f"  allreduce {format_size(max(sizes))} on {label}: busbw {v['busbw_GBps']:.1f} GB/s ({v['algorithm']})"
              for label, v in headline.items()]
    lines.append(f"cost: figures -> {figures} ({len(figure_files)} files: allreduce busbw curves, B heatmaps)")
    return SectionResult(
        summary={"rows": len(frame), "allreduce_largest": headline, "allreduce_peak_busbw_GBps": peak,
                 "rings": rings},
        files=[csv_path, tex_path, *figure_files], lines=lines,
    )


def _presets(spec: dict[str, Any], key: str) -> list[tuple[str, int]]:
    from seedance.errors import SpecError

    entries = spec[key]
    valid = "a list of [preset, nodes] pairs, e.g. [[dgx-a100, 1], [mixed, 2]]"
    if not isinstance(entries, list):
        raise SpecError(f"cost.{key}", "is not a list", valid)
    for entry in entries:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], int) and not isinstance(entry[1], bool)):
            raise SpecError(f"cost.{key}", f"entry {entry!r} is not [preset, nodes]", valid)
    return [(name, nodes) for name, nodes in entries]


def latex_table(frame: Any, *, largest: int) -> str:
    """A booktabs table: per cluster and collective, the algorithm, time and busbw at the largest size."""
    rows = frame[frame["size_bytes"] == largest]
    lines = [
        r"\begin{tabular}{llrlrr}",
        r"\toprule",
        r"cluster & collective & devices & algorithm & time ($\mu$s) & busbw (GB/s) \\",
        r"\midrule",
    ]
    previous = None
    for row in rows.itertuples():
        if previous is not None and row.topology != previous:
            lines.append(r"\addlinespace")
        previous = row.topology
        lines.append(
            f"{_tex(row.topology)} & {row.collective} & {row.num_devices} & {row.algorithm} & "
            f"{row.time_s * 1e6:.1f} & {row.busbw_GBps:.1f} \\\\"
        )
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _tex(text: str) -> str:
    return text.replace("_", r"\_").replace("&", r"\&").replace("%", r"\%")


def paper_section(spec: dict[str, Any], out: Path, steps: Progress | None = None) -> SectionResult:
    """Every item of the paper suite in its quick or full size (see :mod:`seedance.paper.suite`)."""
    from seedance.paper.suite import run_suite

    enabled = bool(steps and steps.enabled)
    results = run_suite(spec["suite"], out, names=spec["items"], workers=spec["workers"], progress=enabled,
                        phase=steps.phase if steps else None, scheduler=spec.get("scheduler"))
    lines = []
    for r in results:
        lines.append(f"{r.title} ({r.name}): {r.counts.get('points_total', 0)} runs, "
                     f"{r.counts.get('points_failed', 0)} failed, {r.wall_s:.1f} s")
        if r.counts.get("points_from_other_commits"):
            lines.append(f"  note: {r.counts['points_from_other_commits']} runs were resumed from another git commit "
                         f"(delete {r.sweep_dir} to rerun them)")
        lines += [f"  {key}: {_value(value)}" for key, value in r.headline.items()]
        if r.error:
            lines.append(f"  not drawn: {r.error}")
        lines += [f"  failed run: {f['error']}\n    reproduce: {f['reproduce']}" for f in r.failures[:5]]
    files = [f for r in results for f in [*r.figures, *([r.table] if r.table else []), r.sweep_dir / "results.parquet"]]
    return SectionResult(summary={"suite": spec["suite"], "items": [r.as_dict() for r in results]}, files=files,
                         lines=lines, items=results)


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, float):
        from seedance.paper.tables import number

        return number(value, 4)
    return str(value)


SECTIONS: list[Section] = [Section(name="cost", run=cost_section), Section(name="paper", run=paper_section)]


def load_spec(path: str | None) -> dict[str, Any]:
    """The embedded default, with each section's keys overridden by those in the YAML/JSON file at ``path``."""
    import copy

    from seedance.errors import SpecError

    spec = copy.deepcopy(DEFAULT_SPEC)
    if path is None:
        return spec
    doc = validation.load_file(path, "spec")  # strict: duplicate keys, NaN, overflow are errors
    if not isinstance(doc, dict):
        raise SpecError("spec", f"{path} is not a mapping", "sections: " + ", ".join(spec))
    for name, override in doc.items():
        if name not in spec:
            raise SpecError("spec", f"unknown section {name!r}", "sections: " + ", ".join(spec))
        if not isinstance(override, dict) or not set(override) <= set(spec[name]):
            raise SpecError(f"spec.{name}", "has unknown keys or is not a mapping", "keys: " + ", ".join(spec[name]))
        spec[name].update(override)
    check_cost_spec(spec["cost"])
    check_paper_spec(spec["paper"])
    return spec


def check_paper_spec(spec: dict[str, Any]) -> None:
    """The paper section: suite quick or full, known items without duplicates (may be empty: cost only), workers."""
    from seedance.errors import SpecError
    from seedance.paper.suite import NAMES, SIZES

    if spec["suite"] not in SIZES:
        raise SpecError("paper.suite", f"unknown suite {spec['suite']!r}", "valid: " + ", ".join(SIZES))
    items = spec["items"]
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise SpecError("paper.items", f"is not a list of names: {items!r}", "a list of: " + ", ".join(NAMES))
    for name in items:
        if name not in NAMES:
            raise SpecError("paper.items", f"unknown item {name!r}", "valid: " + ", ".join(NAMES))
    validation.no_duplicates("paper.items", items, "item")
    validation.integer("paper.workers", spec["workers"], lo=1, hi=64, why="the local pool runs one process each")


def check_cost_spec(spec: dict[str, Any]) -> None:
    """Every value of the cost section, before any work: non-empty lists without duplicates (heatmap_presets may be
    empty: no heatmaps), known presets within the device ceiling, known collectives and algorithm, parseable
    sizes."""
    from seedance.errors import SpecError
    from seedance.models.cost.collectives import check_algorithm, check_collective
    from seedance.models.units import parse_size, parse_size_range

    for key in ("presets", "heatmap_presets"):
        entries = _presets(spec, key)
        if key == "presets":
            validation.non_empty(f"cost.{key}", entries, "at least one [preset, nodes] pair")
        validation.no_duplicates(f"cost.{key}", [list(e) for e in entries], "pair")
        for name, nodes in entries:
            from seedance.models.topology import PRESETS

            if name not in PRESETS:
                raise SpecError(f"cost.{key}", f"unknown preset {name!r}", "one of " + ", ".join(PRESETS))
            check_topology_spec(f"cost.{key}", name, nodes, nodes_field=f"cost.{key} {name} nodes")
    collectives = spec["collectives"]
    if not isinstance(collectives, list) or not all(isinstance(c, str) for c in collectives):
        raise SpecError("cost.collectives", "is not a list of names", "e.g. [allreduce, allgather]")
    validation.non_empty("cost.collectives", collectives, "at least one collective")
    validation.no_duplicates("cost.collectives", [check_collective(c) for c in collectives], "collective")
    if not isinstance(spec["algorithm"], str):
        raise SpecError("cost.algorithm", f"is {spec['algorithm']!r}", "auto or an algorithm name")
    if spec["algorithm"] != "auto":
        for c in collectives:
            check_algorithm(check_collective(c), spec["algorithm"])
    sizes = spec["table_sizes"]
    if not isinstance(sizes, list):
        raise SpecError("cost.table_sizes", "is not a list", 'e.g. ["8B", "1MiB", "1GiB"]')
    validation.non_empty("cost.table_sizes", sizes, "at least one size")
    validation.no_duplicates("cost.table_sizes", [parse_size(s, field="cost.table_sizes") for s in sizes], "size")
    if not isinstance(spec["curve_sizes"], str):
        raise SpecError("cost.curve_sizes", f"is {spec['curve_sizes']!r}", "a range START:END[:FACTOR], e.g. 8B:8GiB")
    parse_size_range(spec["curve_sizes"], field="cost.curve_sizes")


@click.command("report")
@click.option("--out", "out_dir", default="out/report", show_default=True, type=click.Path(file_okay=False),
              help="Directory for the report's files (sweeps resume in it).")
@click.option("--spec", "spec_path", default=None, type=click.Path(dir_okay=False),
              help="YAML/JSON overriding parts of the embedded default, e.g. {cost: {presets: [[dgx-a100, 2]]}, "
                   "paper: {items: [fabrics, nccl], workers: 1}}.")
@click.option("--full", is_flag=True, help="The paper's full size of every item (what `make paper` runs; hours).")
@click.option("--only", "only", default=None, metavar="ITEM,...",
              help="Run only these paper items (protocols, scenarios, fabrics, convergence, pixel, sim-vs-real, "
                   "memory, nccl); 'none' for the cost section alone.")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Worker processes per sweep (default 2; an item may ask for fewer).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run every item's sweep on this Dask scheduler's workers (not with --workers); results equal "
                   "the local run's.")
@json_option
@progress_option
def command(out_dir: str, spec_path: str | None, full: bool, only: str | None, workers: int | None,
            scheduler: str | None, as_json: bool, show_progress: bool | None) -> None:
    """Run the main job: the quick paper suite (--full: the paper's size) and the cost tables; report.html."""
    import time

    from seedance.paper.suite import write_html
    from seedance.provenance import run_metadata

    started = time.perf_counter()
    spec = _checked_spec(spec_path, full, only, workers, scheduler, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    lines: list[str] = []
    steps = Progress(show_progress, "report")
    results: dict[str, SectionResult] = {}
    for section in SECTIONS:
        if section.name == "cost":  # the paper section announces each item itself
            steps.phase(f"section {section.name} -> {out}")
        result = section.run(spec[section.name], out, steps)
        results[section.name] = result
        sections.append({"name": section.name, "summary": result.summary, "files": [str(f) for f in result.files]})
        lines += result.lines
    from seedance.models.units import format_size, parse_size
    from seedance.paper.macros import write as write_macros

    steps.phase(f"writing {out / 'macros.tex'} (every number of paper.tex) and sizes.tex")
    tex_files = write_macros(out, spec["paper"]["suite"],
                             cost_size=format_size(max(parse_size(s) for s in spec["cost"]["table_sizes"])))
    argv = ["report", "--out", out_dir] + (["--spec", spec_path] if spec_path else []) + (["--full"] if full else []) \
        + (["--only", only] if only is not None else []) + (["--workers", str(workers)] if workers else []) \
        + (["--scheduler", scheduler] if scheduler else []) \
        + (["--json"] if as_json else [])
    metadata = run_metadata(seed=None, spec=spec, argv=argv)
    summary = {"spec": spec, "sections": sections, "metadata": metadata,
               "wall_s": round(time.perf_counter() - started, 1)}
    summary_path = out / "summary.json"
    steps.phase(f"writing {summary_path} and report.html")
    summary_path.write_text(json.dumps(json.loads(to_json(summary)), indent=2) + "\n", encoding="utf-8")
    items = results["paper"].items
    cost_figures = [f for f in results["cost"].files if f.suffix == ".png"][:2]
    html_path = write_html(out / "report.html", items, size=spec["paper"]["suite"], metadata=metadata,
                           extra_figures=cost_figures, extra_lines=results["cost"].lines[:1])
    steps.done()
    failed = sum(len(i.failures) for i in items) + sum(1 for i in items if i.error)
    if as_json:
        emit_json({"out": str(out), "summary": str(summary_path), "report": str(html_path), "sections": sections,
                   "macros": [str(f) for f in tex_files],
                   "failed": failed, "wall_s": summary["wall_s"]})
    else:
        for line in lines:
            click.echo(line)
        figures = [f for i in items for f in i.figures if f.suffix == ".pdf"]
        click.echo(f"figures ({len(figures)} PDF, each with a PNG beside it): {out / 'figures'}")
        for f in figures:
            click.echo(f"  {f}")
        click.echo(f"paper.tex's numbers and sizes -> {', '.join(str(f) for f in tex_files)}")
        click.echo(f"summary (spec, results, provenance) -> {summary_path}")
        click.echo(f"report -> {html_path}   ({summary['wall_s']:.0f} s)")
    if failed:
        raise click.exceptions.Exit(1)


def _checked_spec(spec_path: str | None, full: bool, only: str | None, workers: int | None, scheduler: str | None,
                  out_dir: str) -> dict[str, Any]:
    """The report's spec with the options applied, every value, item spec, the output folder and the scheduler
    checked before any work (an error exits 2 in seconds, before anything is written)."""
    spec = load_spec(spec_path)  # every value checked here, before any work
    if full:
        spec["paper"]["suite"] = "full"
    if only is not None:
        spec["paper"]["items"] = [] if only.strip() == "none" else [x.strip() for x in only.split(",")]
    if workers is not None:
        spec["paper"]["workers"] = workers
    check_paper_spec(spec["paper"])
    if scheduler is not None:
        from seedance.errors import SpecError
        from seedance.sweep.execute import check_scheduler

        check_scheduler(scheduler)
        if workers is not None:
            raise SpecError("--workers", "applies to the local pool only",
                            "with --scheduler the cluster's workers run the points (start more `dask worker`s)")
    from seedance.paper.suite import load_item_spec

    for name in spec["paper"]["items"]:  # every sweep spec validated (all points) before the first run
        load_item_spec(name, spec["paper"]["suite"])
    validation.check_writable_dir("--out", out_dir)
    if scheduler is not None:
        from seedance.sweep.execute import probe_scheduler

        probe_scheduler(scheduler)  # unreachable: exit 2 in seconds, before anything is written
        spec["paper"]["scheduler"] = scheduler
    return spec
