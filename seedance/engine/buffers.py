"""Device buffers by handle: one node's named arrays, held by its runtime, with use-after-free detection.

The table stores whatever arrays its backend makes (numpy in the simulator, torch tensors on the node's device in
the real backend); the engine does the bookkeeping so both runtimes reject the same mistakes with the same words:
a handle created twice, used or freed after :class:`FreeBuffer` (or never created). ``live`` is the number of
buffers held; ``created`` / ``freed`` count over the node's life (a leak shows as ``live`` growing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class ArrayBackend:
    """How a runtime makes and reads arrays."""

    name: str
    alloc: Callable[[tuple[int, ...], str, float, Any], Any]  # (shape, dtype, fill, data|None) -> array
    to_numpy: Callable[[Any], np.ndarray]
    from_numpy: Callable[[np.ndarray], Any]


def _np_alloc(shape: tuple[int, ...], dtype: str, fill: float, data: Any) -> np.ndarray:
    if data is not None:
        return np.array(data, copy=True)
    return np.full(shape, fill, dtype=np.dtype(dtype))


NUMPY = ArrayBackend("numpy", _np_alloc, lambda a: np.array(a, copy=True), lambda a: np.array(a, copy=True))


class BufferError(Exception):
    """A handle misused; the text names the handle and what happened to it."""


class BufferTable:
    def __init__(self, backend: ArrayBackend) -> None:
        self.backend = backend
        self.arrays: dict[str, Any] = {}
        self._freed: set[str] = set()
        self.created = 0
        self.freed = 0

    @property
    def live(self) -> int:
        return len(self.arrays)

    def create(self, handle: str, shape: tuple[int, ...], dtype: str, fill: float, data: Any) -> None:
        if not isinstance(handle, str) or not handle:
            raise BufferError(f"buffer handle must be a non-empty string, got {handle!r}")
        if handle in self.arrays:
            raise BufferError(f"buffer {handle!r} created twice (free it first)")
        try:
            np.dtype(dtype)
        except TypeError:
            raise BufferError(f"buffer {handle!r}: unknown dtype {dtype!r}") from None
        self.arrays[handle] = self.backend.alloc(tuple(int(d) for d in shape), dtype, float(fill), data)
        self._freed.discard(handle)
        self.created += 1

    def put(self, handle: str, array: np.ndarray) -> None:
        """Store ``array`` under ``handle`` (created if absent, replaced otherwise)."""
        if handle not in self.arrays:
            self.created += 1
            self._freed.discard(handle)
        self.arrays[handle] = self.backend.from_numpy(array)

    def get(self, handle: str) -> Any:
        array = self.arrays.get(handle)
        if array is None:
            raise BufferError(self._missing(handle, "used"))
        return array

    def free(self, handle: str) -> None:
        if handle not in self.arrays:
            raise BufferError(self._missing(handle, "freed"))
        del self.arrays[handle]
        self._freed.add(handle)
        self.freed += 1

    def _missing(self, handle: str, verb: str) -> str:
        if handle in self._freed:
            return f"buffer {handle!r} {verb} after it was freed"
        return f"buffer {handle!r} {verb} but never created"

    def snapshot(self, handles: tuple[str, ...]) -> dict[str, np.ndarray]:
        return {h: self.backend.to_numpy(self.get(h)) for h in handles}
