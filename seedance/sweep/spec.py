"""A sweep specification (YAML or JSON), validated at load with pydantic.

::

    name: protocols-conflict          # letters, digits, - _ . (names the output)
    runner: sim                       # a registered runner (see seedance.sweep.runners) or module:function
    fixed: {nodes: 3, duration: 0.2}  # parameters every point shares
    axes:
      grid: {protocol: [raft, epaxos]}                     # every combination
      zip: {clients: [4, 8], keys: [8, 16]}                # varied together (equal lengths)
      random:                                              # samples drawn from a seeded generator
        samples: 4
        seed: 0
        params: {conflict_rate: {uniform: [0, 1]}}
    repetitions: 3                    # seeds 0, 1, 2 per point (or `seeds: [7, 11]`)
    timeout_s: 120                    # per run; a run past it is killed and recorded as failed
    max_workers: 1                    # at most this many runs at once (real processes that must not share cores)
    quick:                            # the quick size (`--size quick`): overrides merged into the spec
      axes: {grid: {protocol: [raft]}}  # (mappings key by key, anything else replaced)
      repetitions: 1

Sizes: ``full`` (default) is the spec as written; ``quick`` is the spec with its ``quick:`` overrides merged in (the
spec as written when it has none). The resolved spec (no ``quick:`` key) is what a sweep records in ``spec.json``.

A runner registered by another module (:func:`seedance.sweep.register_runner`) is found when the spec lists that
module under ``plugins`` (imported at load); ``run_sweep`` adds it to the ``spec.json`` it writes.

The points are the product grid × zip × random (an absent axis contributes one empty point); each point runs once
per seed. A parameter may appear in one place only (fixed, grid, zip or random). Every error names the field as a
dotted path (``axes.random.params.lr.loguniform``) and what would be valid, in one line
(:class:`seedance.errors.SpecError`: the CLI exits with status 2).
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from seedance.errors import SpecError
from seedance.sweep.registry import SIZES

MAX_POINTS = 1_000_000
MAX_SEEDS = 10_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
SIZE_KEY = "quick"  # the overrides of the quick size


def plain(where: str, value: Any) -> None:
    """``value`` must be plain JSON data (str, int, float, bool, null, lists, mappings with string keys): a
    parameter travels to worker processes as JSON and is hashed into the run's key."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for k, item in enumerate(value):
            plain(f"{where}[{k}]", item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(where, f"has a non-string key {key!r}", "mappings with string keys")
            plain(f"{where}.{key}", item)
        return
    raise SpecError(where, f"is a {type(value).__name__} ({value!r})",
                    "plain values: strings, numbers, true/false, null, lists, mappings")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


def _pair(value: Any, kind: str) -> tuple[float, float]:
    """``[lo, hi]`` of a uniform / loguniform (0 < lo) / randint (integers, hi inclusive) distribution."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"expected [lo, hi], got {value!r}")
    lo, hi = value
    for x in (lo, hi):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"expected two finite numbers [lo, hi], got {value!r}")
    if not lo < hi:
        raise ValueError(f"needs lo < hi, got {value!r}")
    if kind == "loguniform" and lo <= 0:
        raise ValueError(f"needs 0 < lo < hi, got {value!r}")
    if kind == "randint" and not (isinstance(lo, int) and isinstance(hi, int)):
        raise ValueError(f"expected two integers [lo, hi] (hi inclusive), got {value!r}")
    return lo, hi


class _Bounds(_Model):
    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        return {k: _pair(v, k) for k, v in data.items()} if isinstance(data, dict) else data


class Uniform(_Bounds):
    uniform: tuple[float, float]


class LogUniform(_Bounds):
    loguniform: tuple[float, float]


class RandInt(_Bounds):
    randint: tuple[int, int]


class Choice(_Model):
    choice: list[Any] = Field(min_length=1)


DISTRIBUTIONS = ("uniform", "loguniform", "choice", "randint")


class RandomAxis(_Model):
    samples: int = Field(ge=1, le=MAX_POINTS)
    seed: int = Field(default=0, ge=0)
    params: dict[str, Any] = Field(min_length=1)

    @field_validator("params", mode="before")
    @classmethod
    def _dists(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for name, dist in v.items():
            if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
                raise SpecError(f"axes.random.params.{name}", f"not a distribution: {dist!r}",
                                "one of {uniform: [lo, hi]}, {loguniform: [lo, hi]}, {choice: [...]}, "
                                "{randint: [lo, hi]}")
            kind = next(iter(dist))
            model = {"uniform": Uniform, "loguniform": LogUniform, "choice": Choice, "randint": RandInt}[kind]
            try:
                out[name] = model.model_validate(dist)
            except ValidationError as err:
                first = err.errors()[0]
                raise SpecError(f"axes.random.params.{name}.{kind}",
                                first["msg"].removeprefix("Value error, ")) from None
        return out


class Axes(_Model):
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: dict[str, list[Any]] = Field(default_factory=dict)
    random: RandomAxis | None = None

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in v.items():
            if not values:
                raise SpecError(f"axes.grid.{name}", "is an empty list (the sweep would have no points)",
                                "at least one value")
        return v

    @field_validator("zip")
    @classmethod
    def _zip(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        lengths = {name: len(values) for name, values in v.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"lists of different lengths {lengths} (zip varies them together: equal lengths)")
        if any(n == 0 for n in lengths.values()):
            raise ValueError("an empty list of values (the sweep would have no points)")
        return v


class SweepSpec(_Model):
    """A validated sweep (see the module docstring). ``seed_list`` is the seeds each point runs with."""

    name: str = Field(pattern=NAME_PATTERN)
    plugins: list[str] = Field(default_factory=list)
    runner: str
    fixed: dict[str, Any] = Field(default_factory=dict)
    axes: Axes = Field(default_factory=Axes)
    repetitions: int | None = Field(default=None, ge=1, le=MAX_SEEDS)
    seeds: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1, max_length=MAX_SEEDS)
    timeout_s: float = Field(default=3600.0, gt=0, le=MAX_TIMEOUT_S)
    max_workers: int | None = Field(default=None, ge=1, le=1024)
    description: str = ""
    _points_checked: bool = PrivateAttr(default=False)  # load_spec checked every point's parameters

    @field_validator("plugins")
    @classmethod
    def _plugins(cls, v: list[str]) -> list[str]:
        import importlib

        for module in v:
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise ValueError(f"cannot import plugin module {module!r} ({err})") from None
        return v

    @field_validator("runner")
    @classmethod
    def _runner(cls, v: str) -> str:
        from seedance.sweep.registry import check_runner_name

        check_runner_name(v)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        if self.repetitions is not None and self.seeds is not None:
            raise ValueError("give repetitions (seeds 0..n-1) or seeds (a list), not both")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds has duplicates {self.seeds} (each seed at most once)")
        for where, params in (("fixed", self.fixed), ("axes.grid", self.axes.grid), ("axes.zip", self.axes.zip)):
            for name, value in params.items():
                plain(f"{where}.{name}", value)
        if self.axes.random is not None:
            for name, dist in self.axes.random.params.items():
                if isinstance(dist, Choice):
                    plain(f"axes.random.params.{name}.choice", dist.choice)
        places: dict[str, str] = {}
        sources = [("fixed", self.fixed), ("axes.grid", self.axes.grid), ("axes.zip", self.axes.zip),
                   ("axes.random.params", self.axes.random.params if self.axes.random else {})]
        for where, params in sources:
            for name in params:
                if name in places:
                    raise ValueError(f"parameter {name!r} is in both {places[name]} and {where} "
                                     "(each parameter in one place)")
                places[name] = where
        return self

    @property
    def seed_list(self) -> list[int]:
        if self.seeds is not None:
            return list(self.seeds)
        return list(range(self.repetitions or 1))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the form hashed into ``spec_hash``, written to ``spec.json``)."""
        return self.model_dump(mode="json", exclude_none=True)


# ----------------------------------------------------------------------------------------------------- errors
def _allowed_fields(loc: tuple[Any, ...]) -> str | None:
    """The field names valid at ``loc``'s parent (for 'extra_forbidden' errors)."""
    model: Any = SweepSpec
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        model = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return None
    names = list(getattr(model, "model_fields", {}))
    return ", ".join([*names, SIZE_KEY] if model is SweepSpec else names)


def spec_error(err: ValidationError, where: str = "") -> SpecError:
    """The first error of ``err`` as one line: the field's dotted path, the problem, what is valid."""
    first = err.errors()[0]
    loc = tuple(first.get("loc", ()))
    path = ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "spec"
    msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    valid = None
    kind = first.get("type", "")
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, SpecError):
        path, msg, valid = cause.field, cause.problem, cause.valid
    elif kind == "extra_forbidden":
        allowed = _allowed_fields(loc)
        msg = "unknown field"
        valid = f"valid fields: {allowed}" if allowed else None
    elif kind == "missing":
        msg = "is required"
    elif path == "name" and kind == "string_pattern_mismatch":
        valid = "1-100 letters, digits, '-', '_', '.' starting with a letter or digit"
    field = f"{where}: {path}" if where else path
    return SpecError(field, msg, valid)


def merge(base: Any, override: Any) -> Any:
    """``override`` over ``base``: mappings merged key by key (recursively), anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def check_size(size: Any) -> str:
    if size not in SIZES:
        raise SpecError("--size", f"unknown size {size!r}", f"valid: {', '.join(SIZES)}")
    return size


def sized(doc: dict[str, Any], size: str, where: str = "") -> dict[str, Any]:
    """``doc`` in ``size``: its ``quick:`` overrides merged in for ``quick``, dropped for ``full``."""
    check_size(size)
    doc = dict(doc)
    quick = doc.pop(SIZE_KEY, None)
    field = f"{where}: {SIZE_KEY}" if where else SIZE_KEY
    if quick is None:
        return doc
    if not isinstance(quick, dict):
        raise SpecError(field, f"expected a mapping of overrides, got {quick!r}", "e.g. {repetitions: 2}")
    allowed = [name for name in SweepSpec.model_fields if name != "name"]
    for key in quick:
        if key not in allowed:
            raise SpecError(f"{field}.{key}", "unknown field", f"valid fields: {', '.join(allowed)}")
    return merge(doc, quick) if size == "quick" else doc
