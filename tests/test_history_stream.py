"""The simulator's recording: trusted history events, the history log spilled to disk in chunks, the per-key check
read back from it, and the same trace hash from two runs of one spec and seed."""

from __future__ import annotations

import pytest

from seedance.errors import HistoryError
from seedance.history.events import Event, EventType, Operation, ReplicaEvent, summarize
from seedance.history.linearizability import check, check_keys
from seedance.history.stream import HistoryLog, summarize_stream
from seedance.sim import SimConfig, WorkloadConfig, simulate
from seedance.sim.run import check_history


def _raft(seed: int = 3, duration_s: float = 0.4, **extra) -> SimConfig:
    return SimConfig(protocol="raft", nodes=3, duration_s=duration_s, seed=seed,
                     workload=WorkloadConfig(clients=6, keys=3, mix=(0.4, 0.4, 0.2)), **extra)


def test_trusted_event_equals_the_validated_one():
    fields = dict(process=4, type=EventType.OK, f=Operation.CAS, key="k2", value=[1, [2, 3]], time=1)
    checked = Event(**fields)
    trusted = Event.trusted(4, EventType.OK, Operation.CAS, "k2", [1, [2, 3]], 1)
    assert trusted == checked and hash(trusted) == hash(checked)
    assert trusted.value == (1, (2, 3)) and type(trusted.time) is float


def test_a_trusted_replica_event_equals_the_validated_one_and_a_bad_observe_is_still_refused():
    checked = ReplicaEvent(node=3, f="apply", key="k7", value=[1, [2]], time=2)
    trusted = ReplicaEvent.trusted(3, "apply", "k7", [1, [2]], 2)
    assert trusted == checked and hash(trusted) == hash(checked) and type(trusted.time) is float
    assert ReplicaEvent.trusted(0, "observe", None, 5, 0.5) == ReplicaEvent(node=0, f="observe", value=5, time=0.5)
    with pytest.raises(HistoryError, match="unknown replica event 'applied'"):  # a node's Observe got it wrong
        ReplicaEvent.trusted(1, "applied", "k1", 1, 0.0)
    with pytest.raises(HistoryError, match="key"):
        ReplicaEvent.trusted(1, "apply", 7, 1, 0.0)


def test_the_validating_constructor_still_rejects_bad_rows():
    with pytest.raises(HistoryError, match="type"):
        Event(process=1, type="done", f=Operation.READ, key="k", value=None, time=0.0)


def test_a_spilled_log_reads_back_the_same_events_in_order():
    run = simulate(_raft(), liveness=False)
    rows = list(run.clients.log)  # nothing spilled at this size
    assert len(rows) > 200 and rows == run.history
    log = HistoryLog(spill_rows=37)
    for process, kind, f, key, value, time_s in ((e.process, e.type, e.f, e.key, e.value, e.time) for e in rows):
        log.rows.append((process, kind, f, key, value, time_s))
        log.maybe_spill()
    assert log.spilled > 0 and len(log.rows) < 37 and len(log) == len(rows)
    assert list(log) == rows  # cas values come back as tuples, enums as enums
    assert summarize_stream(log, 0.4) == summarize(rows, 0.4)
    lines = {key: [line for line, _ in numbered] for key, numbered in log.by_key()}
    assert sorted(line for found in lines.values() for line in found) == list(range(1, len(rows) + 1))
    # keys read in batches of any size give what one pass per key gives, in the checker's key order
    per_key = [(key, list(log.events(lambda k, key=key: k == key))) for key in log.keys()]
    for batch_rows in (1, 7, 60, 10**9):
        assert [(key, list(numbered)) for key, numbered in log.by_key(batch_rows=batch_rows)] == per_key


def test_the_per_key_check_gives_the_whole_history_verdict_and_lines():
    rows = simulate(_raft(seed=5), liveness=False).history
    log = HistoryLog(spill_rows=50)
    for e in rows:
        log.rows.append((e.process, e.type, e.f, e.key, e.value, e.time))
        log.maybe_spill()
    whole, by_key = check(rows, model="kv"), check_keys(log.by_key(), model="kv")
    assert whole.valid is True and by_key.valid is True and by_key.ops == whole.ops
    assert {k: v["ops"] for k, v in by_key.per_key.items()} == {k: v["ops"] for k, v in whole.per_key.items()}
    # a broken history: a read returns a value never written; both name the same key and lines
    bad = list(rows)
    index = next(i for i, e in enumerate(bad) if e.type is EventType.OK and e.f is Operation.READ)
    e = bad[index]
    bad[index] = Event(process=e.process, type=e.type, f=e.f, key=e.key, value=-12345, time=e.time)
    broken = HistoryLog(spill_rows=50)
    for e in bad:
        broken.rows.append((e.process, e.type, e.f, e.key, e.value, e.time))
        broken.maybe_spill()
    whole, by_key = check(bad, model="kv"), check_history(broken, timeout_s=30.0)
    assert whole.valid is False and by_key["valid"] is False
    assert by_key["first_violation"] == whole.first_violation


