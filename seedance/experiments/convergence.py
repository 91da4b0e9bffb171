"""The convergence experiment: bounds against empirical gaps, then time to accuracy per fabric (seed §2.4).

Two families of runs on the generated problems (:mod:`.problems`), many seeds each (:mod:`.training`):

* **theorem** (logistic regression only, one worker): each compressor runs with exactly the step sizes, averaging
  and (for the unbiased ones) projection its theorem prescribes, and its mean gap ± 95 % CI over seeds is compared
  with the bound at every evaluated horizon. Biased compressors and fp32/fp16/bf16: error feedback, Stich et al.
  2018 Thm 2.4. Unbiased ones (QSGD, rescaled random-k): no error feedback, projected SGD of Bubeck 2015 Thm 6.2
  with B² = (1 + ω)G² (QSGD Lemma 3.1). Local SGD (K workers, period H): Stich 2019 Thm 2.2. A "wrong" bound with
  the compression term dropped is evaluated next to each compressed bound, to show the comparison can fail.
  G² and σ² are the largest values measured at the run's evaluated iterates (the theorems assume the bound at the
  iterates they visit), L = λ_max(AᵀA)/(4n) + λ and μ = λ from the data.
* **common** (logistic and MLP, K workers compressing their own minibatch gradients with their own error-feedback
  memory, averaged after decompression): one step-size schedule for every compressor, so iteration counts compare
  compressors, not schedules. Logistic: η_t = 2/(μ(2κ + t)) (η₀ = 1/L; Bottou, Curtis & Nocedal 2018 §4.3 style),
  reported iterate weighted by (2κ + t)². MLP: constant η, last iterate (non-convex: empirical only).

Time to accuracy multiplies the iterations a run needs to reach the target gap by the per-iteration time of
:mod:`.time_to_accuracy` on each fabric. Caveat for reading the local SGD rows: the default logistic problem is
well conditioned (κ ≈ 1.3) and nearly quadratic, and for a quadratic with identically distributed data local SGD's
averaged model follows mini-batch SGD exactly, so H barely costs iterations here (check the MLP rows for a
non-quadratic case).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
import torch

from seedance.jsonable import jsonable
from seedance.models import convergence as bounds
from seedance.models.compression import Compressor, Kind, parse_compressor

from seedance.analysis.convergence.problems import LogisticProblem, make_logistic, make_mlp
from seedance.analysis.convergence.time_to_accuracy import FABRICS, ComputeModel, load_fabric, time_to_accuracy
from seedance.analysis.convergence.training import RunResult, RunSpec, iterations_to_target, mean_and_ci, run

DEFAULT_COMPRESSORS = (
    "identity", "fp16", "top_k:0.1", "random_k:0.1", "scaled_sign", "qsgd:4", "random_k_unbiased:0.1",
)
LOCAL_SGD = "local_sgd"


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Everything that determines the results (hashed into summary.json's provenance)."""

    seeds: int = 32
    iterations: int = 2000
    common_iterations: int = 1500
    mlp_iterations: int = 1000
    theorem_batch: int = 1  # the papers' setting: one sample per step
    batch: int = 8  # per worker, common runs
    workers_K: int = 4
    local_period_H: int = 4
    root_seed: int = 0
    logistic_samples: int = 500
    logistic_dim: int = 50
    logistic_l2: float = 1.0
    mlp_samples: int = 256
    mlp_step: float = 0.5
    target_factor: float = 0.005  # logistic target gap = target_factor × (f(x₀) − f*)
    mlp_target_factor: float = 0.5  # MLP target = mlp_target_factor × (f(x₀) − f_ref)
    compressors: tuple[str, ...] = DEFAULT_COMPRESSORS
    compute: ComputeModel = field(default_factory=ComputeModel)
    dense_until: int = 200
    points: int = 120

    @classmethod
    def quick(cls, seeds: int | None = None, root_seed: int = 0) -> "ExperimentConfig":
        return cls(seeds=seeds or 8, iterations=500, common_iterations=400, mlp_iterations=200, root_seed=root_seed,
                   dense_until=60, points=60)


@dataclass(frozen=True, kw_only=True)
class ExperimentResult:
    rows: pd.DataFrame  # one per (problem, compressor, schedule, topology)
    curves: pd.DataFrame  # one per (problem, compressor, schedule, horizon)
    summary: dict


