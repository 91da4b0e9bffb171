"""One collective's alpha-beta time at one size, in plain Python: the plans of :mod:`._algorithms` flattened once
per fabric (cached on it) and evaluated term by term, exactly as the vectorised ``evaluate`` adds them.

Below both cost models: :mod:`.collectives` answers a scalar query with it, and :mod:`.nccl` prices its
point-to-point collectives with it.
"""

from __future__ import annotations

import math

from seedance.errors import SpecError
from seedance.models.cost._algorithms import ALGORITHMS, build_plan
from seedance.models.cost._curves import Steps
from seedance.models.cost._fabric import Fabric


def compiled(fabric: Fabric, collective: str, algorithm: str) -> tuple:
    """The plans ``algorithm`` (or every candidate of auto) needs, flattened for plain-Python evaluation at one size:
    ``((name, terms, base), ...)`` with each term ``(0, count, a, s)`` (one line), ``(1, count, lines, None)`` or
    ``(2, pipeline.at, None, None)``. The arithmetic is exactly that of ``Steps.at``/``Pipeline.at`` (cached)."""
    key = ("scalar", collective, algorithm)
    found = fabric.cache.get(key)
    if found is not None:
        return found
    entries = []
    for name in ALGORITHMS[collective] if algorithm == "auto" else (algorithm,):
        try:
            plan = build_plan(fabric, collective, name)
        except SpecError:
            if algorithm != "auto":
                raise
            continue
        terms = []
        for term in plan.curve:
            if isinstance(term, Steps):
                if not term.count:
                    terms.append((3, None, None, None))  # Steps.at gives 0.0
                    continue
                lines = tuple(zip(term.intercept_s.tolist(), term.slope_s_per_byte.tolist()))
                terms.append((0, term.count, *lines[0]) if len(lines) == 1 else (1, term.count, lines, None))
            else:
                terms.append((2, term.at, None, None))
        entries.append((name, tuple(terms), fabric.base_latency_s if plan.curve else 0.0))
    found = tuple(entries)
    fabric.cache[key] = found
    return found


def scalar_time(collective: str, size: float, fabric: Fabric, algorithm: str) -> tuple[float, str]:
    best, chosen = math.inf, ALGORITHMS[collective][0] if algorithm == "auto" else algorithm
    for name, terms, base in compiled(fabric, collective, algorithm):
        total = 0  # as sum(): the same additions in the same order as the vectorised evaluate()
        for kind, x, y, z in terms:
            if kind == 0:
                total += x * (y + z * size)
            elif kind == 1:
                total += x * max([a + s * size for a, s in y])
            elif kind == 2:
                total += x(size)
            else:
                total += 0.0
        total += base
        if total < best:
            best, chosen = total, name
    return float(best), chosen
