"""Devices for the real backend: which device a node's buffers, work and collectives use, and torch buffers.

Rules (torchrun's environment contract; PyTorch CUDA semantics):

* Backend: NCCL when ``torch.cuda.is_available()``, gloo otherwise. Device: ``cuda:<LOCAL_RANK>`` with NCCL (each
  rank of a server on its own GPU; LOCAL_RANK modulo the visible GPUs, so a one-GPU machine runs several ranks on
  it), the CPU with gloo.
* Nothing imports torch until a node first creates a buffer, starts work or a collective: a node that uses none
  starts without it (a restart costs a fork, not a torch import).
* Buffers are torch tensors on the node's device; ``host(x)`` is ``x.detach().cpu().numpy()``, which for a CUDA
  tensor returns only once the device-to-host copy has completed — a digest always reads finished data.
* Work runs on the node's work thread; on CUDA inside a dedicated stream of the node's device, synchronised before
  the result is reported. ``params["duration_s"]`` keeps the worker busy that long (host work competing with the
  node, e.g. a heartbeat starved by a data loader).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from seedance.engine.buffers import ArrayBackend

_TORCH_DTYPES = ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


def default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def node_device(backend: str | None = None) -> str:
    """``cuda:<LOCAL_RANK mod GPUs>`` under NCCL, else ``cpu``."""
    backend = backend or default_backend()
    if backend != "nccl":
        return "cpu"
    import torch

    count = max(1, torch.cuda.device_count())
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) % count}"


def _torch_dtype(name: str) -> Any:
    import torch

    if name not in _TORCH_DTYPES:
        raise ValueError(f"dtype {name!r} unsupported for device buffers; valid: {', '.join(_TORCH_DTYPES)}")
    return getattr(torch, name)


def torch_backend(device: str | Callable[[], str]) -> ArrayBackend:
    """Torch tensors on ``device`` (a name, or a function giving it on first use)."""
    resolved: list[str] = []

    def where() -> str:
        if not resolved:
            resolved.append(device() if callable(device) else device)
        return resolved[0]

    def alloc(shape: tuple[int, ...], dtype: str, fill: float, data: Any) -> Any:
        import torch

        if data is not None:
            return torch.from_numpy(np.array(data, copy=True)).to(where())
        return torch.full(shape, fill, dtype=_torch_dtype(dtype), device=where())

    def to_numpy(tensor: Any) -> np.ndarray:
        return tensor.detach().cpu().numpy().copy()

    def from_numpy(array: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.array(array, copy=True)).to(where())

    return ArrayBackend("torch", alloc, to_numpy, from_numpy)


def run_on_device(device: str, fn: Callable[[Callable[[Any], np.ndarray]], Any], effect: Any) -> Any:
    """Run ``fn(host)`` for a work effect on ``device`` (a CUDA stream there), honouring ``duration_s``."""
    extra = effect.params.get("duration_s", 0.0) if effect.params else 0.0
    start = time.monotonic()

    def host(tensor: Any) -> np.ndarray:
        return tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)

    if device.startswith("cuda"):  # pragma: no cover - needs a GPU
        import torch

        stream = torch.cuda.Stream(device=device)
        with torch.cuda.stream(stream):
            result = fn(host)
        stream.synchronize()
    else:
        result = fn(host)
    if isinstance(extra, (int, float)) and not isinstance(extra, bool) and extra > 0:
        left = float(extra) - (time.monotonic() - start)
        if left > 0:
            time.sleep(left)
    return result
