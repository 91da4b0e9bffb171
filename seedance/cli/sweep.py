"""``seedance sweep SPEC --out DIR``: run a sweep (a YAML spec of axes over a runner) on a local pool of worker
processes or on a Dask cluster, resumably; results in ``DIR/results.parquet`` (see docs/sweeps.md).

Exit status: 0 when every run succeeded, 1 when some failed (each recorded with its error and reproduce command;
the sweep went on), 2 for bad input (spec, options). ``--json`` prints exactly one object at the end:
``{"points_total", "points_run", "points_skipped", "points_failed", "results"}`` (counts of runs: point × seed).
"""

from __future__ import annotations

import click

from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import progress_option
from seedance.cli._types import Integer
from seedance.errors import SpecError

MAX_WORKERS = 256


@click.command("sweep")
@click.argument("spec_path", metavar="SPEC")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for point files, logs and results.parquet (rerun with the same DIR to resume).")
@click.option("--workers", type=Integer(1, MAX_WORKERS), default=None,
              help="Local worker processes (default 1; not with --scheduler).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run the points on this Dask scheduler's workers instead of locally.")
@click.option("--only", multiple=True, metavar="HASH",
              help="Run only the runs whose key starts with HASH (repeatable): a failed run's reproduce command.")
@json_option
@progress_option
def command(spec_path: str, out_dir: str, workers: int | None, scheduler: str | None, only: tuple[str, ...],
            as_json: bool, show_progress: bool | None) -> int:
    """Run every point of SPEC (YAML/JSON) not already done in --out; write results.parquet."""
    from seedance.sweep import load_spec, run_sweep
    from seedance.sweep.execute import check_scheduler
    from seedance.validation import check_writable_dir

    if scheduler is not None:
        check_scheduler(scheduler)
        if workers is not None:
            raise SpecError("--workers", "applies to the local pool only",
                            "with --scheduler the cluster's workers run the points (start more `dask worker`s)")
    spec = load_spec(spec_path)  # every field and every point's parameters checked before any run
    check_writable_dir("--out", out_dir)
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
