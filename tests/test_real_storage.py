"""Durable storage of the real backend: fsync discipline, crash atomicity, torn/corrupt file detection.

Raft §5.1 (stable storage) and the contract's Persist/PersistLog semantics: what ``persist`` returned for survives;
a crash mid-write leaves the previous state; damage is detected, never silently read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seedance.models.wire import Codec
from seedance.real import storage as storage_mod
from seedance.real.storage import DiskStorage, StorageError


def fresh(root: Path) -> DiskStorage:
    return DiskStorage(root, Codec(()))


def test_values_and_logs_survive_a_reopen(tmp_path):
    s = fresh(tmp_path)
    assert s.load().empty
    s.persist("term", [3, 1])
    s.persist("term", [4, None])
    s.persist_log("log", 0, ((1, "a"), (1, "b"), (2, "c")))
    s.persist_log("log", 1, ((3, "x"),))  # truncate to 1 entry, then append
    s.persist_log("log", 2, ((3, "y"), (3, "z")))
    s.close()
    d = fresh(tmp_path).load()
    assert d.values == {"term": [4, None]}
    assert d.logs == {"log": [(1, "a"), (3, "x"), (3, "y"), (3, "z")]}


def test_log_truncation_to_empty_and_append_after_reopen(tmp_path):
    s = fresh(tmp_path)
    s.persist_log("log", 0, ("a", "b"))
    s.close()
    s2 = fresh(tmp_path)
    assert s2.load().logs["log"] == ["a", "b"]
    s2.persist_log("log", 2, ("c",))
    s2.persist_log("log", 0, ())
    s2.persist_log("log", 0, ("d",))
    s2.close()
    assert fresh(tmp_path).load().logs["log"] == ["d"]


def test_start_beyond_the_log_is_a_bug(tmp_path):
    s = fresh(tmp_path)
    with pytest.raises(ValueError):
        s.persist_log("log", 1, ("a",))


def test_crash_between_write_and_replace_leaves_the_old_state(tmp_path, monkeypatch):
    s = fresh(tmp_path)
    s.persist("vote", {"term": 1, "for": 2})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power lost before os.replace")

    monkeypatch.setattr(storage_mod.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        s.persist("vote", {"term": 2, "for": 0})
    monkeypatch.undo()
    assert any(p.suffix == ".tmp" for p in (tmp_path / "values").iterdir())  # the new bytes were written...
    d = fresh(tmp_path).load()
    assert d.values == {"vote": {"term": 1, "for": 2}}  # ...but the old state stands, and the temp file is gone
    assert not any(p.suffix == ".tmp" for p in (tmp_path / "values").iterdir())


def test_fsync_precedes_replace_and_directory_fsync_follows(tmp_path, monkeypatch):
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(storage_mod.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(storage_mod.os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    fresh(tmp_path).persist("k", 1)
    assert calls == ["fsync", "replace", "fsync"]


def test_torn_value_file_is_detected_with_a_clear_error(tmp_path):
    s = fresh(tmp_path)
    s.persist("term", list(range(100)))
    path = next((tmp_path / "values").glob("*.val"))
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(StorageError, match="torn value file"):
        fresh(tmp_path).load()


def test_corrupt_value_file_is_detected(tmp_path):
    s = fresh(tmp_path)
    s.persist("term", "hello world")
    path = next((tmp_path / "values").glob("*.val"))
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(StorageError, match="checksum mismatch"):
        fresh(tmp_path).load()


def test_torn_log_tail_is_cut_and_reported(tmp_path, caplog):
    s = fresh(tmp_path)
    s.persist_log("log", 0, ("a", "b", "c"))
    s.close()
    path = next((tmp_path / "logs").glob("*.log"))
    path.write_bytes(path.read_bytes()[:-2])  # the last append never completed (its fsync never returned)
    s2 = fresh(tmp_path)
    assert s2.load().logs["log"] == ["a", "b"]
    assert "torn tail" in caplog.text
    s2.persist_log("log", 2, ("c2",))
    s2.close()
    assert fresh(tmp_path).load().logs["log"] == ["a", "b", "c2"]


def test_corruption_in_the_middle_of_a_log_is_an_error(tmp_path):
    s = fresh(tmp_path)
    s.persist_log("log", 0, ("aaaa", "bbbb", "cccc"))
    s.close()
    path = next((tmp_path / "logs").glob("*.log"))
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0xFF  # inside the first record's body
    path.write_bytes(bytes(raw))
    with pytest.raises(StorageError, match="corrupt log record 0"):
        fresh(tmp_path).load()


def test_files_are_private(tmp_path):
    s = fresh(tmp_path / "node")
    s.persist("k", 1)
    s.persist_log("log", 0, (1,))
    assert (tmp_path / "node").stat().st_mode & 0o077 == 0
    for p in [*(tmp_path / "node" / "values").iterdir(), *(tmp_path / "node" / "logs").iterdir()]:
        assert p.stat().st_mode & 0o077 == 0


def test_a_checkpoint_per_commit_interns_no_new_string(tmp_path, monkeypatch):
    """One checkpoint and one value per commit for hours: the storage must not touch the interpreter's interned-string
    table on its hot path. CPython's pathlib (before 3.13) interns every path component it parses. Numbered folders as
    ``Path`` objects added one new interned string per checkpoint (a 1.9 MB RSS step at ~6,000 commits in
    ``seedance real soak``); after that fix, names rebuilt per write (``CURRENT.tmp``, the checkpoint folder) were
    still interned and dropped each time: no new distinct string, but one table insertion per write, and the table
    doubled after ~25,000 writes. So: after warm-up, no interning at all, not merely no new strings."""
    import sys

    import numpy as np

    from seedance.engine.effects import StagedCheckpoint
    from seedance.models.protocols.contract import Persist

    calls: list[str] = []
    real_intern = sys.intern

    def counting(text: str) -> str:
        calls.append(text)
        return real_intern(text)

    monkeypatch.setattr(sys, "intern", counting)
    s = fresh(tmp_path)
    after_warmup = 0
    for i in range(120):
        s.stage(StagedCheckpoint("commit", {"w": np.full(3, i, dtype=np.float32)}))
        s.stage(Persist(key="term", value=i))
        s.sync()
        if i == 4:
            after_warmup = len(calls)
    assert calls[after_warmup:] == [], calls[after_warmup:][:5]
    s.close()
    again = fresh(tmp_path)
    assert again.load().checkpoints == ("commit",)  # the published folder survives the start-up clean-up
    np.testing.assert_array_equal(again.restore("commit")["w"], np.full(3, 119, dtype=np.float32))
    base, = (tmp_path / "checkpoints").iterdir()
    assert sorted(p.name for p in base.iterdir()) == ["119", "CURRENT"]  # older folders removed, one kept