def test_long_runs_spill_the_history_and_keep_their_results(monkeypatch):
    monkeypatch.setattr(HistoryLog.__init__, "__defaults__", None)
    monkeypatch.setattr(HistoryLog.__init__, "__kwdefaults__", {"spill_rows": 64})
    spilled = simulate(_raft(seed=9, check=True), liveness=False)
    assert spilled.clients.log.spilled > 0 and len(spilled.clients.rows) < 64
    monkeypatch.setattr(HistoryLog.__init__, "__kwdefaults__", {"spill_rows": 10**9})
    whole = simulate(_raft(seed=9, check=True), liveness=False)
    assert whole.clients.log.spilled == 0
    assert spilled.summary()["ops_ok"] == whole.ops_ok and spilled.latency_ms_p99 == whole.latency_ms_p99
    assert spilled.linearizable is True and whole.linearizable is True
    assert spilled.history == whole.history and spilled.trace_sha256 == whole.trace_sha256


def test_same_spec_and_seed_give_the_same_trace_hash_twice():
    a, b = (simulate(_raft(seed=11), liveness=False) for _ in range(2))
    assert a.trace_sha256 == b.trace_sha256 and a.ops_ok == b.ops_ok > 0
    assert simulate(_raft(seed=12), liveness=False).trace_sha256 != a.trace_sha256


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65535, 65536])
def test_the_trace_packs_a_chunk_as_the_bytes_of_each_record(count):
    """The trace's chunks (spill file, hash) come from one packer call; they are every record's own bytes in order,
    so the hash does not depend on where the chunks were cut."""
    import msgpack

    from seedance.tracing import _fallback, pack_each

    pack = msgpack.Packer(default=_fallback, use_bin_type=True).pack
    records = [(i * 1e-6, "send", i % 5, "AppendEntries", {"k": {i}}, [i, None]) for i in range(count)]
    assert bytes(pack_each(pack, records)) == b"".join(pack(record) for record in records)


def test_the_collector_is_off_during_the_loop_and_restored_after(monkeypatch):
    """The objects alive before the loop are frozen while it runs and the automatic collector is off; afterwards the
    collector is as it was; the run's figures are the same as with the collector untouched."""
    import contextlib
    import gc

    from seedance.sim import run as sim_run

    seen: list[tuple[int, bool]] = []
    before = gc.get_threshold()
    tuned = simulate(_raft(seed=13, duration_s=0.2), liveness=False,
                     actions=[(0.1, lambda runtime: seen.append((gc.get_freeze_count(), gc.isenabled())))])
    assert seen and seen[0][0] > 1000 and seen[0][1] is False
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before and gc.isenabled()
    monkeypatch.setattr(sim_run, "bulk", contextlib.nullcontext)
    plain = simulate(_raft(seed=13, duration_s=0.2), liveness=False)
    assert plain.trace_sha256 == tuned.trace_sha256 and plain.ops_ok == tuned.ops_ok


def test_the_valve_collects_cyclic_garbage_made_inside_the_block(monkeypatch):
    """With the collector off, a protocol that made cyclic garbage would grow without bound: the loop's valve collects
    once VALVE_OBJECTS more objects are alive than at the last collection, and freezes what survives."""
    import gc
    import weakref

    from seedance.sim import collector

    class Cycle:
        pass

    monkeypatch.setattr(collector, "VALVE_OBJECTS", 20_000)
    with collector.bulk():
        frozen = gc.get_freeze_count()
        kept = [Cycle() for _ in range(10)]
        probes = []
        for _ in range(2_000):  # 2,000 two-object cycles, unreachable: only a collection frees them
            a, b = Cycle(), Cycle()
            a.other, b.other = b, a
            probes.append(weakref.ref(a))
            del a, b
        assert not gc.isenabled() and collector.valve() is False  # about 6,000 objects: below the valve
        assert all(p() is not None for p in probes)  # nothing collected them
        for _ in range(10_000):
            a, b = Cycle(), Cycle()
            a.other, b.other = b, a
            del a, b
        assert collector.valve() is True
        assert all(p() is None for p in probes)  # the cycles were collected
        assert gc.get_freeze_count() > frozen and all(type(k) is Cycle for k in kept)  # survivors frozen
        assert collector.valve() is False  # nothing new since
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_many_simulations_in_one_process_do_not_keep_each_others_garbage(monkeypatch):
    """A run's objects hang off reference cycles; a later simulation collects them at its start once the process has
    grown by RECLAIM_GROWTH_BYTES (here 0: every run), so a loop of runs holds about one run's garbage, not every
    run's (a 200-run campaign had grown to 2.3 GB). Judged by the cyclic garbage left after the loop against one
    run's (about 20,000-30,000 objects; six runs without the collection leave about 170,000), not by the count of
    live objects, which other tests' threads in the same worker move by tens of thousands."""
    import gc

    from seedance.sim import collector

    assert simulate(_raft(seed=0, duration_s=0.3), liveness=False).ops_ok > 0
    one_run = gc.collect()
    monkeypatch.setattr(collector, "RECLAIM_GROWTH_BYTES", 0)
    for seed in range(6):
        result = simulate(_raft(seed=seed, duration_s=0.3), liveness=False)
        assert result.ops_ok > 0
        del result
    left = gc.collect()
    assert one_run > 5_000 and left < 2 * one_run, (one_run, left)


