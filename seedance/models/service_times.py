"""Service-time distributions of the host model (:mod:`seedance.models.host`): a fitted log-normal and the measured
quantiles (empirical), each drawn from a seeded generator, scaled, fitted to samples and read from a profile file.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seedance.errors import SpecError


@dataclass(frozen=True)
class LogNormal:
    """A log-normal service time: ``median_s · exp(sigma · N(0, 1))``, clipped at ``cap_s`` (a tail, not infinity)."""

    median_s: float
    sigma: float = 0.0
    cap_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("median_s", "sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise SpecError(f"host profile {name}", f"must be a finite number >= 0, got {value!r}")
        if self.cap_s is not None and (not math.isfinite(self.cap_s) or self.cap_s <= 0):
            raise SpecError("host profile cap_s", f"must be a finite number > 0 or null, got {self.cap_s!r}")

    @property
    def mean_s(self) -> float:
        return self.median_s * math.exp(self.sigma ** 2 / 2)

    def draw(self, rng: np.random.Generator) -> float:
        if self.sigma == 0.0:
            return self.median_s
        value = self.median_s * math.exp(self.sigma * float(rng.standard_normal()))
        return min(value, self.cap_s) if self.cap_s is not None else value

    def scaled(self, factor: float) -> LogNormal:
        """The same shape, every draw ``factor`` times as long."""
        return LogNormal(self.median_s * factor, self.sigma, None if self.cap_s is None else self.cap_s * factor)

    @classmethod
    def fit(cls, samples: Any, *, cap_quantile: float = 0.999) -> LogNormal:
        """Maximum-likelihood log-normal (location 0) of positive samples; the cap is their 99.9th percentile."""
        values = np.asarray([s for s in samples if s > 0], dtype=float)
        if values.size == 0:
            return cls(0.0)
        logs = np.log(values)
        return cls(float(np.exp(logs.mean())), float(logs.std()), float(np.quantile(values, cap_quantile)))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LogNormal:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return cls(float(data))
        if not isinstance(data, Mapping):
            raise SpecError(where, f"expected {{median_s, sigma, cap_s}} or a number, got {data!r}")
        unknown = set(data) - {"median_s", "sigma", "cap_s"}
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", "median_s, sigma, cap_s")
        if "median_s" not in data:
            raise SpecError(where, "missing median_s", "median_s (seconds), sigma (log-normal shape), cap_s")
        try:
            return cls(float(data["median_s"]), float(data.get("sigma", 0.0)),
                       None if data.get("cap_s") is None else float(data["cap_s"]))
        except (TypeError, ValueError):
            raise SpecError(where, f"not numbers: {data!r}", "median_s, sigma, cap_s as numbers") from None
        except SpecError as err:
            raise SpecError(where, err.problem, err.valid) from None


# The probabilities an empirical service time keeps its quantiles at: every 2 % in the body, then finer towards the
# tail, which is what sets a run's p99 (a slow fsync stalls every operation waiting behind it).
EMPIRICAL_PROBS = (*(i / 50 for i in range(49)), 0.98, 0.99, 0.995, 0.998, 0.999, 1.0)


@dataclass(frozen=True)
class Empirical:
    """A measured service time drawn from its own quantiles: ``p`` (0 .. 1, increasing) and the values ``s`` at them
    (non-decreasing, seconds); a draw is the inverse CDF at a uniform ``u``, linear between the stored points. The
    tail is the measured one (bounded by the largest sample) rather than a fitted shape's: a log-normal fitted to
    the fsyncs of a run put its 99.9th percentile at ~3.8x the median where the run's own was ~6x."""

    p: tuple[float, ...]
    s: tuple[float, ...]

    def __post_init__(self) -> None:
        p, s = tuple(float(x) for x in self.p), tuple(float(x) for x in self.s)
        if len(p) < 2 or len(p) != len(s):
            raise SpecError("host profile empirical", f"p and s need the same length >= 2, got {len(p)} and {len(s)}",
                            "quantiles as written by `seedance real profile`")
        if p[0] != 0.0 or p[-1] != 1.0 or any(b <= a for a, b in zip(p, p[1:])):
            raise SpecError("host profile empirical p", "must increase strictly from 0 to 1", "e.g. [0, 0.5, 1]")
        if not all(math.isfinite(x) and x >= 0 for x in s) or any(b < a for a, b in zip(s, s[1:])):
            raise SpecError("host profile empirical s", "must be finite seconds >= 0, non-decreasing",
                            "quantile values in seconds")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "s", s)

    @property
    def median_s(self) -> float:
        return float(np.interp(0.5, self.p, self.s))

    @property
    def mean_s(self) -> float:  # the piecewise-linear inverse CDF's integral
        return float(sum((b - a) * (x + y) / 2 for a, b, x, y in zip(self.p, self.p[1:], self.s, self.s[1:])))

    @property
    def sigma(self) -> float:
        """The log-normal shape with the same 16th..84th percentile span (for printing, not for drawing)."""
        lo, hi = np.interp([0.16, 0.84], self.p, self.s)
        return float(math.log(hi / lo) / 2) if lo > 0 else 0.0

    @property
    def cap_s(self) -> float:
        return self.s[-1]

    def scaled(self, factor: float) -> Empirical:
        return Empirical(self.p, tuple(x * factor for x in self.s))

    def draw(self, rng: np.random.Generator) -> float:
        u = float(rng.random())
        p, s = self.p, self.s
        hi = bisect_left(p, u, 1)
        lo = hi - 1
        return s[lo] + (s[hi] - s[lo]) * (u - p[lo]) / (p[hi] - p[lo])

    @classmethod
    def fit(cls, samples: Any) -> Empirical:
        values = np.asarray([x for x in samples if x > 0], dtype=float)
        if values.size == 0:
            return cls((0.0, 1.0), (0.0, 0.0))
        return cls(EMPIRICAL_PROBS, tuple(float(v) for v in np.quantile(values, EMPIRICAL_PROBS)))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Empirical:
        unknown = set(data) - {"p", "s"}
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", "p, s (an empirical quantile table)")
        if not isinstance(data.get("p"), list) or not isinstance(data.get("s"), list):
            raise SpecError(where, "p and s must be lists of numbers", "p (probabilities 0..1), s (seconds)")
        try:
            return cls(tuple(data["p"]), tuple(data["s"]))
        except (TypeError, ValueError):
            raise SpecError(where, f"not numbers: {data!r}", "p and s as lists of numbers") from None
        except SpecError as err:
            raise SpecError(where, err.problem, err.valid) from None


def service_time_from_dict(data: Any, where: str) -> LogNormal | Empirical:
    """A profile's service time: ``{median_s, sigma, cap_s}`` (log-normal), a number, or ``{p, s}`` (empirical)."""
    if isinstance(data, Mapping) and ("p" in data or "s" in data):
        return Empirical.from_dict(data, where)
    return LogNormal.from_dict(data, where)


def _service_dict(time_: LogNormal | Empirical) -> dict[str, Any]:
    return {"p": list(time_.p), "s": list(time_.s)} if isinstance(time_, Empirical) else asdict(time_)
