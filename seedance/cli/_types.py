"""click parameter types over :mod:`seedance.validation`: every numeric option is finite and within its range, and
a bad value is one :class:`~seedance.errors.SpecError` line naming the option (exit 2), before any work starts."""

from __future__ import annotations

import math
from typing import Any

import click

from seedance import validation
from seedance.errors import SpecError


def _name(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or []
    return max(opts, key=len) if opts else (param.name or "value")


class Number(click.ParamType):
    """A finite float in a range (``lo_open``/``hi_open`` exclude the bound); ``why`` explains a ceiling."""

    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                 hi_open: bool = False, why: str | None = None) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open, self.why = lo, hi, lo_open, hi_open, why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        field = _name(param)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise SpecError(field, f"{validation.shown(value)} is not a number", validation._range_text(
                    self.lo, self.hi, self.lo_open, self.hi_open)) from None
            if not math.isfinite(value):  # float("1e400") is inf: say so rather than "out of range"
                raise SpecError(field, f"must be finite, got {validation.shown(value)}", validation._range_text(
                    self.lo, self.hi, self.lo_open, self.hi_open))
        return validation.number(field, value, lo=self.lo, hi=self.hi, lo_open=self.lo_open, hi_open=self.hi_open,
                                 why=self.why)


class Integer(click.ParamType):
    """An integer in [lo, hi]; ``why`` explains the ceiling."""

    name = "integer"

    def __init__(self, lo: int | None = None, hi: int | None = None, *, why: str | None = None) -> None:
        self.lo, self.hi, self.why = lo, hi, why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        field = _name(param)
        if isinstance(value, str):
            try:
                value = int(value.strip(), 10)
            except ValueError:
                raise SpecError(field, f"{validation.shown(value)} is not an integer",
                                validation._range_text(self.lo, self.hi, False, False, "an integer")) from None
        return validation.integer(field, value, lo=self.lo, hi=self.hi, why=self.why)


SEED = Integer(0, validation.MAX_SEED)
TIMEOUT = Number(0, validation.MAX_TIMEOUT_S, lo_open=True)
