"""Work ops of the commit protocol: a small data-parallel training job on each rank's flat parameter buffer.

Listed in :data:`OPS`, which :mod:`seedance.engine.work` reads by name the first time a ``commit.`` op is looked up
(nothing registers on import), so both runtimes run them: numpy buffers in the simulator,
torch tensors on the rank's device in the real backend (``host(x)`` reads after the device-to-host copy; results are
written back with the buffer's own ``copy_`` / item assignment). The arithmetic is float32 on the host, identical in
every rank that applies the same inputs, so replicas that follow the protocol are bit-identical.

The model: least-squares linear regression ``y = X w*`` plus noise (the loss ``0.5 · mean((X w − y)²)``), data
generated from ``(seed, rank)`` (no downloads; :func:`shard`): each rank cycles through its own shard of
:data:`SHARD_BATCHES` mini-batches (:func:`batch`, a pure function of seed, rank and step); the gradient
``Xᵀ(Xw − y) / batch`` is summed by an allreduce and applied as ``w −= (lr / n) · Σ g`` (synchronous data-parallel
SGD).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_TRUTH_STREAM = 0x7A11  # the generator of w* (the same on every rank)
_INIT_STREAM = 0x1417  # the generator of the initial parameters (the same on every rank)


def _store(buf: Any, array: np.ndarray) -> None:
    """Write ``array`` into ``buf`` (a numpy array, or a torch tensor through ``new_tensor`` + ``copy_``)."""
    if hasattr(buf, "copy_"):
        buf.copy_(buf.new_tensor(np.ascontiguousarray(array)).reshape(buf.shape))
    else:
        buf[...] = array.astype(buf.dtype, copy=False).reshape(buf.shape)


def _int(params: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"work param {name!r} must be an integer, got {value!r}")
    return int(value)


def _float(params: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"work param {name!r} must be a finite number, got {value!r}")
    return float(value)


@functools.lru_cache(maxsize=16)
def truth(seed: int, dim: int) -> np.ndarray:
    """w* (read-only; drawn once per seed and size: every rank's every batch uses it)."""
    out = np.random.default_rng([seed, _TRUTH_STREAM]).standard_normal(dim).astype(np.float32)
    out.flags.writeable = False
    return out


SHARD_BATCHES = 8  # a rank's data shard holds this many mini-batches; it cycles through them (an epoch)
_SHARDS: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray]] = {}  # (seed, rank, size, dim) -> (x, y)
_SHARDS_MAX = 1024  # shards kept (66 KB each at the default sizes: one per rank of the largest run); past it the cache
# starts again (a stress run draws 64 new ones per segment)