def _label(compressor: Compressor | None, config: ExperimentConfig) -> str:
    if compressor is None:
        return f"{LOCAL_SGD}(K={config.workers_K},H={config.local_period_H})"
    return compressor.name


def _constants(problem: LogisticProblem, result: RunResult) -> bounds.ProblemConstants:
    x0 = problem.initial_point()
    return bounds.ProblemConstants(
        smoothness_L=problem.smoothness_L, strong_convexity_mu=problem.strong_convexity_mu,
        second_moment_G2=result.max_second_moment, variance_sigma2=result.max_variance,
        distance2_initial=float(((x0 - problem.optimum) ** 2).sum()),
        gap_initial=float(problem.loss(x0) - problem.f_star),
    )


def theorem_run(problem: LogisticProblem, compressor: Compressor | None, config: ExperimentConfig, progress):
    """Run one compressor with its theorem's schedule; return (result, bound, wrong bound or None, citation)."""
    mu, L, d = problem.strong_convexity_mu, problem.smoothness_L, problem.dim
    common = dict(iterations=config.iterations, batch=config.theorem_batch, seeds=config.seeds,
                  root_seed=config.root_seed,
                  dense_until=config.dense_until, points=config.points)
    if compressor is None:
        schedule = bounds.local_sgd_schedule(mu, L, config.local_period_H)
        spec = RunSpec(compressor=Compressor(kind=Kind.IDENTITY), schedule=schedule, workers_K=config.workers_K,
                       period_H=config.local_period_H, **common)
        result = run(problem, spec, progress)
        constants = _constants(problem, result)
        bound = bounds.local_sgd_bound(result.horizons, constants=constants, workers_K=config.workers_K,
                                       period_H=config.local_period_H)
        return result, constants, bound, None, schedule.citation
    if compressor.omega(d) is not None and compressor.kind is not Kind.IDENTITY:
        schedule = bounds.sgd_schedule(mu)
        radius = 2.0 * float(problem.optimum.norm())
        spec = RunSpec(compressor=compressor, schedule=schedule, radius=radius, **common)
        result = run(problem, spec, progress)
        constants = _constants(problem, result)
        bound = bounds.unbiased_compressed_sgd_bound(result.horizons, constants=constants, omega=compressor.omega(d))
        wrong = bounds.unbiased_compressed_sgd_bound(result.horizons, constants=constants, omega=0.0)
        return result, constants, bound, wrong, schedule.citation + " + Alistarh et al. 2017, Lemma 3.1"
    delta = compressor.delta(d)
    schedule = bounds.memsgd_schedule(mu, delta)
    spec = RunSpec(compressor=compressor, schedule=schedule, error_feedback=True, **common)
    result = run(problem, spec, progress)
    constants = _constants(problem, result)
    bound = bounds.memsgd_bound(result.horizons, constants=constants, delta=delta)
    wrong = None
    if compressor.kind is not Kind.IDENTITY:
        wrong = bounds.memsgd_bound(result.horizons, constants=constants, delta=delta, drop_compression_term=True)
    return result, constants, bound, wrong, schedule.citation


def common_run(problem, compressor: Compressor | None, config: ExperimentConfig, progress) -> RunResult:
    if isinstance(problem, LogisticProblem):
        kappa = problem.smoothness_L / problem.strong_convexity_mu
        schedule = bounds.StepSchedule(scale=2.0 / problem.strong_convexity_mu, shift=2 * kappa,
                                       weight_shift=2 * kappa, weight_power=2, citation="common decaying")
        iterations = config.common_iterations
    else:
        schedule = bounds.StepSchedule(scale=config.mlp_step, constant=True, weight_power=0, citation="constant")
        iterations = config.mlp_iterations
    local = compressor is None
    spec = RunSpec(
        compressor=Compressor(kind=Kind.IDENTITY) if local else compressor, schedule=schedule, iterations=iterations,
        error_feedback=(not local) and compressor.biased, batch=config.batch, seeds=config.seeds,
        workers_K=config.workers_K, period_H=config.local_period_H if local else 1, root_seed=config.root_seed,
        dense_until=config.dense_until, points=config.points,
    )
    return run(problem, spec, progress)


