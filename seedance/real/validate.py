"""Validate the cost model against real collectives: measured (torch.distributed) vs predicted (seedance.models.cost).

Rules (seed §2.4; issue D item 3; issue N item 4 — validation measures the model, not itself):

* ``validate`` runs the *identical* schedule ``calibrate`` ran, read from the calibration's sidecar
  (``FILE.calibration.json``, key ``plan``): the same items (ping-pong phase, then collectives on the calibration
  and held-out sizes), the same buffers, warm-up and loop rule (>= ``min_sample_s`` of back-to-back operations per
  sample), ``repeats`` (>= 3) full measurements in fresh processes — with other seeds (fresh samples, other orders).
* Each collective is predicted by :func:`seedance.models.cost.collective_time` (alpha-beta: gloo is not NCCL) on the
  pair fits with that collective's fitted efficiency, software latency and algorithm
  (:func:`seedance.real.calibrate.topology_for`).
* ``model_rel_error = (model - measured) / measured``: the cost model alone. ``rel_error`` multiplies the model by
  the calibration's residual correction (:func:`seedance.real.calibrate.correction_factor`). At a calibrated size
  the corrected prediction *is* the calibration's own median, so there ``rel_error`` measures reproducibility, not
  the model.
* The headline, ``median_abs_rel_error_heldout``, is the median |model-only error| at held-out sizes >= 1 MiB (sizes
  never fitted, between calibrated ones) over all repeats; ``repeat_halfwidth_pp`` is half the spread (max - min)
  of that median across the repeats, in percentage points. ``median_abs_rel_error_calibrated`` (corrected error at
  calibrated sizes) is the reproducibility figure, reported apart. The earlier keys (>= / < 1 MiB, with and without
  correction, and the measurement's own 95 % half-width) are kept, computed over every row of every repeat.
* The figure (one function, DataFrame -> Figure) plots predicted against measured with the measurement's interval as
  error bars and the y = x line, saved as PDF and PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seedance.real.calibrate import (
    COLLECTIVES,
    DEFAULT_MIN_SAMPLE_S,
    DEFAULT_REPEATS,
    correction_factor,
    measure_plan,
    split_sizes,
    summarise,
    topology_for,
)

MIB = 1 << 20
VALIDATE_SEED = 7001  # validate's schedules are seeded apart from calibrate's (0, 101, 202, ...)


def _calibration_for(topology_path: Path) -> dict[str, Any] | None:
    """The calibration sidecar beside the topology, strictly read: garbage is one SpecError naming the file."""
    from seedance.errors import SpecError
    from seedance.validation import load_file

    sidecar = Path(str(topology_path) + ".calibration.json")
    if not sidecar.exists():
        return None
    doc = load_file(sidecar, "--topology", expected="the FILE.calibration.json `seedance real calibrate` writes")
    shapes = isinstance(doc, dict) and isinstance(doc.get("plan", {}), dict) and isinstance(doc.get("fits", {}), dict)
    if not shapes or not all(isinstance(fit, dict) for fit in doc.get("fits", {}).values()):
        raise SpecError(f"--topology {sidecar}", "is not a calibration (a mapping with plan and fits mappings)",
                        "the FILE.calibration.json `seedance real calibrate` writes, or no such file")
    return doc


def _plan(calibration: dict[str, Any] | None, world_size: int, sizes: Sequence[int] | None, reps: int | None,
          warmups: int | None, repeats: int | None, min_sample_s: float | None,
          collectives: Sequence[str]) -> dict[str, Any]:
    """The calibration's schedule (identical by default); explicit arguments override it."""
    base = dict((calibration or {}).get("plan") or {})
    if sizes is not None:
        cal, held = split_sizes(sizes, world_size)
        base.update(sizes_bytes=cal, heldout_bytes=held)
    if "sizes_bytes" not in base:
        from seedance.models.units import parse_size_range
        from seedance.real.calibrate import DEFAULT_SIZES

        cal, held = split_sizes(parse_size_range(DEFAULT_SIZES), world_size)
        base.update(sizes_bytes=cal, heldout_bytes=held)
    for key, value, default in (("reps", reps, 3), ("warmups", warmups, 2), ("repeats", repeats, DEFAULT_REPEATS),
                                ("min_sample_s", min_sample_s, DEFAULT_MIN_SAMPLE_S)):
        if value is not None:
            base[key] = value
        base.setdefault(key, default)
    base["collectives"] = list(collectives)
    return base


