"""Aggregation across seeds: the mean of each metric per group, with a bootstrap confidence interval.

:func:`aggregate` groups the rows (``status == "ok"`` only, when the column exists) by ``by`` and, for each metric,
reports ``<metric>_mean``, ``<metric>_lo``, ``<metric>_hi`` (a ``confidence`` interval of the mean from
:func:`scipy.stats.bootstrap`, BCa, ``n_resamples`` resamples, drawn from ``numpy.random.default_rng(seed)``: the
same call gives the same interval), and ``n`` (rows in the group).

Degenerate groups, handled without warnings or surprise NaNs:

* missing values (None / NaN) of a metric are left out of that metric's statistics; booleans count as 0 / 1 (the
  mean is a fraction), also when stored as text ("true" / "false" in a column that mixes them with e.g.
  "unknown", which counts as missing); a metric with no value in a group has mean, lo and hi NaN;
* one value, or values all equal: no spread to resample, so lo = hi = mean (the ``n`` column says how much data
  stood behind it);
* where BCa cannot be computed (its jackknife acceleration is undefined, e.g. two values with heavy ties) the
  percentile interval is used instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from seedance.errors import SpecError


def mean_ci(values: Any, *, confidence: float = 0.95, seed: int = 0, n_resamples: int = 9999) -> tuple[float, float,
                                                                                                         float]:
    """(mean, lo, hi) of ``values`` (finite numbers; see the module docstring for degenerate cases)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return mean, mean, mean
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                                  method=method, vectorized=True, rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(lo) and np.isfinite(hi):
            return mean, min(lo, mean), max(hi, mean)
    return mean, mean, mean


def _number(value: Any) -> Any:
    """Booleans (also as the text a mixed-type column holds: "true", "false") as 1.0 / 0.0."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, str) and value in ("true", "false"):
        return 1.0 if value == "true" else 0.0
    return value


def aggregate(df: Any, by: list[str], metrics: list[str], confidence: float = 0.95, seed: int = 0, *,
              n_resamples: int = 9999) -> Any:
    """One row per group of ``by``: the ``by`` columns, ``n``, and ``<metric>_mean/_lo/_hi`` for each metric."""
    import pandas as pd

    if not 0 < confidence < 1:
        raise SpecError("confidence", f"{confidence!r} is out of range", "a level in (0, 1), e.g. 0.95")
    missing = [c for c in [*by, *metrics] if c not in df.columns]
    if missing:
        raise SpecError("aggregate", f"no column {missing[0]!r}", f"columns: {', '.join(map(str, df.columns))}")
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    rows = []
    groups = df.groupby(list(by), sort=True, dropna=False) if by else [((), df)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        out: dict[str, Any] = dict(zip(by, key))
        out["n"] = len(group)
        for metric in metrics:
            values = pd.to_numeric(group[metric].map(_number), errors="coerce")
            out[f"{metric}_mean"], out[f"{metric}_lo"], out[f"{metric}_hi"] = mean_ci(
                values.to_numpy(dtype=float), confidence=confidence, seed=seed, n_resamples=n_resamples)
        rows.append(out)
    columns = [*by, "n", *[f"{m}_{s}" for m in metrics for s in ("mean", "lo", "hi")]]
    return pd.DataFrame(rows, columns=columns)