def test_a_collection_waits_until_the_process_has_grown(monkeypatch):
    """Small runs do not pay a full collection each: only once the resident set grew by RECLAIM_GROWTH_BYTES since
    the last one, and never in a process's first simulation."""
    from seedance.sim import collector

    calls = []
    monkeypatch.setattr(collector.gc, "collect", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(collector, "_last", [None])
    sizes = iter([100 << 20, 110 << 20, 120 << 20, 200 << 20, 150 << 20, 160 << 20, 230 << 20, 230 << 20])
    monkeypatch.setattr(collector, "_resident_bytes", lambda: next(sizes))
    for _ in range(6):
        collector.reclaim()
    # 100 (first run: none), 110, 120 (grown 20 MB: none), 200 (grown 100 MB: collect, 150 after), 160 (none),
    # 230 (grown 80 MB over 150: collect)
    assert len(calls) == 2


def test_numpy_values_spill_as_their_python_values():
    import numpy as np

    log = HistoryLog(spill_rows=1)
    log.rows.append((0, EventType.INVOKE, Operation.WRITE, "k", np.int64(7), 0.5))
    log.maybe_spill()
    log.rows.append((0, EventType.OK, Operation.WRITE, "k", np.int64(7), np.float64(0.75)))
    log.spill()
    first, second = list(log)
    assert first.value == 7 and type(first.value) is int and second.time == 0.75


def test_merge_by_time_is_the_sort_by_time_stream_and_position():
    import random

    from seedance.history.events import merge_by_time

    rng = random.Random(7)
    for _ in range(20):
        streams = []
        for k in range(rng.randint(1, 3)):  # times drawn from a few values: many ties, streams not in order
            streams.append([ReplicaEvent.trusted(k, "apply", f"k{i}", i, float(rng.randint(0, 9)))
                            for i in range(rng.randint(0, 40))])
        keyed = sorted(((e.time, k, i), e) for k, s in enumerate(streams) for i, e in enumerate(s))
        assert [id(e) for e in merge_by_time(*streams)] == [id(e) for _, e in keyed]


def test_a_stop_ends_the_chunked_loop_at_its_moment():
    """The loop runs in chunks (progress, the collector's valve); a callback that stops the simulation (a training
    run that has finished) ends it there, not at the next chunk's start."""
    from simpy.core import StopSimulation

    def stop(runtime):
        raise StopSimulation(None)

    result = simulate(_raft(seed=5, duration_s=0.4), liveness=False, actions=[(0.0123, stop)])
    assert result.runtime.env.now == pytest.approx(0.0123)
    whole = simulate(_raft(seed=5, duration_s=0.4), liveness=False)
    assert whole.runtime.env.now == pytest.approx(0.4)


def test_the_allocators_free_memory_goes_back_once_the_process_has_grown(monkeypatch):
    """Between the loop's chunks the valve trims the C allocator's free memory (malloc_trim), but only once the
    resident set has grown by TRIM_GROWTH_BYTES since the last trim; where the C library has no malloc_trim,
    nothing happens."""
    from seedance.sim import collector

    calls = []
    monkeypatch.setattr(collector, "_malloc_trim", lambda pad: calls.append(pad) or 1)
    monkeypatch.setattr(collector, "_trimmed", [None])
    monkeypatch.setattr(collector, "TRIM_GROWTH_BYTES", 4 << 20)
    sizes = iter([100 << 20, 90 << 20, 92 << 20, 89 << 20, 92 << 20, 95 << 20, 80 << 20])
    monkeypatch.setattr(collector, "_resident_bytes", lambda: next(sizes))
    assert collector.trim() is True  # the first: 100 MB, 90 after the trim
    assert collector.trim() is False  # 92: grown 2 MB
    assert collector.trim() is False  # 89: shrunk, which lowers the mark
    assert collector.trim() is False  # 92: grown 3 MB over 89
    assert collector.trim() is True  # 95: grown 6 MB
    assert calls == [0, 0]
    monkeypatch.setattr(collector, "_malloc_trim", None)
    assert collector.trim() is False
