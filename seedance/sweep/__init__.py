"""Sweeps: a YAML spec of axes over a runner, run on a local pool or a Dask cluster, results in Parquet.

The API (see docs/sweeps.md)::

    from seedance.sweep import load_spec, run_sweep, load_results, aggregate, register_runner

    spec = load_spec("examples/sweeps/cost-allreduce.yaml")      # validated; errors name the field
    summary = run_sweep(spec, Path("out/sweep"), workers=2)       # resumable; SweepSummary
    df = load_results(summary.results)                            # one row per run
    table = aggregate(df, by=["protocol"], metrics=["throughput_ops_s"])   # mean and bootstrap CI per group

Modules: :mod:`.spec` (schema, sizes, YAML load), :mod:`.expand` (axes → runs), :mod:`.registry` (runner names →
``module:function``, loaded lazily), :mod:`.runners` (the built-in runners), :mod:`.plan` (dry runs),
:mod:`.store` (point files, Parquet), :mod:`.execute` (local pool, Dask), :mod:`.aggregate` (bootstrap CIs).
Names are imported on first use, so ``import seedance.sweep`` costs nothing (a dry run answers in well under a
second).
"""

from __future__ import annotations

import importlib
from typing import Any

from seedance.sweep.aggregate import aggregate, mean_ci  # eager: the function, not its module, is `aggregate`

_WHERE = {"SweepSummary": "execute", "run_sweep": "execute",
          "points": "expand", "runs": "expand", "register_runner": "registry", "runner_names": "registry",
          "current_point_dir": "runners", "SweepSpec": "spec", "load_spec": "load", "build_dataset": "store",
          "load_results": "store", "dry_run": "plan"}

__all__ = sorted([*_WHERE, "aggregate", "mean_ci"])


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
