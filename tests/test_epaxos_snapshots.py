"""EPaxos instance compaction (seedance/models/protocols/epaxos/snapshots.py): snapshots taken and made durable
before any record they cover is deleted, instances forgotten only below every replica's durable snapshot, late
messages about a forgotten instance dropped, recovery from every crash point between the writes, the logs and the
monitor bounded, and the simulated and real runs, the campaign and the planted mutants with a small
``snapshot_instances``."""

from __future__ import annotations

import json

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge, liveness_failure
from paxos_mutants import MUTANTS
from scripted_driver import Driver
from snapshot_runs import FAULT_MIXES, faulted_run, monitored_run, same_trace_twice
from seedance.errors import SpecError
from seedance.models.kv import KVStore
from seedance.models.protocols.contract import Persist, PersistRecords
from seedance.models.protocols.epaxos import SPEC, EPaxosConfig, invariants
from seedance.models.protocols.epaxos.instance import TABLE
from seedance.models.protocols.epaxos.messages import MESSAGE_TYPES, Commit, PreAccept, Prepare, Watermark
from seedance.models.protocols.epaxos.snapshots import FORGOTTEN_KEY, SNAPSHOT_KEY
from seedance.models.protocols.multipaxos.messages import Command
from seedance.models.wire import Codec
from seedance.sim import SimConfig, ceilings

FAST = {**FAST_TIMING, "snapshot_instances": 4}


def writes(d: Driver, count: int, first: int = 0, leaders=(0,)) -> None:
    for c in range(first, first + count):
        d.request(leaders[c % len(leaders)], "write", f"k{c % 3}", c, client_id=100 + c, request_id=1)
        d.deliver_all()


