"""nccl-tests-shaped collective curves over torch.distributed, and the NCCL cost model fitted on three sizes.

Rules (NVIDIA nccl-tests, doc/PERFORMANCE.md; the cost model of :mod:`seedance.models.cost.nccl`):

* ``size`` is nccl-tests' size: the whole buffer (allreduce: the vector; allgather: the gathered output;
  reducescatter: the input). ``algbw = size / time``; ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for
  allreduce and ``(n-1)/n`` for allgather and reducescatter (1 for broadcast): the bandwidth a link would need,
  comparable across collectives and world sizes.
* Times come from :mod:`.microbench` (CUDA events and NCCL on GPUs, host timers and gloo on CPU): loops of
  back-to-back operations of at least ``min_sample_s`` after a barrier, the slowest rank's time, several rounds in a
  seeded random order; a row's time is the median over rounds.
* :func:`fit_three` fits the NCCL model's two free numbers (``eta``, a factor on the topology's bandwidths, and
  ``launch_us``) by :func:`seedance.real.nccl_calibrate.fit_nccl` on three sizes only, and reports the model's
  error at every other (held-out) size: the median |relative error| overall, per collective and at >= 1 MiB.
* :func:`base_topology` is the preset server the GPUs look like (by name: H100/H200 -> hgx-h100, A100 -> dgx-a100,
  else pcie-8gpu), cut to the first ``world`` GPUs when fewer than its eight are visible.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

CURVE_COLLECTIVES = ("allreduce", "allgather", "reducescatter")


def bus_factor(collective: str, world: int) -> float:
    n = max(1, int(world))
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def curves(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a :mod:`.microbench` result with nccl-tests' algbw and busbw (GB/s), by collective then size."""
    from seedance.real.calibrate import summarise

    world = int(raw["world_size"])
    rows = []
    for row in summarise(raw["collectives"]):
        size, t = int(row["size_bytes"]), float(row["median_s"])
        algbw = size / t / 1e9 if t > 0 else 0.0
        rows.append({**row, "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(row["collective"], world)})
    return sorted(rows, key=lambda r: (r["collective"], r["size_bytes"]))


def fit_sizes(sizes: list[int], count: int = 3) -> list[int]:
    """``count`` sizes spread evenly (in log) over ``sizes``, the ends excluded when there are enough of them."""
    ordered = sorted(set(int(s) for s in sizes))
    if len(ordered) <= count:
        return ordered
    inner = ordered[1:-1] if len(ordered) >= count + 2 else ordered
    picks = np.linspace(0, len(inner) - 1, count).round().astype(int)
    return [inner[i] for i in picks]


def fit_three(base: Any, rows: list[dict[str, Any]], sizes: list[int] | None = None) -> dict[str, Any]:
    """The NCCL model fitted on three sizes (``sizes``, or :func:`fit_sizes`), validated on the others."""
    from seedance.models.cost import collective_time
    from seedance.real.nccl_calibrate import calibrated_topology, fit_nccl

    chosen = sorted(sizes or fit_sizes([r["size_bytes"] for r in rows]))
    fit = fit_nccl(base, [r for r in rows if r["size_bytes"] in chosen])
    topology = calibrated_topology(base, fit["eta"], fit["launch_us"])
    table = []
    for r in rows:
        model = collective_time(r["collective"], int(r["size_bytes"]), topology)
        table.append({"collective": r["collective"], "size_bytes": int(r["size_bytes"]), "measured_s": r["median_s"],
                      "model_s": model.time_s, "rel_error": (model.time_s - r["median_s"]) / r["median_s"],
                      "heldout": r["size_bytes"] not in chosen, "algorithm": model.algorithm})

    def median_abs(keep) -> float | None:
        values = [abs(t["rel_error"]) for t in table if keep(t)]
        return float(np.median(values)) if values else None

    return {"fit_sizes": chosen, "eta": fit["eta"], "launch_us": fit["launch_us"], "rows": table,
            "median_abs_rel_error_heldout": median_abs(lambda t: t["heldout"]),
            "median_abs_rel_error_heldout_1MiB": median_abs(lambda t: t["heldout"] and t["size_bytes"] >= 1 << 20),
            "median_abs_rel_error_fitted": median_abs(lambda t: not t["heldout"]),
            "by_collective": {c: median_abs(lambda t, c=c: t["heldout"] and t["collective"] == c)
                              for c in sorted({t["collective"] for t in table})}}


def preset_for(gpu_name: str | None) -> str:
    name = (gpu_name or "").upper()
    if "H100" in name or "H200" in name or "H800" in name or "H20" in name:
        return "hgx-h100"
    if "A100" in name or "A800" in name:
        return "dgx-a100"
    return "pcie-8gpu"


def base_topology(world: int, gpu_name: str | None = None) -> Any:
    """The preset server for ``gpu_name`` with its first ``world`` GPUs (matrix form keeps the NCCL view)."""
    from seedance.models.cost.nccl import view_of
    from seedance.models.topology import from_matrix, load

    nodes = max(1, -(-world // 8))
    base = load(preset_for(gpu_name), nodes=nodes)
    if base.num_devices == world:
        return base
    view = view_of(base)
    nccl = {"intra": view.intra, "nvls": view.nvls, "arch": view.arch}
    bandwidth = np.array(base.bandwidth_GBps, dtype=float)[:world, :world]
    latency = np.array(base.latency_us, dtype=float)[:world, :world]
    return from_matrix(bandwidth, latency, name=f"{base.name}-first{world}", hosts=base.host_of[:world].tolist(),
                       device_kinds=list(base.device_kinds)[:world], meta={"nccl": nccl})


def _nvidia_smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def inventory() -> dict[str, Any]:
    """The GPUs, CUDA, NCCL and links this process sees (``nvidia-smi topo -m`` when present)."""
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                             "cuda_runtime": torch.version.cuda, "gpus": []}
    if facts["cuda_available"]:  # pragma: no cover - needs a GPU
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            facts["gpus"].append({"index": i, "name": p.name, "memory_GiB": round(p.total_memory / 2**30, 1),
                                  "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count})
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception as err:  # noqa: BLE001 - reported, not fatal
            facts["nccl"] = f"unknown ({err})"
    query = _nvidia_smi("--query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current",
                        "--format=csv,noheader")
    facts["nvidia_smi"] = query.strip().splitlines() if query else None
    topo = _nvidia_smi("topo", "-m")
    facts["topo_matrix"] = topo.rstrip() if topo else None
    nvlink = _nvidia_smi("nvlink", "--status")
    facts["nvlink_status"] = nvlink.rstrip()[:4000] if nvlink else None
    return facts


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
