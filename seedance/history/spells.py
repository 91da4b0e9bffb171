"""Slow spells in a run's latencies: how much its operations' latency moves from one short window to the next.

A shared machine runs the same code faster and slower for tens to hundreds of milliseconds at a time. In a run's
history that shows as windows (50 ms) whose median latency differs by more than the operations in them explain,
and as neighbouring windows that agree (the spell lasts). :func:`latency_windows` measures both on one history:

* every completed operation's latency, divided by the median latency of its operation kind (so a run that mixes
  reads and writes, whose latencies differ, is not one bimodal series), then its log;
* per window (after ``skip_s`` of warm-up): the median of those logs, their sd and count;
* stalls: a window whose median lies more than :data:`STALL_MADS` robust sds (1.4826 x the median absolute
  deviation) from the median window is clipped to that bound before the two statistics below, and counted
  (``stalls``). A stall is one window many times slower than the rest (an old-generation collection, a disk
  hiccup): a tail event, which the host model draws apart (``gc``, ``disk_stalls``), not a spell. Unclipped,
  one such window (a log median of 2.9 among 54 whose robust sd was 0.07) lifted a profile run's sd from 0.10 to
  0.40, the three runs' pooled sd from 0.077 to 0.237 and the fitted spells' sigma from 0.165 to 0.55; the
  simulator then drew windows of sd 0.50 (the real ones: 0.24 with the stall, 0.077 without) and over-predicted
  every held-out workload's p99 (median error 66 %, against 2.9 % re-simulated on the clipped fit);
* ``sd``: the sd of the window medians with the medians' own sampling noise removed (a median of ``n`` values
  whose sd is ``s`` varies by about ``1.2533 · s / √n``; subtracted in quadrature), and ``rho``: the lag-1
  correlation of the window medians, corrected for the same noise (it lowers the correlation as much as it raises
  the variance).

:func:`seedance.models.host.fit_spell` turns the two into the host model's spell process; ``experiment sim-vs-real``
reports them for every real and simulated run, so whether the simulator's spells match the real ones is measured
on the held-out workloads, not assumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

WINDOW_S = 0.05  # the windows' length: a spell of tens of ms fills one, an operation (~1-5 ms) is inside one
STALL_MADS = 5.0  # how far (in robust sds) a window median may lie from the median window before it is a stall
MEDIAN_NOISE = 1.2533  # sd of a sample median / (sd of the values / sqrt(n)), for normal values (sqrt(pi / 2))


@dataclass(frozen=True)
class WindowStats:
    sd: float  # window medians' log-sd, sampling noise removed
    rho: float  # their lag-1 correlation, sampling noise removed (nan with fewer than 3 windows)
    windows: int
    noise_sd: float  # the medians' sampling noise that was removed
    raw_sd: float  # before removing it (after clipping the stalls)
    stalls: int = 0  # windows clipped as stalls (module docstring)

    def to_dict(self) -> dict[str, Any]:
        return {"sd": self.sd, "rho": None if math.isnan(self.rho) else self.rho, "windows": self.windows,
                "noise_sd": self.noise_sd, "raw_sd": self.raw_sd, "stalls": self.stalls}


def operation_latencies(events: Iterable[Any]) -> np.ndarray:
    """(invoke time, latency / its operation kind's median latency) of every operation that completed ``ok``,
    from a history's events (:class:`seedance.history.events.Event` or the simulator's, same fields)."""
    pending: dict[int, tuple[float, str]] = {}
    done: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        kind = getattr(event.type, "value", event.type)
        if kind == "invoke":
            pending[event.process] = (event.time, getattr(event.f, "value", event.f))
        elif event.process in pending:
            start, f = pending.pop(event.process)
            if kind == "ok" and event.time > start:
                done.setdefault(f, []).append((start, event.time - start))
    rows = []
    for pairs in done.values():
        values = np.asarray(pairs, dtype=float)
        values[:, 1] /= np.median(values[:, 1])
        rows.append(values)
    if not rows:
        return np.empty((0, 2))
    out = np.concatenate(rows)
    return out[np.argsort(out[:, 0], kind="stable")]


def latency_windows(latencies: np.ndarray, *, window_s: float = WINDOW_S, skip_s: float = 0.3,
                    min_ops: int = 5) -> WindowStats | None:
    """The window statistics of :func:`operation_latencies`' output (module docstring); None with under 3
    windows of at least ``min_ops`` operations."""
    if len(latencies) == 0:
        return None
    times, logs = latencies[:, 0], np.log(latencies[:, 1])
    start = times[0] + skip_s
    index = np.floor((times - start) / window_s).astype(np.int64)
    keep = index >= 0
    index, logs = index[keep], logs[keep]
    medians, noise = [], []
    for window in np.unique(index):
        values = logs[index == window]
        if values.size >= min_ops:
            medians.append(float(np.median(values)))
            noise.append((MEDIAN_NOISE * float(values.std())) ** 2 / values.size)
    if len(medians) < 3:
        return None
    series = np.asarray(medians)
    centre = float(np.median(series))
    bound = STALL_MADS * 1.4826 * float(np.median(np.abs(series - centre)))
    stalls = int(np.count_nonzero(np.abs(series - centre) > bound)) if bound > 0 else 0
    if stalls:
        series = np.clip(series, centre - bound, centre + bound)
    raw = float(series.var())
    noise_var = float(np.mean(noise))
    signal = max(raw - noise_var, 0.0)
    rho = float("nan")
    if signal > 0 and series[:-1].std() > 0 and series[1:].std() > 0:
        rho = float(np.corrcoef(series[:-1], series[1:])[0, 1]) * raw / signal
        rho = max(min(rho, 1.0), -1.0)
    return WindowStats(math.sqrt(signal), rho, len(medians), math.sqrt(noise_var), math.sqrt(raw), stalls)


def history_windows(events: Iterable[Any]) -> WindowStats | None:
    """A history's window statistics: :func:`latency_windows` of :func:`operation_latencies`."""
    return latency_windows(operation_latencies(events))


def pooled(stats: Iterable[WindowStats | None]) -> WindowStats | None:
    """Several runs' window statistics as one: variances averaged (weighted by windows), correlations likewise."""
    runs = [s for s in stats if s is not None]
    if not runs:
        return None
    weights = np.asarray([s.windows for s in runs], dtype=float)
    rhos = [(s.rho, w) for s, w in zip(runs, weights) if not math.isnan(s.rho)]
    return WindowStats(
        math.sqrt(float(np.average([s.sd ** 2 for s in runs], weights=weights))),
        float(np.average([r for r, _ in rhos], weights=[w for _, w in rhos])) if rhos else float("nan"),
        int(weights.sum()),
        math.sqrt(float(np.average([s.noise_sd ** 2 for s in runs], weights=weights))),
        math.sqrt(float(np.average([s.raw_sd ** 2 for s in runs], weights=weights))),
        sum(s.stalls for s in runs))