def validate(world_size: int, topology_path: Path, sizes: Sequence[int] | None = None, *, reps: int | None = None,
             warmups: int | None = None, collectives: Sequence[str] = COLLECTIVES, seed: int = VALIDATE_SEED,
             work_dir: Path | None = None, repeats: int | None = None,
             min_sample_s: float | None = None) -> dict[str, Any]:
    from seedance.errors import SpecError
    from seedance.models.cost import collective_time
    from seedance.models.topology import load

    topology = load(str(topology_path))
    if topology.num_devices != world_size:
        raise SpecError("--topology", f"has {topology.num_devices} devices, --world-size is {world_size}",
                        "a topology calibrated at the same world size")
    if repeats is not None and repeats < 1:
        raise SpecError("--repeats", f"is {repeats}", "at least 1 (3 or more for an interval)")
    calibration = _calibration_for(Path(topology_path))
    plan = _plan(calibration, world_size, sizes, reps, warmups, repeats, min_sample_s, collectives)
    import os

    load_before = os.getloadavg()[0]
    raws = measure_plan(world_size, plan, seed=seed, work_dir=work_dir)
    load_after = os.getloadavg()[0]
    calibrated = set(int(s) for s in plan["sizes_bytes"])
    rows = []
    for repeat, raw in enumerate(raws):
        for row in summarise(raw["collectives"]):
            factor = 1.0
            if calibration is not None and row["collective"] in calibration.get("fits", {}):
                fit = calibration["fits"][row["collective"]]
                algorithm, on = fit["algorithm"], topology_for(row["collective"], calibration)
                factor = correction_factor(fit, int(row["size_bytes"]))
            else:
                algorithm, on = "auto", topology
            model = collective_time(row["collective"], int(row["size_bytes"]), on, algorithm=algorithm,
                                    model="alpha-beta").time_s
            predicted, measured = model * factor, row["median_s"]
            rows.append({"collective": row["collective"], "size_bytes": int(row["size_bytes"]),
                         "heldout": int(row["size_bytes"]) not in calibrated, "repeat": repeat,
                         "measured_s": measured, "predicted_s": predicted,
                         "rel_error": (predicted - measured) / measured, "model_s": model,
                         "model_rel_error": (model - measured) / measured, "correction": factor,
                         "measured_ci_s": [row["ci_low_s"], row["ci_high_s"]], "algorithm": algorithm,
                         "samples": row["samples"], "iters": row.get("iters", 1)})

    def median_abs(key: str, keep) -> float | None:
        values = [abs(r[key]) for r in rows if keep(r)]
        return float(np.median(values)) if values else None

    def noise(big: bool) -> float | None:  # the measurement's own 95 % half-width, relative to its median
        values = [(r["measured_ci_s"][1] - r["measured_ci_s"][0]) / 2 / r["measured_s"] for r in rows
                  if (r["size_bytes"] >= MIB) == big]
        return float(np.median(values)) if values else None

    def heldout_big(r: dict[str, Any]) -> bool:
        return r["heldout"] and r["size_bytes"] >= MIB

    per_repeat = [median_abs("model_rel_error", lambda r, k=k: heldout_big(r) and r["repeat"] == k)
                  for k in range(len(raws))]
    per_repeat = [v for v in per_repeat if v is not None]
    halfwidth = (max(per_repeat) - min(per_repeat)) / 2 * 100 if len(per_repeat) >= 2 else None
    return {"backend": raws[0].get("backend"), "world_size": world_size, "topology": str(topology_path),
            "rows": rows, "reps": plan["reps"], "warmups": plan["warmups"], "seed": seed,
            "repeats": plan["repeats"], "min_sample_s": plan["min_sample_s"], "sizes_bytes": plan["sizes_bytes"],
            "heldout_bytes": plan["heldout_bytes"], "cpu_count": os.cpu_count(),
            "loadavg_1min": [load_before, load_after],  # a shared machine's other work shows here
            "median_abs_rel_error_heldout": median_abs("model_rel_error", heldout_big),
            "median_abs_rel_error_heldout_per_repeat": per_repeat,
            "repeat_halfwidth_pp": halfwidth,
            "median_abs_rel_error_heldout_lt_1MiB": median_abs(
                "model_rel_error", lambda r: r["heldout"] and r["size_bytes"] < MIB),
            "median_abs_corrected_rel_error_heldout": median_abs("rel_error", heldout_big),
            "median_abs_rel_error_calibrated": median_abs("rel_error", lambda r: not r["heldout"]),
            "median_abs_rel_error_ge_1MiB": median_abs("rel_error", lambda r: r["size_bytes"] >= MIB),
            "median_abs_rel_error_lt_1MiB": median_abs("rel_error", lambda r: r["size_bytes"] < MIB),
            "median_abs_model_rel_error_ge_1MiB": median_abs("model_rel_error", lambda r: r["size_bytes"] >= MIB),
            "median_abs_model_rel_error_lt_1MiB": median_abs("model_rel_error", lambda r: r["size_bytes"] < MIB),
            "median_ci_half_width_ge_1MiB": noise(True), "median_ci_half_width_lt_1MiB": noise(False)}


def figure(frame):
    """Predicted vs measured collective time (log-log), the measurement's 95 % interval as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    palette = dict(zip(sorted(frame["collective"].unique()), sns.color_palette("colorblind")))
    for name, group in frame.groupby("collective"):
        low = group["measured_s"] - group["ci_low_s"]
        high = group["ci_high_s"] - group["measured_s"]
        ax.errorbar(group["measured_s"], group["predicted_s"], xerr=[low.clip(lower=0), high.clip(lower=0)],
                    fmt="o", ms=4, capsize=2, label=name, color=palette[name])
    lo = float(min(frame["measured_s"].min(), frame["predicted_s"].min())) * 0.7
    hi = float(max(frame["measured_s"].max(), frame["predicted_s"].max())) * 1.4
    ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--", label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", alpha=0.6, label="±10 %")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured time (s)",
           ylabel="predicted time (s)")
    ax.legend(frameon=True, fontsize=8)
    fig.tight_layout()
    return fig


def frame_of(result: dict[str, Any]):
    import pandas as pd

    rows = [{**{k: v for k, v in r.items() if k != "measured_ci_s"}, "ci_low_s": r["measured_ci_s"][0],
             "ci_high_s": r["measured_ci_s"][1]} for r in result["rows"]]
    return pd.DataFrame(rows)


def save_figure(result: dict[str, Any], stem: Path) -> list[Path]:
    fig = figure(frame_of(result))
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".pdf"), stem.with_suffix(".png")]
    for path in paths:
        fig.savefig(path, dpi=150)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths
