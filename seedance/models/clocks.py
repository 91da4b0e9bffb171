"""Vector clocks (Fidge 1988, Mattern 1989) with the field report's semantics (§2.2–2.3), in two forms.

Node ``i`` keeps ``V[0..N-1]``; ``V[i]`` is the highest event of node ``i`` it knows of.

* ``update_vc(vc, peer)`` — a local event of ``peer``: its entry is created at 0 if missing, then incremented.
* ``merge(local, remote, own)`` — on receive: ``V[j] = max(V[j], remote[j])`` for every ``j``, then ``V[own] += 1``.
* ``join(a, b)`` — the componentwise maximum alone (the least upper bound; what a replica that counts only *writes*
  as events uses on receive, see :mod:`seedance.models.protocols.causal`).
* ``compare(v1, v2)`` — ``"before"`` (v1 < v2: v1 ≤ v2 componentwise and v1 ≠ v2), ``"after"``, ``"equal"`` or
  ``"concurrent"`` (neither ≤ the other). ``is_concurrent(v1, v2)`` is the last case (the report's conflict test).
* ``should_sync_pixel(local, remote)`` — true when some ``local[i] < remote[i]``: the remote knows an event we do
  not (the report's ``shouldSyncPixel``).

Two forms, one semantics: the **dict form** maps node ids to counters (a missing entry is 0, so clocks of different
membership compare), the **dense form** is a 1-d ``numpy`` integer array indexed by node id (shorter arrays are
padded with zeros); a plain list or tuple of integers is read as the dense form (and a clock computed from plain
sequences alone comes back as a list). Every function accepts either form (not mixed with the other in one call) and
returns the form it was given; ``to_dense`` / ``to_dict`` convert. ``compare_many`` compares one clock against many
rows at once. Functions never modify their arguments; an argument of neither form is a TypeError naming it.

Example of the report: A = [3,1,0], B = [2,4,0], C = [2,1,2] are pairwise concurrent; ``merge(A, B, own=0)`` =
[4,4,0]; ``should_sync_pixel(A, B)`` is true (A[1] = 1 < 4), ``should_sync_pixel(A, [2,1,0])`` is false.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Union

import numpy as np

DictVC = Mapping[Hashable, int]
VC = Union[DictVC, np.ndarray]

BEFORE, AFTER, EQUAL, CONCURRENT = "before", "after", "equal", "concurrent"
ORDERS = (BEFORE, AFTER, EQUAL, CONCURRENT)


def _dense(vc: Any) -> bool:
    return isinstance(vc, np.ndarray)


_FORMS = "a mapping node id -> count, or a 1-d numpy array, list or tuple of integer counts"


def _arg(name: str, vc: Any) -> tuple[Any, bool]:
    """``vc`` as an array if it is a plain sequence, and whether it was one; a TypeError naming ``name`` if it is of
    neither form. Checked once per call, at the entry (the elements of a dict are not)."""
    if isinstance(vc, (np.ndarray, Mapping)):
        return vc, False
    if isinstance(vc, (list, tuple)):
        out = np.asarray(vc) if len(vc) else np.zeros(0, np.int64)
        if out.ndim != 1 or out.dtype.kind not in "iu":
            raise TypeError(f"{name}: a vector clock is {_FORMS}; got a {type(vc).__name__} of "
                            f"{'nested sequences' if out.ndim != 1 else out.dtype.name + ' values'}")
        return out.astype(np.int64, copy=False), True
    raise TypeError(f"{name}: a vector clock is {_FORMS}; got {type(vc).__name__}")


def _two(n1: str, v1: Any, n2: str, v2: Any) -> tuple[Any, Any, bool]:
    """Both clocks in one form (plain sequences as arrays) and whether the answer is a list (no array was given)."""
    t1, t2 = type(v1), type(v2)
    if (t1 is np.ndarray and t2 is np.ndarray) or (t1 is dict and t2 is dict):  # the common cases, at once
        return v1, v2, False
    (x, listed_x), (y, listed_y) = _arg(n1, v1), _arg(n2, v2)
    if _dense(x) != _dense(y):
        raise TypeError(f"{n1}, {n2}: vector clocks of different forms (a mapping and a dense array or sequence): "
                        "convert one with to_dense/to_dict")
    return x, y, (listed_x or listed_y) and not (isinstance(v1, np.ndarray) or isinstance(v2, np.ndarray))


def _pad(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"dense vector clocks are 1-d arrays, got shapes {a.shape} and {b.shape}")
    if a.size == b.size:
        return a, b
    n = max(a.size, b.size)
    return np.pad(a, (0, n - a.size)), np.pad(b, (0, n - b.size))


def zeros(n: int) -> np.ndarray:
    """A dense clock of ``n`` nodes, all zero."""
    return np.zeros(n, dtype=np.int64)


def to_dense(vc: VC, n: int | None = None) -> np.ndarray:
    """Dense form of ``vc`` (length ``n``, or one past the largest node id). Keys must be ints ``>= 0``."""
    vc = _arg("vc", vc)[0]
    if _dense(vc):
        out = np.asarray(vc, dtype=np.int64)
        if n is None or out.size == n:
            return out
        if out.size < n:
            return np.pad(out, (0, n - out.size))
        if np.any(out[n:]):
            raise ValueError(f"a clock with entries beyond node {n - 1} does not fit {n} nodes")
        return out[:n]
    size = n if n is not None else (max(vc) + 1 if vc else 0)
    out = np.zeros(size, dtype=np.int64)
    for node, count in vc.items():
        if not isinstance(node, int) or node < 0:
            raise ValueError(f"dense clocks are indexed by node ids >= 0, got {node!r}")
        if node >= size:
            if count:
                raise ValueError(f"node {node} does not fit a clock of {size} nodes")
            continue
        out[node] = count
    return out


def to_dict(vc: VC) -> dict[Hashable, int]:
    """Dict form of ``vc``, zero entries left out."""
    vc = _arg("vc", vc)[0]
    if _dense(vc):
        return {int(i): int(c) for i, c in enumerate(np.asarray(vc).tolist()) if c}
    return {k: int(c) for k, c in vc.items() if c}


def update_vc(vc: VC, peer: int) -> VC:
    """``peer``'s local event: its entry is created at 0 if missing, then incremented (report §2.2 ``updateVC``)."""
    vc, listed = (vc, False) if type(vc) is np.ndarray or type(vc) is dict else _arg("vc", vc)
    if _dense(vc):
        if not (type(peer) is int or isinstance(peer, np.integer)) or peer < 0:
            raise TypeError(f"peer: a dense clock's entries are node ids, integers >= 0; got {peer!r}")
        out = np.array(vc, dtype=np.int64, copy=True)
        if peer >= out.size:
            out = np.pad(out, (0, peer + 1 - out.size))
        out[peer] += 1
        return out.tolist() if listed else out
    out = dict(vc)
    out.setdefault(peer, 0)
    out[peer] += 1
    return out


