"""The windowed check (seedance.history.linearizability.windows) against the whole-key search and the brute-force
oracle, its reports, and its memory: bounded by the window, not by the history's length."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from seedance.analysis.histgen import GeneratorConfig, atomic_history, plant_stale_read
from seedance.errors import HistoryError
from seedance.history.events import Event, EventType, Operation
from seedance.history.linearizability import check, check_keys, check_streamed
from seedance.history.linearizability.oracle import brute_force_linearizable
from seedance.history.linearizability.windows import scan_key

INVOKE, OK, INFO, FAIL = EventType.INVOKE, EventType.OK, EventType.INFO, EventType.FAIL
READ, WRITE, CAS = Operation.READ, Operation.WRITE, Operation.CAS


def _events(rows: list[tuple[int, EventType, Operation, object]], key: str | None = None) -> list[Event]:
    return [Event(process=p, type=t, f=f, key=key, value=v, time=float(i)) for i, (p, t, f, v) in enumerate(rows)]


def _per_key(events: list[Event]) -> list[tuple[str | None, list[tuple[int, Event]]]]:
    keys = sorted({e.key for e in events}, key=lambda k: (k is not None, k or ""))
    return [(k, [(line, e) for line, e in enumerate(events, start=1) if e.key == k]) for k in keys]


def _random_history(seed: int) -> list[Event]:
    """A small history of one or two keys: correct, or with a read's value changed, or cut short (operations
    never completed); many indeterminate operations, few distinct values or unique ones."""
    rng = np.random.default_rng(seed)
    config = GeneratorConfig(
        ops=int(rng.integers(5, 90)), clients=int(rng.integers(1, 6)), keys=int(rng.integers(1, 3)),
        cas_fraction=0.3, info_fraction=float(rng.choice([0.0, 0.1, 0.3])), fail_fraction=0.05,
        value_range=int(rng.choice([3, 5])) if rng.random() < 0.6 else None,
        reuse_process_after_info=bool(rng.random() < 0.3))
    events = atomic_history(config, rng)
    if rng.random() < 0.5:
        reads = [i for i, e in enumerate(events) if e.type is OK and e.f is READ]
        if reads and rng.random() < 0.7:
            i = reads[int(rng.integers(len(reads)))]
            old = events[i]
            events[i] = Event(process=old.process, type=OK, f=READ, key=old.key, value=int(rng.integers(6)),
                              time=old.time)
        if rng.random() < 0.3:
            events = events[:len(events) - int(rng.integers(1, 8))]
    return events


@pytest.mark.parametrize("start", range(0, 400, 100))
def test_windowed_verdicts_are_the_whole_searchs_on_random_histories(start):
    verdicts = []
    for seed in range(start, start + 100):
        events = _random_history(seed)
        whole = check(events, "kv")
        for window in (1, 5, 13, 50):
            assert check_keys(_per_key(events), "kv", window_ops=window).valid == whole.valid, (seed, window)
        numbered = list(enumerate(events, start=1))
        for window in (2, 9):
            assert check_streamed(lambda: iter(numbered), "kv", window_ops=window).valid == whole.valid, (seed, window)
        if len(events) <= 20 and len({e.key for e in events}) == 1:
            assert brute_force_linearizable(events) == whole.valid, seed
        verdicts.append(whole.valid)
    assert verdicts.count(True) > 20 and verdicts.count(False) > 10


def test_an_indeterminate_write_is_carried_to_the_window_that_observes_it():
    rows = [
        (1, INVOKE, WRITE, 1), (1, OK, WRITE, 1),
        (2, INVOKE, WRITE, 7), (2, INFO, WRITE, 7),  # may take effect at any later time, or never
        (1, INVOKE, WRITE, 2), (1, OK, WRITE, 2),
        (1, INVOKE, READ, None), (1, OK, READ, 2),
        (1, INVOKE, READ, None), (1, OK, READ, 7),  # windows later: the write of 7 took effect just before
        (1, INVOKE, READ, None), (1, OK, READ, 7),
    ]
    events = _events(rows)
    assert check(events).valid is True and check_keys(_per_key(events), window_ops=1).valid is True
    early = _events(rows[:2] + [(1, INVOKE, READ, None), (1, OK, READ, 7)] + rows[2:])  # 7 read before its invoke
    assert check(early).valid is False and check_keys(_per_key(early), window_ops=1).valid is False


def test_a_chain_of_indeterminate_operations_keeps_its_first_link():
    """An indeterminate write of 5 observed only by an indeterminate cas 5 -> 6 invoked windows later, whose 6 a
    read returns: the write must still be pending when the cas is invoked."""
    rows = [
        (2, INVOKE, WRITE, 5), (2, INFO, WRITE, 5),
        (1, INVOKE, WRITE, 1), (1, OK, WRITE, 1),
        (1, INVOKE, READ, None), (1, OK, READ, 1),
        (3, INVOKE, CAS, (5, 6)), (3, INFO, CAS, (5, 6)),
        (1, INVOKE, READ, None), (1, OK, READ, 6),
    ]
    events = _events(rows)
    assert check(events).valid is True
    for window in (1, 2, 3):
        assert check_keys(_per_key(events), window_ops=window).valid is True
    scan = scan_key(_per_key(events)[0][1])
    assert set(scan.last_seen) == {1, 7} and scan.last_seen[1] >= 7  # the write lives until the cas' invoke


def test_the_violation_report_names_the_key_and_the_histories_lines():
    config = GeneratorConfig(ops=3000, clients=6, keys=3, cas_fraction=0.2, info_fraction=0.02)
    planted = plant_stale_read(atomic_history(config, np.random.default_rng(5)), np.random.default_rng(6))
    assert planted is not None
    events, where = planted
    whole = check(events)
    windowed = check_keys(_per_key(events), window_ops=40)
    streamed = check_streamed(lambda: enumerate(events, start=1), window_ops=100)
    for result in (windowed, streamed):
        assert result.valid is False and whole.valid is False
        violation = result.first_violation
        assert set(violation) == set(whole.first_violation) and violation["key"] == whole.first_violation["key"]
        op = violation["op"]
        invoke, done = events[op["invoke_line"] - 1], events[op["return_line"] - 1]
        assert invoke.type is INVOKE and done.process == invoke.process == op["process"]
        assert done.key == invoke.key == violation["key"] and op["f"] == invoke.f.value
        assert op["invoke_line"] <= where["read_event"]  # the refutation comes at or before the stale read
        assert result.per_key[str(violation["key"])]["windows"] > 1


class _LongKey:
    """A linearizable one-key history of ``ops`` operations, generated anew by each iteration (never a list):
    three clients, reads overlapping writes, an indeterminate write every 500 operations, a failed cas every 700
    (``ops`` one more than a multiple of 3)."""

    def __init__(self, ops: int) -> None:
        self.ops = ops

    def __iter__(self) -> Iterator[tuple[int, Event]]:
        line, clock, value, spare = 0, 0.0, 0, 100

        def emit(process: int, kind: EventType, f: Operation, v: object) -> tuple[int, Event]:
            nonlocal line, clock
            line, clock = line + 1, clock + 1e-3
            return line, Event.trusted(process, kind, f, "k", v, clock)

        yield emit(0, INVOKE, WRITE, 0)
        yield emit(0, OK, WRITE, 0)
        for n in range(0, self.ops - 1, 3):
            yield emit(0, INVOKE, WRITE, value + 1)
            yield emit(1, INVOKE, READ, None)
            yield emit(0, OK, WRITE, value + 1)
            yield emit(1, OK, READ, value + (n % 2))  # old or new value: the read overlaps the write
            value += 1
            if n % 500 == 0:
                spare += 1
                yield emit(spare, INVOKE, WRITE, -n)
                yield emit(spare, INFO, WRITE, -n)
            elif n % 700 == 0:
                yield emit(2, INVOKE, CAS, (-1, 0))
                yield emit(2, FAIL, CAS, (-1, 0))
            else:
                yield emit(2, INVOKE, READ, None)
                yield emit(2, OK, READ, value)


def _peak(run) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    try:
        result = run()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_by_the_window_not_the_history():
    short, long = _LongKey(60_001), _LongKey(120_001)
    whole_peak, whole = _peak(lambda: check_keys([("k", short)], window_ops=None))
    short_peak, windowed = _peak(lambda: check_keys([("k", short)], window_ops=1_000))
    long_peak, longer = _peak(lambda: check_keys([("k", long)], window_ops=1_000))
    streamed_peak, streamed = _peak(lambda: check_streamed(long.__iter__, window_ops=1_000))
    assert whole.valid is windowed.valid is longer.valid is streamed.valid is True
    assert windowed.ops == whole.ops == 60_001 and longer.ops == 120_001
    assert longer.per_key["k"]["windows"] >= 100
    assert short_peak * 10 < whole_peak  # the whole search holds every operation (about 600 B each)
    assert long_peak < 1.25 * short_peak  # twice the history, the same peak
    assert streamed_peak < 1.25 * short_peak


def test_register_model_refuses_a_cas_that_took_part_and_ignores_a_failed_one():
    base = [(1, INVOKE, WRITE, 1), (1, OK, WRITE, 1), (1, INVOKE, READ, None), (1, OK, READ, 1)] * 3
    failed = _events(base + [(2, INVOKE, CAS, (5, 6)), (2, FAIL, CAS, (5, 6))] + base)
    done = _events(base + [(2, INVOKE, CAS, (1, 6)), (2, OK, CAS, (1, 6))] + base)
    assert check(failed, "register").valid is True
    assert check_keys(_per_key(failed), "register", window_ops=2).valid is True
    for run in (lambda: check(done, "register"), lambda: check_keys(_per_key(done), "register", window_ops=2),
                lambda: check_streamed(lambda: enumerate(done, start=1), "register", window_ops=2)):
        with pytest.raises(HistoryError, match="line 13"):
            run()
