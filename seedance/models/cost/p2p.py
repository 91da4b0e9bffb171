"""The seed's point-to-point cost (SEED §2.4), exactly, with its inputs validated.

``comm_cost(grad_shape, src, dst, B) = latency_s + prod(grad_shape) · dtype_bytes / (B[src][dst] · 1e9)`` seconds:
the transfer time of one gradient of shape ``grad_shape`` (FP32 by default) from device ``src`` to ``dst`` over a
bandwidth matrix ``B`` in GB/s. The seed writes ``grad_shape[0] * grad_shape[1] * 4``; any rank is accepted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from seedance.errors import SpecError


def comm_cost(
    grad_shape: Sequence[int], src: int, dst: int, bandwidth_matrix: Any, dtype_bytes: int = 4, latency_s: float = 0.0
) -> float:
    """Seconds to move a ``grad_shape`` tensor of ``dtype_bytes``-byte elements from ``src`` to ``dst``.

    >>> round(comm_cost((1024, 1024), 0, 1, [[0, 300], [300, 0]]) * 1e6, 3)  # 4 MiB over 300 GB/s, in µs
    13.981
    """
    matrix = np.asarray(bandwidth_matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise SpecError("bandwidth_matrix", f"has shape {matrix.shape}", "a square n×n matrix of GB/s")
    n = matrix.shape[0]
    dims = tuple(grad_shape)
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0 for d in dims):
        raise SpecError("grad_shape", f"{grad_shape!r} is not a shape", "one or more positive integer dimensions")
    for name, index in (("src", src), ("dst", dst)):
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < n:
            raise SpecError(name, f"{index!r} is not a device", f"an integer in [0, {n})")
    if src == dst:
        raise SpecError("dst", f"equals src ({src})", "a different device: a device does not send to itself")
    if isinstance(dtype_bytes, bool) or not isinstance(dtype_bytes, (int, np.integer)) or dtype_bytes <= 0:
        raise SpecError("dtype_bytes", f"{dtype_bytes!r}", "a positive integer (4 for FP32, 2 for FP16)")
    if not (math.isfinite(latency_s) and latency_s >= 0):
        raise SpecError("latency_s", f"{latency_s!r}", "finite seconds >= 0")
    bandwidth = float(matrix[src, dst])
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise SpecError("bandwidth_matrix", f"B[{src}][{dst}] = {bandwidth}", "finite GB/s > 0")
    return latency_s + math.prod(int(d) for d in dims) * int(dtype_bytes) / (bandwidth * 1e9)
