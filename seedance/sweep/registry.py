"""The runner registry: a runner's name -> ``"module:function"`` (and its parameter check), loaded lazily by name.

Like the protocol registry (:mod:`seedance.models.protocols.registry`), the table below is plain strings: looking a
runner up imports nothing, and a runner's module is imported only when a point is validated or run. No runner is
found through the side effect of some other import, so every spec in ``paper/specs/`` names its runner the same way
whichever module happened to be imported first.

Built-in names (see :mod:`seedance.sweep.runners` and :mod:`seedance.paper.runners` for what each does):

==================  ====================================================
``cost``            one collective's predicted cost
``sim``             one simulator run (``seedance sim run``)
``real``            one run on real processes (``seedance real run``)
``train``           one validate-and-commit training run (sim or real)
``experiment``      one ``seedance experiment NAME`` study
``paper-pixel``     one pixel-vs-consensus point (paper, seed §2.1)
``paper-convergence``  one compressed-SGD run and its time to accuracy
``paper-nccl``      one published nccl-tests row against the cost model
``paper-sim-vs-real``  one real run next to the simulator's prediction
``paper-memory``    one memory soak of the commit protocol
==================  ====================================================

A plug-in adds its own with :func:`register_runner` (from a module a spec lists under ``plugins``), or a spec names
``module:function`` directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seedance.errors import SpecError

SIZES = ("full", "quick")  # a spec's sizes (seedance.sweep.spec); here so the CLI lists them without pydantic

@dataclass(frozen=True)
class RunnerEntry:
    target: str  # "module:function"
    validate: str | None = None  # "module:function" or None


def _builtin(module: str, function: str) -> RunnerEntry:
    return RunnerEntry(f"{module}:{function}", f"{module}:validate_{function.removeprefix('run_')}")


_SWEEP = "seedance.sweep.runners"
_PAPER = "seedance.paper.runners"
_REGISTRY: dict[str, RunnerEntry] = {
    "cost": _builtin(_SWEEP, "run_cost"),
    "sim": _builtin(_SWEEP, "run_sim"),
    "real": _builtin(_SWEEP, "run_real"),
    "train": _builtin(_SWEEP, "run_train"),
    "experiment": _builtin(_SWEEP, "run_experiment"),
    "paper-pixel": _builtin(_PAPER, "pixel"),
    "paper-convergence": _builtin(_PAPER, "convergence"),
    "paper-nccl": _builtin(_PAPER, "nccl"),
    "paper-sim-vs-real": _builtin(_PAPER, "sim_vs_real"),
    "paper-memory": _builtin(_PAPER, "memory"),
}
BUILTIN = tuple(_REGISTRY)


def _target(fn: Callable[..., Any] | str, what: str) -> str:
    if isinstance(fn, str):
        module, sep, attr = fn.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"{what}: expected 'module:function', got {fn!r}")
        return fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        raise ValueError(f"{what}: {fn!r} is not importable by name (a closure, lambda or __main__ function); "
                         "define it at module level in an importable module")
    return f"{module}:{qualname}"


def register_runner(name: str, fn: Callable[[dict[str, Any], int], dict[str, Any]] | str, *,
                    validate: Callable[[dict[str, Any]], None] | str | None = None) -> None:
    """Register ``fn`` (a module-level function or ``"module:function"``) as runner ``name``; ``validate(params)``
    raises SpecError for bad parameters (called for every point before any runs). A built-in name cannot be
    taken over."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"runner name must be a non-empty string without ':', got {name!r}")
    new = RunnerEntry(_target(fn, f"runner {name}"),
                      _target(validate, f"validate of {name}") if validate is not None else None)
    if name in BUILTIN and _REGISTRY[name] != new:
        raise ValueError(f"runner {name!r} is built in ({_REGISTRY[name].target}); register under another name")
    _REGISTRY[name] = new


def runner_names() -> list[str]:
    return sorted(_REGISTRY)


def resolve(target: str) -> Callable[..., Any]:
    """Import ``module:function``."""
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def entry(name: str) -> RunnerEntry:
    """The registry entry of ``name`` (a registered name, or ``module:function`` used as is)."""
    if not isinstance(name, str):
        raise SpecError("runner", f"expected a name, got {name!r}", f"valid: {', '.join(runner_names())}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return RunnerEntry(name)
    raise SpecError("runner", f"unknown runner {name!r}", f"valid: {', '.join(runner_names())} or module:function")


def check_runner_name(name: str) -> None:
    """A registered name, or an importable ``module:function``."""
    found = entry(name)
    try:
        fn = resolve(found.target)
    except (ImportError, AttributeError, ValueError) as err:
        raise SpecError("runner", f"cannot import {found.target!r} ({type(err).__name__}: {err})",
                        f"valid: {', '.join(runner_names())} or an importable module:function") from None
    if not callable(fn):
        raise SpecError("runner", f"{found.target!r} is not callable", "a function fn(params, seed) -> dict")


def param_field(field: str) -> str:
    """A library error's field as the sweep parameter's: ``--nemesis`` → ``params.nemesis``, ``--set k`` →
    ``params.set.k``, ``collective`` → ``params.collective``."""
    field = field.lstrip("-").replace("set ", "set.").replace("-", "_")
    return field if field.startswith("params.") else f"params.{field}"


def validate_params(name: str, params: dict[str, Any]) -> None:
    """The runner's own check of one point's parameters (a SpecError names ``params.X``)."""
    found = entry(name)
    if found.validate is not None:
        try:
            resolve(found.validate)(dict(params))
        except SpecError as err:
            raise SpecError(param_field(err.field), err.problem, err.valid) from None