def _curve_frame(problem: str, label: str, schedule: str, result: RunResult, reported: np.ndarray,
                 bound=None, wrong=None) -> pd.DataFrame:
    mean, low, high = mean_and_ci(reported)
    frame = pd.DataFrame({"problem": problem, "compressor": label, "schedule": schedule,
                          "horizon": result.horizons, "gap_mean": mean, "gap_ci_low": low, "gap_ci_high": high})
    frame["bound"] = np.nan if bound is None else bound
    frame["wrong_bound"] = np.nan if wrong is None else wrong
    return frame


def run_experiment(config: ExperimentConfig, progress: Callable[[int], None] | None = None,
                   log: Callable[[str], None] | None = None) -> ExperimentResult:
    """Run everything in ``config``; ``progress(n)`` advances by n iterations (see :func:`total_iterations`)."""
    started = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster, and fair to a shared machine
    try:
        logistic = make_logistic(samples=config.logistic_samples, dim=config.logistic_dim, l2=config.logistic_l2,
                                 seed=config.root_seed)
        mlp = make_mlp(samples=config.mlp_samples, seed=config.root_seed)
        compressors: list[Compressor | None] = [parse_compressor(c) for c in config.compressors] + [None]
        curves, runs = [], []
        for compressor in compressors:
            label = _label(compressor, config)
            if log:
                log(f"theorem run: {label}")
            result, constants, bound, wrong, citation = theorem_run(logistic, compressor, config, progress)
            mean, low, high = mean_and_ci(result.gap_average)
            curves.append(_curve_frame("logistic", label, "theorem", result, result.gap_average, bound, wrong))
            runs.append(dict(problem="logistic", compressor=label, schedule="theorem", result=result,
                             compressor_obj=compressor, bound=float(bound[-1]), citation=citation,
                             bound_holds=bool(np.all(high <= bound)),
                             wrong_bound_violated=None if wrong is None else bool(np.any(low > wrong)),
                             bound_over_gap_min=float(np.min(bound / np.maximum(mean, 1e-300))),
                             second_moment_G2=constants.second_moment_G2, variance_sigma2=constants.variance_sigma2,
                             gap_initial=constants.gap_initial, reported=result.gap_average))
        for problem in (logistic, mlp):
            for compressor in compressors:
                label = _label(compressor, config)
                if log:
                    log(f"common run: {problem.name} {label}")
                result = common_run(problem, compressor, config, progress)
                reported = result.gap_average if isinstance(problem, LogisticProblem) else result.gap_last
                curves.append(_curve_frame(problem.name, label, "common", result, reported))
                runs.append(dict(problem=problem.name, compressor=label, schedule="common", result=result,
                                 compressor_obj=compressor, bound=None, citation="", bound_holds=None,
                                 wrong_bound_violated=None, bound_over_gap_min=None,
                                 gap_initial=float(result.gap_last[:, 0].mean()), reported=reported))
        rows = _rows(runs, config)
    finally:
        torch.set_num_threads(threads)
    summary = _summary(config, rows, logistic, mlp, runs, time.monotonic() - started)
    return ExperimentResult(rows=rows, curves=pd.concat(curves, ignore_index=True), summary=summary)


def _rows(runs: list[dict], config: ExperimentConfig) -> pd.DataFrame:
    fabrics = {label: load_fabric(label) for label in FABRICS}
    records = []
    for entry in runs:
        result: RunResult = entry["result"]
        mean = entry["reported"].mean(axis=0)
        factor = config.target_factor if entry["problem"] == "logistic" else config.mlp_target_factor
        target = factor * entry["gap_initial"]
        iterations = iterations_to_target(result.horizons, mean, target)
        compressor = entry["compressor_obj"]
        wire = compressor if compressor is not None else Compressor(kind=Kind.IDENTITY)
        period = config.local_period_H if compressor is None else 1
        for label, topology in fabrics.items():
            timing = time_to_accuracy(iterations, wire, topology, config.compute, period_H=period)
            records.append({
                "compressor": entry["compressor"], "problem": entry["problem"], "topology": label,
                "schedule": entry["schedule"], "iterations": iterations, "target_gap": target,
                "empirical_gap": float(mean[-1]), "iterations_run": int(result.horizons[-1]), "bound": entry["bound"],
                "bound_holds": entry["bound_holds"], "wrong_bound_violated": entry["wrong_bound_violated"],
                "bound_over_gap_min": entry["bound_over_gap_min"], "theorem": entry["citation"], **timing,
            })
    return pd.DataFrame.from_records(records)


