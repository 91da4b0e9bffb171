"""The effect engine: the one interpretation of the node contract that both runtimes share.

The simulator (:mod:`seedance.sim`) and the real backend (:mod:`seedance.real`) are peers: each keeps only what is its
own (SimPy scheduling, the fabric, storage and CPU models; or sockets, files, processes and torch.distributed) and
hands a node's effects to one :class:`~seedance.engine.effects.EffectEngine`, which owns

* the ordering rule (what may leave before a durable write, and what must wait for it) and group commit,
* timers (arming, replacing, cancelling, stale firings),
* durability notices (``on_persisted``), device buffers by handle and the work table,
* the collective result rules (:mod:`.collectives`: one function computes every member's result), and
* node RNG derivation from the root seed (:mod:`.rng`).

Nothing here performs I/O or reads a clock; the runtimes call in with their own notion of time (``cursor``).
"""

from seedance.engine.effects import ContractError, Driver, EffectEngine

__all__ = ["ContractError", "Driver", "EffectEngine"]
