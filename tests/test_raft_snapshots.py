"""Raft's log compaction (§7): snapshots taken, sent and installed, the log compacted in memory and on both disks,
and recovery from every state a crash can leave between the snapshot's writes."""

from __future__ import annotations

import collections

import pytest

from raft_harness import Cluster, fuzz
from snapshot_runs import FAULT_MIXES, faulted_run, monitored_run, snapshots_sent
from seedance.errors import SpecError
from seedance.models.protocols.contract import CompactLog, DurableState, Persist, PersistLog
from seedance.models.protocols.raft import RaftConfig, RaftNode, invariants
from seedance.models.protocols.raft.log import RaftLog
from seedance.models.protocols.raft.messages import Entry
from seedance.models.protocols.raft.roles import LOG_KEY, SNAPSHOT_KEY
from seedance.models.wire import Codec
from seedance.real.storage import DiskStorage, StorageError
from seedance.sim.storage import Storage

import numpy as np


def _entries(*terms: int) -> list[Entry]:
    return [Entry(term=t, client_id=1, request_id=i, op="write", key="k", value=i) for i, t in enumerate(terms)]


# ---------------------------------------------------------------------------------------------------- the log
def test_a_compacted_log_keeps_its_indexes_and_refuses_what_it_dropped():
    log = RaftLog(_entries(1, 1, 2, 2, 3))
    log.compact(3, 2)
    assert (log.offset, log.offset_term, log.last_index, log.last_term, len(log)) == (3, 2, 5, 3, 2)
    assert log.term_at(3) == 2 and log.entry(4).term == 2 and [e.term for e in log.entries(4, 5)] == [2, 3]
    for bad in (lambda: log.entry(3), lambda: log.term_at(2), lambda: log.entries(3, 4), lambda: log.truncate(2)):
        with pytest.raises(IndexError, match="compacted"):
            bad()
    assert log.first_index_of_term(4) == 4  # the run of term 2 continues into the snapshot: it stops at the offset
    assert log.append(Entry(term=3)) == 6
    log.truncate(4)
    assert log.last_index == 4


def test_a_batch_is_shared_until_the_log_changes_under_it():
    log = RaftLog(_entries(1, 1, 2, 2))
    entries, size = log.batch(2, 4)
    assert [e.request_id for e in entries] == [1, 2, 3] and size == sum(e.size_bytes for e in entries)
    assert log.batch(2, 4)[0] is entries  # the next follower at the same index gets the same tuple
    log.append(Entry(term=2))
    assert log.batch(2, 4)[0] is entries  # appending past it changes nothing in it
    log.truncate(2)
    log.extend(_entries(3, 3))  # indexes 3 and 4 now hold other entries
    assert [e.term for e in log.batch(2, 4)[0]] == [1, 3, 3]
    log.compact(2, 1)
    assert [e.term for e in log.batch(3, 4)[0]] == [3, 3] and log.last_index == 4
    with pytest.raises(IndexError, match="compacted"):
        log.batch(2, 4)


def test_the_last_index_follows_every_change():
    log = RaftLog(_entries(1, 1, 2), offset=4, offset_term=1)
    assert log.last_index == 7
    assert log.append(Entry(term=2)) == 8 and log.last_index == 8
    log.extend(_entries(3, 3))
    assert log.last_index == 10
    log.truncate(6)
    assert log.last_index == 6
    log.compact(5, 1)
    assert log.last_index == 6
    log.compact(9, 4)  # past the end: the log continues after the snapshot
    assert (log.last_index, len(log)) == (9, 0)


def test_compacting_past_a_conflicting_or_missing_entry_empties_the_log():
    log = RaftLog(_entries(1, 1, 2))
    log.compact(2, 5)  # the log holds index 2 with term 1, the snapshot says 5: §7 discards the whole log
    assert (log.offset, log.offset_term, len(log), log.last_term) == (2, 5, 0, 5)
    log = RaftLog(_entries(1, 1))
    log.compact(7, 3)
    assert (log.offset, log.last_index, log.last_term) == (7, 7, 3)


def test_snapshot_entries_must_be_a_count():
    assert RaftConfig(snapshot_entries=0).snapshot_entries == 0
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(SpecError, match="raft.snapshot_entries"):
            RaftConfig(snapshot_entries=bad)


