"""The training problems the bounds are checked on, in torch (CPU, float64), batched over seeds.

* :class:`LogisticProblem` — ℓ2-regularised logistic regression on generated data,
  f(x) = (1/n) Σ log(1 + exp(−y_i a_iᵀx)) + (λ/2)‖x‖². L-smooth with L = λ_max(AᵀA)/(4n) + λ and μ-strongly
  convex with μ = λ (:func:`seedance.models.convergence.logistic_smoothness`), so the strongly convex bounds apply.
  f* comes from L-BFGS (scipy) polished by full Newton steps until the gradient norm is at round-off level.
* :class:`MLPProblem` — a one-hidden-layer tanh network with a logistic loss on data labelled by a random teacher
  network: smooth but non-convex. Its reference value is the best of several full-batch L-BFGS runs (not a
  certified optimum), so it reports an empirical gap only.

Both take parameters as an ``(S, d)`` tensor (one row per seed) and return per-row values, so many seeds run as one
batch. Data generation draws from a ``numpy.random.Generator`` built from a ``SeedSequence``; nothing touches a
global random state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import torch

from seedance.models.convergence import logistic_smoothness

DTYPE = torch.float64


@dataclass(frozen=True, eq=False)
class LogisticProblem:
    """ℓ2-regularised logistic regression; ``features`` (n, d), ``labels`` in {−1, +1}."""

    features: torch.Tensor
    labels: torch.Tensor
    l2: float
    optimum: torch.Tensor
    f_star: float
    smoothness_L: float
    name: str = "logistic"
    certified_optimum: bool = True

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def strong_convexity_mu(self) -> float:
        return self.l2

    def initial_point(self) -> torch.Tensor:
        return torch.zeros(self.dim, dtype=DTYPE)

    def _margins(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.features.T) * self.labels  # (..., n)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """f at each row of x (shape (..., d) → (...))."""
        margins = self._margins(x)
        return torch.nn.functional.softplus(-margins).mean(-1) + 0.5 * self.l2 * (x * x).sum(-1)

    def stats(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per row: ``loss``, ``grad_norm2`` = ‖∇f‖², ``sample_second_moment`` = E_i‖∇f_i‖² (one sample i), with
        f_i(x) = log(1 + exp(−y_i a_iᵀx)) + (λ/2)‖x‖², all from one product with the features."""
        margins = self._margins(x)
        coefficient = -torch.sigmoid(-margins) * self.labels  # ∂ loss_i / ∂ (a_iᵀx), shape (..., n)
        n = self.samples
        gradient = coefficient @ self.features / n + self.l2 * x
        row_norm2 = (self.features * self.features).sum(-1)
        second = (
            (coefficient**2 * row_norm2).mean(-1)
            + 2 * self.l2 * (coefficient * (x @ self.features.T)).mean(-1)
            + self.l2**2 * (x * x).sum(-1)
        )
        return {
            "loss": torch.nn.functional.softplus(-margins).mean(-1) + 0.5 * self.l2 * (x * x).sum(-1),
            "grad_norm2": (gradient * gradient).sum(-1),
            "sample_second_moment": second,
        }

    def minibatch_gradient(self, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """Mean of ∇f_i over ``indices`` (shape (..., b)) at x (shape (..., d))."""
        a = self.features[indices]  # (..., b, d)
        y = self.labels[indices]
        margins = (a @ x.unsqueeze(-1)).squeeze(-1) * y
        coefficient = -torch.sigmoid(-margins) * y
        return (coefficient.unsqueeze(-1) * a).mean(-2) + self.l2 * x


def _solve_logistic(features: np.ndarray, labels: np.ndarray, l2: float) -> np.ndarray:
    n, d = features.shape

    def value_and_gradient(x):
        margins = labels * (features @ x)
        value = np.logaddexp(0.0, -margins).mean() + 0.5 * l2 * x @ x
        coefficient = -labels / (1.0 + np.exp(margins))
        return value, features.T @ coefficient / n + l2 * x

    result = scipy.optimize.minimize(
        value_and_gradient, np.zeros(d), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "maxiter": 10_000}
    )
    x = result.x
    for _ in range(20):  # Newton polish: quadratic convergence from L-BFGS's neighbourhood
        margins = labels * (features @ x)
        p = 1.0 / (1.0 + np.exp(margins))
        gradient = features.T @ (-labels * p) / n + l2 * x
        if np.linalg.norm(gradient) < 1e-14:
            break
        hessian = (features.T * (p * (1 - p))) @ features / n + l2 * np.eye(d)
        x = x - np.linalg.solve(hessian, gradient)
    return x