def join(a: VC, b: VC) -> VC:
    """Componentwise maximum (the least upper bound of the two clocks)."""
    return _join("a", a, "b", b)


def _join(n1: str, a: Any, n2: str, b: Any) -> VC:
    a, b, listed = _two(n1, a, n2, b)
    if _dense(a):
        if a.shape == b.shape:
            out = np.maximum(a, b)
        else:
            out = np.maximum(*_pad(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)))
        return out.tolist() if listed else out
    out = dict(a)
    for k, c in b.items():
        if c > out.get(k, 0):
            out[k] = c
    return out


def merge(local: VC, remote: VC, own: int) -> VC:
    """On receive (report §2.3): ``V[j] = max(V[j], remote[j])`` for all ``j``, then ``V[own] += 1``."""
    return update_vc(_join("local", local, "remote", remote), own)


def leq(v1: VC, v2: VC) -> bool:
    """``v1 ≤ v2`` componentwise (every event ``v1`` knows, ``v2`` knows)."""
    v1, v2, _ = _two("v1", v1, "v2", v2)
    if _dense(v1):
        if v1.shape == v2.shape:
            return bool((v1 <= v2).all())
        x, y = _pad(np.asarray(v1), np.asarray(v2))
        return bool(np.all(x <= y))
    return all(c <= v2.get(k, 0) for k, c in v1.items())


def compare(v1: VC, v2: VC) -> str:
    """``"before"`` | ``"after"`` | ``"equal"`` | ``"concurrent"`` (the partial order of report §2.3)."""
    v1, v2, _ = _two("v1", v1, "v2", v2)
    if _dense(v1):
        x, y = _pad(np.asarray(v1), np.asarray(v2))
        le, ge = bool(np.all(x <= y)), bool(np.all(x >= y))
    else:
        keys = set(v1) | set(v2)
        le = all(v1.get(k, 0) <= v2.get(k, 0) for k in keys)
        ge = all(v1.get(k, 0) >= v2.get(k, 0) for k in keys)
    if le and ge:
        return EQUAL
    if le:
        return BEFORE
    if ge:
        return AFTER
    return CONCURRENT


def is_concurrent(v1: VC, v2: VC) -> bool:
    """Neither ``v1 ≤ v2`` nor ``v2 ≤ v1`` (report §2.3 ``isConcurrent``: conflict handling is needed)."""
    return compare(v1, v2) == CONCURRENT


def should_sync_pixel(local: VC, remote: VC) -> bool:
    """True when some ``local[i] < remote[i]``: the remote knows something we do not (report §2.1)."""
    local, remote, _ = _two("local", local, "remote", remote)
    if _dense(local):
        x, y = _pad(np.asarray(local), np.asarray(remote))
        return bool(np.any(x < y))
    return any(c > local.get(k, 0) for k, c in remote.items())


def compare_many(rows: np.ndarray, vc: np.ndarray) -> np.ndarray:
    """``compare(rows[k], vc)`` for every row of an ``(m, n)`` array, as an array of the strings in ``ORDERS``."""
    rows = np.asarray(rows)
    vc = np.asarray(vc)
    if rows.ndim != 2 or vc.ndim != 1 or rows.shape[1] != vc.size:
        raise ValueError(f"compare_many needs (m, n) rows and an n-vector, got {rows.shape} and {vc.shape}")
    le = np.all(rows <= vc, axis=1)
    ge = np.all(rows >= vc, axis=1)
    codes = np.where(le & ge, 2, np.where(le, 0, np.where(ge, 1, 3)))
    return np.asarray(ORDERS, dtype=object)[codes]
