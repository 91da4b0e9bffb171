"""Triggers: faults aimed at a moment the cluster reaches (a new leader, a granted vote), not at a clock time.

Random fault windows rarely land on the few microseconds where a protocol is fragile — between a leader's
election and its first messages, between a vote and its fsync (Jepsen's targeted nemeses, e.g. its leader-aware
partitioners; the Figure 8 schedule of Raft §5.4.2 needs two such moments in a row). A trigger watches node state
and strikes there.

Rules:

* A :class:`Watch` runs after every input a node handles (the runtime's after-input hook, so it sees the state that
  handler left and acts before anything else is due): for every live node it computes ``key(node)``; when the key of
  one incarnation changes from one observation to the next, it calls ``fire(runtime, node_id, before, after)``. The
  first observation of an incarnation only records its key (``before`` is then unknown).
* Keys are read duck-typed from the node object; :func:`leader_term` is the one convention the nemesis relies on: a
  node whose ``role`` equals ``"leader"`` (a string or a str-valued enum, as Raft's ``Role``) leads its
  ``current_term``. Protocols without a ``role`` never trigger leader faults.
* Triggers draw every choice (fire or not, delays, durations) from the generator they are given, itself spawned
  from the run's seed: a triggered schedule reproduces bit for bit like the clock-timed one.
* The helpers :func:`crash_for`, :func:`cut` schedule their fault and its end with the simulator's own clock; a
  fault never ends before it started, and an ``alive`` guard lets a caller (the nemesis, at heal) cancel pending ends.

Use from a test: ``simulate(config, actions=[(0.0, install(Watch(key=..., fire=...)))])``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from seedance.sim.kernel import call_at

Fire = Callable[[Any, int, Hashable, Hashable], None]


def leader_term(node: Any) -> int | None:
    """The term a node leads, or None when it is not a leader (duck-typed: ``role == "leader"``)."""
    if getattr(node, "role", None) == "leader":
        return int(getattr(node, "current_term", 0))
    return None


def vote(node: Any) -> tuple[int, Any] | None:
    """(term, voted-for) of a node that has voted for another node this term, else None (Raft §5.2's votedFor)."""
    voted_for = getattr(node, "voted_for", None)
    if voted_for is None or voted_for == getattr(node, "node_id", None):
        return None
    return int(getattr(node, "current_term", 0)), voted_for


@dataclass(frozen=True, kw_only=True)
class Watch:
    """Call ``fire(runtime, node_id, before, after)`` whenever ``key(node)`` changes within one incarnation."""

    key: Callable[[Any], Hashable]
    fire: Fire


class Watcher:
    """The after-input hook that evaluates watches, O(1) per input.

    A node's state changes only while it handles an input (or in its start / recovery handler), so after an input
    only the node that handled it is evaluated; a node that has not been observed since it (re)started is recorded
    at the next input anywhere, as scanning every live node after each input would record it (what it shows then is
    what its start or recovery left, or, when the input was its own, what that input left).
    """

    def __init__(self, runtime: Any, watches: list[Watch]) -> None:
        self.runtime = runtime
        self.watches = list(watches)
        self._seen: list[dict[tuple[int, int], Hashable]] = [{} for _ in self.watches]
        self._pending: set[int] = set(range(len(runtime.hosts)))  # not observed since they (re)started
        self.fired = 0

    def install(self) -> Watcher:
        self.runtime.after_input.append(self)
        self.runtime.crash_sinks.append(self._crashed)
        return self

    def _crashed(self, node_id: int, _at: float) -> None:
        self._pending.add(node_id)

    def __call__(self, host: Any = None) -> None:
        runtime = self.runtime
        if host is None or self._pending:
            self._record_pending(host)
        if host is None or host.node is None or not host.up:
            return
        node, slot = host.node, (host.node_id, host.incarnation)
        for watch, seen in zip(self.watches, self._seen):
            value = watch.key(node)
            before = seen.get(slot, _UNSEEN)
            if before is _UNSEEN:
                seen[slot] = value
            elif value != before:
                seen[slot] = value
                self.fired += 1
                watch.fire(runtime, host.node_id, before, value)

    def _record_pending(self, host: Any) -> None:
        """Record the first key of every live node not observed since it (re)started (``host`` is observed after)."""
        hosts, still = self.runtime.hosts, set()
        for node_id in sorted(self._pending):
            other = hosts[node_id]
            if other.node is None or not other.up:
                still.add(node_id)  # down: recorded once it is back
            elif other is not host:
                slot = (node_id, other.incarnation)
                for watch, seen in zip(self.watches, self._seen):
                    seen.setdefault(slot, watch.key(other.node))
        self._pending = still


_UNSEEN = object()


def install(*watches: Watch) -> Callable[[Any], Watcher]:
    """An action for :func:`seedance.sim.simulate` (``actions=[(0.0, install(...))]``) that installs the watches."""
    return lambda runtime: Watcher(runtime, list(watches)).install()


def crash_for(runtime: Any, node_id: int, *, at_s: float, down_s: float,
              alive: Callable[[], bool] = lambda: True) -> None:
    """Crash ``node_id`` at ``at_s`` and restart it ``down_s`` later (from its durable state)."""
    env = runtime.env
    call_at(env, at_s, lambda _e: runtime.crash(node_id) if alive() else None)
    call_at(env, at_s + down_s, lambda _e: runtime.restart(node_id) if alive() else None)


def cut(runtime: Any, pairs: list[tuple[int, int]], *, at_s: float, until_s: float,
        alive: Callable[[], bool] = lambda: True, on_start: Callable[[], None] = lambda: None) -> None:
    """Block the directed node pairs ``pairs`` from ``at_s`` to ``until_s`` (counts compose with partitions)."""
    env, network = runtime.env, runtime.network
    state = {"on": False}

    def start(_event: Any) -> None:
        if alive():
            network.block(pairs, +1)
            state["on"] = True
            on_start()

    def end(_event: Any) -> None:
        if state["on"] and alive():
            network.block(pairs, -1)
        state["on"] = False

    call_at(env, at_s, start)
    call_at(env, max(until_s, at_s), end)


def outbound(node_id: int, num_nodes: int) -> list[tuple[int, int]]:
    """Every link from ``node_id`` to a peer (it can no longer send, and still hears)."""
    return [(node_id, j) for j in range(num_nodes) if j != node_id]


def isolation(node_id: int, num_nodes: int) -> list[tuple[int, int]]:
    """Every link from and to ``node_id``."""
    return outbound(node_id, num_nodes) + [(j, node_id) for j in range(num_nodes) if j != node_id]
