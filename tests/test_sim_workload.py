"""Workloads: key distributions, closed/open loop, retry on not-leader, history shape (Jepsen client model)."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.history.events import HistoryValidator
from seedance.errors import SpecError
from seedance.sim import SimConfig, WorkloadConfig, simulate
from seedance.sim.workload import KeyChooser, Uniforms


@pytest.mark.parametrize("dist, extra", [("uniform", {}), ("zipf", {"zipf_s": 1.2}), ("conflict", {"conflict_rate": 0.7})])
def test_key_distributions_match_their_probabilities(dist, extra):
    config = WorkloadConfig(keys=10, key_distribution=dist, **extra)
    chooser = KeyChooser(config, np.random.default_rng(0))
    draws = [chooser.draw() for _ in range(20_000)]
    empirical = np.array([draws.count(f"k{i}") for i in range(10)]) / len(draws)
    expected = chooser.probabilities()
    assert expected.sum() == pytest.approx(1.0)
    assert np.abs(empirical - expected).max() < 0.015
    if dist == "zipf":
        assert expected[0] / expected[1] == pytest.approx(2 ** 1.2)
    if dist == "conflict":
        assert empirical[0] == pytest.approx(0.7, abs=0.015)


def test_uniforms_are_the_generators_blocks_in_order_drawn_lazily_and_pickle():
    import copy
    import pickle

    rng = np.random.default_rng(5)
    uniforms = Uniforms(rng, block=4)
    first = [uniforms() for _ in range(4)]  # exactly one block used up: the next is not drawn yet
    probe = copy.deepcopy(rng)
    assert first == np.random.default_rng(5).random(4).tolist()
    assert uniforms.next() == probe.random(4).tolist()[0]  # drawn from the generator only now
    again = pickle.loads(pickle.dumps(uniforms))
    assert [again.next() for _ in range(9)] == [uniforms.next() for _ in range(9)]
    expected = np.random.default_rng(5).random(24).tolist()[14]
    assert uniforms.exponential(2.0) == -2.0 * np.log1p(-expected)


def _run(**workload):
    config = SimConfig(protocol="echo", nodes=3, duration_s=0.2, seed=4,
                       workload=WorkloadConfig(**{"clients": 4, "think_s": 0.001, **workload}))
    return simulate(config)


def test_closed_loop_history_is_well_formed_and_retries_not_leader_at_the_hint():
    """Clients start at nodes 0..2; echo's followers redirect to node 0, so every op ends up served there."""
    result = _run(mix=(0.4, 0.4, 0.2))
    validator = HistoryValidator()
    for i, event in enumerate(result.history):
        validator.add(event, f"event {i}")
    assert not validator.pending  # pending ops were closed as info at the end
    assert result.ops_ok > 100 and result.ops_info <= 4
    fs = {e.f.value for e in result.history}
    assert fs == {"read", "write", "cas"}
    # cas expects the last value seen, so some succeed and some fail (definite: "fail")
    cas = [e for e in result.history if e.f.value == "cas" and e.type.value != "invoke"]
    assert {e.type.value for e in cas} >= {"ok"}
    assert result.runtime.hosts[0].handled > result.runtime.hosts[1].handled


def test_open_loop_arrivals_follow_the_rate():
    result = _run(mode="open", rate_ops_s=5000.0)
    invokes = sum(1 for e in result.history if e.type.value == "invoke")
    assert abs(invokes - 1000) < 5 * np.sqrt(1000)
    processes = {e.process for e in result.history}
    assert len(processes) >= 2  # concurrent arrivals use distinct processes


def test_write_values_are_unique():
    result = _run(mix=(0.0, 1.0, 0.0))
    values = [e.value for e in result.history if e.type.value == "invoke"]
    assert len(values) == len(set(values))


