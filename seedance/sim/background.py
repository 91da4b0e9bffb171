"""Training traffic in the background of a protocol run (``--background op:size@period``).

Rules:

* Each ``op:size@period`` (:class:`~seedance.sim.config.BackgroundSpec`) starts one collective every ``period``
  seconds from t = 0 (the first at 0, the last before the run's end) over every device of the topology.
* Each is one flow-level phase (:mod:`seedance.sim.flows`): its ring traffic shares the links max-min fairly with
  every other collective in flight (the protocol's own, earlier background ones still running) and protocol
  messages crossing those links get their fair share meanwhile. Its time alone on the fabric is the cost model's.
* Its duration (start to last byte plus the cost model's latency term) is recorded when it ends; the summary gives
  count, mean, p50, p99 and max per ``op:size``. A collective still running at the end of the run is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seedance.sim.kernel import call_at


class Background:
    """Background collectives among every device of the fabric, on the same links as the protocol."""

    def __init__(self, runtime: Any, specs: Sequence[Any], end_s: float) -> None:
        self.runtime = runtime
        self.specs = list(specs)
        self.end_s = end_s
        self.devices = tuple(range(runtime.network.topology.num_devices))

    def install(self) -> None:
        for spec in self.specs:
            call_at(self.runtime.env, 0.0, self._fire, spec)

    def _fire(self, event: Any) -> None:
        spec = event.args
        env = self.runtime.env
        self.runtime.collectives.background(spec.op, spec.size_bytes, self.devices, env.now)
        nxt = env.now + spec.period_s
        if nxt < self.end_s:
            call_at(env, nxt, self._fire, spec)

    def summary(self) -> dict[str, Any]:
        out = {}
        for key, times in self.runtime.collectives.background_times.items():
            if not times:
                continue
            arr = np.asarray(times)
            out[key] = {"count": int(arr.size), "mean_ms": float(arr.mean() * 1e3),
                        "p50_ms": float(np.percentile(arr, 50) * 1e3), "p99_ms": float(np.percentile(arr, 99) * 1e3),
                        "max_ms": float(arr.max() * 1e3)}
        return out
