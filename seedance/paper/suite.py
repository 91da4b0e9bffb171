"""The paper suite: every item (a sweep spec in ``paper/specs/``, its figures, table and headline numbers), run in
its quick or full size, and the one-page HTML report (``seedance report``, ``make run``, ``make paper``).

A spec file is a plain :mod:`seedance.sweep` spec, so ``seedance sweep paper/specs/NAME.yaml [--size quick]``
runs it as the suite does: its ``quick:`` overrides make the quick size (mappings merged key by key, lists
replaced, e.g. ``quick: {axes: {grid: {conflict_rate: [0.0, 1.0]}}, repetitions: 2}``) and ``max_workers`` caps the
runs at once (1 for real processes that must not share the CPU).

Output layout under ``OUT``: ``<item>/`` the sweep (point files, ``results.parquet``, ``spec.json``, logs),
``figures/<item>.{pdf,png}``, ``tables/<item>.tex``, ``paper-summary.json`` and ``report.html``. Figures and tables
are drawn from ``<item>/results.parquet`` alone (read back from disk), so every number in them traces to its rows.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seedance.errors import SpecError

SPEC_DIR = Path(__file__).resolve().parents[2] / "paper" / "specs"
SIZES = ("quick", "full")


@dataclass(frozen=True, kw_only=True)
class Item:
    name: str  # paper/specs/<name>.yaml, figures/<name>.pdf, tables/<name>.tex
    title: str
    shows: str  # one or two sentences: what the figure and table show (report.html and paper.tex)
    figure: str  # function names in seedance.paper.figures / seedance.paper.tables
    table: str
    headline: str
    seed_section: str = ""


ITEMS: tuple[Item, ...] = (
    Item(name="protocols", title="Protocol comparison", seed_section="§2.5", figure="protocols", table="protocols",
         headline="protocols_headline",
         shows="Raft, Multi-Paxos and EPaxos in the simulator on dgx-a100 servers: throughput and p99 client latency "
               "against the share of commands on one hot key, per replica count, with (dotted) and without "
               "training traffic on the same links; bands are 95 % bootstrap CIs over seeds."),
    Item(name="scenarios", title="Failure-scenario impact", seed_section="§1", figure="scenarios",
         table="scenarios", headline="scenarios_headline",
         shows="Validate-and-commit training under failure scenarios F1-F8, buggy against fixed protocol "
               "(simulated, 4 ranks): the parameter L2 deviation between ranks at the end and the share of runs "
               "whose failure was detected; the table adds recovery time, global resyncs and false alarms."),
    Item(name="fabrics", title="Communication cost on heterogeneous fabrics", seed_section="§2.4",
         figure="fabrics", table="fabrics", headline="fabrics_headline",
         shows="The NCCL cost model's predicted bus bandwidth against message size on each preset cluster (one "
               "colour per preset, dash-dotted for several servers), per collective; the table gives the largest "
               "size with the algorithm NCCL's tuner would pick."),
    Item(name="convergence", title="Convergence and time to accuracy", seed_section="§2.4",
         figure="convergence", table="convergence", headline="convergence_headline",
         shows="Compressed SGD (4 workers, one step-size schedule): iterations to reach 0.5 % of the initial gap "
               "and the resulting time to accuracy on each fabric (compute plus the compressor's collective); "
               "error bars are 95 % bootstrap CIs over seeds."),
    Item(name="pixel", title="Pixel vs consensus", seed_section="§2.1", figure="pixel", table="pixel",
         headline="pixel_headline",
         shows="A 60 Hz frame workload on one dgx-a100 server: p50 and p99 time for a write to reach every replica "
               "with the causal CRDT grid, against a Raft write's latency (a lower bound of its convergence), per "
               "writes per frame, with (dotted) and without training traffic; the dashed line is one frame."),
    Item(name="sim-vs-real", title="Simulator against real processes", figure="sim_vs_real", table="sim_vs_real",
         headline="sim_vs_real_headline",
         shows="Raft with 3 replicas on this machine's real processes against the simulator on a host profile "
               "measured in the same sweep: predicted against measured throughput and p99 latency per client "
               "count, each held-out one at the CPU level of a real run of the profile's workload just before it "
               "(hollow: that workload itself, reproducibility); points on the diagonal are exact predictions."),
    Item(name="memory", title="Memory stability", seed_section="§4.4", figure="memory", table="memory",
         headline="memory_headline",
         shows="A memory soak of the commit protocol's training on real processes: rank 0's mean RSS in three "
               "periods after warm-up and the growth of live buffer handles, fds and threads, for the fixed "
               "protocol without faults and for F8's buggy variant (a handle leak the monitor must flag)."),
    Item(name="nccl", title="Cost model against published nccl-tests curves", figure="nccl", table="nccl",
         headline="nccl_headline",
         shows="Published nccl-tests allreduce bus bandwidth (black) against the NCCL cost model and the "
               "alpha-beta model on the same clusters; the table gives each model's median relative error and "
               "largest ratio per curve."),
)
NAMES = tuple(item.name for item in ITEMS)


def item(name: str) -> Item:
    for it in ITEMS:
        if it.name == name:
            return it
    raise SpecError("paper.items", f"unknown item {name!r}", f"valid: {', '.join(NAMES)}")


@dataclass(frozen=True)
class PaperSpec:
    sweep: Any  # the validated SweepSpec
    workers: int | None  # its max_workers (e.g. 1 for real processes)
    path: Path


def load_item_spec(name: str, size: str, spec_dir: str | os.PathLike[str] | None = None) -> PaperSpec:
    """The sweep of item ``name`` in ``size`` (quick or full), validated (every point's parameters too): the same
    spec ``seedance sweep paper/specs/NAME.yaml --size SIZE`` runs."""
    from seedance.sweep import load_spec

    if size not in SIZES:
        raise SpecError("paper.suite", f"unknown size {size!r}", f"valid: {', '.join(SIZES)}")
    path = Path(spec_dir or SPEC_DIR) / f"{name}.yaml"
    if not path.is_file():
        raise SpecError("paper.specs", f"{path} does not exist", f"a directory with {', '.join(NAMES)} (.yaml)")
    sweep = load_spec(path, size=size)
    return PaperSpec(sweep=sweep, workers=sweep.max_workers, path=path)


@dataclass(kw_only=True)
class ItemResult:
    name: str
    title: str
    shows: str
    sweep_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    headline: dict[str, Any] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    table: Path | None = None
    failures: list[dict[str, str]] = field(default_factory=list)  # failed runs: error and reproduce command
    error: str | None = None  # the item itself could not be drawn
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "sweep_dir": str(self.sweep_dir), **self.counts,
                "headline": self.headline, "figures": [str(f) for f in self.figures],
                "table": str(self.table) if self.table else None, "failures": self.failures, "error": self.error,
                "wall_s": round(self.wall_s, 2)}


def draw(it: Item, results: str | os.PathLike[str], out: Path) -> tuple[list[Path], Path, dict[str, Any]]:
    """Figure, table and headline of item ``it`` from its Parquet dataset (read back from disk)."""
    from seedance.analysis import style
    from seedance.paper import figures, tables
    from seedance.files import atomic_write
    from seedance.sweep import load_results

    df = load_results(results)
    if "status" not in df.columns or not (df["status"] == "ok").any():
        raise SpecError(it.name, "no run of the sweep completed", "see the failed runs' errors")
    figure = getattr(figures, it.figure)(df)
    files = style.save(figure, out / "figures" / it.name)
    table = out / "tables" / f"{it.name}.tex"
    table.parent.mkdir(parents=True, exist_ok=True)
    text = f"% {it.title}: generated from {Path(results)} by seedance.paper.tables.{it.table}\n"
    atomic_write(table, (text + getattr(tables, it.table)(df)).encode())
    headline = getattr(tables, it.headline)(df)
    return files, table, headline


def run_item(it: Item, size: str, out: Path, *, workers: int, progress: bool,
             spec_dir: str | os.PathLike[str] | None = None, spec: PaperSpec | None = None,
             scheduler: str | None = None, listener: Callable[..., None] | None = None) -> ItemResult:
    """Run (or resume) the sweep of ``it`` into ``out/<name>`` (locally on ``workers`` processes, or on the Dask
    cluster at ``scheduler``) and draw it; a failure of the item is recorded."""
    from seedance.sweep import load_results, run_sweep

    start = time.perf_counter()
    spec = spec or load_item_spec(it.name, size, spec_dir)
    result = ItemResult(name=it.name, title=it.title, shows=it.shows, sweep_dir=out / it.name)
    summary = run_sweep(spec.sweep, result.sweep_dir, workers=spec.workers or workers, progress=progress,
                        scheduler=scheduler, listener=listener)
    result.counts = {k: v for k, v in summary.as_dict().items() if k.startswith("points_")}
    df = load_results(summary.results)
    if "git_commit" in df.columns:  # resumed runs made by other code: said, not hidden (delete the sweep to redo)
        from seedance.provenance import git_commit

        result.counts["points_from_other_commits"] = int((df["git_commit"] != git_commit()).sum())
    for row in df[df["status"] != "ok"].itertuples():
        result.failures.append({"error": str(row.error), "reproduce": str(row.reproduce)})
    try:
        result.figures, result.table, result.headline = draw(it, summary.results, out)
    except Exception as err:  # noqa: BLE001 - one item failing to draw must not lose the others
        result.error = f"{type(err).__name__}: {err}".replace("\n", " ")
    result.wall_s = time.perf_counter() - start
    return result


def paper_progress(specs: dict[str, PaperSpec], out: Path, *, workers: int, enabled: bool) -> Any:
    """The whole paper's counts (runs done out of the total per item, from the point files under ``out``)."""
    from seedance.paper.progress import ItemCount, PaperProgress
    from seedance.sweep.expand import runs as sweep_runs
    from seedance.sweep.plan import done_walls

    counts = {}
    for name, spec in specs.items():
        keys = [r.key for r in sweep_runs(spec.sweep)]
        walls = done_walls(out / name, spec.sweep.runner)
        finished = [walls[k] for k in keys if k in walls]
        counts[name] = ItemCount(total=len(keys), done=len(finished), walls=[w for w in finished if w is not None])
    return PaperProgress(counts, workers=workers, enabled=enabled)


def run_suite(size: str, out: str | os.PathLike[str], *, names: tuple[str, ...] | list[str] = NAMES,
              workers: int = 2, progress: bool = False, spec_dir: str | os.PathLike[str] | None = None,
              phase: Callable[[str], None] | None = None, scheduler: str | None = None) -> list[ItemResult]:
    """Every item of ``names`` in ``size``, locally or on the Dask cluster at ``scheduler``; specs are all
    validated (and the scheduler reached) before the first run starts. With ``progress``, the whole paper's
    progress on stderr: per item its runs done out of the total and an ETA from the runs done."""
    from seedance.sweep.execute import probe_scheduler

    out = Path(out)
    specs = {name: load_item_spec(item(name).name, size, spec_dir) for name in names}
    if scheduler is not None:
        probe_scheduler(scheduler)
    tracker = paper_progress(specs, out, workers=workers, enabled=progress)
    results = []
    for k, name in enumerate(names):
        if phase is not None:
            phase(f"[{k + 1}/{len(names)}] {name}: {tracker.counts[name].total} runs ({size})")
        tracker.start(name)
        results.append(run_item(item(name), size, out, workers=workers, progress=False, spec=specs[name],
                                scheduler=scheduler, listener=tracker.listener))  # the paper's lines, not a bar
    return results


# ------------------------------------------------------------------------------------------------ report.html
def _headline_html(headline: dict[str, Any]) -> str:
    rows = []
    for key, value in headline.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        rows.append(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(str(value))}</td></tr>")
    return "<table class=headline>" + "".join(rows) + "</table>"


def write_html(path: Path, results: list[ItemResult], *, size: str, metadata: dict[str, Any],
               extra_figures: list[Path] = (), extra_lines: list[str] = ()) -> Path:
    """One page: per item its headline numbers, figure (PNG, linked relatively; the PDF beside it), table link,
    failed runs with their reproduce commands; then the provenance."""
    from seedance.files import atomic_write

    base = path.parent

    def rel(p: Path) -> str:
        return html.escape(os.path.relpath(p, base))

    parts = [
        "<!doctype html><html><head><meta charset=utf-8><title>seedance report</title><style>",
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}",
        "img{max-width:100%;border:1px solid #ddd}table{border-collapse:collapse;margin:.5em 0}",
        "th,td{border-bottom:1px solid #ddd;padding:.2em .6em;text-align:left;font-size:90%}",
        "code,pre{background:#f5f5f5;font-size:85%}.fail{color:#b00}</style></head><body>",
        f"<h1>seedance report ({html.escape(size)} suite)</h1>",
        f"<p>Generated {html.escape(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))} by "
        f"<code>{html.escape(str(metadata.get('reproduce', 'seedance report')))}</code>. Each figure is drawn from "
        "its sweep's <code>results.parquet</code> alone; intervals are 95 % bootstrap CIs over seeds.</p>",
    ]
    for r in results:
        parts.append(f"<h2>{html.escape(r.title)}</h2><p>{html.escape(r.shows)}</p>")
        counts = ", ".join(f"{k.removeprefix('points_')} {v}" for k, v in r.counts.items())
        parts.append(f"<p>Runs: {html.escape(counts)}; dataset <a href='{rel(r.sweep_dir / 'results.parquet')}'>"
                     f"{rel(r.sweep_dir / 'results.parquet')}</a>; {r.wall_s:.1f} s.</p>")
        if r.error:
            parts.append(f"<p class=fail>Not drawn: {html.escape(r.error)}</p>")
        parts.append(_headline_html(r.headline))
        for f in r.figures:
            if f.suffix == ".png":
                parts.append(f"<p><a href='{rel(f.with_suffix('.pdf'))}'><img src='{rel(f)}' "
                             f"alt='{html.escape(r.name)}'></a></p>")
        if r.table:
            parts.append(f"<p>Table (LaTeX, booktabs): <a href='{rel(r.table)}'>{rel(r.table)}</a></p>")
        if r.failures:
            parts.append(f"<p class=fail>{len(r.failures)} failed run(s); reproduce:</p><pre>" + "\n".join(
                html.escape(f"{f['reproduce']}    # {f['error']}") for f in r.failures[:10]) + "</pre>")
    if extra_figures or extra_lines:
        parts.append("<h2>Predicted collective cost per preset</h2>")
        parts += [f"<p>{html.escape(line)}</p>" for line in extra_lines]
        parts += [f"<p><img src='{rel(f)}' alt='{rel(f)}'></p>" for f in extra_figures if f.suffix == ".png"]
    parts.append("<h2>Provenance</h2><pre>" + html.escape(json.dumps(metadata, indent=2, default=str)) + "</pre>")
    parts.append("</body></html>\n")
    atomic_write(path, "\n".join(parts).encode())
    return path
