"""Cost curves: the time of a collective as a function of its size S, built from two kinds of terms.

- :class:`Steps` — ``count × max_k (intercept_k + slope_k · S)``: ``count`` identical synchronous steps, each as
  slow as its slowest concurrent transfer (a hop, a device's shared port, or a shared link). Only the lines on the
  upper envelope for S ≥ 0 are kept, so evaluation touches a handful of lines whatever the cluster size.
- :class:`Pipeline` — a message cut into ``m`` chunks flowing over ``hops`` hops, each hop costing
  ``alpha + slope·S/m`` per chunk: ``T(m) = (hops − 1 + m)(alpha + slope·S/m)``, at the best real ``m ≥ 1``:
  ``T = (√((hops−1)·alpha) + √(slope·S))²`` when ``m* = √((hops−1)·slope·S/alpha) ≥ 1``,
  else ``hops·(alpha + slope·S)``.

A curve is a tuple of terms; its time is their sum. Everything is vectorised over an array of sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def upper_envelope(intercepts: np.ndarray, slopes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines ``a + s·S`` that are the maximum for some S ≥ 0, by increasing slope."""
    a = np.asarray(intercepts, dtype=float).ravel()
    s = np.asarray(slopes, dtype=float).ravel()
    if a.size == 0:
        return np.zeros(1), np.zeros(1)
    order = np.lexsort((a, s))  # by slope, then intercept
    a, s = a[order], s[order]
    last_of_slope = np.append(s[1:] != s[:-1], True)  # per slope keep the largest intercept
    a, s = a[last_of_slope], s[last_of_slope]
    # Lines whose intercept is below that of a steeper line never win on S >= 0: keep the suffix maxima.
    keep = a > np.append(np.maximum.accumulate(a[::-1])[::-1][1:], -np.inf)
    a, s = a[keep], s[keep]
    hull_a: list[float] = []
    hull_s: list[float] = []
    for ai, si in zip(a.tolist(), s.tolist()):
        while len(hull_a) >= 2:
            # drop the middle line if the new one overtakes the first before the middle does
            a1, s1, a2, s2 = hull_a[-2], hull_s[-2], hull_a[-1], hull_s[-1]
            if (a1 - ai) * (s2 - s1) <= (a1 - a2) * (si - s1):
                hull_a.pop()
                hull_s.pop()
            else:
                break
        hull_a.append(ai)
        hull_s.append(si)
    return np.array(hull_a), np.array(hull_s)


@dataclass(frozen=True, eq=False)
class Steps:
    """``count`` synchronous steps, each ``max_k (intercept_s[k] + slope_s_per_byte[k] · S)``."""

    count: float
    intercept_s: np.ndarray
    slope_s_per_byte: np.ndarray

    @classmethod
    def of(cls, count: float, intercept_s, slope_s_per_byte) -> Steps:
        a, s = upper_envelope(intercept_s, slope_s_per_byte)
        return cls(count=float(count), intercept_s=a, slope_s_per_byte=s)

    def at(self, size: float) -> float:
        """The same for one size, in plain Python (no array overhead)."""
        lines = self.__dict__.get("_pairs")
        if lines is None:
            lines = tuple(zip(self.intercept_s.tolist(), self.slope_s_per_byte.tolist()))
            object.__setattr__(self, "_pairs", lines)
        return self.count * max(a + s * size for a, s in lines) if self.count else 0.0

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        if self.count == 0:
            return np.zeros_like(sizes)
        if self.intercept_s.size == 1:
            return self.count * (self.intercept_s[0] + self.slope_s_per_byte[0] * sizes)
        lines = self.intercept_s[:, None] + self.slope_s_per_byte[:, None] * sizes[None, :]
        return self.count * lines.max(axis=0)


@dataclass(frozen=True, eq=False)
class Pipeline:
    """An optimally chunked pipeline over ``hops`` hops; per chunk of c bytes a hop costs ``alpha_s + slope·c``."""

    hops: int
    alpha_s: float
    slope_s_per_byte: float

    def chunks(self, sizes: np.ndarray) -> np.ndarray:
        """The optimal real chunk count m* ≥ 1 per size."""
        work = self.slope_s_per_byte * sizes
        if self.hops <= 1:
            return np.ones_like(sizes)
        if self.alpha_s <= 0:
            return np.full_like(sizes, np.inf)
        return np.maximum(1.0, np.sqrt((self.hops - 1) * work / self.alpha_s))

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        if self.hops == 0:
            return np.zeros_like(sizes)
        work = self.slope_s_per_byte * sizes
        fill = (self.hops - 1) * self.alpha_s
        pipelined = (np.sqrt(fill) + np.sqrt(work)) ** 2
        unpipelined = self.hops * (self.alpha_s + work)
        m = self.chunks(sizes)
        return np.where(m > 1.0, pipelined, unpipelined)

    def at(self, size: float) -> float:
        """The same for one size, in plain Python."""
        if self.hops == 0:
            return 0.0
        work = self.slope_s_per_byte * size
        fill = (self.hops - 1) * self.alpha_s
        if self.hops > 1 and (self.alpha_s <= 0 or (self.hops - 1) * work > self.alpha_s):  # m* > 1
            return (math.sqrt(fill) + math.sqrt(work)) ** 2
        return self.hops * (self.alpha_s + work)

    def chunk_hop_s(self, sizes: np.ndarray) -> np.ndarray:
        """Time for one chunk to cross one hop at the optimal chunking (the pipeline's beat)."""
        m = self.chunks(sizes)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.alpha_s + np.where(np.isinf(m), 0.0, self.slope_s_per_byte * sizes / m)


Term = Steps | Pipeline


def evaluate(curve: tuple[Term, ...], sizes: np.ndarray) -> np.ndarray:
    """Total time of a curve at each size (seconds)."""
    total = np.zeros_like(sizes, dtype=float)
    for term in curve:
        total = total + term(sizes)
    return total
