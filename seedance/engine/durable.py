"""The durable writes a runtime's storage receives for one sync, by type: one table per storage, checked here.

The engine hands a storage every durable effect of a group in order (:meth:`EffectEngine.take_group`): ``Persist``,
``PersistLog``, ``CompactLog`` and ``PersistRecords`` as the node returned them, and a ``Checkpoint`` as a
:class:`~seedance.engine.effects.StagedCheckpoint` (its buffers' data copied at its place in the order). Each
runtime's storage (the simulator's image in memory, the real backend's files) maps each of these types to its own
writer through :func:`writers`, which refuses a table that misses one (or names another), naming the type. So a new
durable effect fails at import in every storage that does not write it yet, never at the first run that returns it,
and no storage tells effects apart by their class names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from seedance.engine.effects import StagedCheckpoint
from seedance.models.protocols.contract import CompactLog, Persist, PersistLog, PersistRecords

# what a storage writes, in the contract's order (contract.DURABLE_EFFECTS, with Checkpoint as staged)
STAGED: tuple[type, ...] = (Persist, PersistLog, CompactLog, PersistRecords, StagedCheckpoint)

W = TypeVar("W", bound=Callable[..., Any])


def writers(owner: str, table: Mapping[type, W]) -> dict[type, W]:
    """``table`` (type -> writer) as a dict, if it covers exactly :data:`STAGED`; else a TypeError naming ``owner``
    and the types missing or unknown."""
    missing = [kind.__name__ for kind in STAGED if kind not in table]
    unknown = [getattr(kind, "__name__", repr(kind)) for kind in table if kind not in STAGED]
    if missing or unknown:
        raise TypeError(f"{owner}: durable writers " + "; ".join(
            part for part in (f"missing for {', '.join(missing)}" if missing else "",
                              f"for unknown types {', '.join(unknown)}" if unknown else "") if part)
            + f" (a storage writes each of {', '.join(k.__name__ for k in STAGED)})")
    return dict(table)


def not_durable(owner: str, effect: Any) -> TypeError:
    """The error for an effect a storage was handed that no writer takes (an engine bug, never a node's)."""
    return TypeError(f"{owner}: {type(effect).__name__} is not a durable write "
                     f"(one of {', '.join(k.__name__ for k in STAGED)})")
