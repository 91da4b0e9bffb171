"""Axes → points: the product grid × zip × random, merged over ``fixed``; then one run per (point, seed).

Order is deterministic: grid in the order the spec lists its parameters and values (the last parameter varies
fastest), then zip, then random samples in draw order. Random samples come from
``numpy.random.default_rng(axes.random.seed)``, drawn sample by sample, parameter by parameter in the spec's order:
the same spec gives the same points on every machine.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from seedance.provenance import spec_hash
from seedance.sweep.spec import MAX_POINTS, Choice, LogUniform, RandInt, SweepSpec, Uniform
from seedance.errors import SpecError


def _draw(rng: Any, dist: Any) -> Any:
    if isinstance(dist, Uniform):
        lo, hi = dist.uniform
        return float(rng.uniform(lo, hi))
    if isinstance(dist, LogUniform):
        lo, hi = dist.loguniform
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    if isinstance(dist, RandInt):
        lo, hi = dist.randint
        return int(rng.integers(lo, hi + 1))
    if isinstance(dist, Choice):
        return dist.choice[int(rng.integers(len(dist.choice)))]
    raise TypeError(f"unknown distribution {dist!r}")


def random_points(spec: SweepSpec) -> list[dict[str, Any]]:
    axis = spec.axes.random
    if axis is None:
        return [{}]
    import numpy as np  # only for random axes (a dry run of a grid imports no numpy)

    rng = np.random.default_rng(axis.seed)
    return [{name: _draw(rng, dist) for name, dist in axis.params.items()} for _ in range(axis.samples)]


def count(spec: SweepSpec) -> int:
    """Points before seeds (without building them)."""
    n = math.prod(len(v) for v in spec.axes.grid.values())
    if spec.axes.zip:
        n *= len(next(iter(spec.axes.zip.values())))
    if spec.axes.random is not None:
        n *= spec.axes.random.samples
    return n


def points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every point's resolved parameters (fixed merged with one value of each axis), in order."""
    total = count(spec) * len(spec.seed_list)
    if total > MAX_POINTS:
        raise SpecError("axes", f"{total:,} runs (points x seeds)", f"at most {MAX_POINTS:,}: split the sweep")
    grid_names = list(spec.axes.grid)
    grid = [dict(zip(grid_names, combo)) for combo in itertools.product(*spec.axes.grid.values())]
    zip_names = list(spec.axes.zip)
    zipped = [dict(zip(zip_names, values)) for values in zip(*spec.axes.zip.values())] if zip_names else [{}]
    sampled = random_points(spec)
    return [{**spec.fixed, **g, **z, **r} for g in grid for z in zipped for r in sampled]


@dataclass(frozen=True)
class Run:
    """One run of the sweep: a point's parameters with one seed. ``key`` names its result file."""

    index: int
    params: dict[str, Any]
    seed: int
    key: str


def point_key(runner: str, params: dict[str, Any], seed: int) -> str:
    """The hash of (runner, resolved parameters, seed): the name of the run's result file."""
    return spec_hash({"runner": runner, "params": params, "seed": seed})


def runs(spec: SweepSpec) -> list[Run]:
    """Every (point, seed) of the sweep, in order; duplicate points (e.g. repeated random draws) run once."""
    out: list[Run] = []
    seen: set[str] = set()
    for params in points(spec):
        for seed in spec.seed_list:
            key = point_key(spec.runner, params, seed)
            if key not in seen:
                seen.add(key)
                out.append(Run(index=len(out), params=params, seed=seed, key=key))
    return out
