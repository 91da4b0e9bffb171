"""Compressors (seedance.models.compression): contraction δ, variance ω, unbiasedness, wire bytes, error feedback.

Papers: Stich, Cordonnier & Jaggi 2018 (Def. 2.1, k-contraction; Mem-SGD), Alistarh et al. 2017 (QSGD §3.1,
Lemma 3.1), Karimireddy et al. 2019 (scaled sign, EF-SGD Algorithm 2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seedance.errors import SpecError
from seedance.models.compression import (
    Compressor,
    ErrorFeedback,
    Kind,
    cast,
    measured_delta,
    measured_omega,
    parse_compressor,
    qsgd,
    random_k,
    scaled_sign,
    top_k,
)


def _vectors(seed: int, count: int = 200, d: int = 64) -> np.ndarray:
    """Gaussian, heavy-tailed (Cauchy) and sparse-ish vectors: the shapes gradients take."""
    rng = np.random.default_rng(seed)
    gaussian = rng.standard_normal((count, d))
    cauchy = rng.standard_cauchy((count, d))
    spiky = rng.standard_normal((count, d)) * (rng.random((count, d)) < 0.1) + 1e-3
    return np.concatenate([gaussian, cauchy, spiky])


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.5, 1.0])
def test_top_k_measured_delta_is_at_least_k_over_d(ratio):
    """Top-k is a k-contraction: ‖C(g) − g‖² ≤ (1 − k/d)‖g‖² for every g (Stich et al. 2018, Def. 2.1)."""
    compressor = Compressor(kind=Kind.TOP_K, ratio=ratio)
    vectors = _vectors(1)
    d = vectors.shape[1]
    assert measured_delta(compressor, vectors) >= compressor.delta(d) - 1e-12
    assert compressor.delta(d) == compressor.k(d) / d


def test_top_k_keeps_exactly_the_largest_magnitudes():
    g = np.array([[0.5, -3.0, 1.0, 2.0, -0.1], [1.0, 2.0, 3.0, 4.0, 5.0]])
    out = top_k(g, 2)
    np.testing.assert_array_equal(out, [[0, -3.0, 0, 2.0, 0], [0, 0, 0, 4.0, 5.0]])
    naive = [np.where(np.abs(row) >= np.sort(np.abs(row))[-2], row, 0) for row in g]  # oracle: threshold
    np.testing.assert_array_equal(out, naive)


def test_random_k_biased_contracts_by_k_over_d_in_expectation():
    """E‖rand_k(g) − g‖² = (1 − k/d)‖g‖² exactly; the Monte Carlo mean is within 5 standard errors."""
    rng = np.random.default_rng(2)
    g = rng.standard_normal(40)
    draws = np.stack([random_k(g, 8, rng) for _ in range(4000)])
    errors = np.sum((draws - g) ** 2, axis=1) / (g @ g)
    assert abs(errors.mean() - (1 - 8 / 40)) <= 5 * errors.std() / math.sqrt(len(errors))
    assert np.all(np.count_nonzero(draws, axis=1) == 8)


def test_unbiased_random_k_and_qsgd_are_unbiased():
    """E C(g) = g coordinate-wise, tested with a tolerance of 5 standard errors derived from each coordinate's own
    variance: (d/k − 1)g_i² for rescaled random-k, (‖g‖/s)² p_i(1 − p_i) for QSGD (Alistarh et al. 2017, Lemma 3.1)."""
    rng = np.random.default_rng(3)
    d, k, s, n = 32, 4, 2, 20000
    g = rng.standard_normal(d)
    batch = np.broadcast_to(g, (n, d)).copy()
    rand_mean = random_k(batch, k, rng, unbiased=True).mean(axis=0)
    rand_std = np.sqrt((d / k - 1) * g**2 / n)
    assert np.all(np.abs(rand_mean - g) <= 5 * rand_std + 1e-12)
    norm = np.linalg.norm(g)
    scaled = np.abs(g) / norm * s
    p = scaled - np.floor(scaled)
    q_std = np.sqrt((norm / s) ** 2 * p * (1 - p) / n)
    q_mean = qsgd(batch, s, rng).mean(axis=0)
    assert np.all(np.abs(q_mean - g) <= 5 * q_std + 1e-12)


@pytest.mark.parametrize("levels", [1, 2, 4, 16])
def test_qsgd_variance_is_within_its_stated_bound(levels):
    """E‖Q_s(g) − g‖² ≤ min(d/s², √d/s)‖g‖² (Lemma 3.1 (ii)): the exact variance Σ(‖g‖/s)² p_i(1 − p_i) obeys it on
    every vector, and the Monte Carlo estimate matches the exact value."""
    compressor = Compressor(kind=Kind.QSGD, levels=levels)
    vectors = _vectors(4, count=100)
    d = vectors.shape[1]
    omega = compressor.omega(d)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled = np.abs(vectors) / norms * levels
    p = scaled - np.floor(scaled)
    exact = np.sum((norms / levels) ** 2 * p * (1 - p), axis=1) / norms[:, 0] ** 2
    assert np.all(exact <= omega + 1e-12)
    rng = np.random.default_rng(5)
    some = vectors[:5]
    estimate = measured_omega(compressor, some, rng, draws=2000)
    assert estimate <= omega
    assert estimate == pytest.approx(exact[:5].max(), rel=0.1)


def test_scaled_sign_contraction_is_l1_squared_over_d_l2_squared():
    """‖C(g) − g‖² = ‖g‖² − ‖g‖₁²/d, so δ(g) = ‖g‖₁²/(d‖g‖²) ≥ 1/d (Karimireddy et al. 2019)."""
    vectors = _vectors(6)
    d = vectors.shape[1]
    out = scaled_sign(vectors)
    l1 = np.abs(vectors).sum(axis=1)
    l2 = np.sum(vectors**2, axis=1)
    np.testing.assert_allclose(np.sum((out - vectors) ** 2, axis=1), l2 - l1**2 / d, rtol=1e-9, atol=1e-9)
    compressor = Compressor(kind=Kind.SCALED_SIGN)
    assert measured_delta(compressor, vectors) >= compressor.delta(d)


def test_casts_match_torch_and_their_stated_delta():
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(50000) * 10.0 ** rng.integers(-3, 4, 50000)).astype(np.float32)
    reference = torch.from_numpy(values).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(cast(values, "bfloat16"), reference)  # round to nearest, ties to even
    np.testing.assert_array_equal(cast(values, "float16"), values.astype(np.float16).astype(np.float32))
    normal = np.abs(values).reshape(-1, 50) + 1e-3  # inside fp16's normal range
    for kind in (Kind.FP16, Kind.BF16):
        compressor = Compressor(kind=kind)
        assert measured_delta(compressor, normal.astype(np.float64)) >= compressor.delta(50)
    assert np.isinf(cast(np.array([1e5]), "float16")[0])  # fp16 overflows above 65504, as documented


def test_wire_bytes_formulas():
    d = 1000
    assert Compressor(kind=Kind.IDENTITY).wire_bytes(d) == 4000
    assert Compressor(kind=Kind.FP16).wire_bytes(d) == 2000
    assert Compressor(kind=Kind.BF16).wire_bytes(d) == 2000
    assert Compressor(kind=Kind.TOP_K, ratio=0.01).wire_bytes(d) == 10 * (4 + 4)
    assert Compressor(kind=Kind.RANDOM_K, ratio=0.1, index_bytes=8).wire_bytes(d) == 100 * 12
    assert Compressor(kind=Kind.QSGD, levels=1).wire_bytes(d) == 4 + 1000 * 2 // 8  # sign + 1 level bit
    assert Compressor(kind=Kind.QSGD, levels=4).wire_bytes(d) == 4 + 1000 * 4 // 8  # sign + 3 level bits
    assert Compressor(kind=Kind.QSGD, levels=7).wire_bytes(1001) == 4 + math.ceil(1001 * 4 / 8)
    assert Compressor(kind=Kind.SCALED_SIGN).wire_bytes(d) == 4 + 125
    with pytest.raises(SpecError):
        Compressor(kind=Kind.IDENTITY).wire_bytes(0)


@pytest.mark.parametrize("spec", ["top_k:0.1", "random_k:0.25", "scaled_sign", "qsgd:2", "identity", "fp16"])
def test_error_feedback_bookkeeping(spec):
    """Σ sent + residual = Σ updates after every step: nothing is lost, only delayed (Stich et al. 2018, Mem-SGD)."""
    compressor = parse_compressor(spec)
    rng = np.random.default_rng(8)
    feedback = ErrorFeedback(compressor, (3, 20))
    sent_total = np.zeros((3, 20))
    update_total = np.zeros((3, 20))
    for _ in range(50):
        update = rng.standard_normal((3, 20))
        sent_total += feedback.step(update, rng)
        update_total += update
        np.testing.assert_allclose(sent_total + feedback.residual, update_total, atol=1e-9)
    if compressor.kind is Kind.IDENTITY:
        assert np.all(feedback.residual == 0)
    elif compressor.kind is Kind.TOP_K:
        assert np.count_nonzero(feedback.residual) > 0


def test_torch_in_torch_out_and_rows_independent():
    g = torch.randn(4, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = top_k(g, 5)
    assert isinstance(out, torch.Tensor) and out.dtype == g.dtype
    np.testing.assert_array_equal(out[2].numpy(), top_k(g[2].numpy(), 5))


def test_user_errors_are_spec_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(SpecError, match="k"):
        top_k(np.ones(5), 6)
    with pytest.raises(SpecError, match="s"):
        qsgd(np.ones(5), 0, rng)
    with pytest.raises(SpecError, match="dtype"):
        cast(np.ones(5), "int8")
    with pytest.raises(SpecError, match="compressor"):
        parse_compressor("gzip")
    with pytest.raises(SpecError, match="compressor"):
        parse_compressor("top_k:lots")
    with pytest.raises(SpecError, match="ratio"):
        parse_compressor("top_k:2")
    with pytest.raises(SpecError, match="rng"):
        parse_compressor("qsgd:2")(np.ones(5))
    with pytest.raises(SpecError, match="vectors"):
        measured_delta(parse_compressor("top_k:0.5"), np.zeros((1, 4)))
    assert parse_compressor("qsgd:4").name == "qsgd(s=4)" and parse_compressor("top_k:0.01").name == "top_k(1%)"
