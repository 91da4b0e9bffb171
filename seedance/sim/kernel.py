"""The one place that touches SimPy's scheduler: absolute-time callbacks with no generator process per event.

SimPy (4.x) keeps one heap of ``(time, priority, event_id, event)`` with a per-environment counter for ties, so
events at the same time run in the order they were scheduled — the deterministic tie-break this simulator relies
on. A :class:`Call` is a SimPy event that is already triggered and carries its callback and arguments; pushing it
on the heap directly (``env._queue`` / ``env._eid``, stable internals of SimPy 4) costs one tuple and one heap push,
instead of a Timeout plus a process resumption. Everything else (``env.run(until=...)``, processes written by
users) keeps working on the same environment.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any, Callable

import simpy
from simpy.events import NORMAL, Event


class Call(Event):
    """A triggered event whose only callback is ``fn(self)``; ``self.args`` holds its arguments."""

    def __init__(self, env: simpy.Environment, fn: Callable[[Any], None], args: Any) -> None:  # noqa: D107
        self.env = env
        self.callbacks = [fn]
        self._ok = True
        self._value = None
        self.args = args


def call_at(env: simpy.Environment, at_s: float, fn: Callable[[Any], None], args: Any = None) -> None:
    """Run ``fn(event)`` at absolute virtual time ``at_s`` (never before now); ``event.args`` is ``args``."""
    now = env._now
    heappush(env._queue, (at_s if at_s > now else now, NORMAL, next(env._eid), Call(env, fn, args)))
