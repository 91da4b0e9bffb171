"""Liveness as a checked property (seedance.sim.liveness): recovery to a share of the same seed's fault-free
throughput within a bound after the heal, reported in the summary, and failed by Raft's old counting window."""

from __future__ import annotations

import pytest

from raft_mutants import MUTANTS
from seedance.errors import SpecError
from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate
from seedance.sim.liveness import assess


def test_recovery_is_the_first_window_at_the_required_share():
    """Baseline: 1000 ops/s over the healed phase [1, 3). The run does nothing until 1.5 s, then 800 ops/s: the
    first 0.1 s window with >= 50 ops (62.5 ms of the new rate) starts at 1.47 s (10 ms grid): 0.47 s after the heal."""
    baseline = [1 + k / 1000 for k in range(2000)]
    run = [1.5 + k / 800 for k in range(1200)]
    r = assess(run, baseline, healed_at_s=1.0, end_s=3.0)
    assert r.window_s == 0.1 and r.baseline_throughput_ops_s == pytest.approx(1000)
    assert r.throughput_healed_ops_s == pytest.approx(600)
    assert r.recovery_s == pytest.approx(0.47)
    assert r.recovered
    late = assess([2.2 + k / 800 for k in range(600)], baseline, healed_at_s=1.0, end_s=3.0)
    assert late.recovery_s == pytest.approx(1.17) and not late.recovered  # beyond the 1 s bound
    trickle = assess([1 + k / 100 for k in range(200)], baseline, healed_at_s=1.0, end_s=3.0)
    assert trickle.recovery_s is None and not trickle.recovered  # 10 % of the baseline: never


def test_completion_times_as_an_unsorted_array_give_the_same_recovery():
    """The runs hand over their completion times as an array (8 bytes each, not a list of floats); the answer is the
    one for the sorted list."""
    from array import array

    import numpy as np

    rng = np.random.default_rng(3)
    baseline = (1 + rng.random(2000) * 2).tolist()
    run = (1.5 + rng.random(1200) * 1.5).tolist()
    expected = assess(sorted(run), sorted(baseline), healed_at_s=1.0, end_s=3.0)
    got = assess(array("d", run), array("d", baseline), healed_at_s=1.0, end_s=3.0)
    assert got == expected and type(got.baseline_throughput_ops_s) is float and expected.recovery_s is not None
    same = array("d", sorted(run))
    assert assess(same, same, healed_at_s=1.0, end_s=3.0).throughput_healed_ops_s == expected.throughput_healed_ops_s


def test_no_baseline_throughput_means_nothing_to_recover():
    r = assess([], [], healed_at_s=0.5, end_s=1.0)
    assert r.recovered and r.recovery_s == 0.0


def test_short_healed_phases_use_a_quarter_of_it_as_window():
    r = assess([0.2], [0.2], healed_at_s=0.15, end_s=0.25)
    assert r.window_s == pytest.approx(0.025)


@pytest.mark.parametrize("field,value", [("recovery_fraction", 1.5), ("recovery_fraction", -0.1),
                                         ("recovery_bound_s", -1.0), ("recovery_fraction", float("nan"))])
def test_liveness_parameters_are_validated(field, value):
    with pytest.raises(SpecError, match=f"nemesis.{field}"):
        NemesisConfig(faults=("loss",), **{field: value})


def _issue_run(protocol, faults=("loss",)):
    """Issue R's seed 1051 (5 nodes, 4 clients, loss in the first 30 %), shortened to 1.5 s."""
    return simulate(SimConfig(protocol=protocol, nodes=5, duration_s=1.5, seed=1051, trace=False, monitor=False,
                              workload=WorkloadConfig(clients=4),
                              nemesis=NemesisConfig(faults=faults, faulty_fraction=0.3)))


@pytest.fixture(scope="module")
def raft_issue_run():
    return _issue_run("raft")


def test_raft_recovers_after_loss_and_the_counting_window_does_not(raft_issue_run):
    """The issue's seed: Raft is back at the fault-free rate at once; the counting window stays stuck at a few
    percent of it (every operation waits for a heartbeat), so progress_after_heal is False although ops complete."""
    good = raft_issue_run
    assert good.progress_after_heal and good.liveness.recovery_s <= 0.1
    assert good.liveness.throughput_healed_ops_s >= 0.9 * good.liveness.baseline_throughput_ops_s
    bad = _issue_run(MUTANTS["counting-window"])
    assert bad.ops_ok_healed > 0  # the old check (one operation suffices) would have passed
    assert not bad.progress_after_heal and bad.liveness.recovery_s is None
    assert bad.liveness.throughput_healed_ops_s < 0.1 * bad.liveness.baseline_throughput_ops_s


def test_summary_reports_recovery_and_post_heal_throughput(raft_issue_run):
    summary = raft_issue_run.summary()
    for key in ("healed_at_s", "ops_ok_healed", "progress_after_heal", "recovery_s", "throughput_healed_ops_s",
                "baseline_throughput_ops_s", "liveness"):
        assert key in summary
    assert summary["liveness"] == {"fraction": 0.5, "bound_s": 1.0, "window_s": 0.1, "recovered": True}
    assert summary["healed_at_s"] == pytest.approx(0.45)


def test_the_liveness_bound_travels_in_the_reproduce_command():
    config = SimConfig(protocol="raft", nodes=3, duration_s=0.2, seed=1,
                       nemesis=NemesisConfig(faults=("loss",), recovery_bound_s=0.05))
    assert '"recovery_bound_s":0.05' in simulate(config, liveness=False).reproduce


def test_completion_times_on_disk_in_chunks_give_the_same_recovery():
    """A run's completion times are a FloatColumn (in order, on disk in chunks, seedance.history.column): the
    answer is the one for the sorted list, also for a column out of order (read whole and sorted)."""
    import numpy as np

    from seedance.history.column import FloatColumn

    rng = np.random.default_rng(4)
    baseline = sorted((1 + rng.random(3000) * 2).tolist())
    run = (1.5 + rng.random(1500) * 1.5).tolist()
    expected = assess(sorted(run), baseline, healed_at_s=1.0, end_s=3.0)
    for values in (sorted(run), run):
        column, base = FloatColumn(chunk=64), FloatColumn(chunk=100)
        column.extend(values)
        base.extend(baseline)
        assert column._spilled > 10 and column.ordered == (values is not run)
        assert assess(column, base, healed_at_s=1.0, end_s=3.0) == expected
    assert expected.recovery_s is not None
