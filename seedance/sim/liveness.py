"""Liveness as a checked property (TigerBeetle's VOPR, Jepsen): after the heal, a run must recover to a good share of
the throughput the same seed achieves without faults, and soon.

Definitions (the summary of ``seedance sim run`` reports each):

* ``baseline_throughput_ops_s``: operations completed ``ok`` per second by the *same* config and seed run without
  faults (no nemesis, no scripted actions), counted over the same interval ``[healed_at, end)`` — so the warm-up
  (first election) is excluded alike. A run without faults is its own baseline.
* ``throughput_healed_ops_s``: this run's ``ok`` completions per second over ``[healed_at, end)``.
* ``recovery_s``: the earliest ``r >= 0`` (on a grid of ``window/10``) such that the window
  ``[healed_at + r, healed_at + r + window)`` holds at least ``fraction`` × baseline × window ``ok`` completions
  (and at least one); ``None`` when no window that fits in the run does. ``window`` is a tenth of a second, or a
  quarter of the healed phase when that is shorter.
* ``progress_after_heal``: ``recovery_s`` is not None and ``recovery_s <= bound_s`` (default: ≥ 50 % within 1 s).
  With a baseline of zero throughput (no clients) there is nothing to recover to and it is True.

The fraction and bound live in :class:`~seedance.sim.config.NemesisConfig` (``recovery_fraction``,
``recovery_bound_s``; ``--extra '{"nemesis": {...}}'`` on the command line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seedance.history.column import FloatColumn

WINDOW_MAX_S = 0.1


@dataclass(frozen=True, kw_only=True)
class Recovery:
    healed_at_s: float
    end_s: float
    window_s: float
    fraction: float
    bound_s: float
    baseline_throughput_ops_s: float
    throughput_healed_ops_s: float
    recovery_s: float | None

    @property
    def recovered(self) -> bool:
        return self.recovery_s is not None and self.recovery_s <= self.bound_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "recovered": self.recovered}


def _rate(times: np.ndarray | FloatColumn, start: float, end: float) -> float:
    if end <= start:
        return 0.0
    return (_before(times, end) - _before(times, start)) / (end - start)


def _before(times: np.ndarray | FloatColumn, at: float) -> int:
    """How many of the sorted ``times`` are below ``at`` (``bisect_left``)."""
    if type(times) is FloatColumn:
        return times.count_below(at)
    return int(np.searchsorted(times, at, side="left"))


def _sorted(times: Sequence[float] | FloatColumn) -> np.ndarray | FloatColumn:
    """The times in order: a run's :class:`FloatColumn` of completion times as it is (in order, on disk in chunks:
    a list of floats took 32 bytes per operation and each sorted copy 8 more, so a 30 s Raft run's 1.1 million
    completions had raised the peak RSS by 34 MB here), any other sequence as a sorted float64 array."""
    if type(times) is FloatColumn:
        return times if times.ordered else np.sort(times.to_numpy())
    return np.sort(np.asarray(times, dtype=np.float64))


def assess(ok_times: Sequence[float] | FloatColumn, baseline_ok_times: Sequence[float] | FloatColumn, *,
           healed_at_s: float, end_s: float,
           fraction: float = 0.5, bound_s: float = 1.0) -> Recovery:
    """Recovery of a run whose ``ok`` completions happened at ``ok_times``, against the fault-free run's."""
    times = _sorted(ok_times)
    baseline = times if baseline_ok_times is ok_times else _sorted(baseline_ok_times)
    healed = max(0.0, end_s - healed_at_s)
    window = min(WINDOW_MAX_S, healed / 4) if healed > 0 else 0.0
    base_rate = _rate(baseline, healed_at_s, end_s)
    own_rate = _rate(times, healed_at_s, end_s)
    recovery: float | None = None
    if base_rate == 0.0:
        recovery = 0.0
    elif window > 0:
        need = max(1, math.ceil(fraction * base_rate * window - 1e-9))
        step = window / 10
        k = 0
        while True:
            start = healed_at_s + k * step
            if start + window > end_s + 1e-12:
                break
            if _before(times, start + window) - _before(times, start) >= need:
                recovery = k * step
                break
            k += 1
    return Recovery(healed_at_s=healed_at_s, end_s=end_s, window_s=window, fraction=fraction, bound_s=bound_s,
                    baseline_throughput_ops_s=base_rate, throughput_healed_ops_s=own_rate, recovery_s=recovery)


def _ok_times(result: Any) -> FloatColumn:
    return result.clients.ok_times


def assess_run(result: Any, simulate: Any, *, faulty: bool) -> Any:
    """``result`` with its :class:`Recovery` attached; a run with nemesis faults is compared with ``simulate`` of
    the same config without them (nor trace, checker or invariant monitor); any other run (scripted actions included: they are
    scenarios, not a nemesis) with itself."""
    from dataclasses import replace

    from seedance.sim.config import NemesisConfig

    config = result.config
    nemesis = config.nemesis
    if faulty:
        clean = replace(config, nemesis=NemesisConfig(recovery_fraction=nemesis.recovery_fraction,
                                                      recovery_bound_s=nemesis.recovery_bound_s),
                        trace=False, check=False)
        if getattr(clean, "monitor", False):  # safety is judged on the run itself; the baseline only counts ops
            clean = replace(clean, monitor=False)
        baseline = _ok_times(simulate(clean, liveness=False))
    else:
        baseline = None
    own = _ok_times(result)
    recovery = assess(own, own if baseline is None else baseline, healed_at_s=result.healed_at_s,
                      end_s=config.workload.start_s + config.duration_s, fraction=nemesis.recovery_fraction,
                      bound_s=nemesis.recovery_bound_s)
    return replace(result, liveness=recovery)


def liveness_summary(recovery: Recovery | None) -> dict[str, Any]:
    """The summary keys: ``recovery_s``, ``throughput_healed_ops_s``, ``baseline_throughput_ops_s`` and the
    property's parameters (``liveness``); all None when not assessed."""
    if recovery is None:
        return {"recovery_s": None, "throughput_healed_ops_s": None, "baseline_throughput_ops_s": None,
                "liveness": None}
    return {"recovery_s": recovery.recovery_s, "throughput_healed_ops_s": recovery.throughput_healed_ops_s,
            "baseline_throughput_ops_s": recovery.baseline_throughput_ops_s,
            "liveness": {"fraction": recovery.fraction, "bound_s": recovery.bound_s, "window_s": recovery.window_s,
                         "recovered": recovery.recovered}}