def shard(seed: int, rank: int, size: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s data shard: :data:`SHARD_BATCHES` mini-batches of ``size`` examples (``x`` rows of ``dim``
    unit-variance float32 features, ``y = x w* + 0.01 noise``), read-only. Drawn once per (seed, rank) from the
    counter-based Philox4x64 generator keyed by them (Salmon et al., SC 2011): the x rows, then the noise, uniform on
    [-sqrt 3, sqrt 3), zero mean and unit variance like a standard normal feature (least squares needs no more)."""
    key = (seed, rank, size, dim)
    found = _SHARDS.get(key)
    if found is not None:
        return found
    rows = SHARD_BATCHES * size
    gen = np.random.Generator(np.random.Philox(key=np.array([seed, rank], dtype=np.uint64)))
    drawn = gen.random(rows * (dim + 1), dtype=np.float32)
    drawn -= np.float32(0.5)
    drawn *= _UNIT
    x = drawn[:rows * dim].reshape(rows, dim)
    y = x @ truth(seed, dim) + np.float32(0.01) * drawn[rows * dim:]
    x.flags.writeable = False
    y.flags.writeable = False
    if len(_SHARDS) >= _SHARDS_MAX:
        _SHARDS.clear()
    _SHARDS[key] = (x, y)  # two threads drawing the same shard store equal arrays: either is right
    return x, y


def batch(seed: int, rank: int, step: int, size: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s mini-batch of step ``step``: batch ``step mod SHARD_BATCHES`` of its :func:`shard` (read-only
    views), a pure function of (seed, rank, step). Drawing every batch afresh had cost 12 us a rank-step, a tenth of
    `sim train`'s CPU; a shard is drawn once per rank."""
    x, y = shard(seed, rank, size, dim)
    at = (step % SHARD_BATCHES) * size
    return x[at:at + size], y[at:at + size]


_UNIT = np.float32(2 * np.sqrt(3.0))  # U(-1/2, 1/2) times this has variance 1


def _init(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> None:
    w = bufs[0]
    dim = int(np.prod(host(w).shape))
    rng = np.random.default_rng([_int(params, "seed"), _INIT_STREAM])
    _store(w, (0.1 * rng.standard_normal(dim)).astype(np.float32))


def _grad(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> float:
    """g = ∇ loss on this rank's batch at w (written into g in g's dtype); returns the loss."""
    w = host(bufs[0]).astype(np.float32, copy=False)  # host() made the copy
    x, y = batch(_int(params, "seed"), _int(params, "rank"), _int(params, "step"), _int(params, "batch"), w.size)
    residual = x @ w - y
    grad = (x.T @ residual) / np.float32(x.shape[0])
    _store(bufs[1], grad.astype(np.float32, copy=False))
    squares = residual.astype(np.float64) ** 2
    return float(0.5 * (np.add.reduce(squares) / squares.size))  # np.mean's own sum and division, without its wrapper


def _apply(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> None:
    """w −= scale · gsum (gsum upcast to float32); ``fault`` = [lo, hi, factor] models a unified-memory page whose
    atomic adds were lost (factor 0) or applied twice (factor 2) during a migration (scenario F7)."""
    w = host(bufs[0]).astype(np.float32, copy=False)  # host() made the copy
    delta = (-np.float32(_float(params, "scale")) * host(bufs[1]).astype(np.float32)).astype(np.float32)
    fault = params.get("fault")
    if fault:
        lo, hi, factor = int(fault[0]), int(fault[1]), float(fault[2])
        delta[lo:hi] = delta[lo:hi] * np.float32(factor)
    _store(bufs[0], (w + delta).astype(np.float32, copy=False))


def _apply_partial(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> None:
    """The v2.0.2 retransmission after a timed-out allreduce (scenario F2, buggy): only slice [lo, hi) of the
    gradient was resent and reduced (``gpart``); the rest of the update uses this rank's local gradient."""
    w = host(bufs[0]).astype(np.float32)
    local = host(bufs[1]).astype(np.float32) * np.float32(_int(params, "n"))
    lo, hi = _int(params, "lo"), _int(params, "hi")
    local[lo:hi] = host(bufs[2]).astype(np.float32)
    _store(bufs[0], (w - np.float32(_float(params, "scale")) * local).astype(np.float32))


def _slice(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> None:
    lo, hi = _int(params, "lo"), _int(params, "hi")
    _store(bufs[0], host(bufs[1]).astype(np.float32)[lo:hi])


def digest_of(array: np.ndarray) -> list[int]:
    """Two int64 words of the SHA-256 of the array's dtype, shape and bytes (a fixed-size digest row)."""
    array = np.ascontiguousarray(array)
    h = hashlib.sha256(f"{array.dtype.name}{array.shape}".encode())
    h.update(array.tobytes())
    raw = h.digest()
    return [int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:16], "little", signed=True)]


def _digest(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> dict[str, Any]:
    """The digest of the buffer read on the host (after the device-to-host copy), with its values if asked."""
    array = np.asarray(host(bufs[0]))
    out: dict[str, Any] = {"digest": digest_of(array)}
    if params.get("with_values"):
        out["values"] = array.astype(np.float64).tolist()
    return out


def _record_event(bufs: Sequence[Any], params: Mapping[str, Any], host: Any) -> None:
    """Record a (modelled) event on the stream: a one-element device buffer stamped with the step."""
    _store(bufs[0], np.asarray([_float(params, "step", 0.0)], dtype=np.float32))


# op name -> (function, buffers it takes; -1: one or more): what seedance.engine.work serves for "commit." ops
OPS = {
    "commit.init": (_init, 1),
    "commit.grad": (_grad, 2),
    "commit.apply": (_apply, 2),
    "commit.apply_partial": (_apply_partial, 3),
    "commit.slice": (_slice, 2),
    "commit.digest": (_digest, 1),
    "commit.record_event": (_record_event, 1),
}
