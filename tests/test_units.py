"""Size parsing and formatting (seedance.models.units): nccl-tests' conventions, exact round trips, SpecError only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.errors import SpecError
from seedance.models.units import MAX_SIZE_BYTES, format_size, parse_size, parse_size_range


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1GiB", 2**30), ("4MiB", 4 * 2**20), ("512KB", 512_000), ("1e9", 10**9), ("8B", 8), ("1024", 1024),
        ("8G", 8 * 2**30), ("1.5KiB", 1536), ("2 MB", 2_000_000), ("1kB", 1000), ("0.5KiB", 512), ("1E3", 1000),
        ("1TB", 10**12), ("3TiB", 3 * 2**40),
    ],
)
def test_parse_size_accepts_documented_forms(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "abc", "-1", "0", "1.3B", "nan", "inf", "1e40", "1Mb", "1kb", "1 Gib", "GiB", "1GiBB", "1..2", "0x10", "1e-3"],
)
def test_parse_size_rejects_with_a_spec_error_naming_size(text):
    with pytest.raises(SpecError) as err:
        parse_size(text)
    assert err.value.field == "size" and "GiB" in str(err.value)


def test_zero_is_allowed_only_when_asked():
    assert parse_size("0", allow_zero=True) == 0
    with pytest.raises(SpecError):
        parse_size(0)


def test_range_doubles_like_nccl_tests():
    sizes = parse_size_range("8B:8GiB")
    assert sizes[0] == 8 and sizes[-1] == 8 * 2**30 and len(sizes) == 31
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert parse_size_range("1KiB:1MiB:4") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert parse_size_range("1MiB") == [2**20]
    assert parse_size_range("8:100") == [8, 16, 32, 64]


@pytest.mark.parametrize("text", ["8GiB:8B", "1:2:1", "1:2:x", "1:2:3:4", ":", "1KiB:", "1:2:2.5"])
def test_bad_ranges_are_spec_errors(text):
    with pytest.raises(SpecError):
        parse_size_range(text)


def test_format_size_picks_the_exact_shortest_unit():
    assert [format_size(n) for n in (0, 7, 1000, 1024, 512_000, 4 * 2**20, 10**9, 2**30)] == [
        "0B", "7B", "1KB", "1KiB", "512KB", "4MiB", "1GB", "1GiB"
    ]


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=MAX_SIZE_BYTES))
def test_format_then_parse_round_trips(n):
    assert parse_size(format_size(n)) == n


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=20))
def test_garbage_parses_or_raises_spec_error_only(text):
    try:
        value = parse_size(text)
    except SpecError as err:
        assert err.field == "size"
    else:
        assert isinstance(value, int) and 0 < value <= MAX_SIZE_BYTES


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="0123456789.eE+-:KMGTPiBb ", max_size=16))
def test_range_garbage_parses_or_raises_spec_error_only(text):
    try:
        sizes = parse_size_range(text)
    except SpecError:
        return
    assert sizes and all(isinstance(s, int) and s > 0 for s in sizes) and sizes == sorted(sizes)
