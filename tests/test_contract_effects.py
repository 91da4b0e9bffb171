"""The contract's newer effects, in the simulator and (where it matters) in real processes: keyed records,
checkpoints, buffers by handle and their misuse, work on a device stream / off the event loop, observations in the
history, per-protocol operations and invariant monitors, background training traffic."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from _conformance_protocol import TICKER
from _real_helpers import child_env
from _sim_probe import inputs, probe_spec
from seedance.history.events import read_jsonl
from seedance.engine.effects import ContractError
from seedance.errors import SpecError
from seedance.models.protocols.contract import (
    Checkpoint, CreateBuffer, FreeBuffer, Observe, PersistRecords, ProtocolSpec, Restore, SetTimer, StartWork,
)
from seedance.models.wire import Codec
from seedance.real.launcher import LocalLauncher
from seedance.real.storage import DiskStorage
from seedance.sim.config import SimConfig, WorkloadConfig
from seedance.sim.run import simulate, write_outputs

NO_CLIENTS = WorkloadConfig(clients=0)


def run(react, *, nodes=1, duration_s=0.5, actions=(), **kwargs):
    spec = probe_spec(react)
    return spec, simulate(SimConfig(protocol=spec, nodes=nodes, duration_s=duration_s, workload=NO_CLIENTS, **kwargs),
                          actions=actions)


# ------------------------------------------------------------------------------------------------- durability
def test_records_and_checkpoints_survive_a_crash_in_the_simulator():
    def react(node, kind, arg, now):
        if kind == "start":
            return [PersistRecords(table="inst", put={"1": [3, "a"], "2": 5}, notify="r1"),
                    CreateBuffer(handle="w", data=np.arange(4.0)),
                    Checkpoint(name="ck", buffers=("w",), notify="ck"),
                    PersistRecords(table="inst", put={"3": 1}, delete=("2",))]
        if kind == "recover":
            node.state["durable"] = arg
            return [Restore(name="ck"), StartWork(work_id="d", op="to_host", buffers=("w",))]
    spec, result = run(react, actions=[(0.1, lambda rt: rt.crash(0)), (0.2, lambda rt: rt.restart(0))])
    (_, _, _, durable), = inputs(spec, "recover")
    assert durable.records == {"inst": {"1": [3, "a"], "3": 1}} and durable.checkpoints == ("ck",)


def test_disk_records_replay_compact_and_checkpoints_publish_atomically(tmp_path):
    codec = Codec(())
    disk = DiskStorage(tmp_path, codec)
    for i in range(700):  # compaction happens past 2 × live + 256 steps
        disk.stage(PersistRecords(table="t", put={str(i % 50): i}, delete=(str((i + 25) % 50),)))
        disk.sync()
    from seedance.engine.effects import StagedCheckpoint

    disk.stage(StagedCheckpoint("ck", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}))
    disk.sync()
    disk.close()
    log_file, = (tmp_path / "logs").glob("*.log")
    steps = DiskStorage(tmp_path, codec)._read_log("x", log_file)
    assert len(steps) < 700  # compacted
    again = DiskStorage(tmp_path, codec)
    state = again.load()
    expected: dict = {}
    for i in range(700):
        expected[str(i % 50)] = i
        expected.pop(str((i + 25) % 50), None)
    assert state.records == {"t": expected} and state.checkpoints == ("ck",)
    np.testing.assert_array_equal(again.restore("ck")["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    # an unpublished folder (a crash before the pointer moved) is ignored and removed
    base = next((tmp_path / "checkpoints").iterdir())
    (base / "7").mkdir()
    (base / "7" / "junk.npy").write_bytes(b"torn")
    assert DiskStorage(tmp_path, codec).load().checkpoints == ("ck",) and not (base / "7").exists()


# ------------------------------------------------------------------------------------------------ buffer misuse
@pytest.mark.parametrize("effects, words", [
    ([CreateBuffer(handle="w", shape=(2,)), FreeBuffer(handle="w"), StartWork(work_id=1, op="fill", buffers=("w",))],
     "buffer 'w' used after it was freed"),
    ([CreateBuffer(handle="w", shape=(2,)), FreeBuffer(handle="w"), FreeBuffer(handle="w")],
     "buffer 'w' freed after it was freed"),
    ([CreateBuffer(handle="w", shape=(2,)), CreateBuffer(handle="w", shape=(2,))], "buffer 'w' created twice"),
    ([FreeBuffer(handle="nope")], "buffer 'nope' freed but never created"),
])
def test_buffer_misuse_names_the_node_the_effect_and_the_seed(effects, words):
    def react(node, kind, arg, now):
        return effects if kind == "start" else []
    with pytest.raises(ContractError, match=words) as info:
        run(react, seed=11)
    assert "node 0" in str(info.value) and type(effects[-1]).__name__ in str(info.value)
    assert any("--seed 11" in note for note in info.value.__notes__)


def test_live_buffers_are_counted():
    def react(node, kind, arg, now):
        if kind == "start":
            return [CreateBuffer(handle=f"b{i}", shape=(3,)) for i in range(5)] + [FreeBuffer(handle="b0")]
    _, result = run(react)
    table = result.runtime.hosts[0].engine.buffers
    assert (table.live, table.created, table.freed) == (4, 5, 1)


# ---------------------------------------------------------------------------------------------------------- work
def test_work_occupies_the_device_stream_in_order_while_inputs_are_handled():
    def react(node, kind, arg, now):
        if kind == "start":
            return [StartWork(work_id="a", op="idle", params={"duration_s": 0.1}),
                    StartWork(work_id="b", op="idle", params={"duration_s": 0.1}),
                    SetTimer(name="t", delay_s=0.05)]
        return []
    spec = probe_spec(react)
    log = spec.default_config["log"]
    simulate(SimConfig(protocol=spec, nodes=1, duration_s=0.5, workload=NO_CLIENTS))
    timer_at = [e[0] for e in log if e[2] == "timer"][0]
    work = [(e[0], e[3].work_id) for e in log if e[2] == "work"]
    assert timer_at == pytest.approx(0.05, abs=1e-3)  # handled while work ran
    assert [w for _, w in work] == ["a", "b"]
    assert work[0][0] == pytest.approx(0.1, abs=1e-3) and work[1][0] == pytest.approx(0.2, abs=1e-3)


def test_the_compute_model_charges_flops_by_device_kind():
    from seedance.models.compute import work_time_s

    a100 = work_time_s("A100", 1e12, 0)
    h100 = work_time_s("H100", 1e12, 0)
    assert a100 == pytest.approx(5e-6 + 1e12 / (312e12 * 0.7)) and h100 < a100
    assert work_time_s("A100", 0, 2e9) == pytest.approx(5e-6 + 2e9 / (2039e9 * 0.8))


def test_real_work_runs_off_the_event_loop(tmp_path):
    """One second of work on the node's worker: its timer keeps firing every 20 ms meanwhile."""
    record = tmp_path / "record"
    record.mkdir()
    with LocalLauncher(protocol="_conformance_protocol:TICKER", num_nodes=1, run_dir=tmp_path / "run", seed=1,
                       config={"record_dir": str(record), "work_s": 1.0}, extra_env=child_env()) as launch:
        launch.start_all()
        deadline = time.monotonic() + 60
        out = record / "ticker-0.json"
        while time.monotonic() < deadline and not out.exists():
            launch.raise_if_failed()
            time.sleep(0.1)
    result = json.loads(out.read_text())
    assert result["ok"] and result["ticks_during_work"] >= 20, result  # 50 expected; a blocked loop gives 0


