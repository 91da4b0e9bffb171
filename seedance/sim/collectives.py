"""Collectives in the simulator: the shared result rules over the modelled fabric's timing.

What is the simulator's own (validation, agreement and every member's result come from
:mod:`seedance.engine.collectives`, the same rules the real backend is held to):

* As in NCCL, every member of ``group`` issues the same :class:`StartCollective` (same ``collective_id``) with its
  own payload. The collective starts when the last member joins; it then takes the cost model's time for ``op`` on
  ``nominal_size_bytes`` over the group's sub-fabric (``seedance.models.cost.collective_time``, algorithm "auto"),
  and at least as long as its ring traffic takes on the shared links: each member sends its ring share to its
  successor (allreduce 2(n−1)/n·S, allgather / reducescatter (n−1)/n·S, broadcast / reduce S, barrier 0 bytes;
  Patarasuk & Yuan 2009). That traffic is one flow-level phase (:mod:`seedance.sim.flows`): n flows, one per
  ring edge, whose demand cap is the cost model's rate and which share every link max-min fairly with the other
  collectives in flight (training's allreduce, background traffic); one scheduler event per collective, whatever
  its size or group. Protocol messages crossing those links get their fair share of the bandwidth meanwhile.
* ``on_collective_done`` reaches every member that joined (and is still the same incarnation) at completion. A
  member's timeout (``timeout_s``, default :data:`~seedance.engine.collectives.DEFAULT_TIMEOUT_S`) counts from its
  own join: if the collective has not completed by then, it fails for all with error ``"timeout"``. A member that
  crashes before completion fails it for all with ``"peer-failed"``; a member joining an already-failed collective
  gets the same error at once. Members that disagree (op, group, root, dtype, shape) fail it for all with the
  engine's ``"misuse: ..."`` text.
* Partitions: a collective whose members are cut apart (any member unable to reach another when it would
  complete) never completes — as an NCCL collective across a broken link hangs — and ends with its members'
  timeout (``"timeout"``).
* Background traffic (:meth:`Collectives.background`, driven by :mod:`seedance.sim.background`): collectives among
  devices that are not protocol nodes' inputs, phases on the same links; their durations are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.engine import collectives as rules
from seedance.models.protocols.contract import CollectiveDone, StartCollective
from seedance.sim.flows import FlowModel, Phase
from seedance.sim.kernel import call_at

OPS = rules.OPS
_RING_SHARE = {"allreduce": lambda n: 2 * (n - 1) / n, "reducescatter": lambda n: (n - 1) / n,
               "allgather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0,
               "barrier": lambda n: 0.0, "alltoall": lambda n: (n - 1) / n}
_ALPHA_STEPS = {"allreduce": lambda n: 2 * (n - 1), "reducescatter": lambda n: n - 1,
                "allgather": lambda n: n - 1, "broadcast": lambda n: n - 1, "reduce": lambda n: n - 1,
                "barrier": lambda n: 2 * (n - 1), "alltoall": lambda n: n - 1}


@dataclass
class _Collective:
    collective_id: Any
    group: tuple[int, ...]
    nominal_size_bytes: int
    joined: dict[int, tuple[int, Any, rules.Meta]] = field(default_factory=dict)  # member -> (incarnation, payload, meta)
    state: str = "gathering"  # gathering | running | stalled (cut by a partition) | done | failed
    error: str | None = None
    op: str = ""
    phase: Phase | None = None  # its traffic while running
    deadline: float = float("inf")  # the earliest member's timeout
    key: tuple[Any, ...] | None = None  # the first member's declaration (op, root, dtype, shape, its group object)
    agreed: bool = True  # every member so far declared ``key``


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
        self._plans: dict[tuple[str, int, tuple[int, ...]], tuple[Any, ...]] = {}
        self.flows = FlowModel(self.env, self.network)
        self.background_times: dict[str, list[float]] = {}

    def join(self, host: Any, effect: StartCollective, meta: rules.Meta, payload: Any, at_s: float) -> None:
        group = meta.group
        coll = self._active.get(effect.collective_id)
        created = coll is None
        if coll is None:
            coll = _Collective(effect.collective_id, group, effect.nominal_size_bytes, op=meta.op)
            self._active[effect.collective_id] = coll
        runtime = self.runtime
        if runtime._tracing:
            runtime._record((at_s, "collective-start", host.node_id, repr(effect.collective_id), effect.op,
                             effect.nominal_size_bytes))
        if coll.state == "failed":
            self._deliver(host.node_id, host.incarnation, coll, at_s)
            return
        coll.joined[host.node_id] = (host.incarnation, payload, meta)
        if coll.state != "gathering":  # a second start of a running collective: a misuse of its id
            self._fail(coll, f"misuse: node {host.node_id} started collective {effect.collective_id!r} twice", at_s)
            return
        # checked once per collective, not per member (O(group) each): a member that crashes later fails it
        # through member_crashed
        same = group is coll.group or group == coll.group  # the same object, usually (rules.check_start shares it)
        if (created or not same) and any(m < 0 or m >= len(runtime.hosts) for m in group):
            self._fail(coll, f"misuse: group {group} names nodes outside 0..{len(runtime.hosts) - 1}", at_s)
            return
        if created and any(not runtime.hosts[m].up for m in group if m not in coll.joined):
            self._fail(coll, "peer-failed", at_s)
            return
        key = (meta.op, meta.root, meta.dtype, meta.shape, id(group))  # another object for an equal group: compared
        if coll.key is None:
            coll.key = key
        elif key != coll.key and not (meta.op == "barrier" and key[:2] + key[4:] == coll.key[:2] + coll.key[4:]):
            coll.agreed = False
        deadline = at_s + rules.resolve_timeout(effect.timeout_s)
        if deadline < coll.deadline:  # every member's timeout counts from its own join: the earliest ends it
            coll.deadline = deadline
            call_at(self.env, deadline, self._timeout, coll)
        if not same:
            metas = {m: j[2] for m, j in coll.joined.items()}
            self._fail(coll, rules.check_agreement(metas) or "misuse: members disagree on group", at_s)
        elif len(coll.joined) == len(group):
            # one hash of the group per member instead of comparing every member's group with the first's
            problem = None if coll.agreed else rules.check_agreement({m: j[2] for m, j in coll.joined.items()})
            if problem is not None:
                self._fail(coll, problem, at_s)
            else:
                self._start(coll, meta, at_s)

    def _duration_s(self, op: str, nominal_size_bytes: int, devices: tuple[int, ...]) -> float:
        n = len(devices)
        if n <= 1:
            return 0.0
        key = (op, nominal_size_bytes, devices)
        cached = self._durations.get(key)
        if cached is not None:
            return cached
        topology = self.network.topology
        index = np.asarray(devices)
        bandwidth = topology.bandwidth_GBps[np.ix_(index, index)]
        latency = topology.latency_us[np.ix_(index, index)]
        if self._collective_time is not None:
            # the cost model over the group's sub-fabric; reduce costs what broadcast does, barrier a 0-byte allreduce
            model_op = {"reduce": "broadcast", "barrier": "allreduce"}.get(op, op)
            size = 0 if op == "barrier" else int(nominal_size_bytes)
            hosts = np.unique(np.asarray(topology.host_of)[index], return_inverse=True)[1]
            duration = float(self._collective_time(model_op, size, (bandwidth, latency, hosts)).time_s)
        else:
            ring = [(k, (k + 1) % n) for k in range(n)]
            duration = ring_time_s(op, n, nominal_size_bytes, float(min(bandwidth[a, b] for a, b in ring)),
                                   float(max(latency[a, b] for a, b in ring)) * 1e-6)
        self._durations[key] = duration
        return duration

    def _plan(self, op: str, size: int, devices: tuple[int, ...]) -> tuple[Any, ...]:
        """The phase of ``op`` on ``size`` bytes over ``devices``: (links, counts, bytes per flow, cap, α, model time)."""
        key = (op, size, devices)
        plan = self._plans.get(key)
        if plan is None:
            n = len(devices)
            model_s = self._duration_s(op, size, devices)
            share = _RING_SHARE[op](n) * size if n > 1 else 0.0
            links, counts = self.flows.ring_links(devices)
            latency = self.network.topology.latency_us
            edges = [(devices[k], devices[(k + 1) % n]) for k in range(n)] if n > 1 else []
            alpha = _ALPHA_STEPS[op](n) * max((float(latency[a, b]) for a, b in edges), default=0.0) * 1e-6
            alpha = min(alpha, model_s)
            cap = share / (model_s - alpha) if model_s > alpha else float("inf")
            plan = self._plans[key] = (links, counts, share, cap, alpha, model_s)
        return plan

    def _run_phase(self, op: str, size: int, devices: tuple[int, ...], on_done: Any) -> Phase | None:
        """Start ``op``'s traffic now; ``on_done(end_s)`` at its end (None: no traffic, ``on_done`` called later)."""
        links, counts, share, cap, alpha, model_s = self._plan(op, size, devices)
        if share <= 0 or links.size == 0:
            call_at(self.env, self.env.now + model_s, lambda _e: on_done(self.env.now))
            return None
        return self.flows.start(links, counts, share, cap_Bps=cap, latency_s=alpha, on_done=on_done)

    def _start(self, coll: _Collective, meta: rules.Meta, at_s: float) -> None:
        coll.state = "running"
        if at_s > self.env.now:  # the last member joined at the end of its turn: the traffic starts then
            call_at(self.env, at_s, lambda _event: self._begin(coll, meta))
        else:
            self._begin(coll, meta)

    def _begin(self, coll: _Collective, meta: rules.Meta) -> None:
        if coll.state != "running":
            return
        devices = tuple(self.network.devices[m] for m in coll.group)
        coll.phase = self._run_phase(coll.op, coll.nominal_size_bytes, devices,
                                     lambda _end: self._complete(coll, meta))

    def _complete(self, coll: _Collective, meta: rules.Meta) -> None:
        coll.phase = None
        if coll.state != "running":
            return
        if self.network.partitioned and self._cut(coll.group):
            coll.state = "stalled"  # hangs until a member's timeout ends it
            if self.runtime._tracing:
                self.runtime._record((self.env.now, "annotate", -1, "collective-stalled",
                                      {"collective": repr(coll.collective_id)}))
            return
        coll.state = "done"
        self.completed += 1
        del self._active[coll.collective_id]
        results = rules.results(meta, {m: p for m, (_, p, _) in coll.joined.items()})
        now = self.env.now
        runtime = self.runtime
        tracing = runtime._tracing
        name = repr(coll.collective_id) if tracing else None  # once per collective, not per member
        for member in coll.group:
            incarnation = coll.joined[member][0]
            if tracing:
                runtime._record((now, "collective-done", member, name, True, None))
            runtime.collective_done(member, incarnation,
                                    CollectiveDone(collective_id=coll.collective_id, ok=True, result=results[member]))
        coll.joined = {}  # its timeout's timer holds it until the deadline: the payloads go now (memory stays flat)

    def _cut(self, group: tuple[int, ...]) -> bool:
        blocked = self.network.blocked
        return any(blocked[a][b] for a in group for b in group if a != b)

    def _timeout(self, event: Any) -> None:
        coll = event.args
        if coll.state in ("gathering", "running", "stalled"):
            self._fail(coll, "timeout", self.env.now)

    def member_crashed(self, node_id: int) -> None:
        for coll in list(self._active.values()):
            if node_id in coll.group and coll.state in ("gathering", "running", "stalled"):
                self._fail(coll, "peer-failed", self.env.now)

    def _fail(self, coll: _Collective, error: str, at_s: float) -> None:
        if coll.state == "failed":
            return
        coll.state = "failed"
        coll.error = error
        if coll.phase is not None:  # its traffic stops: the bandwidth goes to the others
            self.flows.cancel(coll.phase)
            coll.phase = None
        self.failed += 1
        for member, (incarnation, _, _) in list(coll.joined.items()):
            self._deliver(member, incarnation, coll, at_s)

    def _deliver(self, member: int, incarnation: int, coll: _Collective, at_s: float) -> None:
        runtime = self.runtime
        if runtime._tracing:
            runtime._record((at_s, "collective-done", member, repr(coll.collective_id), False, coll.error))
        done = CollectiveDone(collective_id=coll.collective_id, ok=False, error=coll.error)
        call_at(self.env, at_s, lambda _event: runtime.collective_done(member, incarnation, done))

    # --------------------------------------------------------------------------------------- background traffic
    def background(self, op: str, size_bytes: int, devices: tuple[int, ...], at_s: float) -> None:
        """Start one background collective among ``devices`` (topology indices) now (``at_s``); its duration is
        recorded in :attr:`background_times` when it ends. It shares the links with everything else in flight."""
        times = self.background_times.setdefault(f"{op}:{size_bytes}", [])
        self._run_phase(op, size_bytes, devices, lambda end: times.append(end - at_s))