class Recording(Driver):
    """The scripted driver, keeping each node's durable writes in the order its handlers returned them; with
    ``crash_after``, node ``victim`` crashes just before its durable write number ``crash_after`` + 1 (that write
    and every effect after it in the same handler never happen)."""

    def __init__(self, *args, victim: int = -1, crash_after: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes: dict[int, list] = {i: [] for i in range(self.num_nodes)}
        self.victim, self.crash_after, self._doomed = victim, crash_after, False

    def _run(self, node_id, what, handler):
        def recorded(node):
            kept = []
            for effect in handler(node):
                if isinstance(effect, (Persist, PersistRecords)):
                    if node_id == self.victim and len(self.writes[node_id]) == self.crash_after:
                        self._doomed, self.crash_after = True, None
                        break
                    self.writes[node_id].append(effect)
                kept.append(effect)
            return kept
        super()._run(node_id, what, recorded)
        if self._doomed and node_id in self.nodes:
            self._doomed = False
            self.crash(node_id)


# ----------------------------------------------------------------------------------------------------- options
def test_snapshot_instances_must_be_a_count():
    assert EPaxosConfig().snapshot_instances == 65536 and EPaxosConfig(snapshot_instances=0).snapshot_instances == 0
    for bad in (-1, 1.5, True, "10", None):
        with pytest.raises(SpecError, match=r"epaxos\.snapshot_instances.*integer >= 0 \(0: never\)"):
            EPaxosConfig.from_mapping({"snapshot_instances": bad})


def test_the_wire_codec_carries_the_watermark():
    codec = Codec(MESSAGE_TYPES)
    message = Watermark(prefix=(3, 0, 17))
    assert codec.decode(codec.encode(message)) == message


# ---------------------------------------------------------------------------------------------- taking snapshots
def test_every_replica_snapshots_then_forgets_below_the_watermark_in_memory_and_on_disk():
    d = Driver(SPEC, 3, config=FAST).start()
    writes(d, 10, leaders=(0, 1, 2))
    d.run_timers(until=d.now + 0.01)
    for node_id, node in d.nodes.items():
        assert node.executed_prefix == [4, 3, 3] and node.snapshot_prefix == [3, 3, 2], node.snapshot_prefix
        assert node.forgotten == [3, 3, 2] and sorted(node.instances) == [(0, 4), (2, 3)], node.instances
        assert sorted(d.records[node_id][TABLE]) == ["0.4", "2.3"] and d.values[node_id][FORGOTTEN_KEY] == [3, 3, 2]
        prefix, above, state, results, counts = d.values[node_id][SNAPSHOT_KEY]
        assert prefix == [3, 3, 2] and above == [] and dict(counts) == {"k0": 3, "k1": 3, "k2": 2}
        assert KVStore.restore(state).read("k1") == 7 and [107, 1] in [r[:2] for r in results]
        assert (109, 1) in node.results and (100, 1) not in node.results  # the sessions of forgotten instances go
        assert node.kv.read("k0") == 9
    assert d.violations == []


def test_zero_never_snapshots():
    d = Driver(SPEC, 3, config={**FAST, "snapshot_instances": 0}).start()
    writes(d, 10)
    assert d.nodes[0].forgotten == [0, 0, 0] and len(d.nodes[0].instances) == 10 and SNAPSHOT_KEY not in d.values[0]


def test_the_snapshot_is_durable_before_its_records_are_deleted():
    d = Recording(SPEC, 3, config=FAST).start()
    writes(d, 12, leaders=(0, 1))
    for node_id in range(3):
        sequence = d.writes[node_id]
        deletes = [k for k, w in enumerate(sequence) if isinstance(w, PersistRecords) and w.delete]
        assert deletes, node_id
        for k in deletes:
            snap = next(w for w in reversed(sequence[:k]) if isinstance(w, Persist) and w.key == SNAPSHOT_KEY)
            assert sequence[k - 1].key == FORGOTTEN_KEY
            for name in sequence[k].delete:
                q, i = map(int, name.split("."))
                assert i <= snap.value[0][q] and i <= sequence[k - 1].value[q]


# ---------------------------------------------------------------------------------------------- the watermark
def test_a_crashed_replica_holds_the_watermark_back():
    d = Driver(SPEC, 3, config=FAST).start()
    d.crash(2)
    writes(d, 10)
    d.run_timers(until=d.now + 0.05)
    assert d.nodes[0].snapshot_prefix[0] >= 8 and d.nodes[0].forgotten == [0, 0, 0]
    assert len(d.nodes[0].instances) == 10
    node = d.recover(2)  # told of a peer's snapshot, it fetches what it missed, executes, snapshots and reports
    d.run_timers(until=d.now + 1.5)
    assert node.executed_prefix[0] == 10 and d.nodes[0].forgotten[0] >= 8
    assert [node.kv.read(f"k{k}") for k in range(3)] == [d.nodes[0].kv.read(f"k{k}") for k in range(3)]
    assert d.violations == []


def test_late_and_duplicate_messages_about_a_forgotten_instance_are_dropped():
    d = Driver(SPEC, 3, config=FAST).start()
    writes(d, 10)
    node = d.nodes[1]
    assert node.forgotten[0] >= 4 and (0, 2) not in node.instances
    command = Command(client_id=101, request_id=1, op="write", key="k1", value=1)
    for message in (PreAccept(ballot=0, replica=0, instance=2, command=command, seq=1, deps=()),
                    Commit(replica=0, instance=2, command=command, seq=1, deps=()),
                    Prepare(ballot=4, replica=0, instance=2)):
        assert node.on_message(0, message, d.now) == []
    assert (0, 2) not in node.instances and "0.2" not in d.records[1][TABLE]


# ----------------------------------------------------------------------------------------------------- recovery
def _crash_at(point: int | None) -> tuple[Recording, int]:
    """Node 1 crashes before its durable write number ``point`` + 1 (None: never) and comes back."""
    d = Recording(SPEC, 3, config=FAST, victim=1, crash_after=point).start()
    writes(d, 10, leaders=(0, 2))
    total = len(d.writes[1])
    if point is None:
        return d, total
    if 1 in d.nodes:
        d.crash(1)
    d.crash_after = None
    node = d.recover(1)
    forgotten = node.forgotten
    assert all(i > forgotten[q] for q, i in node.instances)
    assert all(int(n.split(".")[1]) > forgotten[int(n.split(".")[0])] for n in d.records[1].get(TABLE, {}))
    writes(d, 3, first=10, leaders=(0, 2))
    d.run_timers(until=d.now + 0.5)
    return d, total


def test_recovery_from_every_crash_point_between_the_writes():
    _, total = _crash_at(None)
    assert total > 20
    for point in range(total + 1):
        d, _ = _crash_at(point)
        node, other = d.nodes[1], d.nodes[0]
        assert node.executed_prefix == other.executed_prefix == [7, 0, 6], (point, node.executed_prefix)
        assert [node.kv.read(f"k{k}") for k in range(3)] == [other.kv.read(f"k{k}") for k in range(3)], point
        assert node.kv.applied_count == other.kv.applied_count, point
        assert d.violations == [], (point, d.story())


def test_recovery_restores_the_snapshot_and_re_executes_only_what_it_does_not_reflect():
    d = Driver(SPEC, 3, config=FAST).start()
    writes(d, 6)
    d.crash(1)
    node = d.recover(1)
    before = d.nodes[0]
    assert node.snapshot_prefix == [4, 0, 0] and node.executed_prefix == [6, 0, 0] and node.kv == before.kv
    assert node.exec_base_counts == {"k0": 2, "k1": 1, "k2": 1} and len(node.exec_log) == 2  # instances 5, 6 again
    assert (104, 1) in node.results  # deduplication survives
    assert d.violations == []


def test_a_leader_whose_instances_were_all_forgotten_never_reuses_their_numbers():
    d = Driver(SPEC, 3, config=FAST).start()
    writes(d, 8)
    assert d.nodes[0].forgotten[0] == 8 and d.records[0][TABLE] == {}  # no record of ours is left
    d.crash(0)
    node = d.recover(0)
    assert node.next_instance == 9 and node.executed_prefix[0] == 8
    writes(d, 2, first=8)
    d.run_timers(until=d.now + 0.05)
    assert all(n.executed_prefix[0] == 10 and n.kv.read("k0") == 9 for n in d.nodes.values())
    assert d.violations == []


# --------------------------------------------------------------------------------------------------- simulator
SIM = {**FAST_TIMING, "snapshot_instances": 8}


@pytest.mark.parametrize("faults", FAULT_MIXES + [("loss", "duplicate")])
def test_simulated_runs_with_snapshots_are_linearizable_under_faults(faults):
    _, live = faulted_run("epaxos", SIM, faults)
    assert min(sum(node.forgotten) for node in live) > 100
    assert max(len(node.instances) for node in live) < 200
    assert max(len(node.commit_log) + len(node.exec_log) for node in live) < 400


def test_the_same_seed_gives_the_same_trace():
    assert same_trace_twice("epaxos", SIM)


def test_the_monitor_forgets_what_every_replica_compacted():
    monitor = invariants.Monitor()
    nodes = monitored_run("epaxos", {"snapshot_instances": 500}, monitor)
    total = sum(nodes[0].executed_prefix)
    assert total > 2 * invariants._PRUNE_EVERY and min(sum(node.forgotten) for node in nodes) > total - 2000
    assert len(monitor.committed) < invariants._PRUNE_EVERY + 2000
    assert sum(map(len, monitor.order.values())) < invariants._PRUNE_EVERY + 2000
    assert all(len(n.commit_log) + len(n.exec_log) + len(n.instances) + len(n.results) < 4 * 1000 for n in nodes)


def test_the_memory_estimate_bounds_the_instances_by_twice_snapshot_instances():
    def logs(hours: float, **config) -> float:
        return ceilings.estimate_memory(SimConfig(protocol="epaxos", nodes=5, duration_s=hours * 3600.0,
                                                  protocol_config=config))["logs"]

    assert logs(1) == logs(72)
    assert logs(1, snapshot_instances=100) < logs(1)
    assert logs(72, snapshot_instances=0) > 50 * logs(1, snapshot_instances=0)


# ---------------------------------------------------------------------------------------- campaign and mutants
def _tiny_campaign(seed: int, request, **overrides) -> None:
    result, problems = judge(campaign_config(seed, "epaxos", SIM, **overrides))
    assert not problems, explain(result, problems, request.node.nodeid)
    assert result.progress_after_heal, liveness_failure(result, request.node.nodeid)
    assert result.ops_ok > 0


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.campaign) if s >= 12 else s for s in range(100)])
def test_campaign_with_tiny_snapshots(seed, request):
    """The campaign's draws (3 or 5 replicas) with a snapshot every 8 instances: 12 seeds in ``make test``."""
    _tiny_campaign(seed, request)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.campaign) if s >= 4 else s for s in range(50)])
