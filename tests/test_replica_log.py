"""A simulated run's replica events spill to disk in sorted chunks (seedance.history.replica_log): read back in time
order, by groups of keys and in one pass of totals, they give what the same events in a list give; a causal run
spilled in tiny chunks and checked in tiny groups writes the same history.jsonl and the same summary."""

from __future__ import annotations

import json
import random

import pytest

from seedance.history import replica_log
from seedance.history.anomalies import operations
from seedance.history.convergence import check_convergence
from seedance.errors import HistoryError
from seedance.history.events import ReplicaEvent, merge_by_time
from seedance.history.replica_log import ReplicaLog, is_apply, merge_history

from test_causal_campaign import campaign_config


def _rows(n: int, seed: int) -> list[tuple]:
    """Rows a runtime might record: times nearly in order with ties, keyed applies, keyless observes of totals,
    keyed observes, values of several kinds."""
    rng = random.Random(seed)
    rows, now = [], 0.0
    for _ in range(n):
        now += rng.choice([0.0, 0.0, 1e-6, 3e-5])
        at = max(0.0, now + rng.choice([0.0, -2e-5, 4e-5]))  # a cursor ahead of or behind the clock
        kind = rng.random()
        if kind < 0.1:
            rows.append((rng.randrange(6), "observe", None, [rng.randrange(1000), rng.randrange(5000)], at))
        elif kind < 0.2:
            rows.append((rng.randrange(6), "observe", f"k{rng.randrange(5)}", rng.randrange(50), at))
        else:
            value = rng.choice([rng.randrange(50), f"v{rng.randrange(9)}", [1, [2, 3]]])
            rows.append((rng.randrange(6), "apply", f"k{rng.randrange(5)}", value, at))
    return rows


def _log(rows: list[tuple], spill_rows: int) -> ReplicaLog:
    log = ReplicaLog(spill_rows=spill_rows)
    for row in rows:
        log.add(*row)
    return log


@pytest.mark.parametrize("spill_rows", [1, 7, 64, 10_000])
def test_spilled_chunks_read_back_in_a_stable_time_order(spill_rows):
    rows = _rows(500, seed=spill_rows)
    log = _log(rows, spill_rows)
    events = [ReplicaEvent.trusted(*row) for row in rows]
    assert len(log) == 500 and bool(log)
    assert list(log.by_time()) == merge_by_time(events)  # a stable sort by time of the whole log
    assert list(log) == merge_by_time(events)
    stats = log.stats()
    applies = [e for e in events if is_apply(e.f, e.key)]
    assert stats.last_time == max(e.time for e in events)
    assert stats.max_node == max(e.node for e in applies)
    assert sum(stats.applies_per_key.values()) == len(applies)
    observed = [e.value for e in events if e.f == "observe" and e.key is None]
    assert (stats.delta_bytes, stats.full_bytes) == (sum(v[0] for v in observed), sum(v[1] for v in observed))


@pytest.mark.parametrize("batch_rows", [1, 30, 10**9])
def test_groups_of_keys_hold_each_keys_rows_in_the_order_recorded(batch_rows):
    rows = _rows(400, seed=3)
    log = _log(rows, 16)
    counts = log.stats().applies_per_key
    keys = sorted(counts, key=repr)
    seen = []
    for group, chosen in log.by_keys(keys, counts, batch_rows):
        seen += group
        assert sum(counts[k] for k in group) <= max(batch_rows, max(counts[k] for k in group))
        expected = [(*(getattr(ReplicaEvent.trusted(*r), f) for f in ("node", "f", "key", "value", "time")), k)
                    for k, r in enumerate(rows) if r[2] in group]
        got = [r for r in chosen if r[2] in group]
        assert got == expected
    assert seen == keys


def test_merge_history_is_merge_by_time():
    rows = _rows(300, seed=9)
    log = _log(rows, 11)
    history = [ReplicaEvent.trusted(*row) for row in _rows(50, seed=10)]  # any events with times
    assert list(merge_history(history, log)) == merge_by_time(history, [ReplicaEvent.trusted(*r) for r in rows])


@pytest.mark.parametrize("f, key, field", [("merged", "k1", "f"), ("apply", 7, "key")])
def test_a_bad_observe_is_refused_naming_the_field(f, key, field):
    log = ReplicaLog()
    with pytest.raises(HistoryError) as err:
        log.add(0, f, key, 1, 0.0)
    assert err.value.field == field and len(log) == 0


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_a_spilled_log_checked_in_groups_gives_the_lists_convergence(seed, monkeypatch):
    """A causal campaign run (faults injected): the convergence check over its log, spilled every 5 rows and read
    in groups of 3 applies, gives the counts, times and verdict of the same events in a list."""
    from seedance.sim.run import simulate

    monkeypatch.setattr(replica_log, "SPILL_ROWS", 5)
    result = simulate(campaign_config(seed), liveness=False)
    log = result.replicas
    assert isinstance(log, ReplicaLog) and len(log) > 50 and log._chunks
    ops, _ = operations(result.history)
    events = list(log.by_time())
    whole = check_convergence(ops, events, 5, times=True)
    grouped = check_convergence(ops, log, 5, times=True, batch_rows=3)
    for name in ("converged", "counts", "writes_measured", "convergence_ms_p50", "convergence_ms_p99"):
        assert grouped[name] == whole[name], name
    assert sorted(grouped["times_ms"]) == sorted(whole["times_ms"])


def test_a_causal_run_spilled_in_tiny_chunks_writes_the_same_files(tmp_path, monkeypatch):
    from seedance.sim.run import simulate, write_outputs

    config = campaign_config(2)
    outputs = {}
    for name, spill, batch in (("whole", 10**9, 10**9), ("spilled", 13, 40)):
        monkeypatch.setattr(replica_log, "SPILL_ROWS", spill)
        monkeypatch.setattr(replica_log, "BATCH_ROWS", batch)
        result = simulate(config, liveness=False)
        assert bool(result.replicas._chunks) == (name == "spilled")
        summary = write_outputs(result, tmp_path / name)
        summary.pop("wall_s")
        summary.pop("history")
        outputs[name] = ((tmp_path / name / "history.jsonl").read_bytes(), json.dumps(summary, sort_keys=True))
    assert outputs["whole"] == outputs["spilled"]
    assert b'"type":"replica"' in outputs["whole"][0]


def test_stats_are_counted_once_until_a_row_is_added():
    log = _log(_rows(50, seed=1), 16)
    first = log.stats()
    assert log.stats() is first  # asked again (a run's summary asks twice): no second pass over the rows
    log.add(7, "apply", "k1", 5, 1.0)
    again = log.stats()
    assert again is not first and sum(again.applies_per_key.values()) == sum(first.applies_per_key.values()) + 1
