"""Calibrate and validate the NCCL cost model on a GPU server, in one torchrun command (NCCL, CUDA-event timing).

On an 8-GPU server (e.g. a DGX A100)::

    torchrun --standalone --nproc-per-node 8 -m seedance.real.nccl_calibrate \\
        --preset dgx-a100 --out out/calibrated/dgx-a100.yaml

(several servers: ``torchrun --nnodes N --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...``).
Every rank runs the :mod:`.microbench` worker — NCCL backend, tensors on ``cuda:LOCAL_RANK``, CUDA-event timing,
loops of back-to-back collectives lasting >= ``--min-sample-ms`` per sample after a warm-up, randomised rounds —
on allreduce, allgather and broadcast at the calibration sizes (``--sizes``, default 8 B – 1 GiB, ×4) and at the
held-out geometric midpoints between them (:func:`seedance.real.calibrate.split_sizes`). Rank 0 then:

1. fits two numbers of the NCCL model (:mod:`seedance.models.cost.nccl`) to the calibration sizes only, by
   ``least_squares`` (soft-L1) on log(predicted / measured): ``eta``, a factor on the preset's bandwidth matrix
   (link efficiency, the constant the presets calibrate from published figures), and ``launch_us``, the host-side
   cost per call NCCL's tuner leaves out;
2. writes the calibrated topology (matrix form, with ``nccl: {launch_us}``) to ``--out`` — usable as
   ``seedance cost --topology FILE`` — and ``FILE.validation.json``: every measured row with the model's prediction,
   the median |model error| at held-out sizes (the headline) and at calibrated sizes, and the fitted values.

Without a GPU the same command runs on gloo and host timers (how the tests exercise it); the CUDA-event path has not
been run by this project (no GPU was available) — see the README.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

COLLECTIVES = ("allreduce", "allgather", "broadcast")
DEFAULT_SIZES = "8B:1GiB:4"


def fit_nccl(base, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Fit ``eta`` (bandwidth factor) and ``launch_us`` of the NCCL model on ``base`` to measured rows
    (``collective``, ``size_bytes``, ``median_s``)."""
    from scipy.optimize import least_squares

    sizes = np.array([r["size_bytes"] for r in rows], dtype=float)
    measured = np.array([r["median_s"] for r in rows], dtype=float)

    def residuals(params: np.ndarray) -> np.ndarray:
        topology = calibrated_topology(base, float(np.exp(params[0])), float(params[1]))
        from seedance.models.cost import collective_time

        predicted = np.array([collective_time(r["collective"], int(s), topology).time_s for r, s in zip(rows, sizes)])
        return np.log(predicted / measured)

    start = np.array([0.0, 7.0])
    fit = least_squares(residuals, start, bounds=([np.log(0.05), 0.0], [np.log(5.0), 1e4]), loss="soft_l1",
                        f_scale=0.05)
    return {"eta": float(np.exp(fit.x[0])), "launch_us": float(fit.x[1]),
            "median_abs_log_error": float(np.median(np.abs(residuals(fit.x))))}


def calibrated_topology(base, eta: float, launch_us: float, name: str | None = None):
    """``base`` with its bandwidth matrix scaled by ``eta`` and the NCCL launch overhead set (matrix form)."""
    from seedance.models.topology import from_matrix

    bandwidth = np.array(base.bandwidth_GBps, dtype=float) * eta
    np.fill_diagonal(bandwidth, 0.0)
    nccl = dict((base.meta or {}).get("nccl", {}) or {})
    nccl["launch_us"] = float(launch_us)
    if base.graph is not None:  # what the link graph told the model, kept explicit in the matrix form
        from seedance.models.cost.nccl import view_of

        view = view_of(base)
        nccl.setdefault("intra", view.intra)
        nccl.setdefault("nvls", view.nvls)
        nccl.setdefault("arch", view.arch)
    return from_matrix(bandwidth, base.latency_us, name=name or f"{base.name}-calibrated", hosts=base.host_of.tolist(),
                       device_kinds=list(base.device_kinds), meta={"nccl": nccl})


