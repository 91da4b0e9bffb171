"""The compute model checked on a real device: matrix products and streaming copies, measured and predicted.

:mod:`seedance.models.compute` prices a device's work with a roofline whose peaks come from the vendors' datasheets
and whose efficiencies (0.7 of peak FLOP/s, 0.8 of peak memory bandwidth) are rules of thumb; nothing in it is
fitted to a machine. This module times two kinds of work on the device this process sees, and sets each measured
time beside the model's prediction for the same FLOPs and bytes:

* ``gemm``: a square matrix product ``C = A @ B`` of side ``n`` in the device's 16-bit type (bf16 on a GPU,
  float32 on a CPU): ``2 n^3`` FLOPs, ``3 n^2`` elements moved at least once;
* ``copy``: ``dst.copy_(src)`` of ``b`` bytes: ``2 b`` bytes moved (read and written), no FLOPs.

Every row is held out by construction (the model never saw it), so the median relative error is a validation of
the model's datasheet figures and efficiency constants on this device, not a fit. Timing uses CUDA events around a
batch of repetitions after warm-ups on a GPU, ``time.perf_counter`` on a CPU; each size reports the median of
``reps`` batches.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

GPU_GEMM_SIDES = (1024, 2048, 4096, 8192, 16384)
GPU_COPY_BYTES = tuple(1 << k for k in range(20, 33, 3))  # 1 MiB .. 4 GiB
CPU_GEMM_SIDES = (64, 128, 256)
CPU_COPY_BYTES = (1 << 16, 1 << 20, 1 << 22)


def device_kind(name: str | None) -> str:
    """The compute model's kind for a device name as torch reports it (``NVIDIA H200`` -> ``H200``; a CPU: CPU)."""
    if not name:
        return "CPU"
    words = [w for w in str(name).upper().replace("-", " ").split() if w not in ("NVIDIA", "TESLA")]
    return words[0] if words else "CPU"


def _timer(device: Any) -> Any:
    """A function timing ``fn`` run ``inner`` times on ``device``: seconds per run."""
    import torch

    if device.type == "cuda":  # pragma: no cover - needs a GPU
        def timed(fn: Any, inner: int) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / inner
        return timed

    def timed_cpu(fn: Any, inner: int) -> float:
        began = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - began) / inner
    return timed_cpu


def _measure(fn: Any, timed: Any, reps: int, min_batch_s: float) -> float:
    """Median seconds per call of ``fn``: two warm-ups, then ``reps`` batches each long enough to time."""
    fn()
    once = max(timed(fn, 1), 1e-7)
    inner = max(1, min(1000, int(min_batch_s / once)))
    return statistics.median(timed(fn, inner) for _ in range(reps))


def measure(device_name: str = "cpu", *, gemm_sides: tuple[int, ...] | None = None,
            copy_bytes: tuple[int, ...] | None = None, reps: int = 5, min_batch_s: float = 0.02) -> dict[str, Any]:
    """Time the GEMMs and copies on ``device_name`` (``cuda:0``, ``cpu``) and price each with the compute model."""
    import torch

    from seedance.models.compute import device_spec, work_time_s

    device = torch.device(device_name)
    gpu = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if gpu else "CPU"  # pragma: no branch
    kind = device_kind(name if gpu else None)
    dtype = torch.bfloat16 if gpu else torch.float32
    width = torch.finfo(dtype).bits // 8
    timed = _timer(device)
    rows: list[dict[str, Any]] = []
    for n in gemm_sides or (GPU_GEMM_SIDES if gpu else CPU_GEMM_SIDES):
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = _measure(lambda: torch.matmul(a, b, out=out), timed, reps, min_batch_s)
        rows.append(_row("gemm", n, 2.0 * n ** 3, 3.0 * n * n * width, seconds, kind, work_time_s))
        del a, b, out
    for size in copy_bytes or (GPU_COPY_BYTES if gpu else CPU_COPY_BYTES):
        src = torch.empty(size, device=device, dtype=torch.uint8).random_(0, 255)
        dst = torch.empty_like(src)
        seconds = _measure(lambda: dst.copy_(src), timed, reps, min_batch_s)
        rows.append(_row("copy", size, 0.0, 2.0 * size, seconds, kind, work_time_s))
        del src, dst
    if gpu:  # pragma: no cover - needs a GPU
        torch.cuda.empty_cache()
    errors = [abs(r["model_s"] / r["measured_s"] - 1.0) for r in rows]
    spec = device_spec(kind)
    return {"device": name, "kind": kind, "dtype": str(dtype).replace("torch.", ""), "rows": rows,
            "model": {"peak_tflops": spec.peak_tflops, "mem_bandwidth_GBps": spec.mem_bandwidth_GBps,
                      "flop_efficiency": spec.flop_efficiency, "mem_efficiency": spec.mem_efficiency,
                      "known_kind": spec.kind == kind},
            "median_abs_rel_error": statistics.median(errors) if errors else None,
            "by_op": {op: statistics.median(abs(r["model_s"] / r["measured_s"] - 1.0) for r in rows
                                            if r["op"] == op) for op in ("gemm", "copy")
                      if any(r["op"] == op for r in rows)},
            "note": "held out: the model's peaks are datasheet figures and its efficiencies fixed constants; "
                    "nothing was fitted to these rows"}


def _row(op: str, size: int, flops: float, moved: float, seconds: float, kind: str, work_time_s: Any) -> dict:
    model = work_time_s(kind, flops, moved)
    return {"op": op, "size": size, "flops": flops, "bytes": moved, "measured_s": seconds, "model_s": model,
            "achieved_tflops": flops / seconds / 1e12, "achieved_GBps": moved / seconds / 1e9,
            "model_over_measured": model / seconds}
