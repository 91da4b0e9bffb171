"""Bound calculators and estimators of seedance.models.convergence, against naive oracles (seed §2.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.models import convergence as cv


def _constants(**overrides) -> cv.ProblemConstants:
    values = dict(smoothness_L=2.0, strong_convexity_mu=0.5, second_moment_G2=3.0, distance2_initial=4.0,
                  gap_initial=1.0, variance_sigma2=1.5)
    values.update(overrides)
    return cv.ProblemConstants(**values)


def test_memsgd_bound_matches_a_term_by_term_oracle():
    """Stich, Cordonnier & Jaggi 2018, Thm 2.4, evaluated with S_T summed by a loop."""
    constants, delta, alpha = _constants(), 0.1, 5.0
    rho = 4 * alpha / ((alpha - 4) * (alpha + 1) ** 2)
    a = (alpha + 1) / delta + rho / (rho + 1)
    for T in (1, 7, 100, 2500):
        S = sum((a + t) ** 2 for t in range(T))
        mu, L, G2 = 0.5, 2.0, 3.0
        expected = (4 * T * (T + 2 * a) * G2 / (mu * S) + mu * a**3 * 4.0 / (8 * S)
                    + 64 * T * (1 + 2 * L / mu) * (4 * alpha / (alpha - 4)) * G2 / (delta**2 * mu * S))
        assert cv.memsgd_bound(T, constants=constants, delta=delta) == pytest.approx(expected, rel=1e-12)
    assert cv.memsgd_schedule(0.5, delta).shift == pytest.approx(a)
    assert cv.memsgd_schedule(0.5, delta).step(0) == pytest.approx(8 / (0.5 * a))


def test_memsgd_bound_decays_like_one_over_T_and_grows_as_delta_shrinks():
    T = np.array([10**4, 10**5, 10**6])
    values = cv.memsgd_bound(T, constants=_constants(), delta=0.5)
    assert np.all(np.diff(values) < 0)
    # for T ≫ a the first term dominates: 4T(T + 2a)G²/(μ S_T) → 12G²/(μT), since S_T ~ T³/3
    assert values[2] * 10**6 == pytest.approx(12 * 3.0 / 0.5, rel=0.02)
    assert cv.memsgd_bound(100, constants=_constants(), delta=0.01) > cv.memsgd_bound(100, constants=_constants(),
                                                                                     delta=0.5)
    dropped = cv.memsgd_bound(100, constants=_constants(), delta=0.1, drop_compression_term=True)
    assert dropped < cv.memsgd_bound(100, constants=_constants(), delta=0.1)


def test_sgd_and_unbiased_compressed_bounds():
    """Bubeck 2015 Thm 6.2: 2B²/(μ(T + 1)); with QSGD B² = (1 + ω)G² (Alistarh et al. 2017, Lemma 3.1)."""
    constants = _constants()
    assert cv.sgd_strongly_convex_bound(9, mu=0.5, second_moment_B2=3.0) == pytest.approx(2 * 3.0 / (0.5 * 10))
    assert cv.unbiased_compressed_sgd_bound(9, constants=constants, omega=2.0) == pytest.approx(3 * 2 * 3.0 / 5)
    schedule = cv.sgd_schedule(0.5)
    np.testing.assert_allclose(schedule.step(np.arange(3)), 2 / (0.5 * np.array([2, 3, 4])))
    np.testing.assert_allclose(schedule.weight(np.arange(3)), [1, 2, 3])


def test_local_sgd_bound_oracle_and_staleness():
    """Stich 2019, Thm 2.2, term by term; a larger synchronisation period H only loosens it."""
    constants, K, H, T = _constants(), 4, 8, 500
    kappa = 2.0 / 0.5
    a = max(16 * kappa, H) + 1
    S = sum((a + t) ** 2 for t in range(T))
    mu, L = 0.5, 2.0
    expected = (mu * a**3 * 4.0 / (2 * S) + 4 * T * (T + 2 * a) * 1.5 / (mu * K * S)
                + 256 * T * 3.0 * H**2 * L / (mu**2 * S))
    assert cv.local_sgd_bound(T, constants=constants, workers_K=K, period_H=H) == pytest.approx(expected)
    assert cv.local_sgd_bound(T, constants=constants, workers_K=K, period_H=16) > expected
    with pytest.raises(SpecError, match="variance_sigma2"):
        cv.local_sgd_bound(T, constants=_constants(variance_sigma2=None), workers_K=K, period_H=H)


def test_efsgd_bound_oracle():
    """Karimireddy et al. 2019, Thm II with γ = 1/√(T + 1)."""
    T, L, sigma2, gap, delta = 99, 2.0, 3.0, 1.0, 0.25
    gamma = cv.efsgd_step(T)
    assert gamma == pytest.approx(0.1)
    expected = 2 * gap / (gamma * 100) + gamma * L * sigma2 / 2 + 4 * gamma**2 * L**2 * sigma2 * 0.75 / delta**2
    got = cv.efsgd_nonconvex_bound(T, smoothness_L=L, second_moment=sigma2, gap_initial=gap, delta=delta, gamma=gamma)
    assert got == pytest.approx(expected)


def test_logistic_smoothness_is_the_hessian_maximum():
    """L = λ_max(AᵀA)/(4n) + λ bounds the Hessian everywhere and is attained at x = 0 (ℓ'' = 1/4 there)."""
    rng = np.random.default_rng(0)
    features, l2 = rng.standard_normal((200, 10)) * np.linspace(0.2, 2, 10), 0.05
    L = cv.logistic_smoothness(features, l2)

    def hessian_max(x):
        p = 1 / (1 + np.exp(-(features @ x)))
        h = (features.T * (p * (1 - p))) @ features / 200 + l2 * np.eye(10)
        return np.linalg.eigvalsh(h)[-1]

    assert hessian_max(np.zeros(10)) == pytest.approx(L)
    assert all(hessian_max(rng.standard_normal(10)) <= L + 1e-12 for _ in range(20))
    assert cv.power_iteration(lambda v: (features.T @ (features @ v)) / 800 + l2 * v, 10, rng,
                              iterations=500) == pytest.approx(L, rel=1e-6)


def test_gradient_moments_and_minibatch_scaling():
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((500, 6)) + 2.0
    variance, second = cv.gradient_moments(grads)
    assert second == pytest.approx(np.mean(np.sum(grads**2, axis=1)))
    assert variance == pytest.approx(np.mean(np.sum((grads - grads.mean(0)) ** 2, axis=1)))
    mean_norm2 = float(grads.mean(0) @ grads.mean(0))
    # a minibatch of b samples drawn with replacement: E‖g_b‖² = ‖∇f‖² + σ²/b, checked by simulation
    draws = grads[rng.integers(0, 500, (20000, 4))].mean(axis=1)
    simulated = np.mean(np.sum(draws**2, axis=1))
    assert float(cv.minibatch_second_moment(mean_norm2, variance, 4)) == pytest.approx(simulated, rel=0.02)


def test_invalid_parameters_are_spec_errors():
    with pytest.raises(SpecError, match="alpha"):
        cv.memsgd_shift(0.1, alpha=4.0)
    with pytest.raises(SpecError, match="delta"):
        cv.memsgd_shift(1.5)
    with pytest.raises(SpecError, match="T"):
        cv.memsgd_bound(0, constants=_constants(), delta=0.5)
    with pytest.raises(SpecError, match="second_moment_G2"):
        _constants(second_moment_G2=math.nan)
    with pytest.raises(SpecError, match="omega"):
        cv.unbiased_compressed_sgd_bound(3, constants=_constants(), omega=-1)