# -------------------------------------------------------------------------------------------- random interleavings
@pytest.mark.parametrize("seed", range(12))
def test_fuzzed_clusters_with_tiny_snapshots_stay_safe_and_agree(seed):
    """Random delivery, loss, duplication, reordering, crashes and restarts with a snapshot every 3 applied entries:
    Raft's invariants hold, every durable write precedes what depends on it, the nodes that applied the same prefix
    hold the same state, and snapshots were both taken and sent."""
    cluster = fuzz(Cluster(5, seed=seed, config={"snapshot_entries": 3}).start(), seed, steps=3000, crash_rate=0.02)
    assert cluster.check() == [] and cluster.durability_errors == []
    states = collections.defaultdict(set)
    for node in cluster.nodes.values():
        states[node.last_applied].add(repr(sorted(map(repr, node.kv.snapshot()["data"]))))
    assert all(len(held) == 1 for held in states.values()), states
    assert any(node.log.offset > 0 for node in cluster.nodes.values())


def test_fuzzing_sends_and_installs_snapshots():
    sent = 0
    for seed in range(6):
        cluster = fuzz(Cluster(5, seed=seed, config={"snapshot_entries": 3}).start(), seed, steps=3000,
                       crash_rate=0.02)
        sent += sum(type(getattr(e, "message", None)).__name__ == "InstallSnapshot"
                    for _, _, effects in cluster.trace for e in effects)
    assert sent > 0


# ----------------------------------------------------------------------------------------------------- recovery
def _recover(durable: DurableState) -> tuple[RaftNode, list]:
    node = RaftNode(0, 3, np.random.default_rng(0), {"snapshot_entries": 10})
    effects = node.on_recover(durable, 0.0)
    return node, [e for e in effects if isinstance(e, (Persist, PersistLog, CompactLog))]


SNAP = [10, 2, {"data": [["k", 9]], "sessions": [[1, 9, "ok", None, None]], "applied_count": 9}]


def test_recovery_after_the_compaction_needs_no_writes():
    node, writes = _recover(DurableState(values={SNAPSHOT_KEY: SNAP}, logs={LOG_KEY: _entries(2, 3)},
                                         log_starts={LOG_KEY: 10}))
    assert writes == [] and (node.log.offset, node.log.last_index, node.commit_index, node.last_applied) == \
        (10, 12, 10, 10)
    assert node.kv.read("k") == 9 and node.kv.cached(1, 9) is not None  # sessions survive: no double apply


def test_recovery_between_the_snapshot_and_the_compaction_keeps_a_matching_suffix():
    log = _entries(*([1] * 8 + [2, 2, 2, 3]))  # index 10 has term 2, as the snapshot says
    node, writes = _recover(DurableState(values={SNAPSHOT_KEY: SNAP}, logs={LOG_KEY: log}))
    assert (node.log.offset, node.log.last_index) == (10, 12) and writes == [CompactLog(key=LOG_KEY, first=10)]


def test_recovery_drops_a_suffix_that_conflicts_with_the_snapshot_truncating_before_compacting():
    log = _entries(*([1] * 12))  # index 10 has term 1: the snapshot (term 2) replaced this log
    node, writes = _recover(DurableState(values={SNAPSHOT_KEY: SNAP}, logs={LOG_KEY: log}))
    assert (node.log.offset, node.log.last_index, node.log.last_term) == (10, 10, 2)
    assert writes == [PersistLog(key=LOG_KEY, start=10, entries=()), CompactLog(key=LOG_KEY, first=10)]
    short = _entries(1, 1, 1)  # the log ends before the snapshot: compacting empties it (no truncation first)
    node, writes = _recover(DurableState(values={SNAPSHOT_KEY: SNAP}, logs={LOG_KEY: short}))
    assert node.log.last_index == 10 and writes == [CompactLog(key=LOG_KEY, first=10)]


