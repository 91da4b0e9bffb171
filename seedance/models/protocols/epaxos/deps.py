"""EPaxos dependencies as a sparse set: only the replicas with an interfering instance appear.

A command's dependencies say, for each replica ``q``, the highest instance number ``j`` of ``q`` whose command
interferes with it ("every instance of q numbered ≤ j that interferes", SOSP'13 §4.3; efficient/epaxos keeps a
vector of one slot per replica). Here they are a flat tuple ``(q0, j0, q1, j1, ...)``:

* canonical: replicas strictly increasing, every ``j`` ≥ 1 (a replica absent means 0, "none of its instances"),
  so two dependency sets are equal exactly when their tuples are (``==``, hashing) — the fast path's "unchanged",
  the recovery's witnesses and the monitors' Consistency compare them so;
* plain data: a tuple of ints travels through the real backend's codec as it is (one tagged list of ints), and
  :func:`problem` says what is wrong with one that came off the wire or a durable file;
* its size is what it carries: 8 bytes per integer, 16 per replica present (:func:`wire_bytes`), against 8 per
  replica of the cluster for the vector.

A cluster of N replicas whose commands come from C clients (each talking to its own replica) carries at most
min(N, C) pairs: merging, comparing, persisting and checking them follows the replicas that proposed on the keys,
not the cluster's size. Dicts ``{replica: instance}`` are the working form of a merge (:func:`as_dict`,
:func:`from_dict`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

Deps = tuple[int, ...]
NO_DEPS: Deps = ()
INT_BYTES = 8  # the simulated wire counts 8 bytes per integer carried (the vector counted 8 per slot)


def as_dict(deps: Deps) -> dict[int, int]:
    """``{replica: instance}`` of a canonical tuple."""
    pairs = iter(deps)
    return dict(zip(pairs, pairs))


def from_dict(merged: Mapping[int, int]) -> Deps:
    """The canonical tuple of ``{replica: instance}`` (every instance ≥ 1): sorted by replica, flat."""
    replicas = sorted(merged)
    flat = [0] * (2 * len(replicas))
    flat[::2] = replicas
    flat[1::2] = map(merged.__getitem__, replicas)
    return tuple(flat)


def dep_of(deps: Deps, replica: int) -> int:
    """The highest instance of ``replica`` among ``deps`` (0: none)."""
    replicas = deps[::2]
    k = bisect_left(replicas, replica)
    return deps[2 * k + 1] if k < len(replicas) and replicas[k] == replica else 0


def union(deps: Deps, others: Iterable[Deps]) -> Deps:
    """The replica-wise maximum of ``deps`` and every tuple of ``others`` (``deps`` itself when none adds)."""
    merged = as_dict(deps)
    get = merged.get
    grew = False
    for theirs in others:
        pairs = iter(theirs)
        for q, j in zip(pairs, pairs):
            if j > get(q, 0):
                merged[q] = j
                grew = True
    return from_dict(merged) if grew else deps


def from_dense(vector: Iterable[int]) -> Deps:
    """The sparse form of a vector with one slot per replica (the form earlier trees persisted)."""
    return tuple(x for q, j in enumerate(vector) if j for x in (q, j))


def wire_bytes(deps: Deps) -> int:
    """What ``deps`` adds to a simulated message: 8 bytes per integer carried."""
    return INT_BYTES * len(deps)


def problem(deps: Any, num_nodes: int | None = None) -> str | None:
    """What makes ``deps`` other than a canonical dependency tuple of a cluster of ``num_nodes`` (None: any size);
    None when it is one."""
    if type(deps) is not tuple:
        return f"a {type(deps).__name__}, not a tuple"
    if len(deps) % 2:
        return f"{len(deps)} integers (an odd count)"
    last = -1
    for k in range(0, len(deps), 2):
        q, j = deps[k], deps[k + 1]
        if type(q) is not int or type(j) is not int:
            return f"pair {k // 2} is ({q!r}, {j!r}), not two integers"
        if q < 0:
            return f"replica {q} at pair {k // 2} is negative"
        if q <= last:
            return f"replica {q} at pair {k // 2} after replica {last} (replicas must increase)"
        if num_nodes is not None and q >= num_nodes:
            return f"replica {q} at pair {k // 2} outside 0..{num_nodes - 1}"
        if j < 1:
            return f"instance {j} of replica {q} (instances present are >= 1)"
        last = q
    return None


VALID = "a flat tuple (replica, instance, ...) with replicas increasing and instances >= 1"
