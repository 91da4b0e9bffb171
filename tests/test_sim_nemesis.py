"""The nemesis: each fault's observable effect, the seeded schedule, the healed phase (liveness)."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.sim import FAULTS, NemesisConfig, SimConfig, WorkloadConfig, simulate
from seedance.sim.nemesis import LEADER_FAULTS, PARTITION_VARIANTS, TARGETED_FAULTS, _partition_pairs, draw_schedule


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
    # leader faults strike the leader: its links are cut (drops), or it crashes
    "leader-isolate": lambda r: _drops_from_and_to_leader(r) == "both",
    "leader-oneway": lambda r: _drops_from_and_to_leader(r) == "from",
    "leader-crash": lambda r: r.trace.count("fault-strike") > 0 and r.trace.count("crash") > 0,
    "vote-crash": lambda r: any(rec[4] == "vote-crash" for rec in r.trace.of_kind("fault-strike")),
    "slow-disk": lambda r: max(rec[5] - rec[0] for rec in r.trace.of_kind("persist")) >= 5e-3,
}


def _drops_from_and_to_leader(result):
    """"both" / "from" / None: which directions of struck leaders' links dropped messages during their strikes
    ("from": only messages the struck leaders sent)."""
    strikes = [rec[5] for rec in result.trace.of_kind("fault-strike")]
    sent = heard = False
    for rec in result.trace.of_kind("drop"):
        if rec[5] != "partition":
            continue
        active = {s["node"] for s in strikes if s["at_s"] <= rec[0] < s["until_s"]}
        sent |= rec[2] in active
        heard |= rec[4] in active and rec[2] not in active
    return "both" if sent and heard else "from" if sent else None


def raft_run(faults, *, seed=3, nodes=3, duration_s=0.3):
    """Raft (a protocol with a leader) with fast timing, for the leader-targeted faults."""
    config = SimConfig(protocol="raft", nodes=nodes, duration_s=duration_s, seed=seed,
                       protocol_config={"heartbeat_s": 0.002, "election_timeout_s_min": 0.008,
                                        "election_timeout_s_max": 0.016},
                       workload=WorkloadConfig(clients=2, keys=3, op_timeout_s=0.1),
                       nemesis=NemesisConfig(faults=tuple(faults)), check=True)
    return simulate(config)


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_has_its_observable_effect_and_heals(fault):
    if fault in TARGETED_FAULTS:  # vote-crash needs elections: leader crashes make them
        result = raft_run([fault] if fault in LEADER_FAULTS else [fault, "leader-crash"])
    else:
        result = echo_run([fault], nodes=5 if fault == "partition-ring" else 3)  # on 3 nodes a ring cuts nothing
    assert result.faults and all(w.end_s <= result.healed_at_s for w in result.faults)
    assert OBSERVABLE[fault](result), fault
    assert result.trace.count("heal") == 1
    network = result.runtime.network
    assert not network.faulty and all(not any(row) for row in network.blocked)
    assert all(h.up and not h.paused and h.timer_rate == 1.0 for h in result.runtime.hosts)
    assert all(h.storage.fsync_s == result.config.storage.fsync_s for h in result.runtime.hosts)
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


@pytest.mark.parametrize("resets", [True, False])
def test_a_crash_resets_its_clients_connections_unless_told_not_to(resets):
    """A node crashing under a client's request resets the connection (as a killed process's sockets do): the
    client completes it as info one hop after the crash, not at its timeout; ``crash_resets = false`` keeps the
    wait. Echo serves at node 0, so node 0's crashes strand every client's request."""
    config = SimConfig(protocol="echo", nodes=3, duration_s=0.8, seed=4, trace=True,
                       workload=WorkloadConfig(clients=3, op_timeout_s=0.2, think_s=0.0, mix=(0.0, 1.0, 0.0),
                                               crash_resets=resets),
                       nemesis=NemesisConfig(faults=("crash",)))
    result = simulate(config)
    crashes = [rec[0] for rec in result.trace.of_kind("crash") if rec[2] == 0]
    assert crashes
    invoked = {}
    infos = []  # (invoked, completed) of every info
    for event in result.history:
        if event.type.value == "invoke":
            invoked[event.process] = event.time
        elif event.type.value == "info" and event.time < result.healed_at_s:
            infos.append((invoked[event.process], event.time))
    assert infos
    soon = [done for start, done in infos if any(0 <= done - at < 1e-3 for at in crashes)]
    timed_out = [done for start, done in infos if done - start >= 0.2 - 1e-9]
    if resets:
        assert len(soon) == len(infos) and not timed_out
    else:
        assert not soon and len(timed_out) == len(infos)


def test_all_faults_together_stay_linearizable_for_the_single_copy_store():
    config = SimConfig(protocol="echo", nodes=3, duration_s=0.6, seed=11, check=True,
                       workload=WorkloadConfig(clients=4, op_timeout_s=0.05, think_s=0.001), nemesis=NemesisConfig(faults=FAULTS))
    result = simulate(config)
    assert result.linearizable is True and result.progress_after_heal


@pytest.mark.parametrize("fault", LEADER_FAULTS)
def test_leader_faults_strike_each_new_leader_reproducibly(fault):
    """Every strike hits a node that leads at that moment, lands within its fault's window plus 8 of the leader's
    inputs, and the run is a function of its seed (same trace hash)."""
    result = raft_run([fault], seed=5)
    strikes = result.trace.of_kind("fault-strike")
    assert strikes and all(rec[5]["until_s"] <= result.healed_at_s for rec in strikes)
    led = {(rec[2], rec[4]["term"]) for rec in result.trace.of_kind("annotate") if rec[3] == "became-leader"}
    assert all((rec[5]["node"], rec[5]["term"]) in led for rec in strikes)
    assert result.linearizable is True and result.progress_after_heal
    assert raft_run([fault], seed=5).trace_sha256 == result.trace_sha256


def test_leader_faults_leave_leaderless_protocols_alone():
    """The single-copy echo store has no ``role``: a leader-fault window opens and closes, nothing is struck."""
    result = echo_run(["leader-isolate", "leader-crash"])
    assert result.stats["faults_applied"] > 0 and result.trace.count("fault-strike") == 0
    assert result.trace.count("crash") == 0 and not any(rec[5] == "partition" for rec in result.trace.of_kind("drop"))


def test_a_trigger_fires_when_a_key_changes():
    """seedance.sim.triggers: a watch on Raft's votedFor sees every vote granted to another node, once each."""
    from seedance.sim import triggers

    seen = []
    config = SimConfig(protocol="raft", nodes=3, duration_s=0.2, seed=1,
                       protocol_config={"heartbeat_s": 0.002, "election_timeout_s_min": 0.008,
                                        "election_timeout_s_max": 0.016},
                       workload=WorkloadConfig(clients=1), nemesis=NemesisConfig(faults=("leader-crash",)))
    watch = triggers.Watch(key=triggers.vote, fire=lambda runtime, node, before, after: seen.append((node, after)))
    result = simulate(config, actions=[(0.0, triggers.install(watch))])
    votes = [(node, after) for node, after in seen if after is not None]
    assert votes and len(set(votes)) == len(votes)
    leaders = {(rec[2], rec[4]["term"]) for rec in result.trace.of_kind("annotate") if rec[3] == "became-leader"}
    assert leaders and {(candidate, term) for _, (term, candidate) in votes} >= leaders  # each won with a vote (§5.2)


def test_vote_crash_crashes_a_voter_right_after_its_vote():
    """Each vote-crash strike crashes a node that granted a vote at that very instant, for 0.1–1 ms (§5.2)."""
    result = raft_run(["vote-crash", "leader-crash"], seed=4)
    strikes = [rec for rec in result.trace.of_kind("fault-strike") if rec[4] == "vote-crash"]
    crashes = {(rec[0], rec[2]) for rec in result.trace.of_kind("crash")}
    assert strikes and all((rec[5]["at_s"], rec[5]["node"]) in crashes for rec in strikes)
    assert all(1e-4 <= rec[5]["until_s"] - rec[5]["at_s"] <= 1e-3 for rec in strikes
               if rec[5]["until_s"] < result.healed_at_s)
    assert result.linearizable is True and result.progress_after_heal
