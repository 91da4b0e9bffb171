"""Convergence bounds for compressed, error-feedback, quantised and local SGD, with the constants they need (seed §2.4).

Every bound is a plain function of the problem constants, the compressor parameter and the horizon T (arrays of T
broadcast), next to the step-size schedule its theorem prescribes: the bound only holds for runs that use exactly that
schedule and report exactly that iterate. Assumptions, as the papers write them:

* **L-smooth**: ‖∇f(x) − ∇f(y)‖ ≤ L‖x − y‖.  **μ-strongly convex**: f(y) ≥ f(x) + ⟨∇f(x), y − x⟩ + μ/2‖y − x‖².
* **bounded variance** (seed §2.4): E‖g(x) − ∇f(x)‖² ≤ σ².  **bounded second moment**: E‖g(x)‖² ≤ G² at every
  iterate the run visits (Stich et al. 2018 and Stich 2019 state it "for t = 0, …, T−1"; Karimireddy et al. 2019 call
  it σ² in their Assumption B). For a finite sum with b samples drawn with replacement, E‖g_b(x)‖² = ‖∇f(x)‖² +
  σ₁²(x)/b (:func:`minibatch_second_moment`).
* compressor: contraction δ or variance ω, as defined in :mod:`seedance.models.compression`.

Implemented (theorem numbers of the arXiv versions):

1. Stich, Cordonnier & Jaggi 2018, "Sparsified SGD with Memory", **Theorem 2.4** (Mem-SGD = SGD with error feedback,
   any k-contraction, d/k read as 1/δ): :func:`memsgd_schedule`, :func:`memsgd_bound`.
2. Karimireddy, Rebjock, Stich & Jaggi 2019, "Error Feedback Fixes SignSGD…", **Theorem II** (EF-SGD, non-convex,
   bound on min_t E‖∇f(x_t)‖², constant step γ): :func:`efsgd_nonconvex_bound`.
3. Alistarh et al. 2017, "QSGD", **Lemma 3.1** (E‖Q_s(v)‖² ≤ (1 + ω)‖v‖²) inserted into the strongly convex SGD
   rate of Lacoste-Julien, Schmidt & Bach 2012 (as stated in Bubeck 2015, *Convex Optimization: Algorithms and
   Complexity*, **Theorem 6.2**): E f(x̄_T) − f* ≤ 2B²/(μ(T + 1)) with B² = (1 + ω)G²: :func:`sgd_schedule`,
   :func:`sgd_strongly_convex_bound`, :func:`unbiased_compressed_sgd_bound`.
4. Stich 2019, "Local SGD Converges Fast and Communicates Little" (ICLR), **Theorem 2.2** (K workers that average
   every H steps at most, so a worker's model is at most H−1 steps stale): :func:`local_sgd_schedule`,
   :func:`local_sgd_bound`.

Estimators take the problem's data instead of asking the user for constants: :func:`logistic_smoothness`,
:func:`minibatch_second_moment`, :func:`gradient_moments`, :func:`power_iteration`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seedance.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class ProblemConstants:
    """The constants a bound needs. ``distance2_initial`` = ‖x₀ − x*‖², ``gap_initial`` = f(x₀) − f*."""

    smoothness_L: float
    strong_convexity_mu: float
    second_moment_G2: float
    distance2_initial: float
    gap_initial: float
    variance_sigma2: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gap_initial", max(0.0, self.gap_initial))  # f(x*) − f* computes as −1e-16
        for name in ("smoothness_L", "second_moment_G2", "distance2_initial", "gap_initial"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SpecError(name, f"{value!r} is not a finite non-negative number", "a number >= 0")
        if not self.strong_convexity_mu >= 0:
            raise SpecError("strong_convexity_mu", f"{self.strong_convexity_mu!r} is negative", "μ >= 0")

    @property
    def condition_number(self) -> float:
        return self.smoothness_L / self.strong_convexity_mu


@dataclass(frozen=True, kw_only=True)
class StepSchedule:
    """η_t = scale/(shift + t) (or ``scale`` when ``constant``), t = 0, 1, …; the reported iterate is the average of
    x_0 … x_{T−1} weighted by w_t = (weight_shift + t)^weight_power (weight_power 0 with ``constant``: not averaged).
    """

    scale: float
    shift: float = 0.0
    constant: bool = False
    weight_shift: float = 0.0
    weight_power: int = 0
    citation: str = ""

    def step(self, t: np.ndarray | int) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        return np.full_like(t, self.scale) if self.constant else self.scale / (self.shift + t)

    def weight(self, t: np.ndarray | int) -> np.ndarray:
        return (self.weight_shift + np.asarray(t, dtype=np.float64)) ** self.weight_power


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value) and value > 0):
        raise SpecError(name, f"{value!r} is not a positive number", "a finite number > 0")
    return float(value)


def _horizons(T) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    if np.any(T < 1):
        raise SpecError("T", "a horizon is below one iteration", "T >= 1")
    return T


# --- 1. Stich, Cordonnier & Jaggi 2018, Theorem 2.4 -------------------------------------------------------------


def memsgd_shift(delta: float, alpha: float = 5.0) -> float:
    """The smallest shift a allowed by Theorem 2.4: a ≥ (α + 1)/δ + ρ/(ρ + 1), ρ = 4α/((α − 4)(α + 1)²), α > 4."""
    delta = _positive("delta", delta)
    if delta > 1:
        raise SpecError("delta", f"{delta} exceeds 1", "a contraction 0 < δ <= 1")
    if not alpha > 4:
        raise SpecError("alpha", f"{alpha!r} is not above 4", "α > 4 (Theorem 2.4)")
    rho = 4 * alpha / ((alpha - 4) * (alpha + 1) ** 2)
    return max((alpha + 1) / delta + rho / (rho + 1), 1.0 + 1e-12)


def memsgd_schedule(mu: float, delta: float, alpha: float = 5.0) -> StepSchedule:
    """η_t = 8/(μ(a + t)), reported iterate Σ w_t x_t / S_T with w_t = (a + t)² (Theorem 2.4)."""
    a = memsgd_shift(delta, alpha)
    return StepSchedule(
        scale=8.0 / _positive("mu", mu), shift=a, weight_shift=a, weight_power=2,
        citation="Stich, Cordonnier & Jaggi 2018, Theorem 2.4",
    )


def _weight_sum(a: float, T: np.ndarray, power: int) -> np.ndarray:
    """S_T = Σ_{t=0}^{T−1} (a + t)^power, exactly (Faulhaber for power 1 and 2)."""
    m = T - 1  # sum of t^j for t = 0..T-1
    s1 = m * (m + 1) / 2
    if power == 1:
        return a * T + s1
    if power == 2:
        s2 = m * (m + 1) * (2 * m + 1) / 6
        return a * a * T + 2 * a * s1 + s2
    raise SpecError("weight_power", f"{power} not supported", "1 or 2")


def memsgd_bound(
    T, *, constants: ProblemConstants, delta: float, alpha: float = 5.0, drop_compression_term: bool = False
) -> np.ndarray:
    """Theorem 2.4 of Stich et al. 2018: for f L-smooth, μ-strongly convex, E‖g_t‖² ≤ G², a δ-contraction, steps of
    :func:`memsgd_schedule` and x̄_T = Σ_{t<T} w_t x_t / S_T,

        E f(x̄_T) − f* ≤ 4T(T + 2a)G²/(μ S_T) + μa³‖x₀ − x*‖²/(8 S_T)
                          + 64T(1 + 2L/μ)·(4α/(α − 4))·G²/(δ² μ S_T).

    ``drop_compression_term`` removes the last (memory) term: a deliberately wrong bound for the tests.
    """
    T = _horizons(T)
    mu = _positive("strong_convexity_mu", constants.strong_convexity_mu)
    a = memsgd_shift(delta, alpha)
    G2, L = constants.second_moment_G2, constants.smoothness_L
    S = _weight_sum(a, T, 2)
    sgd = 4 * T * (T + 2 * a) * G2 / (mu * S) + mu * a**3 * constants.distance2_initial / (8 * S)
    if drop_compression_term:
        return sgd
    memory = 64 * T * (1 + 2 * L / mu) * (4 * alpha / (alpha - 4)) * G2 / (delta**2 * mu * S)
    return sgd + memory


# --- 2. Karimireddy et al. 2019, Theorem II ------------------------------------------------------------------------


def efsgd_step(T: int) -> float:
    """The constant step γ = 1/√(T + 1) of Karimireddy et al. 2019 (remark after Theorem II)."""
    return 1.0 / math.sqrt(_positive("T", T) + 1)


def efsgd_nonconvex_bound(
    T, *, smoothness_L: float, second_moment: float, gap_initial: float, delta: float, gamma: float
) -> np.ndarray:
    """Theorem II of Karimireddy et al. 2019 (EF-SGD, f L-smooth and bounded below, E‖g_t‖² ≤ σ² — the paper's σ²
    is a second moment — δ-approximate compressor, constant step γ), for iterates x_0 … x_T:

        min_{t ≤ T} E‖∇f(x_t)‖² ≤ 2(f(x₀) − f*)/(γ(T + 1)) + γLσ²/2 + 4γ²L²σ²(1 − δ)/δ².
    """
    T = _horizons(T)
    delta = _positive("delta", delta)
    L = _positive("smoothness_L", smoothness_L)
    return (
        2 * gap_initial / (gamma * (T + 1))
        + gamma * L * second_moment / 2
        + 4 * gamma**2 * L**2 * second_moment * (1 - delta) / delta**2
    )


# --- 3. Strongly convex SGD (Lacoste-Julien et al. 2012) with unbiased compression (Alistarh et al. 2017) ------------


def sgd_schedule(mu: float) -> StepSchedule:
    """η_t = 2/(μ(t + 2)) for t = 0, 1, … (Bubeck 2015 Thm 6.2's η_s = 2/(α(s + 1)) with s = t + 1); reported
    iterate Σ_{t<T} (t + 1) x_t / Σ_{t<T} (t + 1)."""
    return StepSchedule(
        scale=2.0 / _positive("mu", mu), shift=2.0, weight_shift=1.0, weight_power=1,
        citation="Lacoste-Julien, Schmidt & Bach 2012; Bubeck 2015, Theorem 6.2",
    )


def sgd_strongly_convex_bound(T, *, mu: float, second_moment_B2: float) -> np.ndarray:
    """E f(x̄_T) − f* ≤ 2B²/(μ(T + 1)) for μ-strongly convex f and E‖g̃‖² ≤ B² (no smoothness needed)."""
    return 2 * second_moment_B2 / (_positive("mu", mu) * (_horizons(T) + 1))


def unbiased_compressed_sgd_bound(T, *, constants: ProblemConstants, omega: float) -> np.ndarray:
    """The bound above with the compressed oracle: E‖C(g)‖² ≤ (1 + ω)E‖g‖² ≤ (1 + ω)G² (QSGD Lemma 3.1 (ii); exact
    for rescaled random-k). ``omega=0`` gives plain SGD's bound — the "compression term dropped" variant."""
    if not omega >= 0:
        raise SpecError("omega", f"{omega!r} is negative", "ω >= 0")
    return sgd_strongly_convex_bound(
        T, mu=constants.strong_convexity_mu, second_moment_B2=(1 + omega) * constants.second_moment_G2
    )


# --- 4. Stich 2019, local SGD, Theorem 2.2 ----------------------------------------------------------------------


def local_sgd_schedule(mu: float, L: float, period_H: int) -> StepSchedule:
    """η_t = 4/(μ(a + t)) with a > max(16κ, H), κ = L/μ (we take a = max(16κ, H) + 1); weights w_t = (a + t)²."""
    kappa = _positive("L", L) / _positive("mu", mu)
    a = max(16 * kappa, float(period_H)) + 1.0
    return StepSchedule(
        scale=4.0 / mu, shift=a, weight_shift=a, weight_power=2, citation="Stich 2019, Theorem 2.2"
    )


def local_sgd_bound(T, *, constants: ProblemConstants, workers_K: int, period_H: int) -> np.ndarray:
    """Theorem 2.2 of Stich 2019: K workers, each step a local SGD step, models averaged at least every H steps,
    E‖g − ∇f‖² ≤ σ², E‖g‖² ≤ G², steps of :func:`local_sgd_schedule`, x̂_T the w-weighted average over t < T of
    the workers' mean model:

        E f(x̂_T) − f* ≤ μa³‖x₀ − x*‖²/(2 S_T) + 4T(T + 2a)σ²/(μ K S_T) + 256 T G² H² L/(μ² S_T).
    """
    T = _horizons(T)
    if constants.variance_sigma2 is None:
        raise SpecError("variance_sigma2", "is required by the local SGD bound", "an estimate of σ²")
    mu, L = constants.strong_convexity_mu, constants.smoothness_L
    a = local_sgd_schedule(mu, L, period_H).shift
    S = _weight_sum(a, T, 2)
    return (
        mu * a**3 * constants.distance2_initial / (2 * S)
        + 4 * T * (T + 2 * a) * constants.variance_sigma2 / (mu * workers_K * S)
        + 256 * T * constants.second_moment_G2 * period_H**2 * L / (mu**2 * S)
    )


# --- estimators ------------------------------------------------------------------------------------------------------


def logistic_smoothness(features: np.ndarray, l2: float) -> float:
    """L of (1/n)Σ log(1 + exp(−y_i a_iᵀx)) + (λ/2)‖x‖²: λ_max(AᵀA)/(4n) + λ (the logistic loss has ℓ'' ≤ 1/4).
    Its strong convexity is μ = λ (the loss part is convex)."""
    features = np.asarray(features, dtype=np.float64)
    n = features.shape[0]
    top = np.linalg.eigvalsh(features.T @ features / n)[-1]
    return float(top / 4 + l2)


def gradient_moments(per_sample_gradients: np.ndarray) -> tuple[float, float]:
    """(σ₁², G₁²) of one uniformly drawn sample at one point: E_i‖∇f_i − ∇f‖² and E_i‖∇f_i‖² from an (n, d) array."""
    grads = np.asarray(per_sample_gradients, dtype=np.float64)
    mean = grads.mean(axis=0)
    second = float(np.mean(np.sum(grads**2, axis=1)))
    return second - float(mean @ mean), second


def minibatch_second_moment(grad_norm2, sample_variance, batch: int):
    """E‖g_b‖² = ‖∇f‖² + σ₁²/b for b samples drawn independently with replacement."""
    return np.asarray(grad_norm2) + np.asarray(sample_variance) / batch


def power_iteration(
    apply: Callable[[np.ndarray], np.ndarray], dim: int, rng: np.random.Generator, *, iterations: int = 100
) -> float:
    """Largest eigenvalue (in magnitude) of a symmetric linear map given as a matrix-vector product, e.g. a
    Hessian-vector product (an estimate of the local smoothness; not a certified global L)."""
    v = rng.standard_normal(dim)
    v /= np.linalg.norm(v)
    value = 0.0
    for _ in range(iterations):
        w = apply(v)
        value = float(v @ w)
        norm = np.linalg.norm(w)
        if norm == 0:
            return 0.0
        v = w / norm
    return abs(value)
