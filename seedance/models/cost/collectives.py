"""Collective time, algorithm bandwidth and bus bandwidth under the alpha-beta model (seed §2.4).

Sizes and bandwidths follow nccl-tests (NVIDIA/nccl-tests, doc/PERFORMANCE.md) so predictions line up with its
tables column by column:

- ``size_bytes`` S is the column "size" of the matching ``*_perf`` binary: the buffer each rank reduces for
  allreduce, the whole broadcast buffer, each rank's total input for reducescatter (it keeps S/n), the total output
  for allgather (each rank contributes S/n), each rank's whole send buffer for alltoall (S/n to each peer), and the
  message each rank sends to its successor for sendrecv. :data:`SIZE_MEANING` says so per collective.
- ``algbw = S / time`` in GB/s (1e9 bytes/s); ``busbw = algbw × factor`` with factor ``2(n−1)/n`` for allreduce,
  ``(n−1)/n`` for reducescatter, allgather and alltoall, and ``1`` for broadcast and sendrecv — the hardware
  bandwidth a perfect ring would need, comparable across collectives and with link speeds.
- The root of broadcast is device 0, as nccl-tests' default ``-r 0``.

``algorithm="auto"`` evaluates every algorithm valid for the collective (:data:`ALGORITHMS`) and takes the fastest
(ties: the first listed); :class:`CollectiveCost` names the winner. How the straggler vector τ enters each algorithm
is stated in :mod:`seedance.models.cost._algorithms`; with τ, ``time_s`` counts from the moment the first device
(τ = 0) calls the collective. One device: every collective takes 0 s (nothing moves). A topology may set a
per-call software latency (``meta["base_latency_us"]``, see :class:`~seedance.models.cost._fabric.Fabric`), added
to every algorithm alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.cost._algorithms import ALGORITHMS, COLLECTIVES, Plan, build_plan, ring_of
from seedance.models.cost._curves import evaluate
from seedance.models.cost._fabric import Fabric, fabric_of
from seedance.models.cost.ring import RingOrder
from seedance.models.cost.scalar import scalar_time

SIZE_MEANING = {
    "allreduce": "bytes each rank reduces (input = output size)",
    "reducescatter": "bytes of each rank's whole input; each rank keeps size/n",
    "allgather": "bytes of the gathered output; each rank contributes size/n",
    "broadcast": "bytes broadcast from the root (device 0)",
    "alltoall": "bytes of each rank's send buffer; size/n goes to each peer",
    "sendrecv": "bytes each rank sends to its successor",
}
_ALIASES = {"all_reduce": "allreduce", "reduce_scatter": "reducescatter", "all_gather": "allgather",
            "all_to_all": "alltoall", "send_recv": "sendrecv"}


@dataclass(frozen=True, kw_only=True)
class CollectiveCost:
    """One prediction, with nccl-tests' column meanings."""

    collective: str
    algorithm: str
    size_bytes: int
    num_devices: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    protocol: str | None = None  # NCCL protocol (LL, LL128, Simple); None under the alpha-beta model
    channels: int | None = None  # channels NCCL launches at this size; None under the alpha-beta model
    model: str = "nccl"

    def as_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective, "algorithm": self.algorithm, "protocol": self.protocol,
            "channels": self.channels, "model": self.model, "size_bytes": self.size_bytes,
            "num_devices": self.num_devices, "time_s": self.time_s, "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
        }


def check_collective(collective: str) -> str:
    name = _ALIASES.get(str(collective).lower(), str(collective).lower())
    if name not in ALGORITHMS:
        raise SpecError("collective", f"unknown collective {collective!r}", "one of " + ", ".join(COLLECTIVES))
    return name


MODELS = ("nccl", "alpha-beta")
PROTOCOL_NAMES = ("auto", "LL", "LL128", "Simple")


def check_model(model: str) -> str:
    if model not in MODELS:
        raise SpecError("model", f"unknown cost model {model!r}", "nccl (default) or alpha-beta")
    return model


def check_protocol(protocol: str) -> str:
    for name in PROTOCOL_NAMES:
        if str(protocol).lower() == name.lower():
            return name
    raise SpecError("protocol", f"unknown protocol {protocol!r}", "auto, LL, LL128 or Simple (NCCL model only)")


def check_algorithm(collective: str, algorithm: str, model: str = "alpha-beta") -> str:
    if model == "nccl":
        from seedance.models.cost.nccl import ALGORITHMS_NCCL

        if algorithm != "auto" and algorithm not in ALGORITHMS_NCCL[collective]:
            raise SpecError(
                "algorithm", f"unknown algorithm {algorithm!r} for {collective} under the nccl model",
                "one of auto, " + ", ".join(ALGORITHMS_NCCL[collective]) + " (or --model alpha-beta)",
            )
        return algorithm
    valid = ALGORITHMS[collective]
    if algorithm != "auto" and algorithm not in valid:
        raise SpecError(
            "algorithm", f"unknown algorithm {algorithm!r} for {collective}", "one of auto, " + ", ".join(valid)
        )
    return algorithm


