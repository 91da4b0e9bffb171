"""Flow-level bulk traffic: collectives as phases of concurrent flows that share the fabric's links max-min fairly.

Rules:

* A *phase* is one bulk transfer step of a collective: a set of flows (one per ring edge ``device k -> k+1``), each
  moving the same ``bytes_per_flow`` over its route's directed links, all at the same rate (a ring moves in
  lock-step: its slowest edge paces every member). A phase costs one scheduler event at its end, whatever its size
  or number of members; its flows are never cut into chunks.
* Rates are max-min fair per flow (Bertsekas & Gallager, *Data Networks*, 2nd ed. 1992, §6.5.2, progressive
  filling): every flow's rate rises together until a link is full (the capacity left on it divided among the flows
  crossing it) or the flow reaches its demand cap; those flows are frozen and the rest go on. A phase with ``c`` of
  its flows on one link takes ``c`` shares there. The demand cap of a phase comes from the cost model: the rate
  that makes it last exactly the model's time when it has the fabric to itself, so an idle fabric reproduces the
  cost model and a shared one slows every phase on the shared links.
* Rates are recomputed only when a phase starts, ends or is cancelled; between those instants every phase moves
  at a constant rate. A phase that ends frees its share at once: the others speed up from that instant.
* A phase's end callback runs ``latency_s`` after its last byte (the cost model's α term: per-step latencies).
* Protocol messages are packets, not flows: a message crossing a link that carries ``k`` flows gets the fair share
  ``1 / (k + 1)`` of its bandwidth and waits behind one slice of each flow already queued on the link
  (:data:`SLICE_BYTES`: NCCL moves a channel's 4 MiB buffer, ``NCCL_BUFFSIZE``'s default, in 8 steps of 512 KiB);
  the network's per-link bandwidth and latency are adjusted while flows run, so its send path is unchanged.
  Messages do not slow flows (they are a negligible share of the bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.sim.kernel import call_at

SLICE_BYTES = 512 * 1024  # what a message waits behind, per flow on its link


@dataclass(eq=False)
class Phase:
    """One phase in flight: its links (unique indices) and how many of its flows cross each."""

    links: np.ndarray
    counts: np.ndarray
    remaining: float  # bytes still to move per flow
    cap_Bps: float  # per-flow demand cap (the cost model's rate)
    latency_s: float
    on_done: Callable[[float], None]
    started_s: float
    rate_Bps: float = 0.0
    finish_s: float = float("inf")
    done: bool = False


def max_min_rates(capacity: np.ndarray, phases: Sequence[Phase]) -> np.ndarray:
    """Per-flow max-min fair rates of ``phases`` over links of ``capacity`` (bytes/s); one rate per phase."""
    count = len(phases)
    rates = np.zeros(count)
    if count == 0:
        return rates
    residual = capacity.astype(float).copy()
    caps = np.array([p.cap_Bps for p in phases], dtype=float)
    unfrozen = np.ones(count, dtype=bool)
    while unfrozen.any():
        weight = np.zeros_like(residual)
        for i in np.flatnonzero(unfrozen):  # a phase's links are unique: plain fancy-index adds are exact
            weight[phases[i].links] += phases[i].counts
        used = weight > 0
        level = np.full_like(residual, np.inf)
        level[used] = np.maximum(residual[used], 0.0) / weight[used]
        link_level = float(level.min()) if used.any() else float("inf")
        cap_level = float(caps[unfrozen].min())
        rate = min(link_level, cap_level)
        if not np.isfinite(rate):  # no finite constraint: an unbounded link and no cap (cannot happen with a model)
            rate = 1e30
        full = level <= rate * (1 + 1e-12)
        freeze = []
        for i in np.flatnonzero(unfrozen):
            if caps[i] <= rate * (1 + 1e-12) or bool(full[phases[i].links].any()):
                freeze.append(i)
        if not freeze:  # rounding: freeze everything at this level
            freeze = list(np.flatnonzero(unfrozen))
        for i in freeze:
            rates[i] = min(rate, caps[i])
            unfrozen[i] = False
            residual[phases[i].links] -= phases[i].counts * rates[i]
    return rates


class FlowModel:
    """The bulk phases in flight on one simulated fabric (one per :class:`~seedance.sim.network.Network`)."""

    def __init__(self, env: Any, network: Any) -> None:
        self.env = env
        self.network = network
        self._base_inv_array = np.asarray(network._inv_bandwidth, dtype=float)
        self._base_latency_array = np.asarray(network._latency_s, dtype=float)
        inv = self._base_inv_array
        with np.errstate(divide="ignore"):
            self.capacity = np.where(inv > 0, 1.0 / np.where(inv > 0, inv, 1.0), np.inf)
        self.load = np.zeros(len(inv), dtype=np.int64)  # flows per link
        self._applied = self.load.copy()  # the load the network's message bandwidths reflect
        self.active: list[Phase] = []
        self._last_s = 0.0
        self._generation = 0
        self._routes: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.phases_started = 0
        self.recomputes = 0

    # ---------------------------------------------------------------------------------------------- routes
    def ring_links(self, devices: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The unique links the ring ``devices[k] -> devices[k+1]`` crosses and how many ring edges cross each."""
        cached = self._routes.get(devices)
        if cached is not None:
            return cached
        n = len(devices)
        index = self.network._link_index
        routes = self.network.topology.routes
        hops: list[int] = []
        for k in range(n if n > 2 else n - 1):
            a, b = devices[k], devices[(k + 1) % n]
            if a != b:
                hops.extend(index[link] for link in routes[(a, b)])
        links, counts = np.unique(np.asarray(hops, dtype=np.int64), return_counts=True)
        self._routes[devices] = (links, counts)
        return links, counts

    def path_links(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """One flow from device ``a`` to ``b``."""
        return self.ring_links((a, b))

    # ---------------------------------------------------------------------------------------------- phases
    def start(self, links: np.ndarray, counts: np.ndarray, bytes_per_flow: float, *, cap_Bps: float = float("inf"),
              latency_s: float = 0.0, on_done: Callable[[float], None]) -> Phase:
        """Start a phase now; ``on_done(end_s)`` runs at its end. A phase with nothing to move ends after
        ``latency_s``."""
        now = self.env.now
        phase = Phase(links=links, counts=counts, remaining=float(bytes_per_flow), cap_Bps=float(cap_Bps),
                      latency_s=float(latency_s), on_done=on_done, started_s=now)
        self.phases_started += 1
        if phase.remaining <= 0 or links.size == 0:
            phase.done = True
            call_at(self.env, now + phase.latency_s, lambda _e: on_done(self.env.now))
            return phase
        self._advance(now)
        self.active.append(phase)
        self.load[links] += counts
        self._reschedule(now)
        return phase

    def cancel(self, phase: Phase) -> None:
        """Stop a phase (its collective failed): its bandwidth goes to the others now; ``on_done`` never runs."""
        if phase.done:
            return
        now = self.env.now
        self._advance(now)
        self._remove(phase)
        self._reschedule(now)

    def _remove(self, phase: Phase) -> None:
        phase.done = True
        self.active.remove(phase)
        self.load[phase.links] -= phase.counts

    def _advance(self, now: float) -> None:
        dt = now - self._last_s
        if dt > 0:
            for phase in self.active:
                phase.remaining = max(0.0, phase.remaining - phase.rate_Bps * dt)
        self._last_s = now

    def _reschedule(self, now: float) -> None:
        self.recomputes += 1
        rates = max_min_rates(self.capacity, self.active)
        soonest = float("inf")
        for phase, rate in zip(self.active, rates):
            phase.rate_Bps = float(rate)
            phase.finish_s = now + phase.remaining / rate if rate > 0 else float("inf")
            soonest = min(soonest, phase.finish_s)
        self._share_with_messages()
        self._generation += 1
        if soonest < float("inf"):
            call_at(self.env, soonest, self._tick, (self._generation, soonest))

    def _share_with_messages(self) -> None:
        """A message's fair share and slice wait on every link whose flow count changed (see the module rules)."""
        inv = self.network._inv_bandwidth
        latency = self.network._latency_s
        changed = np.flatnonzero(self.load != self._applied)
        if changed.size:
            flows = self.load[changed]
            base_inv = self._base_inv_array[changed]
            new_inv = (base_inv * (1 + flows)).tolist()
            new_latency = (self._base_latency_array[changed] + flows * SLICE_BYTES * base_inv).tolist()
            for link, a, b in zip(changed.tolist(), new_inv, new_latency):
                inv[link] = a
                latency[link] = b
            self._applied[changed] = self.load[changed]

    def _tick(self, event: Any) -> None:
        generation, at = event.args
        if generation != self._generation:
            return  # rates changed since: a newer tick is scheduled
        self._advance(at)
        finished = [p for p in self.active if p.finish_s <= at]
        for phase in finished:
            phase.remaining = 0.0
            self._remove(phase)
        self._reschedule(at)
        for phase in finished:
            end = at + phase.latency_s
            call_at(self.env, end, lambda _e, p=phase, t=end: p.on_done(t))
