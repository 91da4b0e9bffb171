"""Hand-written histories with known verdicts, models, budgets and reports of the linearizability checker.

Each history is a list of steps ``(process, type, f, value[, key])`` in real-time order; the verdicts follow from
the definition (Herlihy & Wing 1990 §3) and Jepsen's reading of fail/info, and are also confirmed by the brute-force
oracle.
"""

from __future__ import annotations

import numpy as np
import pytest

from seedance.analysis.histgen import GeneratorConfig, atomic_history, plant_stale_read
from seedance.history.events import Event
from seedance.history.linearizability import check
from seedance.history.linearizability.oracle import brute_force_linearizable
from seedance.errors import HistoryError, SpecError


def history(*steps):
    events = []
    for index, (process, kind, f, value, *key) in enumerate(steps):
        events.append(Event(process=process, type=kind, f=f, value=value, key=key[0] if key else None,
                            time=index * 0.001))
    return events


def W(p, v, outcome="ok", key=None):  # a write, invoked and completed at once
    return [(p, "invoke", "write", v, key), (p, outcome, "write", v, key)]


def R(p, v, key=None):  # a read returning v, invoked and completed at once
    return [(p, "invoke", "read", None, key), (p, "ok", "read", v, key)]


def seq(*parts):
    return history(*[step for part in parts for step in part])


CLASSICS = {
    # name: (history, linearizable?)
    "write then read it": (seq(W(1, 1), R(2, 1)), True),
    "read of the initial value": (seq(R(1, None), W(1, 1)), True),
    "stale read after a newer write": (seq(W(1, 1), W(2, 2), R(3, 1)), False),
    "lost write: read of the initial value after an ok write": (seq(W(1, 1), R(2, None)), False),
    "concurrent writes, either order (1 last)": (history(
        (1, "invoke", "write", 1), (2, "invoke", "write", 2), (1, "ok", "write", 1), (2, "ok", "write", 2),
        (3, "invoke", "read", None), (3, "ok", "read", 1)), True),
    "concurrent writes, either order (2 last)": (history(
        (1, "invoke", "write", 1), (2, "invoke", "write", 2), (1, "ok", "write", 1), (2, "ok", "write", 2),
        (3, "invoke", "read", None), (3, "ok", "read", 2)), True),
    "concurrent writes, then the register flips back": (history(
        (1, "invoke", "write", 1), (2, "invoke", "write", 2), (1, "ok", "write", 1), (2, "ok", "write", 2),
        *R(3, 2), *R(3, 1)), False),
    "read concurrent with a write sees either value": (history(
        (1, "invoke", "write", 1), (2, "invoke", "read", None), (2, "ok", "read", None), (1, "ok", "write", 1)),
        True),
    "two concurrent reads see the write in opposite orders": (history(
        *W(1, 0), (1, "invoke", "write", 1), (2, "invoke", "read", None), (2, "ok", "read", 1),
        (3, "invoke", "read", None), (3, "ok", "read", 0), (1, "ok", "write", 1)), False),
    "info write that did not happen": (seq(W(1, 1, "info"), R(2, None)), True),
    "info write that happened": (seq(W(1, 1, "info"), R(2, 1)), True),
    "info write that happens late, after a later read": (seq(W(1, 1, "info"), R(2, None), R(3, 1)), True),
    "info write cannot un-happen": (seq(W(1, 1, "info"), R(2, 1), R(3, None)), False),
    "failed write did not happen": (seq(W(1, 1, "fail"), R(2, 1)), False),
    "process reused after info: the info op stays concurrent": (seq(W(1, 1, "info"), R(1, None), R(2, 1)), True),
    "invoke never completed is indeterminate": (history((1, "invoke", "write", 1), *R(2, 1)), True),
    "info read constrains nothing": (history((1, "invoke", "read", None), (1, "info", "read", None), *W(2, 1)), True),
    "cas from the current value": (seq([(1, "invoke", "cas", [None, 1]), (1, "ok", "cas", [None, 1])], R(2, 1)), True),
    "cas ok from a value the register never held": (seq(
        W(1, 0), [(1, "invoke", "cas", [5, 1]), (1, "ok", "cas", [5, 1])]), False),
    "failed cas did not take effect": (seq(
        W(1, 0), [(1, "invoke", "cas", [0, 1]), (1, "fail", "cas", [0, 1])], R(2, 1)), False),
    "info cas may take effect": (seq(
        W(1, 0), [(1, "invoke", "cas", [0, 1]), (1, "info", "cas", None)], R(2, 1)), True),
    "keys are independent objects": (seq(W(1, 1, key="a"), W(2, 2, key="b"), R(3, 1, key="a"), R(3, 2, key="b")),
                                     True),
    "a stale read on one key among good ones": (seq(
        W(1, 1, key="a"), W(2, 2, key="b"), W(1, 3, key="a"), R(3, 2, key="b"), R(3, 1, key="a")), False),
}


