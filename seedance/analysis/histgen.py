"""Synthetic concurrent histories for tests and benchmarks: a correct atomic store, and planted violations.

:func:`atomic_history` simulates clients of a key-value store of cas registers that is linearizable by
construction: every operation takes effect at one instant (its linearization point) drawn between its invoke and
its completion, and the store applies operations in the order of those instants (Herlihy & Wing 1990 §3). So the
history it records is linearizable, whatever the delays. Indeterminate (``info``) completions model client
timeouts: the operation took effect or not (each with a configurable probability). A cas whose expected value is
not current returns ``fail`` and has no effect. Randomness comes only from the ``numpy.random.Generator`` passed in.

:func:`plant_stale_read` turns such a history into one that is certainly not linearizable.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.history.events import Event, EventType, Operation

__all__ = ["GeneratorConfig", "atomic_history", "plant_stale_read"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GeneratorConfig:
    """Shape of a synthetic workload. Times are seconds; delays are exponential with the given means.

    ``value_range`` None writes unique values (1, 2, 3, ...); an integer draws values from ``range(value_range)``
    (few distinct values, as Jepsen's register tests do, is harder for a checker).
    """

    ops: int = 1000
    clients: int = 16
    keys: int = 1
    read_fraction: float = 0.5
    cas_fraction: float = 0.0
    info_fraction: float = 0.0
    info_took_effect: float = 0.5
    fail_fraction: float = 0.0
    value_range: int | None = None
    latency_s_mean: float = 0.002
    think_s_mean: float = 0.0005
    reuse_process_after_info: bool = False

    def __post_init__(self) -> None:
        fractions = (self.read_fraction, self.cas_fraction, self.info_fraction, self.info_took_effect,
                     self.fail_fraction)
        if self.ops < 0 or self.clients < 1 or self.keys < 1 or not all(0 <= p <= 1 for p in fractions):
            raise ValueError(f"invalid generator config {self}")
        if self.read_fraction + self.cas_fraction > 1:
            raise ValueError("read_fraction + cas_fraction must be <= 1")


def _key_name(index: int, keys: int) -> str | None:
    return None if keys == 1 else f"k{index}"


def atomic_history(config: GeneratorConfig, rng: np.random.Generator) -> list[Event]:
    """A linearizable history of ``config.ops`` operations by ``config.clients`` concurrent clients."""
    # 1. When each operation is invoked, takes effect and completes (clients are sequential).
    planned = []  # (linearization time, invoke time, completion time, client, op number)
    client_free = [float(t) for t in rng.exponential(config.think_s_mean, config.clients)]
    ready = [(t, c) for c, t in enumerate(client_free)]
    heapq.heapify(ready)
    for number in range(config.ops):
        invoked, client = heapq.heappop(ready)
        effect = invoked + float(rng.exponential(config.latency_s_mean / 2))
        completed = effect + float(rng.exponential(config.latency_s_mean / 2)) + 1e-9
        planned.append((effect, invoked, completed, client, number))
        heapq.heappush(ready, (completed + float(rng.exponential(config.think_s_mean)) + 1e-9, client))

    # 2. Apply them at their linearization points, in order, to a correct store.
    state: dict[str | None, Any] = {}
    next_value = 0
    records = []
    for effect, invoked, completed, client, number in sorted(planned):
        key = _key_name(int(rng.integers(config.keys)), config.keys)
        draw = rng.random()
        if draw < config.read_fraction:
            f = Operation.READ
        elif draw < config.read_fraction + config.cas_fraction:
            f = Operation.CAS
        else:
            f = Operation.WRITE
        if config.value_range is None:
            next_value += 1
            fresh = next_value
        else:
            fresh = int(rng.integers(config.value_range))
        current = state.get(key)
        if f is Operation.READ:
            value = None
        elif f is Operation.WRITE:
            value = fresh
        else:
            expected = current if rng.random() < 0.5 else int(rng.integers(max(next_value, config.value_range or 1)))
            value = (expected, fresh)
        outcome = EventType.OK
        if rng.random() < config.info_fraction:
            outcome = EventType.INFO
            took_effect = rng.random() < config.info_took_effect
        elif rng.random() < config.fail_fraction:
            outcome, took_effect = EventType.FAIL, False
        else:
            took_effect = True
        if f is Operation.CAS and value[0] != current:
            took_effect = False
            if outcome is EventType.OK:
                outcome = EventType.FAIL
        if took_effect and f is not Operation.READ:
            state[key] = value if f is Operation.WRITE else value[1]
        result = current if f is Operation.READ and outcome is EventType.OK else None
        records.append((invoked, completed, client, number, f, key, value, outcome, result))

    # 3. Emit events in time order; a client that saw info continues as a new process (as Jepsen's do).
    timeline = []
    for invoked, completed, client, number, f, key, value, outcome, result in records:
        timeline.append((invoked, 0, number, client, EventType.INVOKE, f, key, value))
        timeline.append((completed, 1, number, client, outcome, f, key, result if f is Operation.READ else value))
    timeline.sort(key=lambda item: (item[0], item[1], item[2]))
    process_of = list(range(config.clients))
    fresh_process = config.clients
    events = []
    for when, _, _, client, kind, f, key, value in timeline:
        events.append(Event(process=process_of[client], type=kind, f=f, key=key, value=value, time=when))
        if kind is EventType.INFO and not config.reuse_process_after_info:
            process_of[client] = fresh_process
            fresh_process += 1
    return events


def plant_stale_read(events: list[Event], rng: np.random.Generator) -> tuple[list[Event], dict[str, Any]] | None:
    """Make one ok read return a stale value, so that the history is certainly not linearizable.

    The read gets the value of an ok write ``w1`` of the same key that is followed in real time by another ok write
    ``w2`` (``w1`` completed before ``w2`` was invoked) that itself completed before the read was invoked, where
    ``w1``'s value is written by no other operation (``value_range=None`` histories). Returns the new events and a
    description, or ``None`` if the history has no such triple.
    """
    spans: dict[int, list[int]] = {}  # op start index -> [invoke index, completion index]
    open_at: dict[int, int] = {}
    writers: dict[tuple[str | None, Any], int] = {}
    for index, event in enumerate(events):
        if event.type is EventType.INVOKE:
            open_at[event.process] = index
            if event.f is not Operation.READ:
                new = event.value if event.f is Operation.WRITE else event.value[1]
                writers[(event.key, new)] = writers.get((event.key, new), 0) + 1
        else:
            start = open_at.pop(event.process)
            spans[start] = [start, index]
    ok_writes = [(s, c) for s, c in spans.values() if events[s].f is Operation.WRITE and events[c].type is EventType.OK
                 and writers[(events[s].key, events[s].value)] == 1]
    reads = [(s, c) for s, c in spans.values() if events[s].f is Operation.READ and events[c].type is EventType.OK]
    order = rng.permutation(len(reads))
    for r in order:
        read_start, read_end = reads[int(r)]
        key = events[read_start].key
        before = [(s, c) for s, c in ok_writes if events[s].key == key and c < read_start]
        for w1_start, w1_end in sorted(before, reverse=True):
            if any(s > w1_end and c < read_start for s, c in before):
                stale = events[w1_start].value
                if stale == events[read_end].value:
                    continue
                changed = list(events)
                old = events[read_end]
                changed[read_end] = Event(process=old.process, type=old.type, f=old.f, key=old.key, value=stale,
                                          time=old.time)
                return changed, {"read_event": read_end + 1, "stale_value": stale, "stale_write_event": w1_start + 1}
    return None
