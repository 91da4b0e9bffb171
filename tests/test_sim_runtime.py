"""The runtime adapter: effect order, persist-before-send, timers, CPU, crash/restart/pause, collectives, storage."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.engine.effects import ContractError

from _sim_probe import inputs, probe_spec
from seedance.models.protocols.contract import (
    CancelTimer, DurableState, Persist, PersistLog, Send, SetTimer, StartCollective,
)
from seedance.sim import CpuConfig, SimConfig, StorageConfig, WorkloadConfig, simulate
from seedance.sim.storage import Storage

NO_CLIENTS = WorkloadConfig(clients=0)
FSYNC_S = 1e-4


def run(react, *, nodes=2, duration_s=0.1, actions=(), **kwargs):
    spec = probe_spec(react)
    config = SimConfig(protocol=spec, nodes=nodes, duration_s=duration_s, workload=NO_CLIENTS, **kwargs)
    return spec, simulate(config, actions=actions)


def test_persist_is_durable_before_the_following_send():
    """Contract: Persist completes (after the fsync latency) before later effects (Raft §5.1 'before responding')."""
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [Persist(key="term", value=3), Send(dst=1, message="vote", size_bytes=64)]
    spec, result = run(react)
    (arrived, _, _, (src, message)), = inputs(spec, "message", node=1)
    durable = result.trace.of_kind("durable")[0]
    send = result.trace.of_kind("send")[0]
    assert durable[0] == pytest.approx(FSYNC_S + 64 / 2e9) and send[0] >= durable[0]
    assert arrived >= FSYNC_S + result.runtime.network.uncontended_s(0, 1, 64)
    assert result.runtime.hosts[0].storage.values == {"term": 3}


def test_crash_loses_unfsynced_writes_and_recovery_sees_durable_state():
    """A crash during an fsync loses that write; on_recover gets exactly what was durable (PersistLog truncates)."""
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [PersistLog(key="log", start=0, entries=(1, 2, 3)), Persist(key="a", value=[1]),
                    SetTimer(name="second", delay_s=0.001), SetTimer(name="late", delay_s=0.02)]
        if kind == "timer" and arg == "second":
            return [PersistLog(key="log", start=1, entries=(9,)), SetTimer(name="third", delay_s=0.001)]
        if kind == "timer" and arg == "third":
            return [Persist(key="b", value=2)]  # the crash lands inside this fsync

    def crash(runtime):
        runtime.crash(0)

    spec, result = run(react, actions=[(0.00225, crash), (0.005, lambda rt: rt.restart(0))])
    timers = [e[3] for e in inputs(spec, "timer", node=0)]
    assert timers == ["second", "third"]  # "late" died with the first incarnation
    (_, _, _, durable), = inputs(spec, "recover", node=0)
    assert isinstance(durable, DurableState)
    assert durable.values == {"a": [1]} and durable.logs == {"log": (1, 9)}
    assert result.runtime.hosts[0].storage.lost_writes == 1


def test_timers_are_replaced_by_name_and_cancelled():
    def react(node, kind, arg, now):
        if kind == "start":
            return [SetTimer(name="t", delay_s=0.01), SetTimer(name="t", delay_s=0.02),
                    SetTimer(name="u", delay_s=0.005), CancelTimer(name="u"), CancelTimer(name="never-set")]
    spec, _ = run(react, nodes=1)
    fired = inputs(spec, "timer")
    assert [e[3] for e in fired] == ["t"]
    assert fired[0][0] == pytest.approx(0.02, abs=1e-5)


def test_busy_cpu_queues_inputs_fifo():
    """One CPU per node: inputs arriving together are handled one cost apart, in arrival order."""
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [Send(dst=1, message=k, size_bytes=64) for k in range(3)]
    spec, _ = run(react, cpu=CpuConfig(message_s=1e-3))
    got = inputs(spec, "message", node=1)
    assert [e[3][1] for e in got] == [0, 1, 2]
    gaps = np.diff([e[0] for e in got])
    assert gaps == pytest.approx([1e-3, 1e-3])


def test_cpu_hog_delays_a_timer():
    def react(node, kind, arg, now):
        if kind == "start":
            return [SetTimer(name="heartbeat", delay_s=0.01)]
    spec, _ = run(react, nodes=1, actions=[(0.0, lambda rt: rt.hog(0, 0.05))])
    (fired, *_), = inputs(spec, "timer")
    assert fired == pytest.approx(0.05)


def test_clock_skew_scales_timer_delays():
    def react(node, kind, arg, now):
        if kind == "start":
            return [SetTimer(name="arm", delay_s=0.001)]
        if arg == "arm":
            return [SetTimer(name="t", delay_s=0.01)]
    spec, _ = run(react, nodes=2, actions=[(0.0, lambda rt: rt.set_timer_rate(0, 2.0))])
    fired = {e[1]: e[0] for e in inputs(spec, "timer") if e[3] == "t"}
    assert fired[0] == pytest.approx(0.001 + 0.005, abs=1e-5) and fired[1] == pytest.approx(0.001 + 0.01, abs=1e-5)


def test_pause_queues_inputs_until_resume():
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [Send(dst=1, message=k, size_bytes=64) for k in range(2)]
    spec, _ = run(react, actions=[(0.0, lambda rt: rt.pause(1)), (0.03, lambda rt: rt.resume(1))])
    got = inputs(spec, "message", node=1)
    assert [e[3][1] for e in got] == [0, 1] and all(e[0] >= 0.03 for e in got)


def test_messages_to_a_crashed_node_are_dropped_and_restart_uses_the_factory():
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [SetTimer(name="ping", delay_s=0.01)]
        if kind == "timer":
            return [Send(dst=1, message="hello", size_bytes=64)]
    spec, result = run(react, actions=[(0.0, lambda rt: rt.crash(1)), (0.05, lambda rt: rt.restart(1))])
    assert inputs(spec, "message", node=1) == []
    assert [r[5] for r in result.trace.of_kind("drop")] == ["crashed"]
    assert len(inputs(spec, "recover", node=1)) == 1


def test_allreduce_sums_payloads_and_reaches_every_member():
    """NCCL semantics: all members join; the result is the real sum; duration from the cost model (> 0)."""
    def react(node, kind, arg, now):
        if kind == "start":
            return [StartCollective(collective_id=("step", 1), op="allreduce", group=(0, 1, 2),
                                    payload=np.array([1.0, 2.0]) * (node.node_id + 1),
                                    nominal_size_bytes=1 << 20)]
    spec, result = run(react, nodes=3)
    done = inputs(spec, "collective")
    assert sorted(e[1] for e in done) == [0, 1, 2]
    for _, _, _, outcome in done:
        assert outcome.ok and outcome.collective_id == ("step", 1)
        np.testing.assert_allclose(outcome.result, [6.0, 12.0])
    assert done[0][0] > (1 << 20) / (25e9)  # at least the ring bytes over a 25 GB/s link


@pytest.mark.parametrize("op, expected", [
    ("allgather", {0: [[0], [1]], 1: [[0], [1]]}), ("broadcast", {0: [0], 1: [0]}), ("reducescatter", {0: [1], 1: [1]}),
    ("reduce", {0: [1, 1], 1: None}), ("barrier", {0: None, 1: None}),
])
def test_collective_ops_reduce_for_real(op, expected):
    def react(node, kind, arg, now):
        if kind == "start":
            payload = np.array([node.node_id]) if op in ("allgather", "broadcast") else np.array([node.node_id] * 2)
            return [StartCollective(collective_id="c", op=op, group=(0, 1), payload=payload, nominal_size_bytes=1024)]
    spec, _ = run(react, nodes=2)
    results = {e[1]: e[3].result for e in inputs(spec, "collective")}
    for member, want in expected.items():
        if want is None:
            assert results[member] is None
        else:
            np.testing.assert_array_equal(results[member], want)


def test_collective_times_out_when_a_member_never_joins():
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id < 2:
            return [StartCollective(collective_id="c", op="allreduce", group=(0, 1, 2), payload=np.zeros(1),
                                    nominal_size_bytes=8, timeout_s=0.01)]
    spec, _ = run(react, nodes=3)
    done = inputs(spec, "collective")
    assert sorted(e[1] for e in done) == [0, 1]
    assert all(not e[3].ok and e[3].error == "timeout" and e[0] == pytest.approx(0.01) for e in done)


def test_collective_fails_with_peer_failed_when_a_member_crashes():
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id < 2:
            return [StartCollective(collective_id="c", op="allreduce", group=(0, 1, 2), payload=np.zeros(1),
                                    nominal_size_bytes=8)]
    spec, _ = run(react, nodes=3, actions=[(0.001, lambda rt: rt.crash(2))])
    done = inputs(spec, "collective")
    assert sorted(e[1] for e in done) == [0, 1] and all(e[3].error == "peer-failed" for e in done)


def test_protocol_bugs_carry_the_reproduce_command():
    def react(node, kind, arg, now):
        return ["not an effect"]
    with pytest.raises(ContractError, match="node 0: returned something that is not an effect") as info:
        run(react, nodes=1)
    assert any("reproduce: seedance sim run" in note and "--seed 0" in note for note in info.value.__notes__)


def test_storage_semantics_directly():
    storage = Storage(fsync_s=1e-4, write_bandwidth_GBps=1.0)
    storage.stage(PersistLog(key="log", start=0, entries=("a", "b")))
    value = [1, 2]
    storage.stage(Persist(key="v", value=value, size_bytes=1000))
    value.append(3)  # the node keeps mutating its own object: the staged copy must not change
    assert storage.sync_done_s(0.0) == pytest.approx(1e-4 + 1064 / 1e9)
    assert storage.durable_state().empty
    storage.commit()
    storage.stage(PersistLog(key="log", start=1, entries=("c",)))
    assert storage.crash() == 1
    state = storage.durable_state()
    assert state.values == {"v": [1, 2]} and state.logs == {"log": ("a", "b")}
    storage.stage(PersistLog(key="log", start=5, entries=()))
    with pytest.raises(ValueError, match="outside the durable log's positions"):
        storage.commit()


def test_storage_fsync_latency_is_configurable():
    def react(node, kind, arg, now):
        if kind == "start":
            return [Persist(key="x", value=1, size_bytes=0), SetTimer(name="after", delay_s=0.0)]
    spec, _ = run(react, nodes=1, storage=StorageConfig(fsync_s=0.004))
    (fired, *_), = inputs(spec, "timer")
    assert fired == pytest.approx(0.004)


def test_invariant_hooks_run_after_each_input_and_stop_the_run():
    """Campaign hooks: a returned string is a violation, recorded with its time; the run stops there."""
    def react(node, kind, arg, now):
        if kind == "start":
            return [SetTimer(name="t", delay_s=0.01)]
        if kind == "timer":
            node.state["fired"] = node.state.get("fired", 0) + 1
            return [SetTimer(name="t", delay_s=0.01)]
    calls = []

    def hook(view):
        calls.append(view.now)
        fired = [n.state.get("fired", 0) for n in view.nodes if n is not None]
        return "fired three times" if max(fired) >= 3 else None
    spec = probe_spec(react)
    result = simulate(SimConfig(protocol=spec, nodes=1, duration_s=1.0, workload=NO_CLIENTS), invariants=[hook])
    assert result.violations == [(pytest.approx(0.03, abs=1e-4), "fired three times")]
    assert len(calls) == 3 and len(inputs(spec, "timer")) == 3

    periodic = []
    simulate(SimConfig(protocol=probe_spec(react), nodes=1, duration_s=0.1, workload=NO_CLIENTS),
             invariants=[lambda view: periodic.append(view.now)], invariant_every_s=0.025)
    assert periodic == pytest.approx([0.025, 0.05, 0.075])


def test_an_injected_mutant_is_caught_by_the_checker():
    """Echo with the reply sent BEFORE the write is durable: a crash loses an acknowledged write (Raft §5.1's
    rule broken) and the linearizability checker sees the stale read."""
    from seedance.models.protocols import echo
    from seedance.models.protocols.contract import Reply
    from seedance.sim import NemesisConfig

    class ReplyBeforePersist(echo.EchoNode):
        def on_client_request(self, request, now):
            effects = super().on_client_request(request, now)
            return sorted(effects, key=lambda e: not isinstance(e, Reply))  # replies first

    mutant = echo.ProtocolSpec(name="echo-reply-before-persist", factory=ReplyBeforePersist,
                               message_types=echo.SPEC.message_types, default_config=echo.SPEC.default_config)
    verdicts = []
    for seed in range(10):
        config = SimConfig(protocol=mutant, nodes=1, duration_s=0.3, seed=seed, check=True,
                           workload=WorkloadConfig(clients=4, keys=2, op_timeout_s=0.02),
                           nemesis=NemesisConfig(faults=("crash",)))
        verdicts.append(simulate(config).linearizable)
        if verdicts[-1] is False:
            break
    assert False in verdicts
    healthy = SimConfig(protocol="echo", nodes=1, duration_s=0.3, seed=len(verdicts) - 1, check=True,
                        workload=WorkloadConfig(clients=4, keys=2, op_timeout_s=0.02),
                        nemesis=NemesisConfig(faults=("crash",)))
    assert simulate(healthy).linearizable is True


def test_a_collective_across_a_partition_hangs_until_its_timeout():
    """As an NCCL collective across a broken link: it never completes, its members' timeout ends it; once healed,
    the next collective of the same members completes."""
    def react(node, kind, arg, now):
        if kind == "start":
            return [StartCollective(collective_id="cut", op="allreduce", group=(0, 1), payload=np.ones(2),
                                    nominal_size_bytes=1 << 20, timeout_s=0.05)]
        if kind == "collective" and arg.collective_id == "cut":
            return [StartCollective(collective_id="healed", op="allreduce", group=(0, 1), payload=np.ones(2),
                                    nominal_size_bytes=1 << 20, timeout_s=0.05)]
    pairs = [(0, 1), (1, 0)]
    spec, _ = run(react, duration_s=0.2, actions=[(0.0, lambda rt: rt.network.block(pairs, +1)),
                                                   (0.03, lambda rt: rt.network.block(pairs, -1))])
    done = {(e[1], e[3].collective_id): (e[0], e[3]) for e in inputs(spec, "collective")}
    for member in (0, 1):
        at, cut = done[(member, "cut")]
        assert not cut.ok and cut.error == "timeout" and at == pytest.approx(0.05, abs=1e-3)
        assert done[(member, "healed")][1].ok
