"""Vector clocks (seedance.models.clocks): the field report's semantics and example (§2.2–2.3), both forms agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.models import clocks

A, B, C = [3, 1, 0], [2, 4, 0], [2, 1, 2]


def forms(v):
    return [np.array(v, dtype=np.int64), {i: c for i, c in enumerate(v)}]


@pytest.mark.parametrize("dense", [True, False])
def test_report_example(dense):
    a, b, c = (forms(v)[0 if dense else 1] for v in (A, B, C))
    for x, y in ((a, b), (a, c), (b, c)):
        assert clocks.compare(x, y) == "concurrent"
        assert clocks.is_concurrent(x, y) and clocks.is_concurrent(y, x)
    assert clocks.should_sync_pixel(a, b)  # A[1] = 1 < B[1] = 4
    assert clocks.should_sync_pixel(b, a)  # B[0] = 2 < A[0] = 3
    assert clocks.should_sync_pixel(a, c)  # A[2] = 0 < C[2] = 2
    merged = clocks.merge(a, b, own=0)  # max -> [3, 4, 0], then tick node 0
    assert clocks.to_dense(merged, 3).tolist() == [4, 4, 0]
    assert clocks.compare(a, merged) == "before" and clocks.compare(merged, b) == "after"
    assert not clocks.should_sync_pixel(merged, a) and not clocks.should_sync_pixel(merged, b)
    older = forms([2, 1, 0])[0 if dense else 1]
    assert clocks.compare(older, a) == "before" and clocks.compare(older, c) == "before"
    assert not clocks.should_sync_pixel(a, older)
    assert clocks.compare(a, forms(A)[0 if dense else 1]) == "equal"


def test_update_vc_creates_the_entry_at_zero_then_increments():
    assert clocks.update_vc({}, 5) == {5: 1}
    assert clocks.update_vc({5: 1}, 5) == {5: 2}
    assert clocks.update_vc(np.zeros(2, np.int64), 3).tolist() == [0, 0, 0, 1]
    original = {1: 1}
    clocks.update_vc(original, 1)
    assert original == {1: 1}  # arguments are never modified


def test_missing_entries_are_zero_and_forms_do_not_mix():
    assert clocks.compare({0: 1}, {0: 1, 7: 0}) == "equal"
    assert clocks.compare(np.array([1]), np.array([1, 0, 0])) == "equal"
    assert clocks.compare({0: 1}, {1: 1}) == "concurrent"
    with pytest.raises(TypeError, match="different forms"):
        clocks.compare({0: 1}, np.array([1]))


def test_compare_many_matches_compare():
    rows = np.array([A, B, C, [2, 1, 0], [3, 4, 2], A])
    assert clocks.compare_many(rows, np.array(A)).tolist() == [
        "equal", "concurrent", "concurrent", "before", "after", "equal"]


vcs = st.lists(st.integers(0, 5), min_size=3, max_size=3)


@settings(max_examples=300, deadline=None)
@given(vcs, vcs)
def test_dense_and_dict_forms_agree(x, y):
    (dx, mx), (dy, my) = forms(x), forms(y)
    assert clocks.compare(dx, dy) == clocks.compare(mx, my)
    assert clocks.should_sync_pixel(dx, dy) == clocks.should_sync_pixel(mx, my)
    assert clocks.to_dense(clocks.join(mx, my), 3).tolist() == clocks.join(dx, dy).tolist()
    order = clocks.compare(dx, dy)
    # the partial order: before/after are converse, concurrency is symmetric, sync iff the remote is not <= local
    assert clocks.compare(dy, dx) == {"before": "after", "after": "before"}.get(order, order)
    assert clocks.should_sync_pixel(dx, dy) == (order in ("before", "concurrent"))
    # the join is the least upper bound
    j = clocks.join(dx, dy)
    assert clocks.leq(dx, j) and clocks.leq(dy, j)
    assert clocks.compare(clocks.merge(dx, dy, own=1), j) == "after"


def test_plain_sequences_are_the_dense_form_and_come_back_as_lists():
    """The report's own example, written as plain lists: the same answers as arrays and dicts, lists back."""
    assert clocks.merge(A, B, own=0) == [4, 4, 0]
    assert clocks.join(tuple(A), [2, 4, 0, 1]) == [3, 4, 0, 1]
    assert clocks.update_vc([], 2) == [0, 0, 1] and clocks.update_vc(A, 0) == [4, 1, 0]
    assert clocks.to_dense(A).tolist() == A and clocks.to_dict(B) == {0: 2, 1: 4}
    assert clocks.compare(A, C) == "concurrent" and clocks.is_concurrent(A, B)
    assert clocks.leq([2, 1, 0], A) and not clocks.leq(A, B)
    assert clocks.should_sync_pixel(A, B) and not clocks.should_sync_pixel(A, [2, 1, 0])
    mixed = clocks.merge(A, np.array(B), own=0)  # a list with an array: an array, as the array was given
    assert isinstance(mixed, np.ndarray) and mixed.tolist() == [4, 4, 0]
    original = list(A)
    clocks.update_vc(original, 1)
    assert original == A


@pytest.mark.parametrize("call, name", [
    (lambda: clocks.leq([1.5], [1]), "v1"), (lambda: clocks.compare([1], "ab"), "v2"),
    (lambda: clocks.is_concurrent(None, [1]), "v1"), (lambda: clocks.should_sync_pixel(A, 5), "remote"),
    (lambda: clocks.to_dense({1, 2}), "vc"), (lambda: clocks.to_dict("x"), "vc"),
    (lambda: clocks.join([[1]], [1]), "a"), (lambda: clocks.join(A, [10**30]), "b"),
    (lambda: clocks.merge(7, A, 0), "local"), (lambda: clocks.merge(A, {0: 1}, 0), "local, remote"),
    (lambda: clocks.update_vc(A, -1), "peer"), (lambda: clocks.update_vc(A, "x"), "peer"),
    (lambda: clocks.update_vc(3, 0), "vc"),
])
def test_arguments_of_no_clock_form_name_the_argument(call, name):
    with pytest.raises(TypeError, match=f"^{name}: ") as err:
        call()
    assert "vector clock" in str(err.value) or "node ids" in str(err.value)
