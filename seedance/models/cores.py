"""The modelled host's cores, shared by the nodes', the client's and the storage threads' work
(:mod:`seedance.models.host`)."""

from __future__ import annotations

import math

import numpy as np

from seedance.models.host_parts import SpellProcess, TenantProfile


class CorePool:
    """``cores`` cores shared by every process of the modelled host.

    Two classes of work: *foreground* (:meth:`take`: the event-loop threads of the nodes and of the client process,
    which sleep in ``select`` between inputs) and *background* (:meth:`take_background`: the storage threads' CPU
    around their writes and fsyncs, a thread that has been running). Linux's scheduler lets a thread that wakes from
    sleep preempt one that has been running (CFS wake-up preemption: the sleeper's smaller virtual runtime), so
    foreground work never waits for background work: it starts on the core where it ends first counting foreground
    work only, and background work it lands on is pushed out by its length; background work waits for cores free of
    both. The cores' capacity is conserved either way (a background stream on a busy core falls behind).

    With ``tenants`` (and a generator), each core is also held by other tenants' bursts: a burst of ``slice`` starts
    after an exponential gap whose mean makes the held fraction ``busy_cores / cores`` (at most 0.95); work that
    would start in a burst starts at its end, and work running when a burst starts is preempted for its length.

    With ``spell`` (a :class:`SpellProcess`), every piece of work costs the spells' factor at its start times its
    draw: the cores run slower and faster together.
    """

    def __init__(self, cores: int, tenants: TenantProfile | None = None,
                 rng: np.random.Generator | None = None, spell: SpellProcess | None = None) -> None:
        self.spell = spell  # the host's slow spells: every cost is their factor at its start times its draw
        self.work_s = 0.0  # the CPU taken so far, foreground and background (the tenants' bursts not counted)
        self.free = [0.0] * cores  # per core: when its foreground work ends
        self.all_free = [0.0] * cores  # per core: when its foreground and background work ends
        self._tenants = None
        if tenants is not None and tenants.busy_cores * tenants.share > 0 and rng is not None:
            held = min(0.95, tenants.share * tenants.busy_cores / cores)
            mean_gap = tenants.slice.mean_s * (1.0 - held) / held
            self._tenants = (tenants.slice, mean_gap, rng)
            self._bursts: list[list[float]] = [[] for _ in range(cores)]  # flat [start, end, start, end, ...]
            self._drawn = [0.0] * cores  # bursts are drawn up to here

    def _burst_after(self, core: int, t: float) -> tuple[float, float]:
        """The first burst on ``core`` that ends after ``t`` (drawn as needed). Bursts are forgotten only once all
        of the core's work has passed them: a later request may start earlier than this ``t`` (it was asked of a
        core that was not chosen, or is foreground work ahead of background work), and must still meet them."""
        bursts = self._bursts[core]
        slice_, mean_gap, rng = self._tenants  # type: ignore[misc]
        free = min(self.free[core], self.all_free[core])
        while bursts and bursts[1] <= free:
            del bursts[:2]
        i = 0
        while True:
            while i >= len(bursts):
                start = self._drawn[core] + float(rng.exponential(mean_gap))
                end = start + slice_.draw(rng)
                self._drawn[core] = end
                bursts.extend((start, end))
            if bursts[i + 1] > t:
                return bursts[i], bursts[i + 1]
            i += 2

    def _run_on(self, core: int, start: float, cost: float, free: list[float]) -> tuple[float, float]:
        """(begin, end) of ``cost`` on ``core`` after ``start`` and ``free[core]``, around the tenants' bursts."""
        t = max(start, free[core])
        if self._tenants is None:
            return t, t + cost
        begin = None
        while True:
            b_start, b_end = self._burst_after(core, t)
            if b_start <= t:
                t = b_end  # held by a tenant: wait for the burst to end
                continue
            if begin is None:
                begin = t
            if t + cost <= b_start:
                return begin, t + cost
            cost -= b_start - t  # preempted by the burst for its length
            t = b_end

    def earliest(self) -> float:
        """When foreground work could start at the earliest (some core free of foreground work and bursts)."""
        if self._tenants is None:
            return min(self.free)
        best = math.inf
        for core, free in enumerate(self.free):
            b_start, b_end = self._burst_after(core, free)
            best = min(best, b_end if b_start <= free else free)
        return best

    def take(self, start: float, cost: float) -> float:
        """Foreground work: run ``cost`` seconds on the core where it ends first, not before ``start``, ahead of
        any background work there; when it ends."""
        if self.spell is not None:
            cost *= self.spell.factor(start)
        self.work_s += cost
        spans = [self._run_on(core, start, cost, self.free) for core in range(len(self.free))]
        core = min(range(len(spans)), key=lambda c: spans[c][1])
        begin, end = spans[core]
        self.free[core] = end
        if self.all_free[core] > begin:  # background work running or queued there falls behind by this much
            self.all_free[core] += end - begin
        else:
            self.all_free[core] = end
        return end

    def take_background(self, start: float, cost: float) -> float:
        """Background work: ``cost`` seconds on the core where it ends first, after that core's foreground and
        background work and not before ``start``; when it ends."""
        if self.spell is not None:
            cost *= self.spell.factor(start)
        self.work_s += cost
        spans = [self._run_on(core, start, cost, self.all_free) for core in range(len(self.all_free))]
        core = min(range(len(spans)), key=lambda c: spans[c][1])
        self.all_free[core] = spans[core][1]
        return spans[core][1]
