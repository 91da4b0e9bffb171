"""The WGL checker against the brute-force oracle (the definition of linearizability, Herlihy & Wing 1990 §3).

Random small histories — arbitrary interleavings with reads, writes, cas, failed, indeterminate and never-completed
operations on one or two keys, few values so that collisions are common — must get the oracle's verdict. So must
histories of a correct atomic store (always linearizable) and the same with a read's value changed (often not).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seedance.analysis.histgen import GeneratorConfig, atomic_history
from seedance.history.events import Event, EventType, Operation
from seedance.history.linearizability import check
from seedance.history.linearizability.oracle import brute_force_linearizable

VALUES = st.sampled_from([None, 0, 1, 2])


@st.composite
def interleavings(draw, max_ops: int = 7, keys: tuple = (None,), info_heavy: bool = False):
    """An arbitrary well-formed history: processes invoke and complete in a random interleaving."""
    n_ops = draw(st.integers(1, max_ops))
    processes = draw(st.integers(1, 4))
    pending: dict[int, Event] = {}
    events: list[Event] = []
    invoked = 0
    next_process = processes
    live = list(range(processes))
    while invoked < n_ops or (pending and draw(st.booleans())):
        can_invoke = [p for p in live if p not in pending] if invoked < n_ops else []
        choices = can_invoke + list(pending)
        if not choices:
            break
        process = draw(st.sampled_from(choices))
        time = float(len(events))
        if process not in pending:
            f = draw(st.sampled_from(list(Operation)))
            key = draw(st.sampled_from(keys))
            value = None if f is Operation.READ else (draw(VALUES) if f is Operation.WRITE
                                                        else (draw(VALUES), draw(VALUES)))
            event = Event(process=process, type=EventType.INVOKE, f=f, key=key, value=value, time=time)
            pending[process] = event
            invoked += 1
        else:
            invoke = pending.pop(process)
            outcomes = [EventType.OK, EventType.INFO, EventType.INFO] if info_heavy else \
                [EventType.OK, EventType.OK, EventType.OK, EventType.FAIL, EventType.INFO]
            outcome = draw(st.sampled_from(outcomes))
            value = draw(VALUES) if invoke.f is Operation.READ and outcome is EventType.OK else invoke.value
            event = Event(process=process, type=outcome, f=invoke.f, key=invoke.key, value=value, time=time)
            if outcome is EventType.INFO and draw(st.booleans()):  # Jepsen-style: a fresh process after info
                live[live.index(process)] = next_process
                next_process += 1
        events.append(event)
    return events


def _agree(events):
    expected = brute_force_linearizable(events)
    result = check(events, "kv")
    assert result.valid is expected, [e.to_dict() for e in events]
    assert (result.first_violation is None) == expected


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(interleavings())
def test_single_register_matches_oracle(events):
    _agree(events)


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(interleavings(max_ops=8, keys=("a", "b")))
def test_two_keys_match_oracle(events):
    _agree(events)


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(interleavings(max_ops=8, info_heavy=True))
def test_many_indeterminate_operations_match_oracle(events):
    """Timeouts everywhere, few values: the symmetry and no-op rules for indeterminate operations are exercised."""
    _agree(events)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), info=st.sampled_from([0.0, 0.3]), mutate=st.booleans())
def test_atomic_histories_and_mutants_match_oracle(seed, info, mutate):
    rng = np.random.default_rng(seed)
    config = GeneratorConfig(ops=7, clients=3, keys=1, cas_fraction=0.3, info_fraction=info, fail_fraction=0.1,
                             value_range=3)
    events = atomic_history(config, rng)
    if not mutate:
        assert check(events, "cas-register").valid is True
    reads = [i for i, e in enumerate(events) if e.f is Operation.READ and e.type is EventType.OK]
    if mutate and reads:
        i = reads[int(rng.integers(len(reads)))]
        old = events[i]
        events[i] = Event(process=old.process, type=old.type, f=old.f, key=old.key,
                          value=int(rng.integers(3)), time=old.time)
    _agree(events)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(interleavings(max_ops=9, keys=(None, "a")))
def test_oracle_campaign(events):
    _agree(events)
