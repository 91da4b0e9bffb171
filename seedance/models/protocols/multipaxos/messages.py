"""Multi-Paxos messages (Lamport, "Paxos Made Simple" 2001 §3; van Renesse & Altinbuken, "Paxos Made Moderately
Complex", ACM CSUR 2015): frozen, keyword-only, plain-data fields, so the real backend's wire codec encodes them.

Ballots are integers ``round * num_nodes + leader``: totally ordered, and each names the one node that may lead it
(so two leaders never share a ballot). A slot's value is a :class:`Command` (a client's operation, or ``op=None``:
the no-op a new leader proposes for a gap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seedance.models.protocols.raft.messages import value_size_bytes
from seedance.models.protocols.records import fast_init_module

HEADER_BYTES = 64
COMMAND_HEADER_BYTES = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class Command:
    """A client command (``op`` "read" | "write" | "cas") or a no-op (``op`` None)."""

    client_id: int | None = None
    request_id: int = 0
    op: str | None = None
    key: Any = None
    value: Any = None

    @property
    def size_bytes(self) -> int:
        return COMMAND_HEADER_BYTES + value_size_bytes(self.key) + value_size_bytes(self.value)

    def to_plain(self) -> tuple[Any, ...]:
        """The durable form: a tuple (immutable: the simulated disk may share equal records of several nodes)."""
        return (self.client_id, self.request_id, self.op, self.key, self.value)

    @classmethod
    def from_plain(cls, data: Any) -> Command:
        if isinstance(data, Command):
            return data
        client_id, request_id, op, key, value = data
        if isinstance(key, list):
            key = tuple(key)
        return cls(client_id=client_id, request_id=request_id, op=op, key=key, value=value)


NOOP = Command()


@dataclass(frozen=True, kw_only=True, slots=True)
class SlotValue:
    """``command`` in ``slot``, accepted (or proposed) at ``ballot``."""

    slot: int
    ballot: int
    command: Command


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepare:
    """Phase 1a, once per leadership, for every slot from ``low`` on (Multi-Paxos: one prepare covers all slots)."""

    ballot: int
    low: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Promise:
    """Phase 1b. ``ok``: the acceptor promised ``ballot`` and reports every value it accepted in slots ≥ low
    above its snapshot; otherwise ``promised`` is the higher ballot it already promised. ``snapshot_index`` ≥ low:
    the slots up to it are compacted there, chosen and executed, and ``snapshot`` is their state
    (``KVStore.snapshot()``), which the candidate installs instead of proposing for them (0 and None: none sent)."""

    ballot: int
    ok: bool
    promised: int
    accepted: tuple[SlotValue, ...] = ()
    snapshot_index: int = 0
    snapshot: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Accept:
    """Phase 2a for ``values`` (all at ``ballot``; empty: a heartbeat). ``commit``: every slot ≤ commit is chosen."""

    ballot: int
    values: tuple[SlotValue, ...]
    commit: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Accepted:
    """Phase 2b. ``ok``: ``slots`` were accepted (durably) at ``ballot``; otherwise ``promised`` is higher.
    ``executed`` is the acceptor's applied prefix, so the leader can send it chosen values it lacks."""

    ballot: int
    ok: bool
    promised: int
    slots: tuple[int, ...] = ()
    executed: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Decide:
    """Chosen values, leader → a lagging replica (learner catch-up)."""

    ballot: int
    values: tuple[SlotValue, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class InstallSnapshot:
    """The leader's snapshot, leader → a replica whose executed prefix is below the leader's compaction point: the
    state (``KVStore.snapshot()``, client sessions included) after executing every slot up to ``index``."""

    ballot: int
    index: int
    state: Any


MESSAGE_TYPES: tuple[type, ...] = (Command, SlotValue, Prepare, Promise, Accept, Accepted, Decide, InstallSnapshot)


_measured: tuple[Any, int] = ((), HEADER_BYTES)  # the last values measured (by identity) and their size


def values_bytes(values: tuple[SlotValue, ...]) -> int:
    """An Accept's (or Decide's) size. One Accept goes to every acceptor, each of which writes it: the last tuple
    measured is remembered by identity (frozen values; a reference is kept, so its id is not reused)."""
    global _measured
    held = _measured
    if held[0] is values:
        return held[1]
    size = HEADER_BYTES
    for v in values:
        size += 16 + v.command.size_bytes
    _measured = (values, size)
    return size


def state_bytes(state: Any) -> int:
    """What a snapshot's state costs on the wire or the disk."""
    return HEADER_BYTES + value_size_bytes(state)


fast_init_module(globals())  # the generated __init__ of these frozen records, at half the cost
