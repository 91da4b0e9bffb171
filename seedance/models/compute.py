"""Compute model: how long a device takes for work of a given size (FLOPs and bytes moved), by device kind.

A roofline (Williams, Waterman & Patterson, CACM 2009): ``time = launch + max(flops / (peak · eff_f),
bytes / (mem_bw · eff_m))``. Peaks are the vendors' dense tensor-core figures for 16-bit floating point (no
sparsity) and the HBM bandwidth of the SXM parts; the efficiencies are the fraction large GEMMs and streaming kernels
reach in practice (about 0.7 and 0.8; e.g. NVIDIA's "Deep Learning Performance" guide reports 70–80 % of peak for
large well-shaped GEMMs). Sources:

* A100 SXM4 80 GB: 312 TFLOP/s BF16/FP16 dense, 2,039 GB/s (NVIDIA A100 datasheet, 2021).
* H100 SXM5: 989 TFLOP/s BF16/FP16 dense, 3,350 GB/s (NVIDIA H100 datasheet, 2023).
* H200 SXM: 989 TFLOP/s BF16 dense, 4,800 GB/s (NVIDIA H200 datasheet, 2024).
* V100 SXM2: 125 TFLOP/s FP16 tensor, 900 GB/s (NVIDIA V100 datasheet, 2020).
* CPU (a host core doing the work; the unknown-device fallback): 0.1 TFLOP/s, 20 GB/s — an order of magnitude for
  one AVX2 core and its share of DRAM bandwidth, used where no GPU is modelled.

Kernel launch overhead: ~5 µs per op (CUDA launch latency is 2–10 µs; NVIDIA CUDA C++ Best Practices Guide).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeviceSpec:
    kind: str
    peak_tflops: float
    mem_bandwidth_GBps: float
    flop_efficiency: float = 0.7
    mem_efficiency: float = 0.8
    launch_s: float = 5e-6


DEVICES: dict[str, DeviceSpec] = {
    "A100": DeviceSpec("A100", 312.0, 2039.0),
    "H100": DeviceSpec("H100", 989.0, 3350.0),
    "H200": DeviceSpec("H200", 989.0, 4800.0),
    "V100": DeviceSpec("V100", 125.0, 900.0),
    "CPU": DeviceSpec("CPU", 0.1, 20.0, 1.0, 1.0, 1e-6),
}


@functools.lru_cache(maxsize=64)
def device_spec(kind: str | None) -> DeviceSpec:
    """The spec of a device kind (case-insensitive prefix match: "A100-80GB" is an A100); CPU when unknown."""
    if kind:
        upper = str(kind).upper()
        for name, spec in DEVICES.items():
            if upper.startswith(name):
                return spec
    return DEVICES["CPU"]


def work_time_s(kind: str | None, flops: float, bytes_moved: float) -> float:
    """Roofline time of one op on a device of ``kind``; 0 for empty work."""
    if flops <= 0 and bytes_moved <= 0:
        return 0.0
    spec = device_spec(kind)
    compute = flops / (spec.peak_tflops * 1e12 * spec.flop_efficiency)
    memory = bytes_moved / (spec.mem_bandwidth_GBps * 1e9 * spec.mem_efficiency)
    return spec.launch_s + max(compute, memory)


# ----------------------------------------------------------------------------------------- a training step's size
_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_params(text: Any, field: str = "--model-size") -> float:
    """A parameter count: ``7B``, ``1.3B``, ``350M``, ``70b``, or a plain number (``7e9``); 1e3 .. 1e13."""
    from seedance.errors import SpecError

    valid = "a parameter count such as 7B, 1.3B, 350M or 7e9 (1e3 .. 1e13)"
    raw = str(text).strip()
    scale = _SUFFIXES.get(raw[-1:].upper(), 1.0) if raw else 1.0
    digits = raw[:-1] if scale != 1.0 else raw
    try:
        value = float(digits) * scale
    except ValueError:
        raise SpecError(field, f"{text!r} is not a parameter count", valid) from None
    if not math.isfinite(value) or not 1e3 <= value <= 1e13:
        raise SpecError(field, f"{text!r} is out of range", valid)
    return value


def training_step(params: float, tokens_per_step: int, bytes_per_param: int = 2) -> tuple[float, int]:
    """(FLOPs of one data-parallel rank's step, bytes of its gradient) for a dense transformer of ``params``
    parameters on ``tokens_per_step`` tokens per rank.

    FLOPs ≈ 6·N·D: 2N per token forward and 4N backward (Kaplan et al., "Scaling Laws for Neural Language Models",
    2020, §2.1, C ≈ 6NBS, attention's context-dependent term neglected). The gradient is one element per parameter
    of ``bytes_per_param`` bytes (2: bf16/fp16 gradients, as in mixed-precision data parallelism), so a 7B model's
    allreduce moves 14 GB.
    """
    return 6.0 * float(params) * int(tokens_per_step), int(round(float(params) * int(bytes_per_param)))
