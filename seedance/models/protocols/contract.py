"""The node contract: what a protocol node receives (inputs) and what it asks its runtime to do (effects).

A node is a plain object. A runtime (the SimPy simulator or the real multi-process backend) calls one of its
``on_*`` methods with the input and the current time ``now`` (seconds, from the runtime's clock: virtual in the
simulator, monotonic in the real backend) and performs the list of effects returned, **in order**:

* :class:`Persist` / :class:`PersistLog` — the write is durable (fsynced, or survives a simulated crash) before the
  runtime performs any effect that follows it in the list. A node therefore returns ``[Persist(...), Send(...)]``
  to obey "save to stable storage before sending" (Raft §5.1/§5.2, etcd/raft's ``Ready``). This holds for every
  later effect, timers included: a ``SetTimer(name, 0)`` placed after a Persist is armed only once the write is
  durable, which is how a node learns that its own write has landed (Raft's leader does so to write its log in
  parallel with replication, Ongaro's thesis §10.2.1).
* :class:`Send` — best-effort, unordered, may be lost or duplicated by the network; ``size_bytes`` is what the
  fabric model charges for it.
* :class:`SetTimer` — (re)arms the named timer; a timer of the same name still pending is replaced.
  :class:`CancelTimer` — disarms it (no-op when not armed).
* :class:`Reply` — answers a client request (exactly once per request the node accepted; a node that crashes
  forgets, and the client times out: an indeterminate ``info`` outcome).
* :class:`StartCollective` — starts a collective over a group of nodes; the runtime later calls
  ``on_collective_done`` on every member with the same ``collective_id``.
* :class:`Annotate` — a trace annotation; no effect on behaviour.
* :class:`CompactLog` — durably drops a log's entries before a position (Raft §7's log compaction, once a snapshot
  holds what they said); positions are never renumbered, so a later ``PersistLog`` counts from the log's beginning.
* :class:`PersistRecords` — puts and deletes many small keyed records of one table in one durable step (per-instance
  Paxos / EPaxos state): the same ordering and crash rules as :class:`Persist`.
* Durability notices: a ``Persist`` / ``PersistLog`` / ``CompactLog`` / ``PersistRecords`` / ``Checkpoint`` with ``notify`` set makes
  the runtime call ``on_persisted(notify, now)`` once that write is durable (an input like any other, handled after
  the handler that asked for it). This is how a node learns its own write landed.
* :class:`CreateBuffer` / :class:`FreeBuffer` — device state: named arrays the runtime holds for the node (numpy in
  the simulator, torch tensors on the node's device in the real backend), addressed by handle. Live handles are
  counted; a handle used after :class:`FreeBuffer`, freed twice, or created twice is a protocol bug and stops the run
  with an error naming the node, the effect and the seed.
* :class:`StartWork` — compute the node starts and does not block on (a training step, a digest, a device-to-host
  copy); the runtime calls ``on_work_done`` when it finished. The simulator charges the compute model's time on the
  device's stream; the real backend runs it off the event loop, so the node keeps handling messages meanwhile. Work
  on one node runs in the order started (one stream per node).
* :class:`Checkpoint` — durably saves named buffers under a name (atomically: a checkpoint is whole or absent after a
  crash); ``DurableState.checkpoints`` lists the names that survived; :class:`Restore` loads one into buffers.
* :class:`Observe` — the node records that a write was applied (or a value observed) at its replica; both runtimes
  write it to the history as a replica event, so checkers can tell when each write reached each replica.

Randomness comes only from the ``numpy.random.Generator`` given to the node's constructor; time only from ``now``.
The node never sleeps, blocks, or reads a clock. After a crash the runtime builds a *fresh* node object and calls
``on_recover`` with what was durably persisted; nothing else survives.

Messages are frozen dataclasses declared by each protocol and listed in its :class:`ProtocolSpec`, so that the real
backend can encode them as plain data (:mod:`seedance.models.wire`) — never pickle.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Union, runtime_checkable

import numpy as np

from seedance.models.protocols.records import fast_init_module

NodeId = int
TimerName = Hashable


class Operation(str, enum.Enum):
    """Client operations on a register / key-value store (history ``f`` field)."""

    READ = "read"
    WRITE = "write"
    CAS = "cas"


class Outcome(str, enum.Enum):
    """Outcome of a client request, as recorded in histories (``type`` field)."""

    OK = "ok"  # took effect (reads: returned a value)
    FAIL = "fail"  # definitely did not take effect
    INFO = "info"  # indeterminate: may or may not have taken effect


# --------------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True, kw_only=True, slots=True)
class ClientRequest:
    """A client's operation. ``value`` is the written value, ``[expected, new]`` for cas, ``None`` for reads."""

    client_id: int
    request_id: int
    op: Operation
    key: str | None = None
    value: Any = None
    # the client's session context (plain data), echoed from the last Reply.context it received: a causal
    # protocol's client vector clock (COPS-style dependencies). None for protocols that do not use one.
    context: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveDone:
    """Completion of a collective this node took part in. ``ok`` is False on timeout or a failed peer."""

    collective_id: Hashable
    ok: bool
    result: Any = None  # the reduced / gathered payload (numpy array) when ok
    error: str | None = None  # "timeout", "peer-failed", ...


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkDone:
    """Completion of a :class:`StartWork`. ``result`` is the work's small plain result (a digest, a norm...)."""

    work_id: Hashable
    ok: bool
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableState:
    """What survived a crash: the last value of each :class:`Persist` key, each :class:`PersistLog` log, each
    :class:`PersistRecords` table (key -> value) and the names of the complete :class:`Checkpoint` s.
    ``log_starts``: the position of each log's first entry, for a log a :class:`CompactLog` shortened (absent: 0)."""

    values: Mapping[str, Any] = field(default_factory=dict)
    logs: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    records: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    checkpoints: Sequence[str] = ()
    log_starts: Mapping[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.values and not self.logs and not any(self.records.values()) and not self.checkpoints


# -------------------------------------------------------------------------------------------------- effects
@dataclass(frozen=True, kw_only=True, slots=True)
class Send:
    dst: NodeId
    message: Any
    size_bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SetTimer:
    name: TimerName
    delay_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelTimer:
    name: TimerName


@dataclass(frozen=True, kw_only=True, slots=True)
class Persist:
    """Durably store ``value`` (plain data: None, bool, int, float, str, bytes, lists, dicts) under ``key``."""

    key: str
    value: Any
    size_bytes: int = 64
    notify: Hashable | None = None  # when set: on_persisted(notify) once durable


@dataclass(frozen=True, kw_only=True, slots=True)
class PersistLog:
    """Durably truncate log ``key`` to its first ``start`` entries, then append ``entries`` (plain data).

    ``start`` counts from the log's beginning, compacted entries included (see :class:`CompactLog`); a ``start``
    beyond the log's end, or before its first entry still held, is a protocol bug."""

    key: str
    start: int
    entries: tuple[Any, ...]
    size_bytes: int = 64
    notify: Hashable | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactLog:
    """Durably drop the entries of log ``key`` at positions before ``first`` (0-based, as :class:`PersistLog`
    counts); the rest keep their positions. A log that ends before ``first`` is emptied and continues at ``first``
    (a follower that installed a snapshot beyond its log). ``first`` below the log's current first position is a
    protocol bug. After a crash the log holds either all of its entries or only those from ``first``."""

    key: str
    first: int
    size_bytes: int = 64
    notify: Hashable | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PersistRecords:
    """In one durable step, set ``put``'s records and remove ``delete``'s keys in table ``table``.

    Keys are strings, values plain data. Cheap enough for per-instance consensus state: the real backend appends the
    step to one record file per table (one fsync per event-loop turn for everything staged) and compacts it.

    ``handed_over``: nothing in ``put`` changes after the node returns it (the node built the mapping and its lists
    for this write and never changes them, nor anything they share, later). A runtime may then keep them as they
    are instead of copying them when it stages the write (the simulator's disk does; the real backend encodes them
    at once either way). A node that sets it and later changes one of those values corrupts its simulated disk.
    """

    table: str
    put: Mapping[str, Any] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    size_bytes: int = 64
    notify: Hashable | None = None
    handed_over: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class CreateBuffer:
    """A device buffer ``handle`` of ``shape`` / ``dtype`` (numpy dtype name), filled with ``fill`` or ``data``."""

    handle: str
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    fill: float = 0.0
    data: Any = None  # a numpy array (its shape and dtype win) or None


@dataclass(frozen=True, kw_only=True, slots=True)
class FreeBuffer:
    handle: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StartWork:
    """Start work ``op`` (a name in :mod:`seedance.engine.work`'s table) on buffers ``buffers`` with ``params``.

    ``flops`` and ``bytes_moved`` are what the modelled workload costs (the simulator's compute model charges
    them on the node's device); the arithmetic itself is real, on the node's (small) buffers.
    """

    work_id: Hashable
    op: str
    buffers: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    flops: float = 0.0
    bytes_moved: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """Durably save ``buffers`` under checkpoint ``name`` (whole or absent after a crash); replaces one of that
    name. Ordered like a :class:`Persist`."""

    name: str
    buffers: tuple[str, ...]
    notify: Hashable | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Restore:
    """Load checkpoint ``name`` into buffers (created, or overwritten when they exist); ``on_persisted`` is not
    called — the buffers hold the data for every effect that follows."""

    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Observe:
    """A replica event: write ``value`` of ``key`` was ``what`` ("apply" | "observe") at this node's replica."""

    what: str
    key: str | None
    value: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    client_id: int
    request_id: int
    outcome: Outcome
    value: Any = None  # what a read returned; None otherwise
    error: str | None = None  # "not-leader", "timeout", "cas-mismatch"...
    leader_hint: NodeId | None = None  # where a client should retry after "not-leader"
    context: Any = None  # a session context for the client's next requests (ClientRequest.context); None: keep


@dataclass(frozen=True, kw_only=True, slots=True)
class StartCollective:
    """Start collective ``op`` ("allreduce", "allgather", "broadcast", "reducescatter", "barrier", ...).

    ``payload`` is real data (a small numpy array) so results carry real arithmetic; ``nominal_size_bytes`` is what
    the modelled workload would move (e.g. a 7B-parameter gradient) and is what the simulator charges.
    """

    collective_id: Hashable
    op: str
    group: tuple[NodeId, ...]
    payload: Any  # a numpy array, or the handle (str) of one of this node's buffers
    nominal_size_bytes: int
    timeout_s: float | None = None  # None: seedance.engine.collectives.DEFAULT_TIMEOUT_S in both runtimes
    root: NodeId | None = None
    result_into: str | None = None  # a buffer handle: the result is stored there (created if absent), not returned


@dataclass(frozen=True, kw_only=True, slots=True)
class Annotate:
    """A trace annotation (e.g. "became-leader", {"term": 3}); no effect on behaviour."""

    name: str
    attrs: Mapping[str, Any] = field(default_factory=dict)


Effect = Union[Send, SetTimer, CancelTimer, Persist, PersistLog, CompactLog, PersistRecords, Reply, StartCollective,
               Annotate, CreateBuffer, FreeBuffer, StartWork, Checkpoint, Restore, Observe]
DURABLE_EFFECTS = (Persist, PersistLog, CompactLog, PersistRecords, Checkpoint)
Effects = list[Effect]


# --------------------------------------------------------------------------------------------------- nodes
@runtime_checkable
class Node(Protocol):
    """What every protocol node implements. Each method returns the effects to perform, in order."""

    node_id: NodeId

    def on_start(self, now: float) -> Effects:
        """First boot with empty durable state."""

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        """Restart after a crash; ``durable`` is exactly what was persisted before it."""

    def on_message(self, src: NodeId, message: Any, now: float) -> Effects:
        """A message from peer ``src`` arrived."""

    def on_timer(self, name: TimerName, now: float) -> Effects:
        """Timer ``name`` fired (it was armed and not cancelled or replaced since)."""

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        """A client asks for an operation; the node eventually answers with :class:`Reply` (or crashes)."""

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        """A collective started by :class:`StartCollective` finished (or failed)."""

    # Optional inputs, needed only by nodes that use the matching effects:
    #   on_persisted(token, now)      -- a write with notify=token is durable
    #   on_work_done(done: WorkDone, now)  -- a StartWork finished


@dataclass(frozen=True, kw_only=True)
class ProtocolSpec:
    """How a runtime builds a protocol's nodes.

    ``factory(node_id, num_nodes, rng, config)`` returns a fresh node; ``message_types`` lists every dataclass that
    can appear inside a :class:`Send` message (nested ones included), for the real backend's wire codec.
    """

    name: str
    factory: Callable[[NodeId, int, np.random.Generator, Mapping[str, Any]], Node]
    message_types: tuple[type, ...]
    description: str = ""
    default_config: Mapping[str, Any] = field(default_factory=dict)
    # How the protocol is used and judged (the runtimes hold nothing protocol-specific):
    operations: tuple[str, ...] = ("read", "write", "cas")  # client operations the workload may issue
    checker: str | None = "kv"  # the model that judges its histories (seedance check ... --model), None: none
    # a factory of the protocol's invariant monitor: an object whose ``observe(live_nodes) -> list[str]`` returns the
    # breaches first seen now; ``sim run`` calls it after every handled input and stops on a breach. With
    # ``observe_node(node)``, ``forget(node_id)`` and ``finish(live_nodes)`` (seedance.models.protocols.monitoring)
    # it is told only the node that handled the input, and runs its full check at the end. None: none.
    monitor: Callable[[], Any] | None = None
    # how clients find a server: "leader-hint" (a non-leader answers "not-leader" with Reply.leader_hint and the
    # client retries there) or "any" (every replica serves; each client keeps to its own)
    routing: str = "leader-hint"
    # extra summary keys of a run: "module:function" naming ``function(history, replica_events, nodes) -> dict``
    # (client events and the nodes' replica events, each in time order; usually in seedance.analysis, which models
    # may not import), merged into the summaries of ``sim run`` and ``real run``. None: none.
    summarize: str | None = None


fast_init_module(globals())  # the generated __init__ of these frozen records, at half the cost
