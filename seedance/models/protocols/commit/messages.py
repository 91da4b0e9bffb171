"""The validate-and-commit protocol's messages (its collectives carry arrays, not messages)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat:
    epoch: int
    boot: int
    committed: int
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """A watcher's verdict on ``peer`` (heartbeat fan-out): offline, or heard again (``offline=False``)."""

    peer: int
    boot: int
    offline: bool
    epoch: int