def test_campaign_with_tiny_snapshots_five_replicas(seed, request):
    _tiny_campaign(seed, request, nodes=5)


# the first campaign seed (of 0..99) on which each mutant is caught with snapshot_instances=8; without snapshots
# (tests/test_paxos_mutants.py) single-ballot is caught at seed 22: Watermark messages and hole fetches change the
# schedules. early-forget (a replica forgets what its own snapshot reflects) exists only with compaction; the
# monitor's Compaction rule names it.
FIRST_DETECTION = {"unchecked-fast-path": 0, "single-ballot": 53, "early-forget": 0}


@pytest.mark.parametrize("name", sorted(FIRST_DETECTION))
def test_planted_bugs_are_still_caught_with_tiny_snapshots(name):
    _, problems = judge(campaign_config(FIRST_DETECTION[name], MUTANTS[name], SIM, check=False))
    problems = [p for p in problems if not p.startswith("linearizable=None")]
    assert problems, name
    if name == "early-forget":
        assert any("Compaction" in p for p in problems), problems


def test_forgetting_at_the_own_snapshot_is_caught_by_the_monitor():
    """A replica that forgets what its own snapshot reflects while a peer has not snapshotted it yet."""
    d = Driver(MUTANTS["early-forget"], 3, config=FAST).start()
    d.crash(2)
    writes(d, 6)
    assert d.nodes[0].forgotten[0] >= 4
    assert any(v.startswith("Compaction: node 0 forgot instances of replica 0") for v in d.violations), d.violations


# ------------------------------------------------------------------------------------------------ real backend
@pytest.mark.multiprocess
def test_a_real_run_with_snapshots_sends_the_watermark_over_the_wire(tmp_path):
    """3 processes, SIGKILLs, a snapshot every 8 instances: linearizable, and Watermark messages delivered through
    the real codec."""
    from seedance.real.run import run_real

    out = tmp_path / "run"
    summary = run_real(protocol="epaxos", nodes=3, clients=4, duration_s=2.0, seed=1, out=out, kill_rate=2.0,
                       restart_delay_s=0.2, config={"snapshot_instances": 8})
    assert summary["linearizable"] is True, summary["reproduce"]
    delivered = 0
    for path in out.glob("node-*.trace.jsonl"):
        for line in path.read_text().splitlines():
            delivered += sum(1 for r in json.loads(line) if r[1] == "deliver" and r[3] == "Watermark")
    assert delivered > 0, summary["reproduce"]
