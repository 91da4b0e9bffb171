"""An EPaxos instance as a replica holds it (status, value, attributes, ballots) and the phase a replica coordinates
for one; the values an instance holds (a command, a batch, a no-op) and their plain forms for the durable table.

The durable record is the tuple ``(status, value, seq, deps, bal, vbal, agreed)`` with ``deps`` the sparse tuple itself
(:mod:`~seedance.models.protocols.epaxos.deps`; immutable, so the record shares it). Trees before 2026-12-07 wrote
``deps`` as a *list* with one slot per replica; such a record still reads (:meth:`Instance.from_plain` converts it),
and a record whose ``deps`` is neither form is refused with a :class:`~seedance.errors.SpecError` naming it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seedance.errors import SpecError
from seedance.models.kv import Result
from seedance.models.protocols.contract import Reply
from seedance.models.protocols.epaxos.deps import NO_DEPS, VALID, Deps, from_dense, problem, wire_bytes
from seedance.models.protocols.epaxos.messages import HEADER_BYTES, Batch
from seedance.models.protocols.multipaxos.messages import Command

NONE, PREACCEPTED, ACCEPTED, COMMITTED = 0, 1, 2, 3
TABLE = "inst"
NOOP = Command()

Iid = tuple[int, int]
Value = Command | Batch | None  # what an instance holds: one command, a batch of them, or a no-op (None)


def _parts(value: Value) -> tuple[Command, ...]:
    """The client commands of an instance's value, in execution order (none for a no-op)."""
    if value is None:
        return ()
    if type(value) is Batch:
        return value.commands
    return () if value.op is None else (value,)


def _keys(value: Value) -> tuple[Any, ...]:
    """The keys ``value`` touches: it interferes with every command on any of them."""
    if type(value) is Command:  # the common value first
        return () if value.op is None else (value.key,)
    if value is None:
        return ()
    return tuple(dict.fromkeys(c.key for c in value.commands))


def _decoded(value: Command | Batch) -> Value:
    """A value off the wire: the no-op travels as an empty Command."""
    return None if type(value) is Command and value.op is None and value.client_id is None else value


def _value_plain(value: Value) -> Any:
    if type(value) is Command:
        return value.to_plain()
    if value is None:
        return None
    return {"batch": [c.to_plain() for c in value.commands]}


def _value_from_plain(data: Any) -> Value:
    if data is None:
        return None
    if isinstance(data, dict):
        return Batch(commands=tuple(Command.from_plain(c) for c in data["batch"]))
    return Command.from_plain(data)


@dataclass(slots=True)
class Instance:
    status: int = NONE
    command: Value = None
    seq: int = 0
    deps: Deps = NO_DEPS
    bal: int = 0  # the highest ballot promised
    vbal: int = -1  # the ballot of the last pre-accept / accept vote (Sutra 2020)
    agreed: bool = False  # pre-accepted at ballot 0 with the leader's attributes unchanged
    executed: bool = False  # volatile
    # volatile, for the writes: the record's key once made (``_persist``), the plain form of ``plained`` (the value
    # last written): an instance is written at each phase with the same value, made plain once
    name: str = field(default="", repr=False, compare=False)
    plained: Any = field(default=None, repr=False, compare=False)
    value_plain: Any = field(default=None, repr=False, compare=False)
    # volatile, for execution: how many integers of ``deps`` (pairs) were seen committed here, once the instance is
    # committed (its deps no longer change, the committed prefixes only grow)
    ready: int = field(default=0, repr=False, compare=False)

    def plain(self) -> tuple[Any, ...]:
        """The durable record: a tuple of immutable values (a batch aside), so the simulated disk keeps one copy of
        equal records several replicas write (its shared values), and where the cyclic garbage collector runs (the
        real backend) it stops tracking them after one pass."""
        command = self.command
        if command is self.plained:  # the no-op too: None is plained before any value, and its plain form is None
            value = self.value_plain
        else:
            value = self.value_plain = _value_plain(command)
            self.plained = command
        return (self.status, value, self.seq, self.deps, self.bal, self.vbal, self.agreed)

    @classmethod
    def from_plain(cls, data: Any, num_nodes: int | None = None, name: str = "?") -> Instance:
        """The instance of a durable record (``name``: its key, for the error); ``deps`` in either form (above)."""
        status, command, seq, deps, bal, vbal, agreed = data
        return cls(status=int(status), command=_value_from_plain(command), seq=int(seq),
                   deps=_deps_from_plain(deps, num_nodes, name), bal=int(bal), vbal=int(vbal), agreed=bool(agreed))


def _deps_from_plain(deps: Any, num_nodes: int | None, name: str) -> Deps:
    """A durable record's ``deps``: the sparse tuple, or the vector of earlier trees (a list, one slot per replica,
    converted); anything else is refused."""
    field = f"epaxos durable record {TABLE}/{name}: deps"
    if type(deps) is list:
        if not all(type(j) is int and j >= 0 for j in deps) or (num_nodes is not None and len(deps) != num_nodes):
            raise SpecError(field, f"a list of {len(deps)} slots that is no dependency vector of this cluster",
                            f"{VALID}, or (earlier trees) a list of {num_nodes or 'N'} non-negative integers")
        return from_dense(deps)
    found = problem(deps, num_nodes)
    if found is not None:
        raise SpecError(field, found, VALID)
    return deps


@dataclass(slots=True)
class Coordination:
    """A phase this replica runs for one instance: as its command leader (ballot 0) or as a recoverer."""

    phase: str  # "preaccept" | "accept" | "prepare" | "trypreaccept"
    ballot: int
    command: Value = None
    seq: int = 0
    deps: Deps = NO_DEPS
    replies: dict[int, Any] = field(default_factory=dict)
    sent_s: float = 0.0
    started_s: float = 0.0
    witnesses: set[int] = field(default_factory=set)  # TryPreAccept: pre-accepted the leader's attributes at 0
    others: set[int] = field(default_factory=set)  # TryPreAccept: known not to have


def _size(command: Value, deps: Deps) -> int:
    """A message carrying ``command`` and ``deps``: the header, the pairs carried, the command."""
    return HEADER_BYTES + wire_bytes(deps) + (command.size_bytes if command is not None else 0)


def _reply(client_id: int, request_id: int, result: Result) -> Reply:
    return Reply(client_id=client_id, request_id=request_id, outcome=result.outcome, value=result.value,
                 error=result.error)
