"""The Raft log (§5.3, §7): 1-based indexes, truncation only of uncommitted suffixes, a compacted prefix.

Rules: the entries up to ``offset`` are compacted (§7: a snapshot holds what they said); ``term_at(offset)`` is the
snapshot's last included term (``offset_term``; 0 at index 0), so the consistency check of the first entry held
always passes; asking for an entry at or below ``offset`` is a bug of the caller (an IndexError). Slicing copies only
the requested range (never the whole log), so a leader's per-message work is O(batch), not O(log).
"""

from __future__ import annotations

from collections.abc import Iterable

from seedance.models.protocols.raft.messages import Entry

_NO_BATCH: tuple[int, int, tuple[Entry, ...], int] = (1, 0, (), 0)  # an empty range: what entries(1, 0) gives


class RaftLog:
    __slots__ = ("_entries", "offset", "offset_term", "last_index", "_batch")

    def __init__(self, entries: Iterable[Entry] = (), offset: int = 0, offset_term: int = 0) -> None:
        self._entries: list[Entry] = list(entries)  # the entries offset+1, offset+2, ...
        self.offset = offset
        self.offset_term = offset_term
        self.last_index = offset + len(self._entries)  # kept by every change (read on every input: no property)
        self._batch: tuple[int, int, tuple[Entry, ...], int] = _NO_BATCH  # the last batch() asked for

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.offset_term

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index`` (``offset_term`` at ``offset``); ``offset <= index <= last_index``."""
        at = index - self.offset
        if at > 0:
            return self._entries[at - 1].term
        if at == 0:
            return self.offset_term
        raise IndexError(f"index {index} is compacted (the log starts after {self.offset})")

    def entry(self, index: int) -> Entry:
        at = index - self.offset
        if at <= 0:
            raise IndexError(f"index {index} is compacted (the log starts after {self.offset})")
        return self._entries[at - 1]

    def entries(self, first: int, last: int) -> tuple[Entry, ...]:
        """Entries ``first..last`` inclusive (empty when ``first > last``); ``first > offset``."""
        if first > last:
            return ()
        if first <= self.offset:
            raise IndexError(f"index {first} is compacted (the log starts after {self.offset})")
        return tuple(self._entries[first - 1 - self.offset: last - self.offset])

    def batch(self, first: int, last: int) -> tuple[tuple[Entry, ...], int]:
        """Entries ``first..last`` (``offset < first <= last``) and the sum of their ``size_bytes``. The last batch
        asked for is kept until the log is truncated or compacted: a leader sends one batch to every follower, and
        the followers share the tuple (entries are frozen)."""
        held = self._batch
        if held[0] == first and held[1] == last:
            return held[2], held[3]
        entries = self.entries(first, last)
        size = 0
        for entry in entries:
            size += entry.size_bytes
        self._batch = (first, last, entries, size)
        return entries, size

    def append(self, entry: Entry) -> int:
        self._entries.append(entry)
        self.last_index += 1
        return self.last_index

    def extend(self, entries: Iterable[Entry]) -> None:
        self._entries.extend(entries)
        self.last_index = self.offset + len(self._entries)

    def truncate(self, keep: int) -> None:
        """Keep the entries up to index ``keep`` (``keep >= offset``)."""
        if keep < self.offset:
            raise IndexError(f"truncating to {keep} below the compacted prefix ({self.offset})")
        del self._entries[keep - self.offset:]
        self.last_index = self.offset + len(self._entries)
        self._batch = _NO_BATCH

    def compact(self, index: int, term: int) -> None:
        """Drop the entries up to ``index`` (a snapshot of term ``term`` holds them). Entries after ``index`` are
        kept when the log holds ``index`` with that term (§7: "retain log entries following it"); otherwise the
        whole log goes and it continues after ``index``."""
        if index <= self.offset:
            return
        self._batch = _NO_BATCH
        if index <= self.last_index and self.term_at(index) == term:
            del self._entries[:index - self.offset]
        else:
            self._entries = []
        self.offset, self.offset_term = index, term
        self.last_index = index + len(self._entries)

    def first_index_of_term(self, index: int) -> int:
        """The first index of the run of entries ending at ``index`` that share its term (§5.3's fast backup),
        never below the first index held."""
        term = self.term_at(index)
        first = self.offset + 1
        while index > first and self._entries[index - 2 - self.offset].term == term:
            index -= 1
        return index

    def __len__(self) -> int:
        """The entries held (the compacted ones not counted)."""
        return len(self._entries)

    def __iter__(self):
        """The entries held, from index ``offset + 1``."""
        return iter(self._entries)
