"""Raft's messages and log entries (Ongaro & Ousterhout 2014, Figure 2): frozen, keyword-only, plain-data fields.

Rules:

* Every field is plain data (ints, strings, None, tuples of :class:`Entry`), so the real backend's wire codec can
  encode each message from :data:`MESSAGE_TYPES` without pickle.
* ``size_bytes`` estimates are a fixed header per message plus, for AppendEntries, each entry's estimated size
  (:func:`value_size_bytes` of its key and value plus a fixed entry header); the simulator charges the fabric for them.
* ``read_seq`` on AppendEntries and its reply is the ReadIndex heartbeat round (§6.4): a follower echoes it, and an
  echo in the leader's current term confirms the leader was still leader when that round was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seedance.models.protocols.records import fast_init_module

HEADER_BYTES = 64  # type, term, ids, indexes: one small frame header
ENTRY_HEADER_BYTES = 32  # term, client id, request id, op


def value_size_bytes(value: Any) -> int:
    """A cheap estimate of the encoded size of a plain-data value (msgpack-like)."""
    kind = type(value)  # the common kinds first, by exact type (a subclass takes the general path below)
    if kind is str:
        return len(value) + 5
    if kind is int or kind is float:
        return 9
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 9
    if isinstance(value, (str, bytes)):
        return len(value) + 5
    if isinstance(value, (list, tuple)):
        return 5 + sum(value_size_bytes(v) for v in value)
    if isinstance(value, dict):
        return 5 + sum(value_size_bytes(k) + value_size_bytes(v) for k, v in value.items())
    nbytes = getattr(value, "nbytes", None)  # numpy arrays
    return int(nbytes) + 16 if nbytes is not None else 64


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """One log entry: the leader's term when it was created and the client command (all None for a no-op, §8)."""

    term: int
    client_id: int | None = None
    request_id: int = 0
    op: str | None = None  # "read" | "write" | "cas"; None for the leader's no-op
    key: Any = None
    value: Any = None
    size_bytes: int = ENTRY_HEADER_BYTES

    @property
    def is_noop(self) -> bool:
        return self.op is None

    def to_plain(self) -> list[Any]:
        """The entry as a plain list, for :class:`~seedance.models.protocols.contract.PersistLog`."""
        return [self.term, self.client_id, self.request_id, self.op, self.key, self.value, self.size_bytes]

    @classmethod
    def from_plain(cls, data: Any) -> Entry:
        if isinstance(data, Entry):
            return data
        term, client_id, request_id, op, key, value, size_bytes = data
        if isinstance(key, list):  # a key that went through a codec as a list
            key = tuple(key)
        return cls(term=term, client_id=client_id, request_id=request_id, op=op, key=key, value=value,
                   size_bytes=size_bytes)


def command_entry(term: int, client_id: int, request_id: int, op: str, key: Any, value: Any) -> Entry:
    """A client command's entry with its size estimate filled in."""
    # value_size_bytes's usual cases (a string key, an integer value) without its calls
    size = ENTRY_HEADER_BYTES + (len(key) + 5 if type(key) is str else value_size_bytes(key)) \
        + (9 if type(value) is int else value_size_bytes(value))
    return Entry(term=term, client_id=client_id, request_id=request_id, op=op, key=key, value=value,
                 size_bytes=size)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestVote:
    """Candidate → all (§5.2); ``last_log_*`` let voters apply the election restriction (§5.4.1)."""

    term: int
    candidate_id: int
    last_log_index: int
    last_log_term: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestVoteReply:
    term: int
    vote_granted: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class AppendEntries:
    """Leader → follower (§5.3): heartbeat when ``entries`` is empty."""

    term: int
    leader_id: int
    prev_log_index: int
    prev_log_term: int
    entries: tuple[Entry, ...]
    leader_commit: int
    read_seq: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class AppendEntriesReply:
    """``match_index`` on success; on a failed consistency check ``conflict_index`` is where the leader retries and
    ``reject_index`` the ``prev_log_index`` rejected (so the leader can tell a stale or duplicated rejection)."""

    term: int
    success: bool
    match_index: int = 0
    conflict_index: int = 0
    reject_index: int = 0
    read_seq: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class InstallSnapshot:
    """Leader → follower (§7): the state machine as of ``last_index`` (of term ``last_term``), for a follower that
    needs entries the leader has compacted. ``state`` is :meth:`~seedance.models.kv.KVStore.snapshot` (plain data).
    The follower answers with an :class:`AppendEntriesReply` whose ``match_index`` is ``last_index``."""

    term: int
    leader_id: int
    last_index: int
    last_term: int
    state: Any
    read_seq: int = 0


MESSAGE_TYPES: tuple[type, ...] = (RequestVote, RequestVoteReply, AppendEntries, AppendEntriesReply, Entry,
                                   InstallSnapshot)

REQUEST_VOTE_BYTES = HEADER_BYTES
REQUEST_VOTE_REPLY_BYTES = HEADER_BYTES // 2
APPEND_REPLY_BYTES = HEADER_BYTES // 2


fast_init_module(globals())  # the generated __init__ of these frozen records, at half the cost
