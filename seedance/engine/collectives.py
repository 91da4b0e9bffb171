"""The collective result rules, shared by both runtimes: which starts are valid, and what every member gets.

Rules (NCCL's semantics for the ops it has; the simulator computes results with :func:`results`, the real backend
runs torch.distributed and its results are checked against :func:`results` by the conformance suite):

* Ops: ``allreduce`` (sum), ``reducescatter`` (sum, then member k of the group gets chunk k of
  ``numpy.array_split(sum, n, axis=0)``), ``allgather`` (the payloads stacked on a new axis 0, in group order:
  shape ``(n, *shape)``), ``broadcast`` (the root's payload), ``reduce`` (the sum at the root, ``None`` elsewhere),
  ``barrier`` (``None``; payloads are ignored). ``root`` defaults to ``group[0]``.
* Results keep the payload's dtype (an int32 sum is int32) and shape; payloads are numpy arrays of one of
  :data:`DTYPES`, at most :data:`MAX_NDIM` dimensions. Float sums may differ between runtimes in the last bits
  (the reduction order differs); integer-valued floats below 2**24 are exact in both.
* A start is misused when the op is unknown, the node is not in the group, the group repeats a member, the root is
  not a member, or the payload is not an array of a supported dtype: the collective fails at once for that node with
  ``CollectiveDone(ok=False, error="misuse: ...")`` naming the problem (:func:`check_start`). Members that disagree
  on op, group, root, dtype or shape fail the collective for every member with ``"misuse: ..."``
  (:func:`check_agreement`).
* ``timeout_s=None`` means :data:`DEFAULT_TIMEOUT_S` in both runtimes, counted from the member's own start.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

OPS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "barrier")
DTYPES = ("float16", "float32", "float64", "int8", "uint8", "int32", "int64")
MAX_NDIM = 8
DEFAULT_TIMEOUT_S = 30.0
_DTYPE_NAMES = {np.dtype(name): name for name in DTYPES}  # dtype -> name (``dtype.name`` is computed per call)


@dataclass(frozen=True, slots=True)
class Meta:
    """What a member declares when it starts a collective; every member's must agree."""

    op: str
    group: tuple[int, ...]
    root: int
    dtype: str
    shape: tuple[int, ...]

    def encode(self) -> list[int]:
        """A fixed-length int64 vector (for an allgather of metadata over a real process group)."""
        shape = list(self.shape) + [-1] * (MAX_NDIM - len(self.shape))
        group_hash = zlib.crc32(repr(self.group).encode())
        return [OPS.index(self.op), self.group.index(self.root), DTYPES.index(self.dtype) if self.dtype in DTYPES
                else -1, len(self.shape), group_hash, *shape]

    @classmethod
    def decode(cls, row: Sequence[int], group: tuple[int, ...]) -> tuple[str, int, str, tuple[int, ...], int]:
        op, root_pos, dtype, ndim, group_hash = (int(x) for x in row[:5])
        shape = tuple(int(x) for x in row[5:5 + ndim])
        return (OPS[op], group[root_pos] if 0 <= root_pos < len(group) else -1, DTYPES[dtype] if dtype >= 0 else "?",
                shape, group_hash)


ENCODED_LEN = 5 + MAX_NDIM


def resolve_timeout(timeout_s: float | None) -> float:
    return DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)


@functools.lru_cache(maxsize=64)
def _members(group: tuple[int, ...]) -> tuple[tuple[int, ...], frozenset[int]]:
    """One shared copy of a group and its members as a set: every member of a large group starts with an equal group
    (its own tuple), and gets the same objects back, so later checks compare groups by identity."""
    return group, frozenset(group)


_SEEN: dict[int, tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]] = {}  # id(group) -> (group, shared, set)
_SEEN_MAX = 4096


def _shared(group: tuple[int, ...]) -> tuple[tuple[int, ...], frozenset[int]]:
    """:func:`_members` of ``group``, found by the tuple's identity first: a node starts each collective with the same
    view object, so a large group is hashed and compared once per node and view, not once per start. The entry holds
    the tuple itself, so its id is not reused while it is cached."""
    entry = _SEEN.get(id(group))
    if entry is not None and entry[0] is group:
        return entry[1], entry[2]
    shared, members = _members(group)
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN[id(group)] = (group, shared, members)
    return shared, members


