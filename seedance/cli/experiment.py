"""``seedance experiment``: the studies behind the paper's figures, one sub-command each.

``seedance experiment convergence [--quick] --out DIR [--seeds N] [--seed S] [--json]`` runs the compression /
convergence study of :mod:`seedance.experiments.convergence`: empirical optimality gaps of compressed SGD
(many seeds, torch on CPU) against their theorems' bounds, then time to accuracy on NVLink, PCIe, InfiniBand and
mixed-generation fabrics. It writes rows.csv, curves.csv, summary.json (with provenance) and figures into DIR;
with ``--json`` it prints ``{"rows": [...], "summary": {...}, "artifacts": {...}}`` on stdout.

``seedance experiment protocols [--quick] --out DIR [--json]`` compares Raft, Multi-Paxos and EPaxos in the
simulator (:mod:`seedance.experiments.protocols`): protocols.csv, protocols.tex, protocols.{pdf,png}, summary.json.

Each sub-command checks its flags, then calls its study in :mod:`seedance.sweep.experiments` (the one registry the
sweep's ``experiment`` runner uses too), so ``--json`` prints what a sweep's run records; the rest here is text.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import Progress, progress_option
from seedance.cli._types import SEED, Integer, Number
from seedance.validation import check_writable_dir

if TYPE_CHECKING:
    from seedance.cli._progress import Progress as Steps

MAX_SEEDS = 1024
WHY_SEEDS = "the full study takes about a minute per 8 seeds here; 1,024 seeds is already hours"
from seedance.errors import SpecError

ROW_FIELDS = ("compressor", "problem", "topology", "iterations", "empirical_gap", "bound", "time_to_accuracy_s")


@click.group("experiment")
def command() -> None:
    """Run a study end to end and write its tables and figures."""


def run_study(name: str, out_dir: str, steps: Steps, *, quick: bool, seed: int = 0, **options: Any) -> dict[str, Any]:
    """Study ``name`` of :data:`seedance.sweep.experiments.EXPERIMENTS` into ``out_dir`` (checked writable first)."""
    from pathlib import Path

    from seedance.sweep.experiments import experiment

    check_writable_dir("--out", out_dir)  # before minutes of work
    result = experiment(name).run(Path(out_dir), quick=quick, seed=seed, progress=steps.phase, **options)
    steps.done()
    return result


@command.command("convergence")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--quick", is_flag=True, help="Short version (fewer seeds and iterations; about a minute).")
@click.option("--seeds", type=Integer(2, MAX_SEEDS, why=WHY_SEEDS), default=None,
              help="Seeds per run (default 32, or 8 with --quick).")
@click.option("--seed", "root_seed", type=SEED, default=0, show_default=True, help="Root seed of every run.")
@json_option
@progress_option
def convergence(out_dir: str, quick: bool, seeds: int | None, root_seed: int, as_json: bool,
                show_progress: bool | None) -> None:
    """Compressed SGD: empirical gap vs bounds, and time to accuracy per fabric × compressor."""
    import pandas as pd
    from tqdm import tqdm

    from seedance.experiments.convergence import total_iterations
    from seedance.sweep.experiments import convergence_config

    if seeds is not None and seeds < 2:
        raise SpecError("--seeds", f"{seeds} is too few for a confidence interval", "an integer >= 2")
    if root_seed < 0:
        raise SpecError("--seed", f"{root_seed} is negative", "an integer >= 0")
    steps = Progress(show_progress, "experiment convergence")
    bar = tqdm(total=total_iterations(convergence_config(quick, seeds, root_seed)), desc="convergence", unit="it",
               file=sys.stderr, disable=not steps.enabled)
    try:
        result = run_study("convergence", out_dir, steps, quick=quick, seed=root_seed, seeds=seeds,
                           iterations=bar.update)
    finally:
        bar.close()
    if as_json:
        emit_json(result)
        return
    rows = pd.DataFrame(result["rows"])
    click.echo(rows[rows.schedule == "common"][list(ROW_FIELDS)].to_string(index=False))
    click.echo(f"\nrankings differ across fabrics: {result['summary']['rankings_differ_across_fabrics']}")
    click.echo(f"wrote {len(result['artifacts'])} files to {out_dir}")


@command.command("sim-vs-real")
@click.option("--protocol", default="raft", show_default=True, help="A registered protocol (both runtimes run it).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--host-profile", default=None, type=click.Path(dir_okay=False),
              help="A host profile from `seedance real profile` (default: measure one first, into --out).")
@click.option("--quick", is_flag=True, help="3 configurations × 3 rounds of 2 s (about 2 minutes here).")
@click.option("--repeats", type=Integer(1, 20), default=None,
              help="Rounds per configuration [default: 5; 3 with --quick]. Five because the throughput headline "
                   "repeats better with them: six experiments spanned 5.2 pp here, six of 3 rounds 8.5 pp.")
@click.option("--duration", type=Number(0.5, 120), default=3.0, show_default=True,
              help="Seconds of load per run (both runtimes).")
@click.option("--nodes", type=Integer(1, 16), default=3, show_default=True)
@json_option
@progress_option
def sim_vs_real(protocol: str, out_dir: str, host_profile: str | None, quick: bool, repeats: int | None,
                duration: float, nodes: int, as_json: bool, show_progress: bool | None) -> None:
    """The same protocol in the simulator (on a measured host profile) and for real: predicted vs measured."""
    from seedance.experiments import sim_vs_real as svr
    from seedance.models.protocols import registry

    registry.get(protocol)  # unknown -> one line listing the valid names
    steps = Progress(show_progress, "experiment sim-vs-real")
    summary = run_study("sim-vs-real", out_dir, steps, quick=quick, protocol=protocol, host_profile=host_profile,
                        repeats=repeats, duration=duration, nodes=nodes)
    artifacts = summary["artifacts"]
    if as_json:
        emit_json(summary)
        return
    for row in summary["rows"]:
        click.echo(f"{row['config']:>24}{' (held out)' if row['held_out'] else ' (fitted)  '}: real "
                   f"{row['real_ops_s']:.0f} ops/s p50 {row['real_p50_ms']:.2f} p99 {row['real_p99_ms']:.2f} ms | sim "
                   f"{row['sim_ops_s']:.0f} ops/s p50 {row['sim_p50_ms']:.2f} p99 {row['sim_p99_ms']:.2f} ms | "
                   f"p99/p50 sim/real {row['spread_ratio']:.2f}")
        if row.get("real_slow_share") and row.get("sim_slow_share") is not None:  # only where outages held some
            click.echo(f"{'':>24}  operations over {1e3 * svr.SLOW_OP_S:.0f} ms (waited out an outage): real "
                       f"{100 * row['real_slow_share']:.2f} %, sim {100 * row['sim_slow_share']:.2f} %")
        if row.get("real_aftermath_share") is not None and row.get("sim_aftermath_share") is not None:
            click.echo(f"{'':>24}  started within {1e3 * svr.AFTERMATH_S:.0f} ms of a restart, over twice the median: "
                       f"real {100 * row['real_aftermath_share']:.1f} %, sim {100 * row['sim_aftermath_share']:.1f} %")
    for key in ("throughput", "p50", "p99"):
        value = summary[f"median_abs_rel_error_{key}_heldout"]
        click.echo(f"median |error| {key} (held out): {'-' if value is None else f'{100 * value:.0f} %'}")
    interval = summary.get("throughput_error_heldout_ci95")
    if interval is not None:
        click.echo(f"  throughput headline's 95 % interval from the rounds' noise: {100 * interval[0]:.0f}.."
                   f"{100 * interval[1]:.0f} %")
    anchored = summary.get("anchored")
    if anchored is not None:
        errors = anchored["unanchored_median_abs_rel_error_heldout"]
        per_round = ", ".join(f"{v:.2f}" for v in anchored["factors"].values())
        click.echo(f"CPU scale anchored on each round's {anchored['config']} run: x{per_round} "
                   f"(the predictions above); without the anchor, median |error| (held out) "
                   + " / ".join("-" if errors[k] is None else f"{100 * errors[k]:.0f} %"
                                for k in ("ops_s", "p50_ms", "p99_ms")) + " (throughput / p50 / p99)")
    windows = summary.get("window_sd_heldout") or {}
    if windows.get("real") is not None and windows.get("sim") is not None:
        click.echo(f"slow spells, latency windows' sd (held out, median): real {windows['real']:.3f}, simulated "
                   f"{windows['sim']:.3f}")
    cpu = [(row["config"], row["real_cpu_cores"], row["sim_cpu_cores"]) for row in summary["rows"]
           if row.get("real_cpu_cores") and row.get("sim_cpu_cores")]
    if cpu:
        click.echo("CPU over the load, cores (real processes / simulated cores): "
                   + ", ".join(f"{name} {real:.2f} / {sim:.2f}" for name, real, sim in cpu)
                   + f"; simulated / real, median {summary['cpu_ratio']:.2f}")
    spread, drift = summary["real_throughput_spread_pct_heldout"], summary["fitted_config_real_vs_profile_run_pct"]
    if spread is not None:
        click.echo(f"real throughput's own spread over rounds (held out, median): {spread:.0f} %")
    if drift is not None:
        click.echo(f"fitted configuration, real here vs the profile's own run: {drift:+.0f} %")
    click.echo(f"wrote {len(artifacts)} files to {out_dir}")


@command.command("protocols")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--quick", is_flag=True, help="2-3 conflict rates, 3 and 5 replicas, 0.3 s runs (under 3 minutes).")
@click.option("--seed", "root_seed", type=SEED, default=0, show_default=True, help="Seed of every run.")
@click.option("--duration", type=Number(0.05, 60), default=None,
              help="Simulated seconds per run (default: 0.3 with --quick, else 1.0).")
@click.option("--real", "with_real", is_flag=True,
              help="Also run the three protocols on the real backend (3 and 5 processes on loopback, without and "
                   "with SIGKILLs) next to the simulator's prediction on a host profile: a few minutes with --quick.")
@click.option("--host-profile", default=None, type=click.Path(dir_okay=False),
              help="With --real: a host profile from `seedance real profile` (default: measure one, into --out).")
@json_option
@progress_option
def protocols(out_dir: str, quick: bool, root_seed: int, duration: float | None, with_real: bool,
              host_profile: str | None, as_json: bool, show_progress: bool | None) -> None:
    """Raft, Multi-Paxos and EPaxos on the same fabric, workloads and seeds: throughput, latencies, linearizable."""
    from seedance.experiments import protocols as study

    if host_profile is not None and not with_real:
        raise SpecError("--host-profile", "is only used with --real", "add --real or drop --host-profile")
    steps = Progress(show_progress, "experiment protocols")
    result = run_study("protocols", out_dir, steps, quick=quick, seed=root_seed, duration=duration, real=with_real,
                       host_profile=host_profile)
    if as_json:
        emit_json(result)
        return
    rows, real_rows, artifacts = result["rows"], result.get("real_rows"), result["artifacts"]
    for r in rows:
        click.echo(f"{r['protocol']:>17} {r['workload']:>14} n={r['replicas']} "
                   f"{'bg ' if r['background'] else '   '}{(r['fault'] or ''):>13} {r['throughput_ops_s']:>9.0f} ops/s "
                   f"p99 {r['latency_ms_p99'] or 0:6.2f} ms  exec p99 {r['execution_latency_ms_p99'] or 0:5.2f} ms  "
                   f"linearizable={r['linearizable']}")
    for r in real_rows or ():
        click.echo(f"real {r['protocol']:>10} n={r['replicas']} {'SIGKILL' if r['fault'] else 'no faults':>9}: "
                   f"{r['real_ops_s']:7.0f} ops/s p99 {r['real_p99_ms'] or 0:7.1f} ms | predicted "
                   f"{r['predicted_ops_s']:7.0f} ops/s p99 {r['predicted_p99_ms'] or 0:7.1f} ms | real/predicted "
                   f"{study._fmt(r['ratio_ops'], 2)} / {study._fmt(r['ratio_p99'], 2)}  kills {r['kills']}  "
                   f"linearizable={r['real_linearizable']}")
    click.echo(f"wrote {len(artifacts)} files to {out_dir}")


from seedance.cli.train import failure_scenarios as _failure_scenarios  # noqa: E402  (issue F)

command.add_command(_failure_scenarios)


@command.command("pixel-vs-consensus")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--quick", is_flag=True, help="Short runs (0.4 simulated s, smaller grids; a few minutes).")
@click.option("--seed", "root_seed", type=SEED, default=1, show_default=True, help="Seed of every run.")
@json_option
@progress_option
def pixel_vs_consensus(out_dir: str, quick: bool, root_seed: int, as_json: bool, show_progress: bool | None) -> None:
    """The seed's §2.1 table measured: CRDT-grid convergence vs writes through Raft on dgx-a100, with and without
    training traffic; delta vs full-state bytes; a grid-size and write-rate sweep against one frame (16.7 ms)."""
    steps = Progress(show_progress, "experiment pixel-vs-consensus")
    summary = run_study("pixel-vs-consensus", out_dir, steps, quick=quick, seed=root_seed)
    if as_json:
        emit_json(summary)
    else:
        for name, row in summary["headline"].items():
            click.echo(f"{name}: p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms ({row['metric']})")
        ratio = summary["bytes"]["ratio"]
        click.echo(f"delta / full-state bytes: {ratio:.4f}" if ratio is not None else "no sync traffic")
        click.echo(f"files in {out_dir}")



from seedance.sweep.experiments import MAX_STRESS_HOURS, MAX_STRESS_WORKERS, WHY_STRESS_HOURS  # noqa: E402


@command.command("stress")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--hours", type=Number(0, MAX_STRESS_HOURS, lo_open=True, why=WHY_STRESS_HOURS), default=None,
              help="Simulated hours (default 72, or 1 with --quick).")
@click.option("--quick", is_flag=True, help="One simulated hour.")
@click.option("--seed", "root_seed", type=SEED, default=0, show_default=True,
              help="Seeds the injections' draws and every segment's run.")
@click.option("--workers", type=Integer(1, MAX_STRESS_WORKERS), default=None,
              help="Processes running segments (default: the usable cores; the result is the same for any count).")
@json_option
@progress_option
def stress(out_dir: str, hours: float | None, quick: bool, root_seed: int, workers: int | None, as_json: bool,
           show_progress: bool | None) -> None:
    """The seed's 72 h stress test simulated: 8 dgx-a100 servers (64 ranks) training under validate-and-commit,
    F1-F8 injected at seeded rates throughout, the §4.4 memory table per 24 h window, violations and recoveries,
    a figure (stress.pdf/png), rows.csv, memory.csv and summary.json."""
    steps = Progress(show_progress, "experiment stress")
    if workers is None:
        import os

        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    result = run_study("stress", out_dir, steps, quick=quick, seed=root_seed, hours=hours, workers=workers)
    if as_json:
        emit_json(result)
        return
    s = result["summary"]
    click.echo(f"{s['hours']} simulated h, {s['ranks']} ranks, {s['steps']} steps, {s['injections']} injections: "
               f"{s['rollbacks']} rollbacks, {s['recoveries']} recoveries, {s['violations']} violations")
    for row in result["memory_table"]:
        click.echo(f"window {row['period']}: mean {row['mean']:.1f} MiB, std {row['std']:.1f} MiB, "
                   f"fluctuation ±{row['fluctuation_pct']:.2f} %")
    click.echo(f"trace_sha256 {s['trace_sha256']}; {s['wall_s']:.1f} wall s; files in {out_dir}")
