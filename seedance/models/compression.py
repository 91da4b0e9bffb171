"""Gradient compressors: what the receiver reconstructs, how far it is from the input, what it costs on the wire.

Seed §2.4 asks for a compression error bound on the operator ``C`` applied to a gradient. Each plain function here
returns the vector the *receiver* reconstructs (same shape and dtype as the input; the last axis is the gradient, so a
``(seeds, d)`` batch compresses row by row). Randomness is an injected ``numpy.random.Generator``; nothing else.

Two families and their parameters:

* **contractive** (biased) compressors satisfy ``E‖C(g) − g‖² ≤ (1 − δ)‖g‖²`` with ``0 < δ ≤ 1`` — the
  "k-contraction" of Stich, Cordonnier & Jaggi 2018 (Def. 2.1, δ = k/d) and the "δ-approximate compressor" of
  Karimireddy et al. 2019 (Assumption C). Top-k (δ = k/d), unscaled random-k (δ = k/d, in expectation), scaled sign
  (δ(g) = ‖g‖₁²/(d‖g‖₂²) ≥ 1/d, Karimireddy et al. 2019 Lemma 8) and fp16/bf16 casts (δ = 1 − u², u the unit
  round-off, for coordinates in the normal range) are contractive.
* **unbiased** compressors satisfy ``E C(g) = g`` and ``E‖C(g) − g‖² ≤ ω‖g‖²``: QSGD with s levels
  (ω = min(d/s², √d/s), Alistarh et al. 2017 Lemma 3.1) and random-k rescaled by d/k (ω = d/k − 1).

Conventions. The seed writes the bound as ``‖C(g) − g‖² ≤ δ_seed‖g‖²`` (δ as *distortion*); here δ is the
*contraction* of the papers, so ``δ_seed = 1 − δ``. An unbiased compressor with variance ω becomes a contraction with
δ = 1/(1 + ω) after scaling by 1/(1 + ω) (Stich et al. 2018 Remark 2.2-style argument); it is not itself one when ω ≥ 1.

Wire bytes (what one worker puts on the wire for a d-vector; see :meth:`Compressor.wire_bytes`): dense fp32 4d;
fp16/bf16 2d; top-k/random-k ``k·(value_bytes + index_bytes)`` (fp32 values, int32 indices by default; random-k could
send a shared seed instead of indices, which we do not assume); QSGD with the *fixed-width* code: one fp32 norm plus,
per coordinate, a sign bit and ``ceil(log2(s + 1))`` bits for the level (Alistarh et al. 2017's Elias code is shorter
for small s and is not modelled); scaled sign one bit per coordinate plus one fp32 scale.

Error feedback (:class:`ErrorFeedback`) keeps the residual ``e`` each worker failed to send and adds it back before
the next compression: ``p = e + update; sent = C(p); e ← p − sent`` (Mem-SGD of Stich et al. 2018 eq. (Mem-SGD);
EF-SGD, Algorithm 2 of Karimireddy et al. 2019, where ``update`` is the step-size-scaled gradient).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from seedance.errors import SpecError

# Unit round-off of the casts (half the spacing of representable numbers at 1): 2^-(p) with p mantissa bits + 1.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}


def _as_numpy(g: Any) -> tuple[np.ndarray, Any]:
    """Return ``(array, restore)``; ``restore`` turns a result back into the caller's type (torch in, torch out)."""
    if isinstance(g, np.ndarray):
        return g, None
    if type(g).__module__.startswith("torch"):
        array = g.detach().cpu().numpy()
        return array, g
    raise SpecError("g", f"expected a numpy array or torch tensor, got {type(g).__name__}")


def _restore(result: np.ndarray, like: Any) -> Any:
    if like is None:
        return result
    import torch  # only when the caller handed a tensor in

    return torch.from_numpy(np.ascontiguousarray(result)).to(dtype=like.dtype, device=like.device)


