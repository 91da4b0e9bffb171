"""Majority arithmetic (§5.2, §5.3) against a naive oracle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.models.protocols.raft.quorum import committed_index, majority


def test_majority():
    assert [majority(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=9))
def test_committed_index_matches_naive_oracle(match):
    naive = max(n for n in range(0, 51) if sum(m >= n for m in match) >= len(match) // 2 + 1)
    assert committed_index(match) == naive
