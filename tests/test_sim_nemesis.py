"""The nemesis: each fault's observable effect, the seeded schedule, the healed phase (liveness)."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.sim import FAULTS, NemesisConfig, SimConfig, WorkloadConfig, simulate
from seedance.sim.nemesis import PARTITION_VARIANTS, _partition_pairs, draw_schedule


def echo_run(faults, *, seed=3, nodes=3, duration_s=0.6, **nemesis):
    config = SimConfig(protocol="echo", nodes=nodes, duration_s=duration_s, seed=seed,
                       workload=WorkloadConfig(clients=3, op_timeout_s=0.05, think_s=0.002),
                       nemesis=NemesisConfig(faults=tuple(faults), **nemesis))
    return simulate(config)


def _transit_times(trace):
    return [r[6] - r[0] for r in trace.of_kind("send")]


OBSERVABLE = {
    "partition": lambda r: any(rec[5] == "partition" for rec in r.trace.of_kind("drop")),
    "partition-one": lambda r: any(rec[5] == "partition" for rec in r.trace.of_kind("drop")),
    "partition-halves": lambda r: any(rec[5] == "partition" for rec in r.trace.of_kind("drop")),
    "partition-ring": lambda r: any(rec[5] == "partition" for rec in r.trace.of_kind("drop")),  # on 5 nodes
    "partition-oneway": lambda r: any(rec[5] == "partition" for rec in r.trace.of_kind("drop")),
    "crash": lambda r: r.trace.count("crash") > 0 and r.trace.count("restart") == r.trace.count("crash"),
    "pause": lambda r: r.trace.count("pause") > 0 and r.trace.count("resume") == r.trace.count("pause"),
    "loss": lambda r: any(rec[5] == "loss" for rec in r.trace.of_kind("drop")),
    "duplicate": lambda r: r.trace.count("duplicate") > 0,
    "reorder": lambda r: max(_transit_times(r.trace)) > 1e-3,
    "delay": lambda r: max(_transit_times(r.trace)) >= 10e-3,
    "skew": lambda r: len({host.node.ticks for host in r.runtime.hosts}) > 1,
    "cpu-hog": lambda r: r.trace.count("cpu-hog") > 0,
}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_has_its_observable_effect_and_heals(fault):
    result = echo_run([fault], nodes=5 if fault == "partition-ring" else 3)  # on 3 nodes a ring cuts nothing
    assert result.faults and all(w.end_s <= result.healed_at_s for w in result.faults)
    assert OBSERVABLE[fault](result), fault
    assert result.trace.count("heal") == 1
    network = result.runtime.network
    assert not network.faulty and all(not any(row) for row in network.blocked)
    assert all(h.up and not h.paused and h.timer_rate == 1.0 for h in result.runtime.hosts)
    assert result.progress_after_heal


def test_majorities_ring_lets_every_node_see_a_majority_but_no_two_the_same():
    """Jepsen's majorities-ring on 5 nodes: each node reaches itself and its two ring neighbours."""
    pairs, shape = _partition_pairs("partition-ring", 5, np.random.default_rng(1))
    blocked = set(pairs)
    visible = [frozenset(j for j in range(5) if j == i or (i, j) not in blocked) for i in range(5)]
    assert all(len(v) == 3 for v in visible) and len(set(visible)) == 5


@pytest.mark.parametrize("variant", PARTITION_VARIANTS)
def test_partition_variants_shapes(variant):
    pairs, shape = _partition_pairs(variant, 5, np.random.default_rng(7))
    assert pairs and all(a != b for a, b in pairs)
    if variant == "partition-oneway":
        assert not any((b, a) in set(pairs) for a, b in pairs)  # one-way: no reverse pair
    else:
        assert all((b, a) in set(pairs) for a, b in pairs)


def test_schedule_is_a_function_of_the_seed():
    def draw(seed):
        return draw_schedule(FAULTS, num_nodes=5, faulty_end_s=3.0, rng=np.random.default_rng(seed))
    assert draw(1) == draw(1) and draw(1) != draw(2)
    windows = draw(1)
    for name in ("crash", "pause"):
        mine = [w for w in windows if w.name == name]
        assert all(a.end_s <= b.start_s for a, b in zip(mine, mine[1:]))  # windows of one fault never overlap


def test_unknown_fault_is_a_spec_error_listing_the_valid_ones():
    with pytest.raises(SpecError, match="valid: partition, partition-one"):
        NemesisConfig(faults=("partition", "meteor"))


def test_crash_of_the_leader_gives_info_ops_and_fresh_processes():
    """Jepsen semantics: a client whose op timed out continues under a new process id."""
    result = echo_run(["crash"], seed=5, duration_s=0.8)
    infos = [e for e in result.history if e.type.value == "info"]
    assert infos
    processes = {e.process for e in result.history}
    assert len(processes) > 3
    # after an info, that process never invokes again
    last_info = {e.process: i for i, e in enumerate(result.history) if e.type.value == "info"}
    assert all(result.history[j].process != p for p, i in last_info.items() for j in range(i + 1, len(result.history))
               if result.history[j].type.value == "invoke")


def test_all_faults_together_stay_linearizable_for_the_single_copy_store():
    config = SimConfig(protocol="echo", nodes=3, duration_s=0.6, seed=11, check=True,
                       workload=WorkloadConfig(clients=4, op_timeout_s=0.05, think_s=0.001), nemesis=NemesisConfig(faults=FAULTS))
    result = simulate(config)
    assert result.linearizable is True and result.progress_after_heal
