"""Durable writes are stored by type, through one table per runtime storage (seedance.engine.durable).

The simulator's storage (an image in memory) and the real backend's (files, fsync) take the same staged writes
and must leave the same durable state: the same values, logs, record tables and checkpoints.
"""

from __future__ import annotations

import numpy as np
import pytest

from seedance.engine.durable import STAGED, writers
from seedance.engine.effects import StagedCheckpoint
from seedance.models.protocols.contract import Persist, PersistLog, PersistRecords
from seedance.models.wire import Codec
from seedance.real import storage as real_storage
from seedance.real.storage import DiskStorage
from seedance.sim import storage as sim_storage
from seedance.sim.storage import Storage


def _writes() -> list[object]:
    """One of each durable type, with a truncation, a record delete and a checkpoint replaced."""
    return [
        Persist(key="term", value=3),
        PersistLog(key="log", start=0, entries=("a", "b", "c")),
        PersistRecords(table="inst", put={"1": [1, 2], "2": "x"}),
        StagedCheckpoint("model", {"w": np.arange(4, dtype=np.float32)}),
        PersistLog(key="log", start=1, entries=("B",)),  # truncate to one entry, then append
        PersistRecords(table="inst", put={"3": {"k": 1}}, delete=("2",)),
        Persist(key="vote", value=None),
        StagedCheckpoint("model", {"w": np.full(4, 7.0, dtype=np.float32)}),
    ]


def _sim_state(effects: list[object]) -> tuple[object, dict[str, np.ndarray] | None]:
    store = Storage(fsync_s=1e-3, write_bandwidth_GBps=1.0)
    for effect in effects:
        store.stage(effect)
    store.sync_done_s(0.0)
    assert store.commit() == len(effects)
    return store.durable_state(), store.restore("model")


def _real_state(effects: list[object], root) -> tuple[object, dict[str, np.ndarray] | None]:
    store = DiskStorage(root, Codec(()))
    for effect in effects:
        store.stage(effect)
    assert store.sync() == len(effects)
    store.close()
    again = DiskStorage(root, Codec(()))  # what a restarted node reads back from the files
    try:
        return again.load(), again.restore("model")
    finally:
        again.close()


def test_both_storages_leave_the_same_durable_state(tmp_path):
    sim, sim_model = _sim_state(_writes())
    real, real_model = _real_state(_writes(), tmp_path)
    assert dict(sim.values) == dict(real.values) == {"term": 3, "vote": None}
    assert {k: list(v) for k, v in sim.logs.items()} == {k: list(v) for k, v in real.logs.items()} == {
        "log": ["a", "B"]}
    assert {t: dict(r) for t, r in sim.records.items()} == {t: dict(r) for t, r in real.records.items()} == {
        "inst": {"1": [1, 2], "3": {"k": 1}}}
    assert list(sim.checkpoints) == list(real.checkpoints) == ["model"]
    assert np.array_equal(sim_model["w"], real_model["w"]) and float(real_model["w"][0]) == 7.0


def test_each_storage_has_one_writer_per_durable_type():
    assert set(sim_storage._APPLY) == set(real_storage._WRITERS) == set(STAGED)


def test_a_table_missing_a_type_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"new storage: durable writers missing for CompactLog, PersistRecords, StagedCheckpoint"):
        writers("new storage", {Persist: print, PersistLog: print})
    with pytest.raises(TypeError, match=r"for unknown types int"):
        writers("new storage", {**{kind: print for kind in STAGED}, int: print})


def test_a_write_of_no_durable_type_is_refused_by_both(tmp_path):
    store = Storage(fsync_s=1e-3, write_bandwidth_GBps=1.0)
    store.staged.append(("not", "an", "effect"))
    with pytest.raises(TypeError, match="sim Storage: tuple is not a durable write"):
        store.commit()
    disk = DiskStorage(tmp_path, Codec(()))
    disk.stage(("not", "an", "effect"))
    with pytest.raises(TypeError, match="DiskStorage: tuple is not a durable write"):
        disk.sync()
    disk.close()


def test_the_simulated_disk_copies_records_unless_the_node_handed_them_over():
    store = Storage(fsync_s=1e-3, write_bandwidth_GBps=1.0)
    kept = {"a": [1, [2, 3]]}
    store.stage(PersistRecords(table="t", put=kept))
    kept["a"][1].append(4)  # a node that goes on changing what it returned: the staged copy does not see it
    store.stage(PersistRecords(table="u", put={"b": [5, 6]}, handed_over=True))
    store.commit()
    state = store.durable_state()
    assert state.records["t"] == {"a": [1, [2, 3]]} and state.records["u"] == {"b": [5, 6]}
    handed = [9, (1, 2)]
    store.stage(PersistRecords(table="u", put={"c": handed}, handed_over=True))
    store.commit()
    assert store.records["u"]["c"] is handed  # kept as it is: no copy
    # and the durable state reads back as written
    assert store.durable_state().records["u"] == {"b": [5, 6], "c": [9, (1, 2)]}


def test_nodes_of_one_simulation_store_an_equal_handed_over_record_once():
    """Storages sharing one dict (a simulation's): an immutable record a node handed over, equal to the last one
    written under its table and key, is kept as that same object; a copied write, a mutable value and a different
    value are not shared, and a delete drops only the deleting node's record."""
    shared: dict = {}
    a, b, c = (Storage(fsync_s=1e-3, write_bandwidth_GBps=1.0, shared=shared) for _ in range(3))
    def entry(*fields):  # a new tuple each time (equal constant tuples would be one object)
        return tuple(list(fields))

    first = entry(7, 1, 0.25, 3, 9)
    a.stage(PersistRecords(table="grid", put={"p5": first, "c3": 12, "m": [1, 2]}, handed_over=True))
    b.stage(PersistRecords(table="grid", put={"p5": entry(7, 1, 0.25, 3, 9), "c3": 12, "m": [1, 2]}, handed_over=True))
    c.stage(PersistRecords(table="grid", put={"p5": entry(7, 1, 0.25, 3, 9)}))  # not handed over: copied, not shared
    for store in (a, b, c):
        store.commit()
    assert b.records["grid"]["p5"] is first and b.records["grid"]["c3"] is a.records["grid"]["c3"]
    assert b.records["grid"]["m"] is not a.records["grid"]["m"]  # a list: each node keeps its own
    assert c.records["grid"]["p5"] == first and c.records["grid"]["p5"] is not first
    newer = entry(8, 2, 0.5, 1, 4)
    b.stage(PersistRecords(table="grid", put={"p5": newer}, delete=("c3",), handed_over=True))
    b.commit()
    a.stage(PersistRecords(table="grid", put={"p5": entry(8, 2, 0.5, 1, 4)}, handed_over=True))
    a.commit()
    assert a.records["grid"]["p5"] is newer and b.records["grid"]["p5"] is newer
    assert "c3" not in b.records["grid"] and a.records["grid"]["c3"] == 12
    assert a.durable_state().records["grid"] == {"p5": newer, "c3": 12, "m": [1, 2]}
