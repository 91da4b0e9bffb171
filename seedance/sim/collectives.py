"""Collectives in the simulator: NCCL semantics over the modelled fabric, with real payload arithmetic.

Rules:

* As in NCCL, every member of ``group`` issues the same :class:`StartCollective` (same ``collective_id``) with its
  own payload. The collective starts when the last member joins; it then takes the cost model's time for ``op`` on
  ``nominal_size_bytes`` over the group's sub-fabric (``seedance.models.cost.collective_time``, algorithm "auto";
  the ring α–β bound below if the cost model is absent), and at least as long as its ring traffic takes on the shared links: each member sends its ring
  share to its successor (allreduce 2(n−1)/n·S, allgather / reducescatter (n−1)/n·S, broadcast / reduce S,
  barrier 0 bytes; Patarasuk & Yuan 2009; NCCL docs "Collective Operations"). Those bytes are booked on the links,
  so consensus messages behind a bulk collective wait.
* The payload is reduced for real with numpy, members in group order: allreduce = sum; reducescatter = sum split
  into n near-equal chunks (member k gets chunk k); allgather = concatenation; broadcast = the root's payload
  (root defaults to ``group[0]``); reduce = sum at the root, None elsewhere; barrier = None.
* ``on_collective_done`` reaches every member that joined (and is still the same incarnation) at completion. A
  member's ``timeout_s`` counts from its own join: if the collective has not completed by then, it fails for all
  with error ``"timeout"``. A member that crashes before completion fails it for all with ``"peer-failed"``; a
  member joining an already-failed collective gets the same error at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.protocols.contract import CollectiveDone, StartCollective
from seedance.sim.kernel import call_at

OPS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "barrier")
_RING_SHARE = {"allreduce": lambda n: 2 * (n - 1) / n, "reducescatter": lambda n: (n - 1) / n,
               "allgather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0,
               "barrier": lambda n: 0.0}
_ALPHA_STEPS = {"allreduce": lambda n: 2 * (n - 1), "reducescatter": lambda n: n - 1,
                "allgather": lambda n: n - 1, "broadcast": lambda n: n - 1, "reduce": lambda n: n - 1,
                "barrier": lambda n: 2 * (n - 1)}


@dataclass
class _Collective:
    collective_id: Any
    op: str
    group: tuple[int, ...]
    nominal_size_bytes: int
    root: int | None
    joined: dict[int, tuple[int, Any]] = field(default_factory=dict)  # member -> (incarnation, payload)
    state: str = "gathering"  # gathering | running | done | failed
    error: str | None = None


def reduce_payloads(op: str, group: tuple[int, ...], payloads: dict[int, Any], root: int | None) -> dict[int, Any]:
    """Each member's result of ``op`` over the members' payloads (real numpy arithmetic, group order)."""
    ordered = [payloads[m] for m in group]
    if op == "barrier":
        return {m: None for m in group}
    if op == "broadcast":
        value = payloads[root if root is not None else group[0]]
        return {m: np.array(value, copy=True) for m in group}
    if op == "allgather":
        gathered = np.concatenate([np.atleast_1d(np.asarray(p)) for p in ordered])
        return {m: gathered.copy() for m in group}
    total = ordered[0] if len(ordered) == 1 else np.sum(np.stack([np.asarray(p) for p in ordered]), axis=0)
    total = np.asarray(total)
    if op == "allreduce":
        return {m: total.copy() for m in group}
    if op == "reduce":
        at = root if root is not None else group[0]
        return {m: (total.copy() if m == at else None) for m in group}
    chunks = np.array_split(total.reshape(-1), len(group))  # reducescatter
    return {m: chunks[k].copy() for k, m in enumerate(group)}


def ring_time_s(op: str, n: int, size_bytes: int, bandwidth_GBps: float, latency_s: float) -> float:
    """The α–β ring bound: steps·α + share·S/β (Thakur, Rabenseifner & Gropp 2005, §4)."""
    if n <= 1:
        return 0.0
    return _ALPHA_STEPS[op](n) * latency_s + _RING_SHARE[op](n) * size_bytes / (bandwidth_GBps * 1e9)


class Collectives:
    """Tracks the collectives in flight for a runtime."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.env = runtime.env
        self.network = runtime.network
        self._active: dict[Any, _Collective] = {}
        self.completed = 0
        self.failed = 0
        try:  # the cost model, when installed, gives the duration (topology-aware algorithms)
            from seedance.models.cost import collective_time  # type: ignore[attr-defined]
        except ImportError:
            collective_time = None
        self._collective_time = collective_time
        self._durations: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def join(self, host: Any, effect: StartCollective, at_s: float) -> None:
        if effect.op not in OPS:
            raise SpecError("StartCollective.op", f"unknown collective {effect.op!r}", f"valid: {', '.join(OPS)}")
        group = tuple(effect.group)
        if host.node_id not in group:
            raise ValueError(f"node {host.node_id} starts collective {effect.collective_id!r} of group {group} "
                             "without being a member")
        coll = self._active.get(effect.collective_id)
        if coll is None:
            coll = _Collective(effect.collective_id, effect.op, group, effect.nominal_size_bytes, effect.root)
            self._active[effect.collective_id] = coll
        runtime = self.runtime
        if runtime._tracing:
            runtime._record((at_s, "collective-start", host.node_id, repr(effect.collective_id), effect.op,
                             effect.nominal_size_bytes))
        if coll.state == "failed":
            self._deliver(host.node_id, host.incarnation, coll, at_s)
            return
        coll.joined[host.node_id] = (host.incarnation, effect.payload)
        if any(not runtime.hosts[m].up for m in group if m not in coll.joined):
            self._fail(coll, "peer-failed", at_s)
            return
        if effect.timeout_s is not None:
            call_at(self.env, at_s + effect.timeout_s, self._timeout, coll)
        if len(coll.joined) == len(group):
            self._start(coll, at_s)

    def _duration_s(self, coll: _Collective) -> float:
        n = len(coll.group)
        if n <= 1:
            return 0.0
        key = (coll.op, coll.nominal_size_bytes, coll.group)
        cached = self._durations.get(key)
        if cached is not None:
            return cached
        topology = self.network.topology
        index = np.asarray([self.network.devices[m] for m in coll.group])
        bandwidth = topology.bandwidth_GBps[np.ix_(index, index)]
        latency = topology.latency_us[np.ix_(index, index)]
        if self._collective_time is not None:
            # the cost model over the group's sub-fabric; reduce costs what broadcast does, barrier a 0-byte allreduce
            op = {"reduce": "broadcast", "barrier": "allreduce"}.get(coll.op, coll.op)
            size = 0 if coll.op == "barrier" else int(coll.nominal_size_bytes)
            hosts = np.unique(np.asarray(topology.host_of)[index], return_inverse=True)[1]
            duration = float(self._collective_time(op, size, (bandwidth, latency, hosts)).time_s)
        else:
            ring = [(k, (k + 1) % n) for k in range(n)]
            duration = ring_time_s(coll.op, n, coll.nominal_size_bytes, float(min(bandwidth[a, b] for a, b in ring)),
                                   float(max(latency[a, b] for a, b in ring)) * 1e-6)
        self._durations[key] = duration
        return duration

    def _start(self, coll: _Collective, at_s: float) -> None:
        coll.state = "running"
        n = len(coll.group)
        done = at_s + self._duration_s(coll)
        share = int(_RING_SHARE[coll.op](n) * coll.nominal_size_bytes)
        if n > 1 and share > 0:
            for k, member in enumerate(coll.group):
                successor = coll.group[(k + 1) % n]
                done = max(done, self.network.transit(member, successor, share, at_s))
        call_at(self.env, done, self._complete, coll)

    def _complete(self, event: Any) -> None:
        coll = event.args
        if coll.state != "running":
            return
        coll.state = "done"
        self.completed += 1
        del self._active[coll.collective_id]
        results = reduce_payloads(coll.op, coll.group, {m: p for m, (_, p) in coll.joined.items()}, coll.root)
        now = self.env.now
        runtime = self.runtime
        for member in coll.group:
            incarnation, _ = coll.joined[member]
            if runtime._tracing:
                runtime._record((now, "collective-done", member, repr(coll.collective_id), True, None))
            runtime.collective_done(member, incarnation,
                                    CollectiveDone(collective_id=coll.collective_id, ok=True, result=results[member]))

    def _timeout(self, event: Any) -> None:
        coll = event.args
        if coll.state in ("gathering", "running"):
            self._fail(coll, "timeout", self.env.now)

    def member_crashed(self, node_id: int) -> None:
        for coll in list(self._active.values()):
            if node_id in coll.group and coll.state in ("gathering", "running"):
                self._fail(coll, "peer-failed", self.env.now)

    def _fail(self, coll: _Collective, error: str, at_s: float) -> None:
        coll.state = "failed"
        coll.error = error
        self.failed += 1
        for member, (incarnation, _) in list(coll.joined.items()):
            self._deliver(member, incarnation, coll, at_s)

    def _deliver(self, member: int, incarnation: int, coll: _Collective, at_s: float) -> None:
        runtime = self.runtime
        if runtime._tracing:
            runtime._record((at_s, "collective-done", member, repr(coll.collective_id), False, coll.error))
        done = CollectiveDone(collective_id=coll.collective_id, ok=False, error=coll.error)
        call_at(self.env, at_s, lambda _event: runtime.collective_done(member, incarnation, done))
