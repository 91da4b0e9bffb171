"""Multi-Paxos log compaction: snapshots taken, sent (``InstallSnapshot``) and carried by promises, the per-slot
state dropped in memory and on disk, recovery from every crash point between the snapshot's writes, the monitor's
memory bounded, and the simulated and real runs, the campaign and the planted mutants with a small
``snapshot_slots``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge
from paxos_mutants import MUTANTS
from scripted_driver import Driver, to
from snapshot_runs import FAULT_MIXES, faulted_run, monitored_run, same_trace_twice, snapshots_sent
from seedance.errors import SpecError
from seedance.models.kv import KVStore
from seedance.models.protocols.contract import DurableState, Persist, PersistRecords
from seedance.models.protocols.multipaxos import SPEC, MultiPaxosConfig, MultiPaxosNode, invariants
from seedance.models.protocols.multipaxos.messages import (
    MESSAGE_TYPES, NOOP, Accept, Command, InstallSnapshot, Promise,
)
from seedance.models.protocols.multipaxos.snapshots import ACC_TABLE, SNAPSHOT_KEY
from seedance.models.wire import Codec
from seedance.sim import SimConfig, ceilings

FAST = {**FAST_TIMING, "snapshot_slots": 4}


def elect(d: Driver, node_id: int, where=None) -> None:
    d.call(node_id, "stand", lambda node, out: out.extend(node._stand(d.now)))
    d.deliver_all(where)


def writes(d: Driver, leader: int, count: int, first: int = 0, where=None) -> None:
    for c in range(first, first + count):
        d.request(leader, "write", f"k{c % 3}", c, client_id=100 + c, request_id=1)
        d.deliver_all(where)


def received(d: Driver, node_id: int) -> list[str]:
    """The catch-up messages ``node_id`` handled, in order (from the driver's log)."""
    kinds = []
    for line in d.log:
        what = line.split(f"node {node_id}: ", 1)[-1] if f" node {node_id}: " in line else ""
        if what.startswith(("InstallSnapshot ", "Decide ")):
            kinds.append(what.split(" ", 1)[0])
    return kinds


class Recording(Driver):
    """The scripted driver, keeping each node's durable writes in the order its handlers returned them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes: dict[int, list] = {i: [] for i in range(self.num_nodes)}

    def _run(self, node_id, what, handler):
        def recorded(node):
            effects = handler(node)
            self.writes[node_id].extend(e for e in effects if isinstance(e, (Persist, PersistRecords)))
            return effects
        super()._run(node_id, what, recorded)


# ----------------------------------------------------------------------------------------------------- options
def test_snapshot_slots_must_be_a_count():
    assert MultiPaxosConfig().snapshot_slots == 65536 and MultiPaxosConfig(snapshot_slots=0).snapshot_slots == 0
    for bad in (-1, 1.5, True, "10", None):
        with pytest.raises(SpecError, match=r"multipaxos\.snapshot_slots.*integer >= 0 \(0: never\)"):
            MultiPaxosConfig.from_mapping({"snapshot_slots": bad})


def test_the_wire_codec_carries_snapshots():
    codec = Codec(MESSAGE_TYPES)
    state = {"data": [["k", 1], [["a", 2], [3]]], "sessions": [[7, 2, "ok", None, None]], "applied_count": 2}
    for message in (InstallSnapshot(ballot=4, index=9, state=state),
                    Promise(ballot=4, ok=True, promised=4, snapshot_index=9, snapshot=state)):
        assert codec.decode(codec.encode(message)) == message


# ---------------------------------------------------------------------------------------------- taking snapshots
def test_every_replica_compacts_memory_and_disk_and_keeps_its_sessions():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    writes(d, 0, 10)
    d.run_timers(until=d.now + 0.01)
    for node_id, node in d.nodes.items():
        assert node.executed == 10 and node.snapshot_index == 8, node
        assert min(node.accepted) > 8 and min(node.decided) > 8 and len(node.decided_log) <= 2 * 4
        durable = d.records[node_id][ACC_TABLE]
        assert sorted(map(int, durable)) == [9, 10]
        index, state = d.values[node_id][SNAPSHOT_KEY]
        restored = KVStore.restore(state)
        assert index == 8 and restored.read("k1") == 7 and restored.cached(107, 1) is not None
    assert d.violations == []


def test_zero_never_compacts():
    d = Driver(SPEC, 3, config={**FAST, "snapshot_slots": 0}).start()
    elect(d, 0)
    writes(d, 0, 10)
    assert d.nodes[0].snapshot_index == 0 and len(d.nodes[0].accepted) == 10 and SNAPSHOT_KEY not in d.values[0]


# ------------------------------------------------------------------------------------------------ InstallSnapshot
def test_a_replica_behind_the_compaction_point_gets_the_snapshot_then_decides():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    d.crash(2)
    writes(d, 0, 10)  # nodes 0 and 1 choose and compact up to 8 alone
    d.values[2], d.records[2] = {}, {}  # node 2 comes back with an empty disk
    node = d.recover(2)
    d.run_timers(until=d.now + 0.05)
    sent = received(d, 2)
    assert sent[:1] == ["InstallSnapshot"] and "Decide" in sent and node.snapshot_index == 8, sent
    assert node.executed == 10 and node.kv == d.nodes[0].kv and node.kv.cached(109, 1) is not None
    assert d.values[2][SNAPSHOT_KEY][0] == 8 and all(int(s) > 8 for s in d.records[2].get(ACC_TABLE, {}))
    assert d.violations == []


def test_a_replica_above_the_compaction_point_gets_decide_only():
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    writes(d, 0, 9)
    d.crash(2)  # it keeps its snapshot at 8
    writes(d, 0, 2, first=9)
    node = d.recover(2)
    assert node.executed == 8 and node.kv.read("k1") == 7
    d.run_timers(until=d.now + 0.05)
    kinds = received(d, 2)
    assert node.executed == 11 and "Decide" in kinds and "InstallSnapshot" not in kinds and node.kv == d.nodes[0].kv


# ------------------------------------------------------------------------------------------------------ phase 1
def test_a_new_leader_installs_a_promised_snapshot_instead_of_proposing_compacted_slots():
    """Node 2 misses slots 1..10 (nodes 0 and 1 chose them and compacted up to 8); node 0 crashes; node 2 stands
    with low = 1. Node 1's promise carries its snapshot: node 2 installs it and proposes only slots 9 and 10, with
    the values node 1 reports, never a no-op for a compacted slot."""
    d = Driver(SPEC, 3, config=FAST).start()
    elect(d, 0)
    cut_off = lambda s, dst, m: 2 not in (s, dst)  # noqa: E731
    writes(d, 0, 10, where=cut_off)
    d.drop(to(2))
    d.drop(lambda s, dst, m: s == 2)
    d.crash(0)
    d.call(2, "stand", lambda node, out: out.extend(node._stand(d.now)))
    assert d.nodes[2]._low == 1
    d.deliver(lambda s, dst, m: s == 2 and dst == 1)
    promise = next(m for s, dst, m in d.queue if s == 1 and dst == 2 and isinstance(m, Promise))
    assert promise.snapshot_index == 8 and [v.slot for v in promise.accepted] == [9, 10]
    d.deliver(lambda s, dst, m: s == 1 and dst == 2)
    leader = d.nodes[2]
    assert leader.role == "leader" and leader.snapshot_index == 8
    proposed = sorted({v.slot for s, dst, m in d.queue if s == 2 and isinstance(m, Accept) for v in m.values})
    assert proposed == [9, 10] and all(c.op is not None for c in leader._proposals.values())
    d.request(2, "write", "x", "new", client_id=7, request_id=1)
    d.deliver_all()
    assert leader.executed == 11 and leader.kv.read("k0") == 9 and leader.kv.read("x") == "new"
    assert d.violations == []


def test_a_promise_without_its_snapshot_lets_a_leader_overwrite_chosen_slots_and_the_monitor_sees_it():
    """The same schedule with the planted bug: node 1's promise reports slots 9 and 10 only, node 2 proposes no-ops
    for the chosen slots 1..8, and the monitor reports Agreement broken."""
    broken = MUTANTS["snapshotless-promise"]
    d = Driver(broken, 3, config=FAST).start()
    elect(d, 0)
    writes(d, 0, 10, where=lambda s, dst, m: 2 not in (s, dst))
    d.drop(to(2))
    d.drop(lambda s, dst, m: s == 2)
    d.crash(0)
    elect(d, 2)
    d.run_timers(until=d.now + 0.01)
    assert d.nodes[2].role == "leader" and d.nodes[2].decided_log[0] == (1, NOOP)
    assert any(v.startswith("Agreement: slot 1 ") for v in d.violations), d.story()


# ---------------------------------------------------------------------------------------------------- recovery
def _durable_after(writes_: list) -> DurableState:
    values: dict = {}
    records: dict = {}
    for w in writes_:
        if isinstance(w, Persist):
            values[w.key] = w.value
        else:
            table = records.setdefault(w.table, {})
            table.update(w.put)
            for key in w.delete:
                table.pop(key, None)
    return DurableState(values=values, records=records)


def test_the_snapshot_is_durable_before_its_records_are_deleted():
    d = Recording(SPEC, 3, config=FAST).start()
    elect(d, 0)
    writes(d, 0, 9)
    for node_id in range(3):
        sequence = d.writes[node_id]
        deletes = [k for k, w in enumerate(sequence) if isinstance(w, PersistRecords) and w.delete]
        assert deletes, node_id
        for k in deletes:
            snap = sequence[k - 1]
            assert isinstance(snap, Persist) and snap.key == SNAPSHOT_KEY
            assert max(map(int, sequence[k].delete)) <= snap.value[0]


def _crash_at(point: int | None) -> tuple[Recording, int]:
    """Node 1 crashes after its first ``point`` durable writes (None: the run's length) and comes back."""
    d = Recording(SPEC, 3, config=FAST).start()
    elect(d, 0)
    writes(d, 0, 10)
    total = len(d.writes[1])
    if point is None:
        return d, total
    d.crash(1)
    durable = _durable_after(d.writes[1][:point])
    d.values[1], d.records[1] = dict(durable.values), {t: dict(r) for t, r in durable.records.items()}
    node = d.recover(1)
    assert all(s > node.snapshot_index for s in node.accepted) and node.executed == node.snapshot_index
    assert all(int(s) > node.snapshot_index for s in d.records[1].get(ACC_TABLE, {}))  # a leftover is deleted
    writes(d, 0, 3, first=10)
    d.run_timers(until=d.now + 0.02)
    return d, total


def test_recovery_from_every_crash_point_between_the_writes():
    _, total = _crash_at(None)
    for point in range(total + 1):
        d, _ = _crash_at(point)
        node, leader = d.nodes[1], d.nodes[0]
        assert node.executed == leader.executed == 13 and node.kv == leader.kv, point
        assert d.violations == [], (point, d.story())


def test_recovery_reads_the_snapshot_keeps_later_records_and_deletes_older_ones():
    kv = KVStore()
    kv.apply(1, 5, "write", "k", 9)
    put = {str(s): [3, Command(client_id=2, request_id=s, op="write", key="j", value=s).to_plain()]
           for s in (7, 8, 9)}
    node = MultiPaxosNode(0, 3, np.random.default_rng(0), FAST)
    effects = node.on_recover(DurableState(values={SNAPSHOT_KEY: [8, kv.snapshot()], "promised": 3},
                                           records={ACC_TABLE: put}), 0.0)
    assert effects[0] == PersistRecords(table=ACC_TABLE, delete=("7", "8"), size_bytes=32)
    assert (node.executed, node.snapshot_index, sorted(node.accepted), node.promised) == (8, 8, [9], 3)
    assert node.kv.read("k") == 9 and node.kv.cached(1, 5) is not None  # deduplication survives
    clean = MultiPaxosNode(0, 3, np.random.default_rng(0), FAST)
    effects = clean.on_recover(DurableState(values={SNAPSHOT_KEY: [8, kv.snapshot()]},
                                            records={ACC_TABLE: {"9": put["9"]}}), 0.0)
    assert not any(isinstance(e, (Persist, PersistRecords)) for e in effects)


# --------------------------------------------------------------------------------------------------- simulator
SIM = {**FAST_TIMING, "snapshot_slots": 8}


@pytest.mark.parametrize("faults", FAULT_MIXES)
def test_simulated_runs_with_snapshots_are_linearizable_under_faults(faults):
    result, live = faulted_run("multipaxos", SIM, faults)
    assert min(node.snapshot_index for node in live) > 0 and max(len(node.accepted) for node in live) < 64
    assert len({node.kv.snapshot()["applied_count"] for node in live if node.executed == live[0].executed}) == 1
    assert snapshots_sent(result) > 0 or "crash" not in faults


def test_the_same_seed_gives_the_same_trace():
    assert same_trace_twice("multipaxos", SIM)


def test_the_monitor_forgets_what_every_replica_compacted():
    monitor = invariants.Monitor()
    nodes = monitored_run("multipaxos", {"snapshot_slots": 1000}, monitor)
    floor = min(node.snapshot_index for node in nodes)
    assert floor > invariants._PRUNE_EVERY and min(monitor.decided) > floor - invariants._PRUNE_EVERY - 1000
    assert max(node.executed for node in nodes) - min(monitor.decided) < 2 * invariants._PRUNE_EVERY + 2000
    assert all(len(node.decided_log) <= 2 * 1000 + 100 for node in nodes)


def test_the_memory_estimate_bounds_the_slots_by_twice_snapshot_slots():
    def logs(hours: float, **config) -> float:
        return ceilings.estimate_memory(SimConfig(protocol="multipaxos", nodes=5, duration_s=hours * 3600.0,
                                                  protocol_config=config))["logs"]

    assert logs(1) == logs(72) == 2 * 65536 * 5 * ceilings.MULTIPAXOS_SLOT_BYTES
    assert logs(1, snapshot_slots=100) == 2 * 100 * 5 * ceilings.MULTIPAXOS_SLOT_BYTES
    assert logs(72, snapshot_slots=0) > 50 * logs(1, snapshot_slots=0)


# ---------------------------------------------------------------------------------------- campaign and mutants
@pytest.mark.parametrize("seed", range(12))
def test_campaign_with_tiny_snapshots(seed, request):
    result, problems = judge(campaign_config(seed, "multipaxos", SIM))
    assert not problems, explain(result, problems, request.node.nodeid)
    assert result.ops_ok > 0


# the first campaign seed (of 0..99) on which each Multi-Paxos mutant breaks Agreement with snapshot_slots=8; without
# snapshots (tests/test_paxos_mutants.py) lowest-ballot is caught at seed 1: a promised snapshot leaves fewer slots
# for phase 1 to re-propose, so fewer schedules expose the wrong choice among reported values. snapshotless-promise
# (an acceptor's Promise leaves its snapshot out) exists only with compaction.
FIRST_DETECTION = {"lowest-ballot": 64, "accept-below-promise": 28, "snapshotless-promise": 1}


@pytest.mark.parametrize("name", sorted(FIRST_DETECTION))
def test_planted_bugs_are_still_caught_with_tiny_snapshots(name):
    _, problems = judge(campaign_config(FIRST_DETECTION[name], MUTANTS[name], SIM, check=False))
    assert any("Agreement" in p for p in problems), problems


# ------------------------------------------------------------------------------------------------ real backend
@pytest.mark.multiprocess
def test_a_real_run_installs_snapshots_over_the_wire(tmp_path):
    """3 processes, SIGKILLs, a snapshot every 8 slots: linearizable, and a restarted (or lagging) replica receives
    InstallSnapshot through the real codec."""
    from seedance.real.run import run_real

    summary = None
    for seed in (1, 2, 3):
        out = tmp_path / f"run-{seed}"
        summary = run_real(protocol="multipaxos", nodes=3, clients=4, duration_s=2.0, seed=seed, out=out,
                           kill_rate=2.0, restart_delay_s=0.2, config={"snapshot_slots": 8})
        assert summary["linearizable"] is True, summary["reproduce"]
        delivered = 0
        for path in out.glob("node-*.trace.jsonl"):
            for line in path.read_text().splitlines():
                delivered += sum(1 for r in json.loads(line) if r[1] == "deliver" and r[3] == "InstallSnapshot")
        if delivered:
            return
    pytest.fail(f"no InstallSnapshot delivered in 3 real runs; last: {summary and summary['reproduce']}")
