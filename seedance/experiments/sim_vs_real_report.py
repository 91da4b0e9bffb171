"""The sim-vs-real experiment's report (:mod:`seedance.experiments.sim_vs_real`): each configuration's medians, the
summary's errors and their bootstrap interval, the real side's own noise, the figure and the files written.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _float(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


def _rel(predicted: float | None, real: float | None) -> float | None:
    if predicted is None or real is None or real == 0:
        return None
    return abs(predicted - real) / real


def headline_interval(frame: Any, key: str, side: str = "sim", draws: int = 2000, seed: int = 0) -> list[float] | None:
    """A 95 % bootstrap interval of the held-out headline (median over held-out configurations of |median sim /
    median real - 1|), resampling each configuration's rounds (a round's real and simulated run stay paired): how
    far another experiment on the same machine state could land from this one, from the rounds' noise alone."""
    held = frame[frame.held_out]
    groups = [g for _, g in held.groupby("config", sort=False)]
    if not groups or any(len(g) < 2 for g in groups) or f"{side}_{key}" not in held:
        return None
    rng = np.random.default_rng(seed)
    pairs = [(g[f"{side}_{key}"].to_numpy(dtype=float), g[f"real_{key}"].to_numpy(dtype=float)) for g in groups]
    out = np.empty(draws)
    for i in range(draws):
        errs = []
        for sim, real in pairs:
            pick = rng.integers(0, len(real), len(real))
            errs.append(abs(np.median(sim[pick]) / np.median(real[pick]) - 1.0))
        out[i] = np.median(errs)
    return [float(np.quantile(out, 0.025)), float(np.quantile(out, 0.975))]


def _anchored_summary(anchor: Mapping[str, Any] | None, frame: Any, held: list[dict[str, Any]],
                      median_error: Callable[..., float | None],
                      per_round_error: Callable[..., list[float]]) -> dict[str, Any] | None:
    """The CPU scale anchored on this experiment's fitted configuration, per round (see :func:`anchor_rounds`;
    the headline's predictions use it), and the errors of the prediction without it (``unanchored_*``)."""
    if anchor is None:
        return None
    rounds = per_round_error("ops_s", "unanchored_sim")
    return {**anchor, "factors": {str(k): v for k, v in anchor["factors"].items()},
            "unanchored_median_abs_rel_error_heldout": {k: median_error(k, held, "unanchored_sim")
                                                        for k in ("ops_s", "p50_ms", "p99_ms")},
            "unanchored_throughput_error_by_round_heldout": rounds,
            "unanchored_throughput_error_round_spread_pp": (100 * (max(rounds) - min(rounds))) if len(rounds) > 1
            else None,
            "unanchored_throughput_error_heldout_ci95": headline_interval(frame, "ops_s", "unanchored_sim")}


def real_noise(per_config: Sequence[Mapping[str, Any]], profile: Any) -> dict[str, Any]:
    """How much the real side moves on its own: the median over held-out configurations of the real throughput's
    spread over rounds, and how far the fitted configuration's real throughput in this experiment is from the
    profile run's own (the machine between profiling and measuring; both in %)."""
    spreads = [r["real_ops_spread_pct"] for r in per_config if r["held_out"] and r.get("real_ops_spread_pct")
               is not None]
    profile_run = ((profile.measured or {}).get("raft_run") or {}).get("throughput_ops_s")
    fitted = [r for r in per_config if not r["held_out"]]
    drift = (100 * (fitted[0]["real_ops_s"] / profile_run - 1)) if fitted and profile_run else None
    return {"real_throughput_spread_pct_heldout": float(np.median(spreads)) if spreads else None,
            "fitted_config_real_vs_profile_run_pct": drift}