def bus_bandwidth_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw/algbw ratio for ``collective`` on ``n`` ranks (doc/PERFORMANCE.md)."""
    collective = check_collective(collective)
    if n < 1:
        raise SpecError("num_devices", f"{n} devices", "at least 1")
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("reducescatter", "allgather", "alltoall"):
        return (n - 1) / n
    return 1.0


def ring_order(topology: Any) -> RingOrder:
    """The bottleneck-aware ring order the ring algorithms use on this topology (cached)."""
    return ring_of(fabric_of(topology))


def ring_channels(topology: Any) -> tuple[tuple[int, ...], ...]:
    """The rings the ring algorithms run at once (one, or NCCL-style channels across hosts), each an order."""
    from seedance.models.cost._algorithms import ring_channels as channels_of

    fabric = fabric_of(topology)
    if fabric.num_devices == 1:
        return ((0,),)
    return tuple(tuple(int(i) for i in channel) for channel in channels_of(fabric))


def _tau_vector(fabric: Fabric, tau_s: Any) -> np.ndarray | None:
    if tau_s is None:
        return None
    try:
        tau = np.asarray(tau_s, dtype=float)
    except (TypeError, ValueError):
        raise SpecError("tau", "is not numeric", "seconds per device, >= 0") from None
    n = fabric.num_devices
    if tau.ndim == 0:
        tau = np.full(n, float(tau))
    if tau.shape != (n,):
        raise SpecError("tau", f"has shape {tau.shape}", f"one value per device ({n}), in seconds")
    if not np.all(np.isfinite(tau) & (tau >= 0)):
        raise SpecError("tau", "has a negative, NaN or infinite entry", "finite seconds >= 0")
    return tau


def _sizes(sizes_bytes: Any) -> np.ndarray:
    sizes = np.asarray(sizes_bytes, dtype=float)
    if sizes.ndim > 1 or not np.all(np.isfinite(sizes) & (sizes >= 0)):
        raise SpecError("size", "is not a list of finite sizes >= 0", "bytes, e.g. 8 or 1073741824")
    return np.atleast_1d(sizes)


def _time(plan: Plan, sizes: np.ndarray, tau: np.ndarray | None, base_latency_s: float = 0.0) -> np.ndarray:
    base = evaluate(plan.curve, sizes) + (base_latency_s if plan.curve else 0.0)
    if tau is None:
        return base
    if plan.tau == "sync" or not plan.curve:
        return base + tau.max()
    if plan.tau == "depth":
        beat = plan.beat.chunk_hop_s(sizes)
        return base + (tau[:, None] - plan.depth[:, None] * beat[None, :]).max(axis=0)
    src, dst, alpha, inv = plan.pairs
    start = np.maximum(tau[src], tau[dst])
    pairs = (start[:, None] + alpha[:, None] + inv[:, None] * sizes[None, :]).max(axis=0)
    return np.maximum(pairs, base + start.min())


def _times(collective: str, sizes: np.ndarray, fabric: Fabric, algorithm: str, tau: np.ndarray | None):
    """(times, index of the winning algorithm in ALGORITHMS[collective] or None)."""
    if algorithm != "auto":
        return _time(build_plan(fabric, collective, algorithm), sizes, tau, fabric.base_latency_s), None
    best, winner = None, None
    for index, name in enumerate(ALGORITHMS[collective]):
        try:
            plan = build_plan(fabric, collective, name)
        except SpecError:  # e.g. hierarchical on unequal hosts: not a candidate
            continue
        times = _time(plan, sizes, tau, fabric.base_latency_s)
        if best is None:
            best, winner = times, np.zeros(len(sizes), dtype=np.int64)
        else:
            better = times < best
            best = np.where(better, times, best)
            winner = np.where(better, index, winner)
    return best, winner


def collective_times(
    collective: str, sizes_bytes: Any, topology: Any, *, algorithm: str = "auto", tau_s: Any = None,
    model: str = "nccl", protocol: str = "auto",
) -> np.ndarray:
    """Times (s) of ``collective`` for an array of sizes, vectorised; ``auto`` takes the fastest per size."""
    collective = check_collective(collective)
    model = check_model(model)
    algorithm = check_algorithm(collective, algorithm, model)
    fabric = fabric_of(topology)
    if model == "nccl":
        from seedance.models.cost import nccl

        protocol = check_protocol(protocol)
        tau = _tau_vector(fabric, tau_s)
        late = float(tau.max()) if tau is not None else 0.0
        return np.array([nccl.choose(topology, collective, float(s), algorithm, protocol)[0] + late
                         for s in _sizes(sizes_bytes)])
    times, _ = _times(collective, _sizes(sizes_bytes), fabric, algorithm, _tau_vector(fabric, tau_s))
    return times


def best_algorithms(
    collective: str, sizes_bytes: Any, topology: Any, *, tau_s: Any = None, model: str = "nccl"
) -> list[str]:
    """The algorithm ``auto`` picks at each size (``algorithm/protocol`` under the nccl model)."""
    collective = check_collective(collective)
    model = check_model(model)
    fabric = fabric_of(topology)
    if model == "nccl":
        from seedance.models.cost import nccl

        _tau_vector(fabric, tau_s)
        return [f"{a}/{p}" for _, a, p, _ in (nccl.choose(topology, collective, float(s))
                                               for s in _sizes(sizes_bytes))]
    _, winner = _times(collective, _sizes(sizes_bytes), fabric, "auto", _tau_vector(fabric, tau_s))
    names = ALGORITHMS[collective]
    return [names[i] for i in winner]


_RESOLVED: dict[tuple, tuple[str, str]] = {}  # (collective, algorithm, model) as given -> checked names
_BUSBW = {"allreduce": 2.0, "reducescatter": 1.0, "allgather": 1.0, "alltoall": 1.0}  # × (n−1)/n; others 1


def _resolve(collective: Any, algorithm: Any, model: Any = "alpha-beta") -> tuple[str, str]:
    try:
        return _RESOLVED[(collective, algorithm, model)]
    except (KeyError, TypeError):
        pass
    name = check_collective(collective)
    resolved = (name, check_algorithm(name, algorithm, check_model(model)))
    if isinstance(collective, str) and isinstance(algorithm, str) and len(_RESOLVED) < 1024:
        _RESOLVED[(collective, algorithm, model)] = resolved
    return resolved


def _new_cost(fields: dict[str, Any]) -> CollectiveCost:
    """A CollectiveCost without the frozen dataclass's per-field ``object.__setattr__`` (same object otherwise)."""
    cost = object.__new__(CollectiveCost)
    cost.__dict__.update(fields)
    return cost


