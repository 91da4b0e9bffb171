"""Conformance: the same scripted nodes see the same inputs under the simulator and the real backend.

The script (tests/_conformance_protocol.py) touches every part of the contract: durable writes with notices and
group commit, timers, buffers and work (digests of the bytes), collectives of every op, dtype and shape, misuse,
checkpoints, messages. Each node's recorded input sequence — kinds, payload values, shapes and dtypes, the order in
which its writes became durable — must be identical in both runtimes, timing aside. The real run is made once
(3 real processes, gloo collectives, fsync) and compared with simulator runs; the last tests plant each of the
disagreements the two runtimes used to have into the simulator and show that the comparison catches it.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from _conformance_protocol import SPEC
from _real_helpers import child_env
from seedance.engine import collectives as rules
from seedance.real.launcher import LocalLauncher
from seedance.sim.config import SimConfig, WorkloadConfig
from seedance.sim.run import simulate

NODES = 3
SEED = 7


def sim_record(**overrides) -> dict[int, list]:
    record: dict[int, list] = {}
    spec = dataclasses.replace(SPEC, default_config={"record": record})
    simulate(SimConfig(protocol=spec, nodes=NODES, duration_s=5.0, seed=SEED, workload=WorkloadConfig(clients=0),
                       **overrides))
    return record


@pytest.fixture(scope="module")
def real_record(tmp_path_factory) -> dict[int, list]:
    run_dir = tmp_path_factory.mktemp("conformance")
    record_dir = run_dir / "record"
    record_dir.mkdir()
    files = [record_dir / f"node-{i}.jsonl" for i in range(NODES)]
    with LocalLauncher(protocol="_conformance_protocol:SPEC", num_nodes=NODES, run_dir=run_dir / "run", seed=SEED,
                       config={"record_dir": str(record_dir)}, extra_env=child_env()) as launch:
        launch.start_all()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            launch.raise_if_failed()
            if all(f.exists() and '["finished"]' in f.read_text() for f in files):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the real run did not finish its script in 180 s: " +
                        "; ".join(f"{f.name}: {f.read_text()[-300:] if f.exists() else '-'}" for f in files))
    logs = [(run_dir / "run" / f"node-{i}.log").read_text() for i in range(NODES)]
    # one process group for every collective of the script (13 of them), not one per call
    assert all(text.count("process group built") == 1 for text in logs), [t.count("process group built") for t in logs]
    return {i: [json.loads(line) for line in files[i].read_text().splitlines()] for i in range(NODES)}


def first_difference(a: dict[int, list], b: dict[int, list]) -> str | None:
    for node in range(NODES):
        left, right = a.get(node, []), b.get(node, [])
        for k in range(max(len(left), len(right))):
            x = left[k] if k < len(left) else None
            y = right[k] if k < len(right) else None
            if x != y:
                return f"node {node}, input {k}: sim {x!r} != real {y!r}"
    return None


def test_the_script_runs_to_its_end_in_the_simulator():
    record = sim_record()
    for node in range(NODES):
        kinds = [row[0] for row in record[node]]
        assert kinds[0] == "start" and kinds[-1] == "finished", kinds
        # the four notices of one group commit, in the order of the writes
        assert [row[1] for row in record[node] if row[0] == "persisted"][:4] == ["p-value", "p-records", "p-log",
                                                                                  "p-compact"]
        assert [row[1] for row in record[node] if row[0] == "timer"] == ["t2", "t3", "t4"]


def test_simulator_and_real_backend_see_the_same_inputs(real_record):
    sim = sim_record()
    assert first_difference(sim, real_record) is None, first_difference(sim, real_record)
    # and the script did what it says: real arithmetic, the same shapes everywhere
    by_id = {row[1]: row for row in real_record[0] if row[0] == "collective"}
    assert by_id["c-ag"][4]["shape"] == [NODES, 3, 2]
    assert by_id["c-rs"][4]["shape"] == [2, 2] and by_id["c-rs"][4]["dtype"] == "int64"
    assert by_id["c-ar-int"][4]["values"] == [3, 6, 9, -3] and by_id["c-ar-int"][4]["dtype"] == "int32"
    assert by_id["c-red"][4] is None  # node 0 is not the root
    assert by_id["c-bad-op"][2] is False and by_id["c-bad-op"][3].startswith("misuse: unknown collective")
    assert by_id["c-disagree"][3] == "misuse: members disagree on shape: node 0 has (2,), node 1 has (3,)"


def test_the_simulator_is_deterministic_per_seed():
    assert sim_record() == sim_record()


# --- planted disagreements: each of the runtimes' old differences makes the comparison fail -------------------------
def _old_allgather(meta, payloads):  # the simulator used to flatten and concatenate
    if meta.op == "allgather":
        flat = np.concatenate([np.asarray(payloads[m]).reshape(-1) for m in meta.group])
        return {m: flat.copy() for m in meta.group}
    return REAL_RESULTS(meta, payloads)


def _old_reducescatter(meta, payloads):  # ... and to split the flattened sum
    if meta.op == "reducescatter":
        total = np.add.reduce(np.stack([payloads[m] for m in meta.group]), axis=0).reshape(-1)
        return {m: c for m, c in zip(meta.group, np.array_split(total, len(meta.group)))}
    return REAL_RESULTS(meta, payloads)


def _upcast_sums(meta, payloads):  # numpy's default sum of int32 is int64
    if meta.op == "allreduce" and np.asarray(payloads[meta.group[0]]).dtype == np.int32:
        total = np.sum(np.stack([payloads[m] for m in meta.group]), axis=0)
        return {m: total.copy() for m in meta.group}
    return REAL_RESULTS(meta, payloads)


REAL_RESULTS = rules.results


@pytest.mark.parametrize("planted", [_old_allgather, _old_reducescatter, _upcast_sums], ids=lambda f: f.__name__)
def test_a_planted_result_rule_disagreement_is_caught(real_record, monkeypatch, planted):
    monkeypatch.setattr(rules, "results", planted)
    problem = first_difference(sim_record(), real_record)
    assert problem is not None and "collective" in problem


def test_a_misuse_that_raises_in_one_runtime_is_caught(real_record, monkeypatch):
    """The simulator used to raise on an unknown op where the real backend failed the collective."""
    def strict(node_id, op, group, root, payload):
        if op not in rules.OPS:
            raise ValueError(f"unknown collective {op!r}")
        return ORIGINAL_CHECK(node_id, op, group, root, payload)

    monkeypatch.setattr(rules, "check_start", strict)
    with pytest.raises(ValueError):
        sim_record()


ORIGINAL_CHECK = rules.check_start


def test_one_default_timeout_for_both_runtimes():
    from seedance.real import collectives as real_collectives
    from seedance.sim import collectives as sim_collectives

    assert real_collectives.DEFAULT_TIMEOUT_S == rules.DEFAULT_TIMEOUT_S
    assert rules.resolve_timeout(None) == rules.DEFAULT_TIMEOUT_S
    assert sim_collectives.rules is rules and real_collectives.rules is rules


def test_a_missing_member_times_out_at_the_default_in_virtual_time():
    from _sim_probe import inputs, probe_spec

    from seedance.models.protocols.contract import StartCollective

    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [StartCollective(collective_id="x", op="allreduce", group=(0, 1), payload=np.zeros(2),
                                    nominal_size_bytes=8)]
    spec = probe_spec(react)
    simulate(SimConfig(protocol=spec, nodes=2, duration_s=rules.DEFAULT_TIMEOUT_S + 1,
                       workload=WorkloadConfig(clients=0)))
    (at, _, _, done), = inputs(spec, "collective")
    assert done.error == "timeout" and at == pytest.approx(rules.DEFAULT_TIMEOUT_S, abs=1e-3)


# --- Raft, unchanged, under both runtimes -----------------------------------------------------------------------------
RAFT_SEED = 700  # node 0 draws the shortest first election timeout by 144 ms (and is started first by the launcher)


def test_raft_elects_the_same_leader_and_writes_the_same_first_entries_in_both_runtimes(tmp_path):
    """Same seed → same node RNG → the same first election timeouts in both runtimes: the same candidate wins
    the same term, and its first durability notices (its no-op's log write) come in the same order."""
    from _conformance_protocol import RAFT

    record: dict[int, list] = {}
    spec = dataclasses.replace(RAFT, default_config={**RAFT.default_config, "record": record, "limit": 3})
    simulate(SimConfig(protocol=spec, nodes=NODES, duration_s=1.0, seed=RAFT_SEED, workload=WorkloadConfig(clients=0)))
    assert record[0][:2] == [["role", "candidate", 1], ["role", "leader", 1]] and ["persisted", ["log", 1, 1]] in record[0]

    record_dir = tmp_path / "record"
    record_dir.mkdir()
    files = [record_dir / f"raft-{i}.jsonl" for i in range(NODES)]
    with LocalLauncher(protocol="_conformance_protocol:RAFT", num_nodes=NODES, run_dir=tmp_path / "run",
                       seed=RAFT_SEED, config={"record_dir": str(record_dir), "limit": 3},
                       extra_env=child_env()) as launch:
        launch.start_all()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            launch.raise_if_failed()
            if files[0].exists() and len(files[0].read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
    real = {i: [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []
            for i, f in enumerate(files)}
    assert real[0] == record[0], (real, record)
    assert all(real[i] == record.get(i, []) for i in range(1, NODES)), (real, record)
