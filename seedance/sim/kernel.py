"""The one place that touches SimPy's scheduler: absolute-time callbacks with no generator process per event.

SimPy (4.x) keeps one heap of ``(time, priority, event_id, event)`` with a per-environment counter for ties, so
events at the same time run in the order they were scheduled — the deterministic tie-break this simulator relies
on. A :class:`Call` is an already-triggered event (read by SimPy as one of its own) that carries its callback and
arguments; pushing it on the heap directly (``env._queue`` / ``env._eid``, stable internals of SimPy 4) costs one
small object, one tuple and one heap push, instead of a Timeout plus a process resumption. Everything else
(``env.run(until=...)``, processes written by users) keeps working on the same environment.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any, Callable

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT


class Call:
    """A triggered event whose only callback is ``fn(self)``; ``self.args`` holds its arguments.

    Not a SimPy :class:`~simpy.events.Event` (whose instances carry a ``__dict__``, a callback list and the
    environment): two slots, and just what ``Environment.step`` reads of an event it pops (``callbacks``, ``_ok``),
    so ``env.run`` still processes it; :func:`run_until` calls ``fn`` directly.
    """

    __slots__ = ("fn", "args")
    _ok = True  # triggered, successfully, with no value: class attributes, not stores per event
    _value = None

    def __init__(self, fn: Callable[[Any], None], args: Any) -> None:  # noqa: D107
        self.fn = fn
        self.args = args

    @property
    def callbacks(self) -> list[Callable[[Any], None]] | None:
        """SimPy's view: the one callback, or None once processed (``step`` sets it so)."""
        return None if self.fn is None else [self.fn]

    @callbacks.setter
    def callbacks(self, callbacks: list[Callable[[Any], None]] | None) -> None:
        self.fn = callbacks[0] if callbacks else None


def _spent(event: Call) -> None:
    """The callback of a call already made (rescheduled by a stop, as SimPy reschedules what is left of an event)."""


def call_at(env: simpy.Environment, at_s: float, fn: Callable[[Any], None], args: Any = None) -> None:
    """Run ``fn(event)`` at absolute virtual time ``at_s`` (never before now); ``event.args`` is ``args``."""
    now = env._now
    heappush(env._queue, (at_s if at_s > now else now, NORMAL, next(env._eid), Call(fn, args)))


def run_until(env: simpy.Environment, until: float) -> bool:
    """``env.run(until=until)`` without SimPy's per-event ``step`` call: the same events in the same order.

    SimPy schedules an urgent stop event at ``now + (until - now)`` (taking the next event id) and steps until it
    is processed; here the loop stops before that event would have been, and the clock is left where it would be.
    A callback that raises ``StopSimulation`` ends the run at its event's time, the event's remaining callbacks
    rescheduled as ``step`` does; then it returns True (False: it ran until ``until``).
    """
    now = env._now
    at = float(until)
    if at <= now:
        raise ValueError(f"until ({at}) must be greater than the current simulation time")
    at = now + (at - now)  # the stop event's time, as SimPy computes it
    stop_eid = next(env._eid)
    queue = env._queue
    while queue:
        item = queue[0]
        when = item[0]
        if when > at or (when == at and (item[1] != URGENT or item[2] > stop_eid)):
            break
        heappop(queue)
        env._now = when
        event = item[3]
        if event.__class__ is Call:  # nearly every event: its one callback, without a list
            try:
                event.fn(event)
            except StopSimulation:
                event.fn = _spent
                env.schedule(event, -1)  # type: ignore[arg-type]
                return True
            continue
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            try:
                callback(event)
            except StopSimulation:
                event.callbacks = callbacks[callbacks.index(callback) + 1:]
                env.schedule(event, -1)
                return True
        if not event._ok and not hasattr(event, "_defused"):
            failure = type(event._value)(*event._value.args)
            failure.__cause__ = event._value
            raise failure
    env._now = at
    return False
