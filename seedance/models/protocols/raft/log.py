"""The Raft log (§5.3): 1-based indexes, term 0 at index 0, truncation only of uncommitted suffixes.

Rules: ``term_at(0) == 0`` so the consistency check of the first entry always passes; slicing copies only the
requested range (never the whole log), so a leader's per-message work is O(batch), not O(log).
"""

from __future__ import annotations

from collections.abc import Iterable

from seedance.models.protocols.raft.messages import Entry


class RaftLog:
    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = list(entries)

    @property
    def last_index(self) -> int:
        return len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else 0

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index`` (0 for index 0); ``index`` must be ≤ ``last_index``."""
        return self._entries[index - 1].term if index > 0 else 0

    def entry(self, index: int) -> Entry:
        return self._entries[index - 1]

    def entries(self, first: int, last: int) -> tuple[Entry, ...]:
        """Entries ``first..last`` inclusive (empty when ``first > last``)."""
        return tuple(self._entries[first - 1 : last])

    def append(self, entry: Entry) -> int:
        self._entries.append(entry)
        return len(self._entries)

    def extend(self, entries: Iterable[Entry]) -> None:
        self._entries.extend(entries)

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` entries."""
        del self._entries[keep:]

    def first_index_of_term(self, index: int) -> int:
        """The first index of the run of entries ending at ``index`` that share its term (§5.3's fast backup)."""
        term = self.term_at(index)
        while index > 1 and self._entries[index - 2].term == term:
            index -= 1
        return index

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)
