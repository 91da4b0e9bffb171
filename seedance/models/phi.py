"""The phi-accrual failure detector (Hayashibara, Défago, Yared & Katayama, SRDS 2004), as Akka implements it.

A pure model: it is fed heartbeat arrival times and asked for ``phi(now)``; it reads no clock.

* Inter-arrival times go into a window of at most ``max_sample_size`` samples (Akka default 1,000); the window's mean
  and standard deviation describe the heartbeat process.
* ``phi(now) = -log10(P(a heartbeat arrives later than now - last))`` under a normal distribution with the window's
  mean plus ``acceptable_heartbeat_pause_s`` and standard deviation ``max(std, min_std_deviation_s)`` (Akka default
  100 ms). The normal tail uses Akka's logistic approximation (Bowling et al. 2009, "A logistic approximation to the
  cumulative normal distribution", J. Industrial Engineering and Management 2(1)): ``e = exp(-y (1.5976 +
  0.070566 y²))`` with ``y = (Δ - mean) / std``; ``phi = -log10(e / (1 + e))`` when Δ > mean, else
  ``-log10(1 - 1 / (1 + e))``.
* A peer is suspected (``available`` is False) when ``phi >= threshold`` (Akka default 8.0).
* Before the second heartbeat the window is seeded as Akka does: ``first_heartbeat_estimate_s`` (its default 1 s;
  callers pass their heartbeat interval) with standard deviation a quarter of it, as two samples ``mean ± std``.

Defaults are Akka's ``akka.remote.watch-failure-detector`` / cluster failure-detector settings (threshold 8.0,
max-sample-size 1000, min-std-deviation 100 ms, acceptable-heartbeat-pause 3 s, heartbeat-interval 1 s).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from seedance.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class PhiConfig:
    threshold: float = 8.0
    max_sample_size: int = 1000
    min_std_deviation_s: float = 0.1
    acceptable_heartbeat_pause_s: float = 3.0
    first_heartbeat_estimate_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("threshold", "min_std_deviation_s", "first_heartbeat_estimate_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise SpecError(f"phi.{name}", f"must be a finite number > 0, got {value!r}")
        pause = self.acceptable_heartbeat_pause_s
        if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not math.isfinite(pause) or pause < 0:
            raise SpecError("phi.acceptable_heartbeat_pause_s", f"must be a finite number >= 0, got {pause!r}")
        if isinstance(self.max_sample_size, bool) or not isinstance(self.max_sample_size, int) \
                or self.max_sample_size < 1:
            raise SpecError("phi.max_sample_size", f"must be an integer >= 1, got {self.max_sample_size!r}")


def phi_value(elapsed_s: float, mean_s: float, std_s: float) -> float:
    """Akka's ``phi``: -log10 of the (logistic-approximated) normal tail beyond ``elapsed_s``."""
    y = (elapsed_s - mean_s) / std_s
    exponent = -y * (1.5976 + 0.070566 * y * y)
    if elapsed_s > mean_s:  # -log10(e / (1 + e)) = -exponent / ln 10 + log10(1 + e), stable for tiny e
        return -exponent / math.log(10.0) + math.log10(1.0 + math.exp(min(exponent, 700.0)))
    if exponent > 700.0:  # e overflows: 1 - 1 / (1 + e) -> 1, phi -> 0
        return 0.0
    e = math.exp(exponent)
    return -math.log10(1.0 - 1.0 / (1.0 + e))


class PhiAccrualDetector:
    """One monitored peer. ``heartbeat(now)`` on every arrival; ``phi(now)`` / ``available(now)`` on demand."""

    __slots__ = ("config", "_intervals", "_sum", "_sq", "last")

    def __init__(self, config: PhiConfig | None = None) -> None:
        self.config = config or PhiConfig()
        self._intervals: deque[float] = deque()
        self._sum = 0.0
        self._sq = 0.0
        self.last: float | None = None

    def _add(self, interval: float) -> None:
        if len(self._intervals) >= self.config.max_sample_size:
            old = self._intervals.popleft()
            self._sum -= old
            self._sq -= old * old
        self._intervals.append(interval)
        self._sum += interval
        self._sq += interval * interval

    def heartbeat(self, now: float) -> None:
        if self.last is None:
            estimate = self.config.first_heartbeat_estimate_s
            std = estimate / 4.0
            self._add(estimate - std)
            self._add(estimate + std)
        else:
            interval = now - self.last
            if interval >= 0:
                self._add(interval)
        self.last = now if self.last is None or now > self.last else self.last

    @property
    def samples(self) -> int:
        return len(self._intervals)

    def mean_std(self) -> tuple[float, float]:
        n = len(self._intervals)
        mean = self._sum / n
        var = max(0.0, self._sq / n - mean * mean)
        return mean, math.sqrt(var)

    def phi(self, now: float) -> float:
        """0 before the first heartbeat (nothing to suspect yet)."""
        if self.last is None:
            return 0.0
        mean, std = self.mean_std()
        mean += self.config.acceptable_heartbeat_pause_s
        std = max(std, self.config.min_std_deviation_s)
        return phi_value(now - self.last, mean, std)

    def available(self, now: float) -> bool:
        return self.phi(now) < self.config.threshold