def test_values_of_a_given_size_travel_in_entries_messages_and_durable_writes():
    """``value_bytes`` (``sim run --value-size``): written values are strings of that length, as the real clients
    write them, so Raft's log entries, AppendEntries and durable writes carry the bytes; the history still checks."""
    def run(value_bytes):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.5, seed=2, trace=True, check=True,
                                  workload=WorkloadConfig(clients=3, mix=(0.3, 0.5, 0.2), value_bytes=value_bytes)))

    small, big = run(0), run(300)
    values = [e.value for e in big.history if e.type.value == "invoke" and e.f.value == "write"]
    assert values and all(isinstance(v, str) and len(v) == 300 for v in values) and len(set(values)) == len(values)
    assert big.linearizable is True

    def sent(result):
        return sum(r[5] for r in result.trace if r[1] == "send" and r[3] == "AppendEntries")

    def persisted(result):
        return sum(r[4] for r in result.trace if r[1] == "persist")

    per_op = {name: (sent(r) / r.ops_ok, persisted(r) / r.ops_ok) for name, r in (("small", small), ("big", big))}
    assert per_op["big"][0] > per_op["small"][0] + 2 * 250 and per_op["big"][1] > per_op["small"][1] + 3 * 250
    with pytest.raises(SpecError) as info:
        WorkloadConfig(value_bytes=-1)
    assert info.value.field == "workload.value_bytes"


@pytest.mark.parametrize("field, value", [("mode", "half-open"), ("key_distribution", "pareto"),
                                          ("mix", (0.5, 0.5, 0.5)), ("keys", 0), ("conflict_rate", 1.5),
                                          ("crash_resets", "yes"), ("start_s", -0.1), ("start_s", float("nan"))])
def test_bad_workload_is_a_spec_error(field, value):
    with pytest.raises(SpecError) as info:
        WorkloadConfig(**{field: value})
    assert info.value.field == f"workload.{field}"


@pytest.mark.parametrize(("field_name", "value"), [("duration_s", 0), ("duration_s", float("nan")), ("duration_s", "1"),
                                                   ("seed", -1), ("seed", 1.5), ("seed", True),
                                                   ("check_timeout_s", 0), ("check_timeout_s", float("inf"))])
def test_bad_run_settings_are_refused_naming_the_field(field_name, value):
    # these checks once sat after a return statement and never ran: a zero-length run was silently accepted
    with pytest.raises(SpecError) as info:
        SimConfig(**{field_name: value})
    assert info.value.field == field_name


def test_a_load_that_starts_after_the_nodes_finds_the_first_election_done():
    """Real runs start their load once every node serves, ~0.1-1.2 s after the nodes' protocols started: the first
    election is then under way or over. ``start_s`` simulates that: the clients, the duration and the fault windows
    count from it, and a load started after the longest election timeout (0.3 s) meets a leader at once."""
    from seedance.sim.config import NemesisConfig, SimConfig
    from seedance.sim.run import simulate

    def run(start_s, faults=()):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=1.0, seed=4, trace=False,
                                  workload=WorkloadConfig(clients=4, mix=(0.0, 1.0, 0.0), start_s=start_s),
                                  nemesis=NemesisConfig(faults=faults)), liveness=False)

    def first_ok(result):
        return min(e.time for e in result.history if e.type.value == "ok")

    cold, warm = run(0.0), run(0.5)
    assert min(e.time for e in warm.history) >= 0.5  # no request before the load starts
    assert first_ok(cold) > 0.15  # the first election's timeout, at least
    assert first_ok(warm) - 0.5 < 0.01  # the leader was elected before the load
    assert warm.throughput_ops_s > cold.throughput_ops_s  # over the same 1 s of load
    assert max(e.time for e in warm.history) <= 1.5 + 0.5  # the load's end counts from its start (ops finish late)
    # the fault windows move with the load: the same draw, start_s later
    base, moved = run(0.0, ("crash",)), run(0.5, ("crash",))
    assert len(base.faults) == len(moved.faults) > 0
    assert [t + 0.5 for w in base.faults for t in (w.start_s, w.end_s)] == pytest.approx(
        [t for w in moved.faults for t in (w.start_s, w.end_s)])
    assert moved.healed_at_s == pytest.approx(base.healed_at_s + 0.5)
