"""``seedance sweep SPEC --out DIR``: run a sweep (a YAML spec of axes over a runner) on a local pool of worker
processes or on a Dask cluster, resumably; results in ``DIR/results.parquet`` (see docs/sweeps.md).

Exit status: 0 when every run succeeded, 1 when some failed (each recorded with its error and reproduce command;
the sweep went on), 2 for bad input (spec, options). ``--json`` prints exactly one object at the end:
``{"points_total", "points_run", "points_skipped", "points_failed", "results"}`` (counts of runs: point × seed).

``--size quick|full`` (default full) picks the spec's size (its ``quick:`` overrides, as in ``paper/specs/``).
``--dry-run`` lists the runs without running them (their count, keys, seeds and parameters, which ones ``--out``
already holds, and the estimated cost where finished runs in ``--out`` give it); ``--json`` prints that plan as
one object.
"""

from __future__ import annotations

import click

from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import progress_option
from seedance.cli._types import Integer
from seedance.errors import SpecError
from seedance.sweep.registry import SIZES

MAX_WORKERS = 256


@click.command("sweep")
@click.argument("spec_path", metavar="SPEC")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Directory for point files, logs and results.parquet (rerun with the same DIR to resume); "
                   "required unless --dry-run.")
@click.option("--size", type=click.Choice(SIZES), default="full", show_default=True,
              help="The spec's size: full (as written) or quick (its `quick:` overrides merged in).")
@click.option("--dry-run", is_flag=True, help="List the runs (count, keys, estimated cost) without running them.")
@click.option("--check", "check_points", is_flag=True,
              help="With --dry-run: also check every point's parameters with the runner (imports it: slower).")
@click.option("--workers", type=Integer(1, MAX_WORKERS), default=None,
              help="Local worker processes (default 1; not with --scheduler).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run the points on this Dask scheduler's workers instead of locally.")
@click.option("--only", multiple=True, metavar="HASH",
              help="Run only the runs whose key starts with HASH (repeatable): a failed run's reproduce command.")
@json_option
@progress_option
def command(spec_path: str, out_dir: str | None, size: str, dry_run: bool, check_points: bool, workers: int | None,
            scheduler: str | None, only: tuple[str, ...], as_json: bool, show_progress: bool | None) -> int:
    """Run every point of SPEC (YAML/JSON) not already done in --out; write results.parquet."""
    if dry_run:
        return _dry_run(spec_path, size, out_dir, workers, check_points, as_json)
    if check_points:
        raise SpecError("--check", "applies to --dry-run only", "a real run always checks every point first")
    if out_dir is None:
        raise SpecError("--out", "is required", "a directory for the results (or --dry-run to list the runs)")
    from seedance.sweep import load_spec, run_sweep
    from seedance.sweep.execute import check_scheduler, probe_scheduler
    from seedance.validation import check_writable_dir

    if scheduler is not None:
        check_scheduler(scheduler)
        if workers is not None:
            raise SpecError("--workers", "applies to the local pool only",
                            "with --scheduler the cluster's workers run the points (start more `dask worker`s)")
    spec = load_spec(spec_path, size=size)  # every field and every point's parameters checked before any run
    check_writable_dir("--out", out_dir)
    if scheduler is not None:
        probe_scheduler(scheduler)  # unreachable: exit 2 in seconds, nothing written
    summary = run_sweep(spec, out_dir, workers=workers or 1, scheduler=scheduler, progress=show_progress,
                        only=only)
    if as_json:
        emit_json(summary.as_dict())
    else:
        click.echo(f"{spec.name}: {summary.points_total} runs, {summary.points_run} run now, "
                   f"{summary.points_skipped} already done, {summary.points_failed} failed")
        click.echo(f"results: {summary.results}")
    if summary.points_failed:
        from seedance.sweep import load_results

        failed = load_results(summary.results)
        failed = failed[failed["status"] != "ok"]
        for row in failed.head(3).itertuples():
            click.echo(f"seedance: run {row.point[:16]} failed: {row.error}; reproduce with: {row.reproduce}",
                       err=True)
        click.echo(f"seedance: {len(failed)} run(s) failed in all; their errors, tracebacks and reproduce commands "
                   f"are in {out_dir}/points/ (columns error, reproduce of {summary.results})", err=True)
        return 1
    return 0


def _dry_run(spec_path: str, size: str, out_dir: str | None, workers: int | None, check_points: bool,
             as_json: bool) -> int:
    from seedance.sweep.plan import describe, dry_run

    plan = dry_run(spec_path, size=size, out=out_dir, workers=workers or 1, check_points=check_points)
    if as_json:
        emit_json(plan)
    else:
        for line in describe(plan):
            click.echo(line)
    return 0