def make_logistic(*, samples: int = 1000, dim: int = 50, l2: float = 0.01, seed: int = 0) -> LogisticProblem:
    """Generated data: a_i ~ N(0, diag(s_j²)) with s_j = (j + 1)^(−1/2) (so coordinates differ in importance and
    top-k is not random-k), labels from a planted model through the logistic link."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    scales = (np.arange(dim) + 1.0) ** -0.5
    features = rng.standard_normal((samples, dim)) * scales
    planted = rng.standard_normal(dim) * 2.0
    probability = 1.0 / (1.0 + np.exp(-(features @ planted)))
    labels = np.where(rng.random(samples) < probability, 1.0, -1.0)
    optimum = _solve_logistic(features, labels, l2)
    margins = labels * (features @ optimum)
    f_star = float(np.logaddexp(0.0, -margins).mean() + 0.5 * l2 * optimum @ optimum)
    return LogisticProblem(
        features=torch.from_numpy(features), labels=torch.from_numpy(labels), l2=l2,
        optimum=torch.from_numpy(optimum), f_star=f_star, smoothness_L=logistic_smoothness(features, l2),
    )


@dataclass(frozen=True, eq=False)
class MLPProblem:
    """One hidden tanh layer, logistic loss, weight decay ``l2``; parameters flattened as [W1, b1, w2, b2]."""

    features: torch.Tensor
    labels: torch.Tensor
    hidden: int
    l2: float
    f_star: float  # best value found, not certified
    init: torch.Tensor
    name: str = "mlp"
    certified_optimum: bool = False

    @property
    def dim(self) -> int:
        d_in = self.features.shape[1]
        return self.hidden * d_in + 2 * self.hidden + 1

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    def initial_point(self) -> torch.Tensor:
        return self.init.clone()

    def _forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Logits for parameters x (..., P) on inputs a (..., m, d_in) or (m, d_in)."""
        d_in, h = self.features.shape[1], self.hidden
        w1 = x[..., : h * d_in].reshape(*x.shape[:-1], h, d_in)
        b1 = x[..., h * d_in : h * d_in + h]
        w2 = x[..., h * d_in + h : h * d_in + 2 * h]
        b2 = x[..., -1]
        hidden = torch.tanh(a @ w1.transpose(-1, -2) + b1.unsqueeze(-2))
        return (hidden * w2.unsqueeze(-2)).sum(-1) + b2.unsqueeze(-1)

    def _objective(self, x: torch.Tensor, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self._forward(x, a)
        return torch.nn.functional.softplus(-y * logits).mean(-1) + 0.5 * self.l2 * (x * x).sum(-1)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return self._objective(x, self.features, self.labels)

    def stats(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = x.detach().requires_grad_(True)
        value = self.loss(x)
        (gradient,) = torch.autograd.grad(value.sum(), x)
        return {"loss": value.detach(), "grad_norm2": (gradient * gradient).sum(-1)}

    def minibatch_gradient(self, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        value = self._objective(x, self.features[indices], self.labels[indices])
        (gradient,) = torch.autograd.grad(value.sum(), x)
        return gradient


def make_mlp(*, samples: int = 512, inputs: int = 8, hidden: int = 16, l2: float = 1e-3, seed: int = 0) -> MLPProblem:
    """Data labelled by a random teacher of the same shape (with label noise); reference value: the best of two
    full-batch L-BFGS runs (200 iterations each) — an empirical reference, not a certified minimum."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    features = torch.from_numpy(rng.standard_normal((samples, inputs)))
    dim = hidden * inputs + 2 * hidden + 1
    teacher = torch.from_numpy(rng.standard_normal(dim))
    shell = MLPProblem(features=features, labels=torch.ones(samples, dtype=DTYPE), hidden=hidden, l2=l2,
                       f_star=0.0, init=torch.zeros(dim, dtype=DTYPE))
    with torch.no_grad():
        probability = torch.sigmoid(shell._forward(teacher, features)).numpy()
    labels = torch.from_numpy(np.where(rng.random(samples) < probability, 1.0, -1.0))
    init = torch.from_numpy(rng.standard_normal(dim) / math.sqrt(inputs))
    problem = MLPProblem(features=features, labels=labels, hidden=hidden, l2=l2, f_star=0.0, init=init)
    best = math.inf
    for start in [init.numpy()] + [rng.standard_normal(dim) / math.sqrt(inputs) for _ in range(1)]:
        def value_and_gradient(v):
            x = torch.from_numpy(v).requires_grad_(True)
            value = problem.loss(x)
            (gradient,) = torch.autograd.grad(value, x)
            return float(value.detach()), gradient.numpy().copy()

        result = scipy.optimize.minimize(value_and_gradient, start, jac=True, method="L-BFGS-B",
                                         options={"gtol": 1e-9, "maxiter": 200})
        best = min(best, float(result.fun))
    return MLPProblem(features=features, labels=labels, hidden=hidden, l2=l2, f_star=best, init=init)
