"""Messages of the causal pixel-grid protocol (plain frozen dataclasses; numpy arrays travel through the wire codec)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seedance.models.crdt import GridDelta

HEADER_BYTES = 32  # epoch, start, end and framing of a Sync / an Ack

@dataclass(frozen=True, kw_only=True, eq=False)
class Sync:
    """A delta-interval ``Δ[start, end)`` of the sender's own delta-groups in its incarnation ``epoch``
    (``start`` None: the sender's full state, and ``end`` its group counter). The arrays are a
    :class:`~seedance.models.crdt.GridDelta`; ``clock`` is its causal context (the sender's clock).

    :meth:`delta` makes the GridDelta once per message object: in the simulator one Sync goes to every peer of a
    write (1,023 at 1,024 replicas), and each receiver reads the same immutable delta. ``usual`` is likewise what
    the node's usual delivery of it emits, the same at every receiver (kept by :meth:`keep`). ``_delta`` and
    ``usual`` are no fields, so they are neither sent nor compared."""

    __slots__ = ("epoch", "start", "end", "idx", "value", "version", "t", "writer", "seq", "clock", "_delta", "usual")

    epoch: int
    start: int | None
    end: int
    idx: np.ndarray
    value: np.ndarray
    version: np.ndarray
    t: np.ndarray
    writer: np.ndarray
    seq: np.ndarray
    clock: np.ndarray

    @classmethod
    def of(cls, epoch: int, start: int | None, end: int, delta: GridDelta) -> Sync:
        return cls(epoch=epoch, start=start, end=end, idx=delta.idx, value=delta.value, version=delta.version,
                   t=delta.t, writer=delta.node, seq=delta.seq, clock=delta.clock)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_delta", None)
        object.__setattr__(self, "usual", None)

    def keep(self, usual: tuple) -> None:
        """Keep ``usual`` (immutable effects, made from this message alone) as :attr:`usual`."""
        object.__setattr__(self, "usual", usual)

    def delta(self) -> GridDelta:
        made = self._delta
        if made is None:
            made = GridDelta.from_wire((self.idx, self.value, self.version, self.t, self.writer, self.seq,
                                        self.clock))
            object.__setattr__(self, "_delta", made)
        return made


@dataclass(frozen=True, kw_only=True, slots=True)
class Ack:
    """The receiver holds the sender's groups ``[0, held)`` of incarnation ``epoch``. ``rejected``: the interval
    it answers did not extend that prefix (lost or reordered predecessors, or a receiver restart) — send again
    from ``held``."""

    epoch: int
    held: int
    rejected: bool = False


MESSAGE_TYPES = (Sync, Ack)
