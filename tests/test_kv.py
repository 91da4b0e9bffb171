"""The replicated key-value state machine: semantics, deduplication (Raft §8), snapshots, determinism."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.models.kv import KVStore, validate
from seedance.models.protocols.contract import Operation, Outcome


def test_initial_value_is_none_and_write_then_read():
    kv = KVStore()
    assert kv.apply(1, 1, "read", "k", None).value is None
    assert kv.apply(1, 2, Operation.WRITE, "k", 7).outcome is Outcome.OK
    assert kv.apply(2, 1, "read", "k", None).value == 7
    assert kv.read("other") is None


def test_cas_succeeds_iff_current_equals_expected():
    kv = KVStore()
    assert kv.apply(1, 1, "cas", "k", [None, 1]).outcome is Outcome.OK  # initial value None
    failed = kv.apply(1, 2, "cas", "k", [5, 2])
    assert (failed.outcome, failed.error) == (Outcome.FAIL, "cas-mismatch")
    assert kv.read("k") == 1
    assert kv.apply(1, 3, "cas", "k", (1, 3)).outcome is Outcome.OK
    assert kv.read("k") == 3


def test_retried_request_is_applied_once_and_returns_the_first_result():
    kv = KVStore()
    kv.apply(1, 1, "cas", "k", [None, "a"])
    assert kv.apply(2, 1, "write", "k", "b").outcome is Outcome.OK
    again = kv.apply(1, 1, "cas", "k", [None, "a"])  # duplicate of an applied request: not re-executed
    assert again.outcome is Outcome.OK and kv.read("k") == "b"
    assert kv.cached(1, 1) == again and kv.cached(1, 2) is None
    assert kv.applied_count == 2


def test_an_older_request_than_the_remembered_one_is_not_executed():
    kv = KVStore()
    kv.apply(1, 5, "write", "k", 1)
    stale = kv.apply(1, 4, "write", "k", 2)
    assert stale.outcome is Outcome.INFO and stale.error == "stale-request" and kv.read("k") == 1


def test_validate_rejects_malformed_cas_and_unknown_ops():
    assert validate("cas", [1, 2]) is None
    assert validate("cas", 3) == "bad-cas-value"
    assert validate("cas", [1, 2, 3]) == "bad-cas-value"
    assert validate("increment", 1) == "unknown-op"
    assert KVStore().apply(1, 1, "cas", "k", 3).outcome is Outcome.FAIL


def test_single_register_key_none():
    kv = KVStore()
    kv.apply(1, 1, "write", None, 4)
    assert kv.read(None) == 4


commands = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 6), st.sampled_from(["read", "write", "cas"]),
              st.sampled_from([None, "a", "b"]), st.integers(0, 3)),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(commands)
def test_snapshot_restore_roundtrip_and_determinism(cmds):
    def run(store: KVStore, cmds):
        out = []
        for client, request, op, key, value in cmds:
            arg = [value, value + 1] if op == "cas" else (value if op == "write" else None)
            out.append(store.apply(client, request, op, key, arg))
        return out

    a, b = KVStore(), KVStore()
    assert run(a, cmds) == run(b, cmds) and a == b
    restored = KVStore.restore(a.snapshot())
    assert restored == a
    tail = cmds[: len(cmds) // 2]
    assert run(restored, tail) == run(a, tail) and restored == a


def test_snapshot_is_plain_data():
    kv = KVStore()
    kv.apply(1, 1, "write", "k", np.int64(3).item())
    snap = kv.snapshot()
    assert snap == {"data": [["k", 3]], "sessions": [[1, 1, "ok", None, None]], "applied_count": 1}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 0, 1, 2]), st.integers(0, 6),
                          st.sampled_from([None, "read", "write", "cas", Operation.WRITE, "bogus"]),
                          st.sampled_from([None, "a", "b"]), st.integers(0, 3)), max_size=60))
def test_apply_commands_is_apply_of_each_command(cmds):
    """The batch form a follower uses: the same state (data, sessions, count) as one apply per command, no-ops
    (``op`` None) skipped, duplicates and stale requests included."""
    from types import SimpleNamespace

    entries = [SimpleNamespace(client_id=client, request_id=request, op=op, key=key,
                               value=[value, value + 1] if op == "cas" else value)
               for client, request, op, key, value in cmds]
    one, batch = KVStore(), KVStore()
    for e in entries:
        if e.op is not None:
            one.apply(e.client_id, e.request_id, e.op, e.key, e.value)
    batch.apply_commands(entries[: len(entries) // 2])
    batch.apply_commands(iter(entries[len(entries) // 2:]))
    assert batch == one and batch.applied_count == one.applied_count
