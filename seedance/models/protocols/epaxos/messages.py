"""EPaxos messages (Moraru, Andersen & Kaminsky, "There Is More Consensus in Egalitarian Parliaments", SOSP 2013,
Figures 2 and 3): frozen, keyword-only, plain-data fields for the real backend's wire codec.

An instance is ``(replica, number)``: the ``number``-th instance led by ``replica``. A command's attributes are its
sequence number ``seq`` and its dependencies ``deps``, a sparse set of (replica, instance) pairs as a flat tuple
``(q0, j0, q1, j1, ...)``: ``j`` for replica ``q`` means "every instance of replica q numbered ≤ j that interferes
with this command", and a replica absent means none of its instances (the authors' implementation, efficient/epaxos,
keeps a vector with one slot per replica; :mod:`~seedance.models.protocols.epaxos.deps`). A message that carries
``deps`` checks them as it comes off the real backend's wire (``wire_check``). Ballot 0 is the initial command
leader's; recovery ballots are ``round * n + replica`` with round ≥ 1, unique per replica. With ``max_batch`` > 1 an
instance may hold a :class:`Batch` of client commands instead of one :class:`Command`.
"""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import FrameError
from seedance.models.protocols.epaxos.deps import VALID, Deps, problem
from seedance.models.protocols.multipaxos.messages import Command
from seedance.models.protocols.records import fast_init_module

HEADER_BYTES = 64


class _CarriesDeps:
    """A message with a ``deps`` field: the codec calls :meth:`wire_check` on each one it decodes."""

    __slots__ = ()

    def wire_check(self, num_nodes: int | None) -> None:
        found = problem(self.deps, num_nodes)  # type: ignore[attr-defined]
        if found is not None:
            raise FrameError(f"{type(self).__name__}.deps", found, VALID)


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """Several client commands proposed in one instance (``max_batch`` > 1): they share one ``seq``/``deps``, commit
    together and execute together, in this order. The batch interferes with every command on any of its keys."""

    commands: tuple[Command, ...]

    @property
    def size_bytes(self) -> int:
        return sum(c.size_bytes for c in self.commands)


@dataclass(frozen=True, kw_only=True, slots=True)
class PreAccept(_CarriesDeps):
    ballot: int
    replica: int
    instance: int
    command: Command | Batch
    seq: int
    deps: Deps


@dataclass(frozen=True, kw_only=True, slots=True)
class PreAcceptReply(_CarriesDeps):
    """``ok``: the sender pre-accepted with attributes ``seq``/``deps`` (``changed``: they differ from the ones
    proposed); otherwise ``promised`` is a higher ballot."""

    ballot: int
    replica: int
    instance: int
    ok: bool
    promised: int
    seq: int = 0
    deps: Deps = ()
    changed: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Accept(_CarriesDeps):
    ballot: int
    replica: int
    instance: int
    command: Command | Batch
    seq: int
    deps: Deps


@dataclass(frozen=True, kw_only=True, slots=True)
class AcceptReply:
    ballot: int
    replica: int
    instance: int
    ok: bool
    promised: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Commit(_CarriesDeps):
    replica: int
    instance: int
    command: Command | Batch
    seq: int
    deps: Deps


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepare:
    ballot: int
    replica: int
    instance: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PrepareReply(_CarriesDeps):
    """Explicit prepare's answer. ``status``: 0 none, 1 pre-accepted, 2 accepted, 3 committed. ``vballot`` is the
    ballot at which the reported attributes were accepted / pre-accepted (kept apart from the promise: Sutra 2020);
    ``agreed``: pre-accepted at ballot 0 with exactly the attributes the command leader proposed."""

    ballot: int
    replica: int
    instance: int
    ok: bool
    promised: int
    status: int = 0
    command: Command | Batch | None = None
    seq: int = 0
    deps: Deps = ()
    vballot: int = -1
    agreed: bool = False


MESSAGE_TYPES: tuple[type, ...] = (Command, PreAccept, PreAcceptReply, Accept, AcceptReply, Commit, Prepare,
                                   PrepareReply)


@dataclass(frozen=True, kw_only=True, slots=True)
class Fetch:
    """A replica blocked on instances ``replica.first .. replica.last`` asks a peer for the ones it committed."""

    replica: int
    first: int
    last: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TryPreAccept(PreAccept):
    """Recovery of the optimized fast quorum (Moraru et al., technical report CMU-PDL-13-111, "TryPreAccept"): the
    recoverer asks a replica to pre-accept, at ``ballot``, the attributes a few replicas pre-accepted unchanged from
    the command leader, unless it knows an interfering command that conflicts with them. Same fields as PreAccept."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TryPreAcceptReply:
    """``ok`` False: refused, ``promised`` is higher. Otherwise the sender promised ``ballot`` and says one of:
    ``witness`` (it pre-accepted these attributes from the command leader at ballot 0), ``preaccepted`` (it had no
    conflict and pre-accepted them now), ``conflict`` = (replica, instance) of an interfering command that neither
    is among the dependencies nor depends on the instance (``conflict_committed``: that command is committed), or
    none of these (it holds the instance accepted: no evidence either way)."""

    ballot: int
    replica: int
    instance: int
    ok: bool
    promised: int
    witness: bool = False
    preaccepted: bool = False
    conflict: tuple[int, ...] = ()
    conflict_committed: bool = False

    def wire_check(self, num_nodes: int | None) -> None:
        """As it comes off the real backend's wire: ``conflict`` is none or one (replica, instance) pair."""
        found = problem(self.conflict, num_nodes)
        if found is None and len(self.conflict) > 2:
            found = f"{len(self.conflict) // 2} pairs (one at most)"
        if found is not None:
            raise FrameError("TryPreAcceptReply.conflict", found, "() or one (replica, instance) pair")


@dataclass(frozen=True, kw_only=True, slots=True)
class Watermark:
    """Instance compaction (seedance/models/protocols/epaxos/snapshots.py): per command leader, the prefix of its
    instances the sender's latest durable snapshot reflects."""

    prefix: tuple[int, ...]

    def wire_check(self, num_nodes: int | None) -> None:
        """As it comes off the real backend's wire: one prefix per replica, each an integer >= 0 (a short or
        negative prefix would move the global watermark, and what is forgotten, wrongly)."""
        prefix = self.prefix
        if type(prefix) is not tuple or any(type(p) is not int or p < 0 for p in prefix):
            raise FrameError("Watermark.prefix", f"{prefix!r:.80}", "a tuple of integers >= 0, one per replica")
        if num_nodes is not None and len(prefix) != num_nodes:
            raise FrameError("Watermark.prefix", f"{len(prefix)} entries", f"one per replica: {num_nodes}")


MESSAGE_TYPES = (*MESSAGE_TYPES, Fetch, Batch, TryPreAccept, TryPreAcceptReply, Watermark)


fast_init_module(globals())  # the generated __init__ of these frozen records, at half the cost