def collective_time(
    collective: str, size_bytes: int, topology: Any, *, algorithm: str = "auto", tau_s: Any = None,
    model: str = "nccl", protocol: str = "auto",
) -> CollectiveCost:
    """Predicted time, algbw and busbw of one collective call (see the module docstring for conventions).

    ``model="nccl"`` (default): NCCL's own tuner on this topology (:mod:`seedance.models.cost.nccl`); the result
    names the algorithm, protocol and channels NCCL would use. ``model="alpha-beta"``: the alpha-beta model."""
    collective, algorithm = _resolve(collective, algorithm, model)
    if type(size_bytes) is not int or size_bytes < 0:  # noqa: E721 - the fast path; subclasses checked below
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, np.integer)) or size_bytes < 0:
            raise SpecError("size", f"{size_bytes!r} is not a whole number of bytes >= 0", "an int, e.g. 1073741824")
        size_bytes = int(size_bytes)
    fabric = fabric_of(topology)
    if model == "nccl":
        from seedance.models.cost import nccl

        if protocol != "auto":
            protocol = check_protocol(protocol)
        time_s, chosen, proto, channels = nccl.choose(topology, collective, float(size_bytes), algorithm, protocol)
        if tau_s is not None:  # NCCL collectives synchronise: none ends before the last rank arrives
            time_s += float(_tau_vector(fabric, tau_s).max())
        n = fabric.num_devices
        algbw = size_bytes / time_s / 1e9 if time_s > 0 else (0.0 if size_bytes == 0 else float("inf"))
        factor = _BUSBW[collective] * (n - 1) / n if collective in _BUSBW else 1.0
        return _new_cost({
            "collective": collective, "algorithm": chosen, "size_bytes": size_bytes, "num_devices": n,
            "time_s": time_s, "algbw_GBps": algbw, "busbw_GBps": algbw * factor, "protocol": proto,
            "channels": channels, "model": "nccl",
        })
    if tau_s is None:  # the common case, in plain Python: no array overhead for one size
        time_s, chosen = scalar_time(collective, float(size_bytes), fabric, algorithm)
    else:
        times, winner = _times(
            collective, np.array([float(size_bytes)]), fabric, algorithm, _tau_vector(fabric, tau_s)
        )
        time_s = float(times[0])
        chosen = algorithm if winner is None else ALGORITHMS[collective][int(winner[0])]
    n = fabric.num_devices
    algbw = size_bytes / time_s / 1e9 if time_s > 0 else (0.0 if size_bytes == 0 else float("inf"))
    factor = _BUSBW[collective] * (n - 1) / n if collective in _BUSBW else 1.0
    return _new_cost({
        "collective": collective, "algorithm": chosen, "size_bytes": size_bytes, "num_devices": n, "time_s": time_s,
        "algbw_GBps": algbw, "busbw_GBps": algbw * factor, "protocol": None, "channels": None, "model": "alpha-beta",
    })