@pytest.mark.parametrize("name", sorted(CLASSICS))
def test_classic_history(name):
    events, expected = CLASSICS[name]
    assert brute_force_linearizable(events) is expected  # the definition agrees with the expected verdict
    result = check(events, "kv")
    assert result.valid is expected
    assert result.ops == sum(e.type.value == "invoke" for e in events)
    if not expected:
        assert result.first_violation["explanation"]


def test_violation_report_names_key_operation_and_state():
    events, _ = CLASSICS["a stale read on one key among good ones"]
    violation = check(events, "kv").first_violation
    assert violation["key"] == "a"
    assert violation["op"] == {
        "process": 3, "f": "read", "key": "a", "value": 1, "type": "ok", "invoke_line": 9, "return_line": 10,
        "invoke_time": pytest.approx(0.008), "return_time": pytest.approx(0.009)}
    assert violation["state"] == 3 and violation["linearized"] == 2
    assert "p3 read() -> 1 (lines 9-10) cannot be linearized" in violation["explanation"]


def test_models_and_initial_value():
    events = seq(R(1, 0), W(1, 1), R(2, 1))
    assert check(events, "register").valid is False  # registers start at None ...
    assert check(events, "register", initial=0).valid is True  # ... unless told otherwise
    cas = seq([(1, "invoke", "cas", [None, 1]), (1, "ok", "cas", [None, 1])])
    assert check(cas, "cas-register").valid is True
    with pytest.raises(HistoryError, match="line 1: cas is not an operation of model register"):
        check(cas, "register")
    with pytest.raises(SpecError, match="unknown model 'queue'.*register, cas-register, kv"):
        check(cas, "queue")
    with pytest.raises(SpecError, match="timeout"):
        check(cas, "kv", timeout_s=-1)


def test_malformed_event_list_is_rejected_with_its_line():
    events = history((1, "invoke", "read", None), (2, "ok", "read", 1))
    with pytest.raises(HistoryError, match="line 2: .*no pending invoke"):
        check(events)


def _generated(ops, keys, seed, **extra):
    config = GeneratorConfig(ops=ops, clients=16, keys=keys, cas_fraction=0.2, info_fraction=0.02,
                             fail_fraction=0.01, **extra)
    return atomic_history(config, np.random.default_rng(seed))


def test_20000_op_16_client_kv_history_and_a_planted_stale_read():
    """The issue's size: 20,000 operations, 16 clients, key-value, with indeterminate and failed operations."""
    events = _generated(20_000, 10, seed=1)
    result = check(events, "kv", timeout_s=120)
    assert result.valid is True and result.ops == 20_000 and len(result.per_key) == 10
    planted, where = plant_stale_read(events, np.random.default_rng(2))
    bad = check(planted, "kv", timeout_s=120)
    assert bad.valid is False
    assert bad.first_violation["op"]["return_line"] == where["read_event"]


def test_single_register_with_few_values_and_many_timeouts():
    events = _generated(3000, 1, seed=5, value_range=5)
    assert check(events, "cas-register", timeout_s=120).valid is True


def test_time_budget_gives_unknown():
    events = _generated(3000, 1, seed=5, value_range=5)
    result = check(events, "cas-register", timeout_s=0)
    assert result.valid == "unknown" and result.first_violation is None
    assert result.per_key["None"]["valid"] == "unknown"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_campaign_generated_and_planted(seed):
    """Seeded campaign: correct-store histories of every shape are linearizable; a planted stale read is not."""
    rng = np.random.default_rng(seed)
    config = GeneratorConfig(ops=int(rng.integers(500, 5000)), clients=int(rng.integers(2, 21)),
                             keys=int(rng.choice([1, 3, 10])), cas_fraction=float(rng.choice([0.0, 0.2])),
                             info_fraction=float(rng.choice([0.0, 0.02, 0.1])), fail_fraction=0.01,
                             value_range=None if seed % 2 else int(rng.integers(2, 8)))
    events = atomic_history(config, rng)
    assert check(events, "kv", timeout_s=300).valid is True, f"seed {seed}: {config}"
    if config.value_range is None:
        planted = plant_stale_read(events, rng)
        if planted is not None:
            assert check(planted[0], "kv", timeout_s=300).valid is False, f"seed {seed}: {config}"


def test_a_long_key_checks_in_memory_linear_in_its_operations():
    """One key with 40,000 sequential writes and reads: the search's memory is linear in the operations. It had kept
    each operation's power of two (1 << i), O(n^2) bits: 100 MB at this size, 0.5 GB for a 20 s Raft run's keys."""
    import tracemalloc

    steps = [step for i in range(20_000) for step in (*W(0, i % 5), *R(1, i % 5))]
    events = history(*steps)
    tracemalloc.start()
    try:
        result = check(events)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.valid is True and result.ops == 40_000
    assert peak < 60 << 20, f"peak {peak / (1 << 20):.0f} MiB"