# -------------------------------------------------------------------------------------------------- observations
def test_observations_become_replica_events_in_the_history(tmp_path):
    def react(node, kind, arg, now):
        if kind == "start":
            return [Observe(what="apply", key="k", value=np.int64(node.node_id)), SetTimer(name="x", delay_s=0.01)]
        if kind == "timer":
            return [Observe(what="observe", key="k", value=[1, 2])]
    _, result = run(react, nodes=2)
    write_outputs(result, tmp_path)
    replicas = read_jsonl(tmp_path / "history.jsonl", replicas=True)
    assert [(e.node, e.f, e.value) for e in replicas] == [(0, "apply", 0), (1, "apply", 1), (0, "observe", (1, 2)),
                                                          (1, "observe", (1, 2))]
    assert read_jsonl(tmp_path / "history.jsonl") == []  # client readers see client events only


# ------------------------------------------------------------------------------------------ per-protocol judgement
def test_a_protocol_declares_its_operations():
    spec = probe_spec(lambda *a: [])
    spec = ProtocolSpec(name="probe", factory=spec.factory, message_types=(), default_config=spec.default_config,
                        operations=("write",))
    with pytest.raises(SpecError, match="does not serve 'read'"):
        simulate(SimConfig(protocol=spec, nodes=1, duration_s=0.1, workload=WorkloadConfig(clients=1)))


