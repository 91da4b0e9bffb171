"""The work table: named compute a node starts with :class:`~seedance.models.protocols.contract.StartWork`.

Every op is written once against the operations numpy arrays and torch tensors share (``x[...] = ...``, ``+``,
``*``, ``.sum()``), so the simulator runs it on numpy buffers and the real backend on torch tensors on the node's
device. ``host(x)`` gives a numpy copy (for torch, after the device-to-host copy has completed), which is what
digests read. An op receives the buffers named by the effect, in order, and its params; it updates buffers in place
and returns a small plain result (a digest, a norm, a list) or None.

A protocol adds its own ops by name, as protocols themselves are found: its module lists them in ``OPS`` (name ->
(function, buffers)) and :data:`PROVIDERS` names that module for the ops' prefix (``commit.`` ->
:mod:`seedance.models.protocols.commit.ops`), read the first time one of them is looked up. Nothing registers on
import, so no module below the engine imports it. :func:`register` adds one op directly.

Timing: the simulator charges ``StartWork.flops`` / ``bytes_moved`` on the node's device (:mod:`seedance.models.
compute`), plus ``params["duration_s"]`` when given; the real backend runs the op for real and, when
``params["duration_s"]`` is given, also keeps its worker busy that long (host work that competes with the node, e.g.
the seed's heartbeat-starvation scenario).
"""

from __future__ import annotations

import hashlib
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

WorkFn = Callable[[Sequence[Any], Mapping[str, Any], Callable[[Any], np.ndarray]], Any]

_OPS: dict[str, tuple[WorkFn, int]] = {}
# op-name prefix -> module whose OPS lists the ops of that prefix (imported on first use)
PROVIDERS: dict[str, str] = {"commit": "seedance.models.protocols.commit.ops"}


def register(name: str, fn: WorkFn, *, buffers: int) -> None:
    """Add op ``name`` taking exactly ``buffers`` buffers (-1: one or more)."""
    _OPS[name] = (fn, buffers)


def _provide(name: str) -> None:
    """Load the ops of ``name``'s prefix from their provider module, once."""
    prefix = name.partition(".")[0]
    module = PROVIDERS.pop(prefix, None) if "." in name else None
    if module is not None:
        for op, (fn, buffers) in importlib.import_module(module).OPS.items():
            _OPS.setdefault(op, (fn, buffers))


def names() -> list[str]:
    for prefix in list(PROVIDERS):
        _provide(prefix + ".")
    return sorted(_OPS)


def lookup(name: str, count: int) -> tuple[WorkFn | None, str | None]:
    """The op's function, or an error naming the problem."""
    entry = _OPS.get(name)
    if entry is None:
        _provide(name)
        entry = _OPS.get(name)
    if entry is None:
        return None, f"unknown work op {name!r}; valid: {', '.join(names())}"
    fn, want = entry
    if (want >= 0 and count != want) or (want < 0 and count < 1):
        return None, f"work op {name!r} takes {want if want >= 0 else 'one or more'} buffers, got {count}"
    return fn, None


def _param(params: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = params.get(name, default)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"work param {name!r} must be a finite number, got {value!r}")
    return float(value)


def _fill(bufs, params, host):
    bufs[0][...] = _param(params, "value", 0.0)


def _axpy(bufs, params, host):  # y += a x
    bufs[0][...] = bufs[0] + _param(params, "a", 1.0) * bufs[1]


def _scale(bufs, params, host):
    bufs[0][...] = bufs[0] * _param(params, "a")


def _copy(bufs, params, host):
    bufs[0][...] = bufs[1]


def _sgd(bufs, params, host):  # w -= lr g
    bufs[0][...] = bufs[0] - _param(params, "lr") * bufs[1]


def _digest(bufs, params, host):
    """SHA-256 over every buffer's bytes (dtype and shape included), after the copy to host."""
    h = hashlib.sha256()
    for b in bufs:
        array = np.ascontiguousarray(host(b))
        h.update(f"{array.dtype.name}{array.shape}".encode())
        h.update(array.tobytes())
    return h.hexdigest()


def _norm(bufs, params, host):
    return float(np.sqrt(sum(float(np.square(host(b).astype(np.float64)).sum()) for b in bufs)))


def _to_host(bufs, params, host):
    return host(bufs[0]).tolist()


def _idle(bufs, params, host):  # costs only its duration_s / flops
    return None


register("fill", _fill, buffers=1)
register("axpy", _axpy, buffers=2)
register("scale", _scale, buffers=1)
register("copy", _copy, buffers=2)
register("sgd", _sgd, buffers=2)
register("digest", _digest, buffers=-1)
register("norm", _norm, buffers=-1)
register("to_host", _to_host, buffers=1)
register("idle", _idle, buffers=0)