# ----------------------------------------------------------------------------------------------------- storage
def test_sim_storage_compacts_keeping_positions():
    disk = Storage(fsync_s=1e-3, write_bandwidth_GBps=1.0)
    disk.stage(PersistLog(key="log", start=0, entries=("a", "b", "c", "d")))
    disk.stage(CompactLog(key="log", first=2))
    disk.stage(PersistLog(key="log", start=3, entries=("x",)))
    disk.commit()
    state = disk.durable_state()
    assert state.logs["log"] == ("c", "x") and state.log_starts == {"log": 2}
    disk.stage(PersistLog(key="log", start=1, entries=()))
    with pytest.raises(ValueError, match=r"outside the durable log's positions 2..4"):
        disk.commit()
    disk.staged = [CompactLog(key="log", first=1)]
    with pytest.raises(ValueError, match="before the durable log's first position 2"):
        disk.commit()
    disk.staged = [CompactLog(key="log", first=9)]  # beyond the end: empty, continuing at 9
    disk.commit()
    assert disk.durable_state().logs["log"] == () and disk.durable_state().log_starts["log"] == 9


def test_disk_storage_compacts_atomically_and_reopens_at_the_same_positions(tmp_path):
    disk = DiskStorage(tmp_path, Codec(()))
    for effect in (PersistLog(key="log", start=0, entries=([1], [2], [3], [4])), CompactLog(key="log", first=2),
                   PersistLog(key="log", start=3, entries=([9],))):
        disk.stage(effect)
    disk.sync()
    path = tmp_path / "logs" / ("log".encode().hex() + ".log")
    assert path.read_bytes()[:4] == b"SDLS" and not list((tmp_path / "logs").glob("*.tmp"))
    disk.close()
    again = DiskStorage(tmp_path, Codec(()))
    state = again.load()
    assert state.logs["log"] == [[3], [9]] and state.log_starts == {"log": 2}
    again.stage(PersistLog(key="log", start=4, entries=([10],)))
    again.stage(CompactLog(key="log", first=6))  # beyond the end
    again.stage(PersistLog(key="log", start=6, entries=([11],)))
    again.sync()
    again.close()
    third = DiskStorage(tmp_path, Codec(()))
    state = third.load()
    assert state.logs["log"] == [[11]] and state.log_starts == {"log": 6}
    with pytest.raises(ValueError, match=r"outside the log's positions 6..7"):
        third.persist_log("log", 5, ())
    third.close()


def test_a_torn_compacted_log_header_is_refused(tmp_path):
    (tmp_path / "logs").mkdir(parents=True)
    (tmp_path / "logs" / ("log".encode().hex() + ".log")).write_bytes(b"SDLS\x00\x00")
    with pytest.raises(StorageError, match="torn compacted-log header"):
        DiskStorage(tmp_path, Codec(())).load()


# --------------------------------------------------------------------------------------------------- simulator
FAST = {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016,
        "snapshot_entries": 8}


@pytest.mark.parametrize("faults", FAULT_MIXES)
def test_simulated_runs_with_snapshots_are_linearizable_under_faults(faults):
    """The campaign's shape with a snapshot every 8 entries: linearizable, no invariant breach, snapshots sent."""
    result, live = faulted_run("raft", FAST, faults)
    assert invariants.check(live) == [] and min(node.log.offset for node in live) > 0
    assert snapshots_sent(result) > 0 or faults == ("partition", "loss")


def test_the_monitor_forgets_what_every_log_compacted():
    monitor = invariants.Monitor()
    nodes = monitored_run("raft", {"snapshot_entries": 1000}, monitor)
    floor = min(node.log.offset for node in nodes)
    assert floor > 0 and min(monitor.committed) > floor - invariants._PRUNE_EVERY - 1000


def test_a_real_runs_reproduce_command_carries_its_protocol_options(tmp_path):
    """A real run started from Python with protocol options prints a command that sets them (it had dropped them)."""
    from seedance.real.run import _default_reproduce

    spec = {"protocol": "raft", "nodes": 3, "clients": 4, "duration_s": 2.0, "kill_rate": 2.0,
            "config": {"snapshot_entries": 50, "reads": "log"}}
    command = _default_reproduce(spec, 7, tmp_path / "o")
    assert "--set snapshot_entries=50" in command and "--set 'reads=\"log\"'" in command
    assert command.startswith("seedance real run --protocol raft") and "--seed 7" in command
