"""Published nccl-tests curves (``tests/data/nccl``) and the model's error against every row.

``curves()`` reads ``curves.yaml`` in the data directory: each curve names its nccl-tests output file, the
collective, and the cluster it ran on (a preset, or a matrix built from per-GPU figures), plus any
``Topology.meta["nccl"]`` overrides (calibrated values are marked there). ``compare(curve)`` predicts every row and
returns measured and predicted times side by side; ``summary`` reduces that to the figures the targets are stated in:
median |relative error| over the curve, the largest ratio either way, and the largest error at ≥ 256 MiB.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from seedance.errors import SpecError

DATA_DIR = Path(__file__).resolve().parents[3] / "tests" / "data" / "nccl"
LARGE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Curve:
    id: str
    collective: str
    topology: Any
    rows: pd.DataFrame
    hardware: str
    targets: bool
    file: str


def _matrix_topology(spec: dict, nccl: dict, name: str):
    from seedance.models.topology import from_matrix
    from seedance.validation import MAX_DEVICES

    try:
        g, nodes = int(spec["gpus_per_node"]), int(spec["nodes"])
        intra, inter = float(spec["intra_GBps"]), float(spec["inter_GBps_per_gpu"])
    except (KeyError, TypeError, ValueError) as err:
        raise SpecError(f"{name}.topology.matrix", f"is incomplete or not numeric ({err})",
                        "gpus_per_node, nodes, intra_GBps, inter_GBps_per_gpu") from None
    n = g * nodes
    if not 0 < n <= MAX_DEVICES or g < 1:
        raise SpecError(f"{name}.topology.matrix", f"has {g} x {nodes} devices", f"1 to {MAX_DEVICES} in all")
    hosts = np.repeat(np.arange(nodes), g)
    same = hosts[:, None] == hosts[None, :]
    bandwidth = np.where(same, intra, inter)
    latency = np.where(same, 0.6, 2.7)  # NCCL's LL step latencies for NVLink and network hops (tuning.cc)
    np.fill_diagonal(bandwidth, 0.0)
    np.fill_diagonal(latency, 0.0)
    return from_matrix(bandwidth, latency_us=latency, hosts=hosts.tolist(), device_kinds=str(spec.get("kinds", "GPU")),
                       name=name, meta={"nccl": dict(nccl)})


def _topology(entry: dict, name: str):
    from seedance.models.topology import load
    from seedance.validation import integer

    spec, nccl = entry.get("topology") or {}, entry.get("nccl") or {}
    if not isinstance(spec, dict) or not isinstance(nccl, dict):
        raise SpecError(f"{name}.topology", "topology or nccl is not a mapping", "{preset, nodes} or {matrix: {...}}")
    if "preset" in spec:
        base = load(spec["preset"], nodes=integer(f"{name}.topology.nodes", spec.get("nodes", 1), lo=1))
        meta = dict(base.meta)
        meta["nccl"] = {**dict(meta.get("nccl", {}) or {}), **nccl}
        return dataclasses.replace(base, meta=meta)
    if "matrix" in spec:
        return _matrix_topology(spec["matrix"], nccl, name)
    raise SpecError(f"{name}.topology", "names neither a preset nor a matrix", "{preset, nodes} or {matrix: {...}}")


def curves(directory: str | Path | None = None) -> list[Curve]:
    """Every curve of ``curves.yaml`` in ``directory`` (default: the repository's tests/data/nccl); a malformed index
    or output file is one SpecError naming it."""
    from seedance.models.topology import parse_nccl_tests
    from seedance.validation import load_file, read_text

    root = Path(directory) if directory is not None else DATA_DIR
    index = root / "curves.yaml"
    if not index.is_file():
        raise SpecError("data", f"{index} does not exist", "a directory with curves.yaml (tests/data/nccl)")
    doc = load_file(index, "--data")
    entries = doc.get("curves") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError(f"{index}: curves", "is missing, empty or not a list of mappings",
                        "curves: [{id, file, collective, topology}, ...]")
    out = []
    for entry in entries:
        name = str(entry.get("id"))
        if not isinstance(entry.get("file"), str) or not isinstance(entry.get("collective"), str):
            raise SpecError(f"{index}: {name}", "has no file or collective name", "file and collective as strings")
        text = read_text(root / entry["file"], f"{index}: {name}.file", "the text output of an nccl-tests binary")
        try:
            rows = parse_nccl_tests(text)
        except SpecError as err:
            raise SpecError(f"{root / entry['file']}: {err.field}", err.problem, err.valid) from None
        out.append(Curve(
            id=name, collective=entry["collective"], topology=_topology(entry, name), rows=rows,
            hardware=str(entry.get("hardware", "")), targets=bool(entry.get("targets", True)), file=entry["file"],
        ))
    return out


def compare(curve: Curve, model: str = "nccl") -> pd.DataFrame:
    """Measured vs predicted out-of-place time for every row of ``curve``."""
    from seedance.models.cost import collective_time

    records = []
    for size, measured in zip(curve.rows["size_bytes"], curve.rows["oop_time_us"]):
        cost = collective_time(curve.collective, int(size), curve.topology, model=model)
        predicted = cost.time_s * 1e6
        records.append({
            "size_bytes": int(size), "measured_us": float(measured), "predicted_us": predicted,
            "ratio": predicted / float(measured), "algorithm": cost.algorithm,
            "protocol": cost.protocol, "channels": cost.channels,
        })
    return pd.DataFrame.from_records(records)


def summary(table: pd.DataFrame) -> dict[str, float]:
    """median |error|, max ratio either way, max |error| at >= 256 MiB (NaN when the curve stops below)."""
    ratio = table["ratio"].to_numpy(dtype=float)
    error = np.abs(ratio - 1.0)
    large = table["size_bytes"].to_numpy() >= LARGE_BYTES
    return {
        "median_abs_rel_error": float(np.median(error)),
        "max_ratio": float(np.max(np.maximum(ratio, 1.0 / ratio))),
        "max_abs_rel_error_ge_256MiB": float(np.max(error[large])) if large.any() else float("nan"),
        "rows": int(len(table)),
    }
