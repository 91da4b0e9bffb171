"""The commit and execution latencies of a replica's own commands, the latest so many, at 16 bytes a sample.

A ``deque`` of ``(commit, execute)`` tuples held about 110 bytes a sample (the tuple, its two floats, the deque's
slot); with 131,072 samples kept per replica, a 5-replica run at 16,000 operations per second grew its peak RSS by
about 2 MB per simulated second until every deque was full (about 40 s in), which had looked like a leak. Two
``array('d')`` used as one ring hold the same samples in 16 bytes each.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class LatencySamples:
    """The latest ``capacity`` pairs ``(commit latency, execution latency)``, oldest first when iterated (as the
    ``deque(maxlen=capacity)`` of tuples it replaces)."""

    __slots__ = ("capacity", "_commit", "_execute", "_next")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._commit = array("d")
        self._execute = array("d")
        self._next = 0  # once full: the slot of the oldest sample, overwritten next

    def add(self, commit_s: float, execute_s: float) -> None:
        if len(self._commit) < self.capacity:
            self._commit.append(commit_s)
            self._execute.append(execute_s)
            return
        k = self._next
        self._commit[k] = commit_s
        self._execute[k] = execute_s
        self._next = k + 1 if k + 1 < self.capacity else 0

    def __len__(self) -> int:
        return len(self._commit)

    def __iter__(self) -> Iterator[tuple[float, float]]:
        k = self._next
        commit, execute = self._commit, self._execute
        return zip(commit[k:] + commit[:k], execute[k:] + execute[:k])
