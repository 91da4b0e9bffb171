"""Protocol options: one way to build them from ``--set`` / config mappings and to check the common ones.

A protocol's options are a frozen dataclass that derives from :class:`Options` and names its ``prefix`` (the
protocol's name, used in error fields such as ``raft.heartbeat_s``). :meth:`Options.from_mapping` refuses an
unknown key with the valid ones listed; :meth:`Options.as_dict` is the ``ProtocolSpec.default_config``.
:func:`check_timing` and :func:`check_counts` validate what several protocols share (heartbeat and election
timeout ranges, positive integer counts), with the same words everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

from seedance.errors import SpecError

T = TypeVar("T", bound="Options")


class Options:
    """Mixin for a protocol's frozen options dataclass (``slots=True`` works: the mixin has no slots of its own)."""

    __slots__ = ()
    prefix: ClassVar[str] = "protocol"

    @classmethod
    def from_mapping(cls: type[T], config: Mapping[str, Any] | None) -> T:
        """Build from a plain mapping; an unknown key is a :class:`SpecError` naming the valid ones."""
        config = dict(config or {})
        valid = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise SpecError(f"{cls.prefix}.{unknown[0]}", "unknown option", f"valid: {', '.join(valid)}")
        return cls(**config)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_timing(prefix: str, heartbeat_s: Any, lo: Any, hi: Any, *,
                 why: str = "an election timeout several heartbeats long") -> None:
    """A positive heartbeat, 0 < election timeout min <= max, and min above the heartbeat."""
    if not (_number(heartbeat_s) and heartbeat_s > 0):
        raise SpecError(f"{prefix}.heartbeat_s", f"must be a positive number, got {heartbeat_s!r}")
    if not (_number(lo) and _number(hi) and 0 < lo <= hi):
        raise SpecError(f"{prefix}.election_timeout_s_min", f"need 0 < min <= max, got [{lo!r}, {hi!r}]")
    if lo <= heartbeat_s:
        raise SpecError(f"{prefix}.election_timeout_s_min", f"{lo} must exceed heartbeat_s {heartbeat_s}", why)


def check_counts(prefix: str, options: Any, names: Iterable[str]) -> None:
    """Each named option is an integer >= 1."""
    for name in names:
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{prefix}.{name}", f"must be an integer >= 1, got {value!r}")
