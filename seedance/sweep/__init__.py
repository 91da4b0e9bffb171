"""Sweeps: a YAML spec of axes over a runner, run on a local pool or a Dask cluster, results in Parquet.

The API (see docs/sweeps.md)::

    from seedance.sweep import load_spec, run_sweep, load_results, aggregate, register_runner

    spec = load_spec("examples/sweeps/cost-allreduce.yaml")      # validated; errors name the field
    summary = run_sweep(spec, Path("out/sweep"), workers=2)       # resumable; SweepSummary
    df = load_results(summary.results)                            # one row per run
    table = aggregate(df, by=["protocol"], metrics=["throughput_ops_s"])   # mean and bootstrap CI per group

Modules: :mod:`.spec` (schema, YAML load), :mod:`.expand` (axes → runs), :mod:`.runners` (registry, built-ins),
:mod:`.store` (point files, Parquet), :mod:`.execute` (local pool, Dask), :mod:`.aggregate` (bootstrap CIs).
"""

from __future__ import annotations

from seedance.sweep.aggregate import aggregate, mean_ci
from seedance.sweep.execute import SweepSummary, run_sweep
from seedance.sweep.expand import load_spec, points, runs
from seedance.sweep.runners import current_point_dir, register_runner, runner_names
from seedance.sweep.spec import SweepSpec
from seedance.sweep.store import build_dataset, load_results

__all__ = ["SweepSpec", "SweepSummary", "aggregate", "build_dataset", "current_point_dir", "load_results",
           "load_spec", "mean_ci", "points", "register_runner", "run_sweep", "runner_names", "runs"]