def test_the_protocols_monitor_runs_after_every_input_and_stops_the_run():
    class Monitor:
        def observe(self, nodes):
            return [f"node {n.node_id} saw the timer" for n in nodes if n.state.get("fired")]

    def react(node, kind, arg, now):
        if kind == "start":
            return [SetTimer(name="x", delay_s=0.25)]
        if kind == "timer":
            node.state["fired"] = True
        return []
    base = probe_spec(react)
    spec = ProtocolSpec(name="probe", factory=base.factory, message_types=(), default_config=base.default_config,
                        monitor=Monitor)
    result = simulate(SimConfig(protocol=spec, nodes=1, duration_s=1.0, workload=NO_CLIENTS))
    assert result.violations == [(pytest.approx(0.25), "node 0 saw the timer")]
    quiet = simulate(SimConfig(protocol=spec, nodes=1, duration_s=1.0, workload=NO_CLIENTS, monitor=False))
    assert quiet.violations == []


# ------------------------------------------------------------------------------------------- background traffic
def test_training_traffic_slows_consensus_on_the_same_links():
    base = dict(protocol="raft", nodes=3, duration_s=0.6, seed=3, topology="dgx-a100", check=False, trace=False,
                workload=WorkloadConfig(clients=4))
    quiet = simulate(SimConfig(**base), liveness=False)
    busy = simulate(SimConfig(**base, background=("allreduce:1GiB@0.2",)), liveness=False)
    stats = busy.background["allreduce:1073741824"]
    assert stats["count"] == 3 and stats["mean_ms"] > 1.0
    assert busy.latency_ms_p99 > quiet.latency_ms_p99
    assert "--background allreduce:1073741824@0.2" in busy.reproduce


@pytest.mark.parametrize("text", ["allreduce", "allreduce:1GiB", "bogus:1GiB@1", "allreduce:-1@1",
                                  "allreduce:1GiB@0", "allreduce:1GiB@nan", "allreduce:xyz@1"])
def test_bad_background_specs_are_refused_with_the_field(text):
    with pytest.raises(SpecError) as info:
        SimConfig(background=(text,))
    assert info.value.field == "--background"


def test_real_run_writes_observations_into_the_history_and_judges_with_the_protocols_checker(tmp_path):
    from seedance.real.clients import Workload
    from seedance.real.run import run_real

    record = tmp_path / "record"
    record.mkdir()
    summary = run_real(protocol="_conformance_protocol:SPEC", nodes=3, clients=1, duration_s=3.0, seed=7,
                       out=tmp_path / "run", config={"record_dir": str(record)}, extra_env=child_env(),
                       workload=Workload(num_clients=1, op_timeout_s=0.2))
    replicas = read_jsonl(tmp_path / "run" / "history.jsonl", replicas=True)
    replicas = [e for e in replicas if getattr(e, "node", None) is not None]
    # the token's hops 2..(rounds × nodes) are applied once each, by the node that received them (node 0 finishes)
    assert sorted(e.value for e in replicas) == [2, 3, 4, 5, 6] and summary["replica_events"] == 5
    assert summary["linearizable"] == "unknown"  # the script declares no checker model