def figure(per_config: list[dict[str, Any]]) -> Any:
    """Predicted vs measured (throughput, p99), y = x dashed; held-out configurations filled, fitted hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from seedance.analysis import style

    style.apply()  # the project's one style
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.2))
    for ax, key, label in ((axes[0], "ops_s", "throughput (ops/s)"), (axes[1], "p99_ms", "p99 latency (ms)")):
        for row in per_config:
            real, sim = row[f"real_{key}"], row[f"sim_{key}"]
            ax.scatter([real], [sim], marker="o", s=36, facecolors="C0" if row["held_out"] else "none",
                       edgecolors="C0")
            if row.get(f"profile_sim_{key}") is not None:  # the profile alone: tenants as when it was measured
                ax.scatter([real], [row[f"profile_sim_{key}"]], marker="x", s=24, color="C3", lw=0.8)
            ax.annotate(row["config"], (real, sim), fontsize=6, xytext=(3, 3), textcoords="offset points")
        values = [row[f"{side}_{key}"] for row in per_config for side in ("real", "sim", "profile_sim")
                  if row.get(f"{side}_{key}") is not None]
        lo, hi = min(values) * 0.8, max(values) * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # log-scale minor labels overlap over less than a decade
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
    axes[0].set_title("held out: filled; fitted (the profile's configuration, reproducibility): hollow", fontsize=7)
    axes[1].set_title("o: CPU level anchored on each round's fitted run, tenants and speed metered per run; "
                      "x: the profile alone", fontsize=6)
    fig.tight_layout()
    return fig


def save(result: dict[str, Any], out: Path, *, provenance: dict[str, Any]) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    result["frame"].to_csv(out / "rows.csv", index=False)
    artifacts["rows"] = str(out / "rows.csv")
    document = {**result["summary"], "provenance": provenance}
    (out / "summary.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    artifacts["summary"] = str(out / "summary.json")
    fig = figure(result["summary"]["rows"])
    for suffix in ("pdf", "png"):
        path = out / f"sim_vs_real.{suffix}"
        fig.savefig(path, dpi=200)
        artifacts[f"figure_{suffix}"] = str(path)
    return artifacts


def per_config_rows(frame: Any, protocol: str) -> list[dict[str, Any]]:
    """Each configuration's medians over its rounds, both sides, and the real side's own spread."""
    per_config = []
    for name, group in frame.groupby("config", sort=False):
        med = group.median(numeric_only=True)
        ratio = group.sim_ops_s / group.real_ops_s
        per_config.append({"protocol": protocol, "config": name, "held_out": bool(group.held_out.iloc[0]),
                           "real_ops_s": float(med.real_ops_s), "sim_ops_s": float(med.sim_ops_s),
                           "real_p50_ms": float(med.real_p50_ms), "sim_p50_ms": float(med.sim_p50_ms),
                           "real_p99_ms": float(med.real_p99_ms), "sim_p99_ms": float(med.sim_p99_ms),
                           "ratio_ops": float(med.sim_ops_s / med.real_ops_s),
                           # the real side's own spread over the rounds (max - min, % of the median): an error
                           # below it cannot be told from the machine's noise
                           "real_ops_spread_pct": float(100 * (group.real_ops_s.max() - group.real_ops_s.min())
                                                        / med.real_ops_s) if med.real_ops_s else None,
                           "ratio_ops_range": [float(ratio.min()), float(ratio.max())],
                           "spread_ratio": float((med.sim_p99_ms / med.sim_p50_ms) / (med.real_p99_ms /
                                                                                      med.real_p50_ms)),
                           "real_window_sd": _float(med.real_window_sd), "sim_window_sd": _float(med.sim_window_sd),
                           "real_slow_share": _float(med.get("real_slow_share")),
                           "sim_slow_share": _float(med.get("sim_slow_share")),
                           "real_cpu_cores": _float(med.get("real_cpu_cores")),
                           "sim_cpu_cores": _float(med.get("sim_cpu_cores")),
                           "real_aftermath_share": _float(med.get("real_aftermath_share")),
                           "sim_aftermath_share": _float(med.get("sim_aftermath_share")),
                           "real_loadavg": _float(med.real_loadavg),
                           "real_tenant_cores": _float(med.real_tenant_cores),
                           "real_cpu_speed": _float(med.real_cpu_speed),
                           "profile_sim_ops_s": float(med.profile_sim_ops_s),
                           "profile_sim_p50_ms": float(med.profile_sim_p50_ms),
                           "profile_sim_p99_ms": float(med.profile_sim_p99_ms),
                           **({f"unanchored_sim_{k}": float(med[f"unanchored_sim_{k}"])
                               for k in ("ops_s", "p50_ms", "p99_ms")} if "unanchored_sim_ops_s" in med else {})})
    return per_config


def _median_error(key: str, rows_: list[dict[str, Any]], side: str = "sim") -> float | None:
    errors = [_rel(r[f"{side}_{key}"], r[f"real_{key}"]) for r in rows_]
    errors = [e for e in errors if e is not None]
    return float(np.median(errors)) if errors else None


def _per_round_error(frame: Any, repeats: int, key: str, side: str = "sim") -> list[float]:
    """The held-out headline per round: how repeatable is it?"""
    out_ = []
    for rnd in range(repeats):
        part = frame[(frame["round"] == rnd) & frame.held_out]
        errs = [_rel(s, r) for s, r in zip(part[f"{side}_{key}"], part[f"real_{key}"])]
        errs = [e for e in errs if e is not None]
        if errs:
            out_.append(float(np.median(errs)))
    return out_


def summarize(frame: Any, per_config: list[dict[str, Any]], anchor: Mapping[str, Any] | None, profile: Any, *,
              protocol: str, nodes: int, repeats: int, duration_s: float, fitted: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment's summary: the held-out errors (median, per round, bootstrap interval), the spells', the
    CPU's, the profile-only and unanchored predictions', and the machine's conditions over the runs."""
    median_error = _median_error
    per_round_error = functools.partial(_per_round_error, frame, repeats)
    held = [r for r in per_config if r["held_out"]]

    rounds = per_round_error("ops_s")
    summary = {
        "protocol": protocol, "nodes": nodes, "repeats": repeats, "duration_s": duration_s,
        "fitted_config": fitted, "rows": per_config,
        "median_abs_rel_error_throughput_heldout": median_error("ops_s", held),
        "median_abs_rel_error_p50_heldout": median_error("p50_ms", held),
        "median_abs_rel_error_p99_heldout": median_error("p99_ms", held),
        "throughput_error_by_round_heldout": rounds,
        "throughput_error_round_spread_pp": (100 * (max(rounds) - min(rounds))) if len(rounds) > 1 else None,
        "spread_ratio_heldout": [r["spread_ratio"] for r in held],
        # the slow spells on both sides (seedance.history.spells): the median over the held-out workloads
        "window_sd_heldout": {side: _median([r[f"{side}_window_sd"] for r in held]) for side in ("real", "sim")},
        # the CPU the simulator spends over the real processes' (cores / cores), median over every configuration
        "cpu_ratio": _median([r["sim_cpu_cores"] / r["real_cpu_cores"] for r in per_config
                              if r.get("sim_cpu_cores") and r.get("real_cpu_cores")]),
        # the same errors for the simulator on the profile alone (tenants as at profiling, not as during each run)
        "profile_only_median_abs_rel_error_heldout": {
            key: median_error(key, held, "profile_sim") for key in ("ops_s", "p50_ms", "p99_ms")},
        # 95 % bootstrap interval of the throughput headline from the rounds' own noise (see headline_interval)
        "throughput_error_heldout_ci95": headline_interval(frame, "ops_s"),
        **real_noise(per_config, profile),
        # the CPU scale's anchor, and the errors of the prediction before it (tenants and speed metered per run)
        "anchored": _anchored_summary(anchor, frame, held, median_error, per_round_error),
        "real_loadavg_range": [_float(frame.real_loadavg.min()), _float(frame.real_loadavg.max())],
        "real_tenant_cores_range": [_float(frame.real_tenant_cores.min()), _float(frame.real_tenant_cores.max())],
        "real_cpu_speed_range": [_float(frame.real_cpu_speed.min()), _float(frame.real_cpu_speed.max())],
    }
    return summary