def rankings(rows: pd.DataFrame, problem: str = "logistic", schedule: str = "common") -> dict[str, list[str]]:
    """Compressors ordered by time to accuracy (fastest first; never-reached last) on each fabric."""
    chosen = rows[(rows.problem == problem) & (rows.schedule == schedule)]
    order = {}
    for topology, group in chosen.groupby("topology", sort=False):
        times = group.time_to_accuracy_s.astype(float).fillna(math.inf)
        order[topology] = list(group.assign(t=times).sort_values(["t", "compressor"]).compressor)
    return order


def _summary(config, rows, logistic, mlp, runs, elapsed_s) -> dict:
    ranking = {problem: rankings(rows, problem) for problem in ("logistic", "mlp")}
    winners = {problem: {fabric: order[0] for fabric, order in r.items()} for problem, r in ranking.items()}
    compressor_winners = {
        problem: {fabric: [name for name in order if not name.startswith(LOCAL_SGD)][0] for fabric, order in r.items()}
        for problem, r in ranking.items()
    }
    theorem = rows[(rows.schedule == "theorem")].drop_duplicates("compressor")
    return {
        "config": config_dict(config),
        "problems": {
            "logistic": {"samples": logistic.samples, "dim": logistic.dim, "l2": logistic.l2,
                         "smoothness_L": logistic.smoothness_L, "strong_convexity_mu": logistic.strong_convexity_mu,
                         "condition_number": logistic.smoothness_L / logistic.strong_convexity_mu,
                         "f_star": logistic.f_star, "f_star_certified": True},
            "mlp": {"samples": mlp.samples, "dim": mlp.dim, "f_reference": mlp.f_star, "f_star_certified": False},
        },
        "bounds": {
            row.compressor: {"theorem": row.theorem, "holds_at_every_horizon": row.bound_holds,
                             "wrong_bound_violated": row.wrong_bound_violated,
                             "min_bound_over_gap": row.bound_over_gap_min}
            for row in theorem.itertuples()
        },
        "constants_measured": {
            entry["compressor"]: {"second_moment_G2": entry["second_moment_G2"],
                                  "variance_sigma2": entry["variance_sigma2"]}
            for entry in runs if entry["schedule"] == "theorem"
        },
        "ranking_by_fabric": ranking,
        "winner_by_fabric": winners,
        "winning_compressor_by_fabric": compressor_winners,  # local SGD left out
        "rankings_differ_across_fabrics": {
            problem: len({tuple(order) for order in r.values()}) > 1 for problem, r in ranking.items()
        },
        "elapsed_s": elapsed_s,
    }


def config_dict(config: ExperimentConfig) -> dict:
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in asdict(config).items()}


def total_iterations(config: ExperimentConfig) -> int:
    """How many iterations :func:`run_experiment` reports to its progress callback."""
    runs = len(config.compressors) + 1
    return runs * (config.iterations + config.common_iterations + config.mlp_iterations)


def save(result: ExperimentResult, out_dir, *, provenance: dict, formats: tuple[str, ...] = ("pdf", "png")
         ) -> dict[str, str]:
    """Write rows.csv, curves.csv, summary.json (with ``provenance``) and the figures (one file per format) into
    ``out_dir``; return {artifact: path}."""
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    from seedance.analysis.convergence import figures

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"rows": out / "rows.csv", "curves": out / "curves.csv", "summary": out / "summary.json"}
    result.rows.to_csv(paths["rows"], index=False)
    result.curves.to_csv(paths["curves"], index=False)
    summary = {**result.summary, "provenance": provenance}
    paths["summary"].write_text(json.dumps(jsonable(summary), indent=2, allow_nan=False) + "\n")
    drawings = {
        "gap_vs_bound": figures.gap_vs_bound(result.curves),
        "gap_curves": figures.gap_curves(result.curves),
        "time_to_accuracy_logistic": figures.time_to_accuracy_heatmap(result.rows, "logistic"),
        "time_to_accuracy_mlp": figures.time_to_accuracy_heatmap(result.rows, "mlp"),
    }
    for name, fig in drawings.items():
        for suffix in formats:
            path = out / f"{name}.{suffix}"
            fig.savefig(path, dpi=150)
            paths[f"{name}.{suffix}"] = path
        plt.close(fig)
    return {key: str(value) for key, value in paths.items()}
