"""FloatColumn (seedance/history/column.py): per-operation numbers held on disk in chunks, read back exactly."""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.history import column as column_module
from seedance.history.column import FloatColumn


def _column(values, chunk: int = 4) -> FloatColumn:
    col = FloatColumn(chunk=chunk)
    col.extend(values)
    return col


def test_values_come_back_in_order_across_chunks_and_only_full_chunks_go_to_disk() -> None:
    values = [0.5 * k for k in range(11)]
    col = _column(values, chunk=4)
    assert len(col) == 11
    assert col._spilled == 2 and len(col._tail) == 3  # two chunks written, three values in memory
    assert col.to_numpy().tolist() == values
    assert [len(part) for part in col.chunks()] == [4, 4, 3]
    empty = FloatColumn()
    assert len(empty) == 0 and not empty and empty.percentile(50) is None and empty.count_below(1.0) == 0
    assert empty._file is None  # nothing written: no file


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), max_size=60), st.floats(-1, 1.1e3),
       st.integers(1, 7))
def test_count_below_is_bisect_left_over_an_ordered_column(values, at, chunk) -> None:
    values.sort()
    col = _column(values, chunk=chunk)
    assert col.ordered
    assert col.count_below(at) == bisect_left(values, at)
    for value in values[:5]:  # at a value present (ties across chunk boundaries)
        assert col.count_below(value) == bisect_left(values, value)


def test_count_below_refuses_an_unordered_column() -> None:
    col = _column([1.0, 3.0, 2.0])
    assert not col.ordered
    with pytest.raises(ValueError, match="non-decreasing"):
        col.count_below(2.0)


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 99.9, 100])
@pytest.mark.parametrize("n", [1, 2, 17, 64, 65, 1000, 4097])
def test_percentile_is_numpys_exactly_with_the_radix_selection(monkeypatch, n, q) -> None:
    """Chunks of 16 (so every column above 64 values is selected on disk, in passes narrowed to 8 candidates)."""
    monkeypatch.setattr(column_module, "_SELECT_HELD", 8)
    rng = np.random.default_rng(n)
    for values in (rng.lognormal(-7, 1, n), np.round(rng.random(n) * 5) / 4,  # many ties
                   rng.normal(0, 1, n)):  # negatives
        col = _column(rng.permutation(values), chunk=16)
        assert col.percentile(q) == np.percentile(values, q)


def test_percentile_of_a_column_holding_nan_is_nan_as_numpys() -> None:
    values = [float(k) for k in range(100)] + [math.nan]
    col = _column(values, chunk=8)
    assert math.isnan(col.percentile(50)) and math.isnan(np.percentile(values, 50))
    assert not col.ordered


def test_a_long_column_holds_about_one_chunk_in_memory() -> None:
    col = FloatColumn(chunk=1024)
    for k in range(100_000):
        col.append(k * 1e-3)
    assert len(col._tail) < 1024 and col._spilled == 97
    assert len(col._firsts) == 97  # 8 bytes per written chunk
    assert col.count_below(50.0) == 50_000
    assert col.percentile(99) == np.percentile(np.arange(100_000) * 1e-3, 99)


def test_chunk_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        FloatColumn(chunk=0)


@given(st.lists(st.one_of(st.floats(-5, 5, allow_nan=False), st.just(math.nan)), max_size=40),
       st.integers(1, 5), st.lists(st.integers(0, 40), max_size=4))
def test_order_and_nan_are_those_of_one_comparison_per_append(values, chunk, asks):
    """``ordered`` and the NaN flag are worked out a run of values at a time: asking in between (any number of
    times) or crossing chunk boundaries gives what comparing each value with the one before would."""
    col = FloatColumn(chunk=chunk)
    for i, value in enumerate(values):
        if i in asks:
            prefix = values[:i]
            assert col.ordered == (not any(v != v for v in prefix)
                                   and all(b >= a for a, b in zip(prefix, prefix[1:])))
        col.append(value)
    assert col.ordered == (not any(v != v for v in values) and all(b >= a for a, b in zip(values, values[1:])))
    col._scan()
    assert col._nan == any(v != v for v in values)