def check_start(node_id: int, op: str, group: Sequence[int], root: int | None,
                payload: Any) -> tuple[Meta | None, str | None]:
    """Validate one member's start; its :class:`Meta` (whose group is shared by every member that declared an equal
    one while it stays cached), or an error text (``"misuse: ..."``)."""
    if op not in OPS:
        return None, f"misuse: unknown collective {op!r}; valid: {', '.join(OPS)}"
    if type(group) is not tuple:
        group = tuple(group)
    if not group:
        return None, "misuse: empty group"
    group, members = _shared(group)
    if len(members) != len(group):
        return None, f"misuse: group {group} repeats a member"
    if node_id not in members:
        return None, f"misuse: node {node_id} is not a member of group {group}"
    at = group[0] if root is None else root
    if at not in members:
        return None, f"misuse: root {at} is not a member of group {group}"
    if op == "barrier":
        return Meta(op, group, at, "float32", ()), None
    if not isinstance(payload, np.ndarray):
        return None, f"misuse: {op} payload must be a numpy array (or a buffer handle), got {type(payload).__name__}"
    dtype = _DTYPE_NAMES.get(payload.dtype)
    if dtype is None:
        return None, f"misuse: {op} payload dtype {payload.dtype.name} unsupported; valid: {', '.join(DTYPES)}"
    if payload.ndim > MAX_NDIM:
        return None, f"misuse: {op} payload has {payload.ndim} dimensions; at most {MAX_NDIM}"
    if op == "reducescatter" and payload.ndim == 0:
        return None, "misuse: reducescatter needs a payload with at least one dimension (it splits axis 0)"
    return Meta(op, group, at, dtype, payload.shape), None


def check_agreement(metas: Mapping[int, Meta]) -> str | None:
    """None when every member declared the same op, group, root, dtype and shape; else the first disagreement."""
    members = sorted(metas)
    first = metas[members[0]]
    for m in members[1:]:
        other = metas[m]
        for name in ("op", "group", "root", "dtype", "shape"):
            a, b = getattr(first, name), getattr(other, name)
            if name in ("dtype", "shape") and first.op == "barrier":
                continue
            if a != b:
                return (f"misuse: members disagree on {name}: node {members[0]} has {a!r}, node {m} has {b!r}")
    return None


def results(meta: Meta, payloads: Mapping[int, Any]) -> dict[int, Any]:
    """Every member's result of the collective described by ``meta`` over ``payloads`` (member -> array)."""
    op, group = meta.op, meta.group
    if op == "barrier":
        return dict.fromkeys(group)
    if op == "broadcast":
        value = np.asarray(payloads[meta.root])
        return {m: value.copy() for m in group}
    ordered = [np.asarray(payloads[m]) for m in group]
    if op == "allgather":
        gathered = np.stack(ordered)
        return {m: gathered.copy() for m in group}
    dtype = ordered[0].dtype
    total = ordered[0].copy() if len(ordered) == 1 else np.add.reduce(np.stack(ordered), axis=0, dtype=dtype)
    total = np.asarray(total, dtype=dtype)
    if op == "allreduce":
        return {m: total.copy() for m in group}
    if op == "reduce":
        return {m: (total.copy() if m == meta.root else None) for m in group}
    chunks = np.array_split(total, len(group), axis=0)  # reducescatter
    return {m: chunks[k].copy() for k, m in enumerate(group)}


def result_shape(meta: Meta, member: int) -> tuple[int, ...] | None:
    """The shape of ``member``'s result (None when it gets no array)."""
    if meta.op == "barrier" or (meta.op == "reduce" and member != meta.root):
        return None
    if meta.op == "allgather":
        return (len(meta.group), *meta.shape)
    if meta.op == "reducescatter":
        n, k = len(meta.group), meta.group.index(member)
        rows = meta.shape[0] // n + (1 if k < meta.shape[0] % n else 0)
        return (rows, *meta.shape[1:])
    return meta.shape
