"""Majority arithmetic (§5.2, §5.3): pure functions, tested against a naive oracle.

``committed_index(match)`` is the largest N such that a majority of ``match`` values are ≥ N — the replication
half of the commit rule; the term half (§5.4.2) is the node's business.
"""

from __future__ import annotations

from collections.abc import Sequence


def majority(num_nodes: int) -> int:
    """Smallest number of nodes forming a majority of ``num_nodes``."""
    return num_nodes // 2 + 1


def committed_index(match: Sequence[int]) -> int:
    """Largest N with at least a majority of ``match`` (one value per node, self included) ≥ N."""
    return sorted(match, reverse=True)[len(match) // 2]  # the majority(len(match))-th largest