def report(base, raw: dict[str, Any], calibration_sizes: list[int], out: Path) -> dict[str, Any]:
    """Fit on the calibration sizes, predict every row, write the topology and its validation report."""
    from seedance.models.cost import collective_time
    from seedance.models.topology import load, to_dict
    from seedance.real.calibrate import summarise
    from seedance.validation import dumps_yaml

    rows = summarise(raw["collectives"])
    fitted = [r for r in rows if int(r["size_bytes"]) in set(calibration_sizes)]
    fit = fit_nccl(base, fitted)
    topology = calibrated_topology(base, fit["eta"], fit["launch_us"])
    table = []
    for r in rows:
        cost = collective_time(r["collective"], int(r["size_bytes"]), topology)
        table.append({"collective": r["collective"], "size_bytes": int(r["size_bytes"]),
                      "heldout": int(r["size_bytes"]) not in set(calibration_sizes), "measured_s": r["median_s"],
                      "measured_ci_s": [r["ci_low_s"], r["ci_high_s"]], "model_s": cost.time_s,
                      "model_rel_error": (cost.time_s - r["median_s"]) / r["median_s"],
                      "algorithm": cost.algorithm, "protocol": cost.protocol, "channels": cost.channels})

    def median_abs(keep) -> float | None:
        values = [abs(t["model_rel_error"]) for t in table if keep(t)]
        return float(np.median(values)) if values else None

    out.parent.mkdir(parents=True, exist_ok=True)
    document = to_dict(topology)
    document["description"] = (f"seedance.real.nccl_calibrate: {raw.get('backend')} on {base.name}; bandwidth x "
                               f"eta={fit['eta']:.4g}, NCCL launch {fit['launch_us']:.3g} us")
    out.write_text(dumps_yaml(document) if out.suffix in (".yaml", ".yml")
                   else json.dumps(document, indent=2) + "\n")
    load(str(out))
    result = {"backend": raw.get("backend"), "world_size": raw.get("world_size"), "base": base.name,
              "topology": str(out), "fit": fit, "rows": table,
              "median_abs_rel_error_heldout": median_abs(lambda t: t["heldout"] and t["size_bytes"] >= 1 << 20),
              "median_abs_rel_error_heldout_all": median_abs(lambda t: t["heldout"]),
              "median_abs_rel_error_calibrated": median_abs(lambda t: not t["heldout"])}
    Path(str(out) + ".validation.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _base_topology(preset: str | None, topology: str | None, world: int, local: int):
    from seedance.errors import SpecError
    from seedance.models.topology import load

    if topology:
        base = load(topology)
    else:
        nodes = max(1, world // max(1, local))
        base = load(preset or "dgx-a100", nodes=nodes)
    if base.num_devices != world:
        raise SpecError("--preset" if not topology else "--topology",
                        f"has {base.num_devices} devices but torchrun started {world} ranks",
                        "a cluster with one device per rank")
    return base


def main(argv: list[str] | None = None) -> int:
    from seedance.models.units import parse_size_range
    from seedance.real import microbench
    from seedance.real.calibrate import split_sizes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset the servers are (default dgx-a100)")
    parser.add_argument("--topology", default=None, help="or a topology file with one device per rank")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="calibration sizes START:END[:FACTOR]")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--min-sample-ms", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="calibrated topology file (.yaml or .json)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    base = _base_topology(args.preset, args.topology, world, local)  # every rank checks (same answer)
    calibration, held = split_sizes(parse_size_range(args.sizes, field="--sizes"), world)
    scratch = Path(tempfile.gettempdir()) / f"seedance-nccl-calibrate-{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}"
    scratch.mkdir(parents=True, exist_ok=True)
    plan = {"p2p": False, "collectives": list(COLLECTIVES), "sizes": sorted(set(calibration) | set(held)),
            "reps": args.reps, "warmups": args.warmups, "seed": args.seed, "min_sample_s": args.min_sample_ms / 1e3,
            "out": str(scratch / "bench.json")}
    microbench.worker(plan)
    if rank == 0:
        raw = json.loads((scratch / "bench.json").read_text())
        result = report(base, raw, calibration, Path(args.out))
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
