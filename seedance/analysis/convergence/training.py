"""Compressed SGD runs, many seeds as one torch batch, single process (CPU).

One run = S seeds × K workers × T iterations of

    g_k = minibatch gradient of worker k at its model (b samples drawn with replacement)
    synchronous (period_H = 1):  p_k = e_k + η_t g_k (error feedback) or η_t g_k;  c_k = C(p_k);  e_k = p_k − c_k;
                                 every worker applies x ← x − mean_k c_k
    local SGD   (period_H > 1):  x_k ← x_k − η_t g_k, and every H steps all x_k ← mean_k x_k (no compression)

optionally followed by the projection onto the ball ‖x‖ ≤ radius (projected SGD, the setting of Bubeck 2015 Thm 6.2),
with the step sizes η_t of a :class:`~seedance.models.convergence.StepSchedule`. Every iteration records, for the
workers' mean model x_t: f(x_t) − f*, ‖∇f(x_t)‖² and (logistic only) E‖g_b(x_t)‖², the second moment the bounds
assume; and f(x̄_T) − f* for the schedule's weighted average x̄_T of x_0 … x_{T−1} — the iterate the theorems bound.

Randomness: the root ``SeedSequence(root_seed)`` spawns one child per seed; a child seeds a ``torch.Generator`` that
draws all minibatch indices up front and a ``numpy.random.Generator`` for the compressor. Seed s therefore follows the
same trajectory whatever the number of seeds in the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from seedance.errors import SpecError
from seedance.models.compression import Compressor, Kind
from seedance.models.convergence import StepSchedule, minibatch_second_moment

from .problems import DTYPE, LogisticProblem, MLPProblem

Problem = LogisticProblem | MLPProblem
_RANDOMISED = (Kind.RANDOM_K, Kind.RANDOM_K_UNBIASED, Kind.QSGD)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What to run. ``workers_K`` > 1 with ``period_H`` > 1 is local SGD; ``period_H`` = 1 is synchronous SGD."""

    compressor: Compressor
    schedule: StepSchedule
    iterations: int
    error_feedback: bool = False
    batch: int = 8
    seeds: int = 16
    workers_K: int = 1
    period_H: int = 1
    root_seed: int = 0
    radius: float | None = None  # projected SGD onto the ball ‖x‖ ≤ radius (Bubeck 2015 Thm 6.2's set X)
    dense_until: int = 10**9  # evaluate every iteration up to here ...
    points: int = 200  # ... then about this many log-spaced iterations more
    label: str = ""

    def __post_init__(self) -> None:
        for name in ("iterations", "batch", "seeds", "workers_K", "period_H"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise SpecError(name, f"{value!r} is not a positive integer", "an integer >= 1")
        if self.period_H > 1 and self.compressor.kind is not Kind.IDENTITY:
            raise SpecError("compressor", "local SGD (period_H > 1) runs uncompressed here", "identity")


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Arrays are (seeds, len(horizons)): a column is iterate x_t (t = horizon − 1) or average x̄_T (T = horizon)."""

    spec: RunSpec
    problem: str
    horizons: np.ndarray  # T = 1, 2, … (evaluated horizons, increasing)
    gap_last: np.ndarray  # f(x_t) − f*, t = 0 … T−1
    gap_average: np.ndarray  # f(x̄_T) − f*, T = 1 … T
    grad_norm2: np.ndarray  # ‖∇f(x_t)‖²
    second_moment: np.ndarray | None  # E‖g_b(x_t)‖² (logistic only)
    sample_variance: np.ndarray | None  # E_i‖∇f_i(x_t) − ∇f(x_t)‖² / b, the minibatch variance
    extra: dict = field(default_factory=dict)

    @property
    def max_second_moment(self) -> float:
        return float(np.max(self.second_moment)) if self.second_moment is not None else float("nan")

    @property
    def max_variance(self) -> float:
        return float(np.max(self.sample_variance)) if self.sample_variance is not None else float("nan")


def _generators(spec: RunSpec, samples: int) -> tuple[torch.Tensor, list[np.random.Generator]]:
    children = np.random.SeedSequence(spec.root_seed).spawn(spec.seeds)
    indices, rngs = [], []
    for child in children:
        torch_seed, numpy_child = child.spawn(2)
        generator = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] >> 1))
        indices.append(
            torch.randint(samples, (spec.iterations, spec.workers_K, spec.batch), generator=generator)
        )
        rngs.append(np.random.default_rng(numpy_child))
    return torch.stack(indices), rngs  # (S, T, K, b)


def _compress(compressor: Compressor, p: torch.Tensor, rngs: list[np.random.Generator]) -> torch.Tensor:
    array = p.numpy()
    if compressor.kind in _RANDOMISED:  # one generator per seed keeps seeds independent of the batch
        out = np.stack([compressor(array[s], rngs[s]) for s in range(array.shape[0])])
    else:
        out = compressor(array)
    return torch.from_numpy(out)


def run(problem: Problem, spec: RunSpec, progress: Callable[[int], None] | None = None) -> RunResult:
    """Run ``spec`` on ``problem``; ``progress(n)`` is called every 100 iterations with n done."""
    S, K, T, d = spec.seeds, spec.workers_K, spec.iterations, problem.dim
    indices, rngs = _generators(spec, problem.samples)
    worker_rngs = [rngs[row // K] for row in range(S * K)]  # a seed's workers share its generator, in order
    x = problem.initial_point().expand(S, K, d).clone()
    memory = torch.zeros(S, K, d, dtype=DTYPE)
    average = torch.zeros(S, d, dtype=DTYPE)
    weight_total = 0.0
    grid = evaluation_grid(T, spec.dense_until, spec.points)
    at = {t: column for column, t in enumerate(grid)}
    E = len(grid)
    gap_last, gap_average, grad_norm2 = (np.empty((S, E)) for _ in range(3))
    logistic = isinstance(problem, LogisticProblem)
    second = np.empty((S, E)) if logistic else None
    variance = np.empty((S, E)) if logistic else None
    steps = spec.schedule.step(np.arange(T))
    weights = spec.schedule.weight(np.arange(T))
    for t in range(T):
        mean_model = x.mean(dim=1)
        w = float(weights[t])
        average = (weight_total * average + w * mean_model) / (weight_total + w)
        weight_total += w
        column = at.get(t)
        if column is not None:
            stats = problem.stats(torch.cat([mean_model, average]))
            loss = stats["loss"].numpy()
            gap_last[:, column] = loss[:S] - problem.f_star
            gap_average[:, column] = loss[S:] - problem.f_star
            grad_norm2[:, column] = stats["grad_norm2"].numpy()[:S]
            if logistic:
                sample = stats["sample_second_moment"].numpy()[:S]
                variance[:, column] = (sample - grad_norm2[:, column]) / spec.batch
                second[:, column] = minibatch_second_moment(grad_norm2[:, column], sample - grad_norm2[:, column],
                                                            spec.batch)
        gradient = problem.minibatch_gradient(x, indices[:, t]).detach()
        update = float(steps[t]) * gradient
        if spec.period_H > 1:
            x = x - update
            if (t + 1) % spec.period_H == 0:
                x = x.mean(dim=1, keepdim=True).expand(S, K, d).clone()
        else:
            p = memory + update if spec.error_feedback else update
            sent = _compress(spec.compressor, p.reshape(S * K, d), worker_rngs)
            sent = sent.reshape(S, K, d)
            if spec.error_feedback:
                memory = p - sent
            x = x - sent.mean(dim=1, keepdim=True)
        if spec.radius is not None:
            norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
            x = x * torch.clamp(spec.radius / norms, max=1.0)
        if progress is not None and (t + 1) % 100 == 0:
            progress(100)
    if progress is not None and T % 100:
        progress(T % 100)
    return RunResult(
        spec=spec, problem=problem.name, horizons=grid + 1, gap_last=gap_last, gap_average=gap_average,
        grad_norm2=grad_norm2,
        second_moment=second, sample_variance=variance,
    )


def evaluation_grid(T: int, dense_until: int, points: int) -> np.ndarray:
    """Iterations t (0-based) at which a run is evaluated: every t < dense_until, then ~``points`` log-spaced ones,
    always including the last."""
    dense = np.arange(min(T, dense_until))
    if T <= dense_until:
        return dense
    sparse = np.unique(np.geomspace(dense_until, T - 1, points).astype(int))
    return np.unique(np.concatenate([dense, sparse, [T - 1]]))


def mean_and_ci(values: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (axis 0) and the normal-approximation 95 % confidence interval of the mean."""
    mean = values.mean(axis=0)
    half = z * values.std(axis=0, ddof=1) / np.sqrt(values.shape[0]) if values.shape[0] > 1 else 0 * mean
    return mean, mean - half, mean + half


def iterations_to_target(horizons: np.ndarray, curve: np.ndarray, target: float) -> int | None:
    """First evaluated horizon at which the mean curve is at or below ``target`` (None if never): exact on the dense
    part of the grid, an upper bound to the next grid point on the sparse part."""
    hit = np.nonzero(curve <= target)[0]
    return int(horizons[hit[0]]) if hit.size else None