def _check_k(k: int, d: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
        raise SpecError("k", f"{k!r} is not a number of coordinates to keep", f"an integer in [1, {d}]")
    return int(k)


def _keep(values: np.ndarray, order_key: np.ndarray, k: int) -> np.ndarray:
    """Zero all but the k coordinates with the smallest ``order_key`` along the last axis."""
    d = values.shape[-1]
    if k == d:
        return values.copy()
    kept = np.argpartition(order_key, k - 1, axis=-1)[..., :k]
    out = np.zeros_like(values)
    np.put_along_axis(out, kept, np.take_along_axis(values, kept, axis=-1), axis=-1)
    return out


def top_k(g: Any, k: int) -> Any:
    """Keep the k coordinates of largest magnitude (ties broken by numpy's partition, deterministically). δ = k/d."""
    array, like = _as_numpy(g)
    k = _check_k(k, array.shape[-1])
    return _restore(_keep(array, -np.abs(array), k), like)


def random_k(g: Any, k: int, rng: np.random.Generator, *, unbiased: bool = False) -> Any:
    """Keep k coordinates chosen uniformly without replacement.

    ``unbiased=False`` (the default, Stich et al. 2018's rand_k): biased, contraction δ = k/d in expectation.
    ``unbiased=True``: the kept values are scaled by d/k so ``E C(g) = g``, with variance ω = d/k − 1.
    """
    array, like = _as_numpy(g)
    d = array.shape[-1]
    k = _check_k(k, d)
    out = _keep(array, rng.random(array.shape), k)
    if unbiased:
        out *= d / k
    return _restore(out, like)


def qsgd(g: Any, s: int, rng: np.random.Generator) -> Any:
    """QSGD (Alistarh et al. 2017, §3.1): ``‖g‖₂ · sign(g_i) · ξ_i(g, s)`` with ξ the unbiased stochastic rounding of
    ``s|g_i|/‖g‖₂`` to one of the levels 0..s, divided by s. Unbiased; variance ω = min(d/s², √d/s) (Lemma 3.1)."""
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
        raise SpecError("s", f"{s!r} is not a number of quantisation levels", "an integer >= 1")
    array, like = _as_numpy(g)
    norm = np.linalg.norm(array, axis=-1, keepdims=True)
    safe = np.where(norm > 0, norm, 1.0)
    scaled = np.abs(array) / safe * s
    lower = np.floor(scaled)
    level = lower + (rng.random(array.shape) < (scaled - lower))
    out = (norm * np.sign(array) * level / s).astype(array.dtype, copy=False)
    return _restore(out, like)


def scaled_sign(g: Any) -> Any:
    """``‖g‖₁/d · sign(g)`` (Karimireddy et al. 2019, eq. (1)); contraction δ(g) = ‖g‖₁²/(d‖g‖₂²) ≥ 1/d."""
    array, like = _as_numpy(g)
    d = array.shape[-1]
    scale = np.abs(array).sum(axis=-1, keepdims=True) / d
    return _restore((scale * np.sign(array)).astype(array.dtype, copy=False), like)


def _round_to_bfloat16(array: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even) by bit manipulation of the float32 pattern.

    float64 inputs go through float32 first (a second rounding, error ≤ 2^-24 relative, documented in δ). NaN and inf
    pass through as NaN/inf.
    """
    single = np.ascontiguousarray(array, dtype=np.float32)
    bits = single.view(np.uint32)
    # finite patterns are at most 0xFF7FFFFF, so adding at most 0x8000 cannot wrap around in uint32
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    result = np.where(np.isfinite(single), rounded.view(np.float32), single)
    return result.astype(array.dtype, copy=False)


def cast(g: Any, dtype: str) -> Any:
    """Round-trip through ``"float16"`` or ``"bfloat16"`` and back to the input dtype (what an fp16/bf16 allreduce
    delivers before the reduction's own rounding). Relative error ≤ u per coordinate in the normal range
    (u = 2^-11 fp16, 2^-8 bf16); fp16 overflows to inf above 65504 and loses relative precision below 6.1e-5."""
    array, like = _as_numpy(g)
    if dtype == "float16":
        with np.errstate(over="ignore"):  # overflow to inf is the documented fp16 behaviour
            out = array.astype(np.float16).astype(array.dtype)
    elif dtype == "bfloat16":
        out = _round_to_bfloat16(array)
    else:
        raise SpecError("dtype", f"{dtype!r} is not a supported cast", "float16 or bfloat16")
    return _restore(out, like)


class Kind(Enum):
    """The compressors this module knows."""

    IDENTITY = "identity"
    TOP_K = "top_k"
    RANDOM_K = "random_k"
    RANDOM_K_UNBIASED = "random_k_unbiased"
    QSGD = "qsgd"
    SCALED_SIGN = "scaled_sign"
    FP16 = "fp16"
    BF16 = "bf16"


@dataclass(frozen=True, kw_only=True)
class Compressor:
    """A compressor with its parameters: ``ratio`` (k/d, sparsifiers) or ``levels`` (s, QSGD).

    ``value_bytes``/``index_bytes`` size the sparse payload. :meth:`delta` is the theoretical contraction (None for
    unbiased compressors), :meth:`omega` the variance parameter (None for biased ones).
    """

    kind: Kind
    ratio: float | None = None
    levels: int | None = None
    value_bytes: int = 4
    index_bytes: int = 4

    def __post_init__(self) -> None:
        if self.kind in (Kind.TOP_K, Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED):
            if self.ratio is None or not 0 < self.ratio <= 1:
                raise SpecError("ratio", f"{self.ratio!r} is not a kept fraction k/d", "a number in (0, 1]")
        if self.kind is Kind.QSGD and (self.levels is None or self.levels < 1):
            raise SpecError("levels", f"{self.levels!r} is not a number of QSGD levels", "an integer >= 1")

    @property
    def name(self) -> str:
        """A short label: ``top_k(1%)``, ``qsgd(s=4)``, ``fp16``..."""
        if self.ratio is not None:
            return f"{self.kind.value}({self.ratio * 100:g}%)"
        if self.levels is not None:
            return f"{self.kind.value}(s={self.levels})"
        return self.kind.value

    @property
    def biased(self) -> bool:
        return self.kind not in (Kind.QSGD, Kind.RANDOM_K_UNBIASED, Kind.IDENTITY)

    def k(self, d: int) -> int:
        """Coordinates kept out of d (at least one)."""
        return max(1, min(d, int(round((self.ratio or 1.0) * d))))

    def __call__(self, g: Any, rng: np.random.Generator | None = None) -> Any:
        d = (g.shape[-1]) if hasattr(g, "shape") else 0
        kind = self.kind
        if kind in (Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED, Kind.QSGD) and rng is None:
            raise SpecError("rng", f"{self.name} is randomised", "pass a numpy.random.Generator")
        if kind is Kind.IDENTITY:
            return g.copy() if isinstance(g, np.ndarray) else g.clone()
        if kind is Kind.TOP_K:
            return top_k(g, self.k(d))
        if kind is Kind.RANDOM_K:
            return random_k(g, self.k(d), rng)
        if kind is Kind.RANDOM_K_UNBIASED:
            return random_k(g, self.k(d), rng, unbiased=True)
        if kind is Kind.QSGD:
            return qsgd(g, int(self.levels), rng)
        if kind is Kind.SCALED_SIGN:
            return scaled_sign(g)
        return cast(g, "float16" if kind is Kind.FP16 else "bfloat16")

    def delta(self, d: int) -> float | None:
        """Theoretical contraction δ (``E‖C(g)−g‖² ≤ (1−δ)‖g‖²``) for any g in R^d; None for unbiased compressors.

        Scaled sign: the worst case over R^d, 1/d. Casts: 1 − u² with u the unit round-off, plus the float32
        rounding bfloat16 goes through (valid for coordinates in the normal range, no overflow).
        """
        if self.kind is Kind.IDENTITY:
            return 1.0
        if self.kind in (Kind.TOP_K, Kind.RANDOM_K):
            return self.k(d) / d
        if self.kind is Kind.SCALED_SIGN:
            return 1.0 / d
        if self.kind is Kind.FP16:
            return 1.0 - UNIT_ROUNDOFF["float16"] ** 2
        if self.kind is Kind.BF16:
            u = UNIT_ROUNDOFF["bfloat16"] + UNIT_ROUNDOFF["float32"] * (1 + UNIT_ROUNDOFF["bfloat16"])
            return 1.0 - u**2
        return None

    def omega(self, d: int) -> float | None:
        """Variance parameter ω (``E‖C(g)−g‖² ≤ ω‖g‖²``, ``E C(g) = g``) of unbiased compressors; else None."""
        if self.kind is Kind.IDENTITY:
            return 0.0
        if self.kind is Kind.QSGD:
            s = int(self.levels)
            return min(d / s**2, math.sqrt(d) / s)
        if self.kind is Kind.RANDOM_K_UNBIASED:
            return d / self.k(d) - 1.0
        return None

    def wire_bytes(self, d: int) -> int:
        """Bytes one worker sends for a d-coordinate gradient (encodings in the module docstring)."""
        if d < 1:
            raise SpecError("d", f"{d!r} is not a gradient dimension", "an integer >= 1")
        kind = self.kind
        if kind is Kind.IDENTITY:
            return 4 * d
        if kind in (Kind.FP16, Kind.BF16):
            return 2 * d
        if kind in (Kind.TOP_K, Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED):
            return self.k(d) * (self.value_bytes + self.index_bytes)
        if kind is Kind.QSGD:
            bits_per_coordinate = 1 + math.ceil(math.log2(int(self.levels) + 1))
            return 4 + math.ceil(d * bits_per_coordinate / 8)
        return 4 + math.ceil(d / 8)  # scaled sign

    @property
    def summable(self) -> bool:
        """Whether workers' payloads can be summed on the wire (allreduce) rather than gathered (allgather)."""
        return self.kind in (Kind.IDENTITY, Kind.FP16, Kind.BF16)


def parse_compressor(spec: str) -> Compressor:
    """``identity``, ``fp16``, ``bf16``, ``scaled_sign``, ``top_k:0.01``, ``random_k:0.1``,
    ``random_k_unbiased:0.1``, ``qsgd:4`` → :class:`Compressor`."""
    name, _, arg = spec.partition(":")
    try:
        kind = Kind(name)
    except ValueError:
        raise SpecError("compressor", f"unknown compressor {name!r}", "one of " + ", ".join(k.value for k in Kind))
    try:
        if kind in (Kind.TOP_K, Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED):
            ratio = float(arg)
        elif kind is Kind.QSGD:
            levels = int(arg)
    except ValueError:
        raise SpecError("compressor", f"{spec!r} has a malformed parameter", "e.g. top_k:0.01 or qsgd:4")
    if kind in (Kind.TOP_K, Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED):
        return Compressor(kind=kind, ratio=ratio)
    if kind is Kind.QSGD:
        return Compressor(kind=kind, levels=levels)
    if arg:
        raise SpecError("compressor", f"{name} takes no parameter", name)
    return Compressor(kind=kind)


def _relative_errors(compressor: Compressor, vectors: np.ndarray, rng, draws: int) -> np.ndarray:
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    norms = np.sum(vectors**2, axis=-1)
    if np.any(norms == 0):
        raise SpecError("vectors", "contains a zero vector, for which δ is undefined", "non-zero vectors")
    errors = np.zeros(vectors.shape[0])
    for _ in range(draws):
        errors += np.sum((compressor(vectors, rng) - vectors) ** 2, axis=-1)
    return errors / draws / norms


def measured_delta(
    compressor: Compressor, vectors: Iterable, rng: np.random.Generator | None = None, *, draws: int = 1
) -> float:
    """Smallest contraction seen: ``1 − max_v mean_draws ‖C(v)−v‖²/‖v‖²`` over the rows of ``vectors``."""
    return float(1.0 - _relative_errors(compressor, np.asarray(vectors), rng, draws).max())


def measured_omega(
    compressor: Compressor, vectors: Iterable, rng: np.random.Generator, *, draws: int = 200
) -> float:
    """Largest variance seen: ``max_v mean_draws ‖C(v)−v‖²/‖v‖²`` (a Monte Carlo estimate of ω on these vectors)."""
    return float(_relative_errors(compressor, np.asarray(vectors), rng, draws).max())


class ErrorFeedback:
    """Error feedback around a compressor (Stich et al. 2018 Mem-SGD; Karimireddy et al. 2019 Algorithm 2).

    ``step(update)`` sends ``C(residual + update)`` and keeps ``residual + update − sent`` for next time, so the sum
    of everything sent plus the current residual equals the sum of every update (checked in the tests). One object
    per worker; ``residual`` has the update's shape and starts at zero.
    """

    def __init__(self, compressor: Compressor, shape: tuple[int, ...], dtype: Any = np.float64) -> None:
        self.compressor = compressor
        self.residual = np.zeros(shape, dtype=dtype)

    def step(self, update: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        corrected = self.residual + update
        sent = self.compressor(corrected, rng)
        self.residual = corrected - sent
        return sent
