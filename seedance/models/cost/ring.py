"""Bottleneck-aware ring orders on a heterogeneous bandwidth matrix (seed §2.4).

A ring collective moves equal chunks over every hop ``order[k] → order[k+1]`` at once, so each step lasts as long as
its slowest hop: the order that matters is the one that **maximises the minimum hop bandwidth** (a bottleneck
travelling-salesman problem), ties broken by the smallest maximum hop latency. Index order is only a candidate.

- ``n ≤ 9``: exact, by enumerating all ``(n-1)!`` cycles through device 0 (vectorised).
- larger ``n``: the best of three candidates (index order; devices grouped by host with each host's path found
  exactly (or greedily for hosts over 8 devices), hosts joined in index order; a greedy widest-next walk), improved
  by segment reversals that remove a bottleneck hop (2-opt, for ``n ≤ 256``).

Every result carries an upper bound on the optimum (each device needs one outgoing and one incoming hop, so no ring
beats ``min_i max_j B[i,j]`` nor ``min_j max_i B[i,j]``); ``exact`` is true when enumeration was used or the bound
is reached.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.sparse.csgraph import connected_components

EXACT_MAX_DEVICES = 9
PATH_EXACT_MAX_DEVICES = 8
TWO_OPT_MAX_DEVICES = 256


@dataclass(frozen=True, kw_only=True)
class RingOrder:
    """A directed ring ``order[0] → order[1] → … → order[-1] → order[0]``."""

    order: tuple[int, ...]
    bottleneck_GBps: float  # the slowest hop
    max_hop_latency_us: float
    upper_bound_GBps: float  # no ring can have a faster slowest hop
    exact: bool  # proven optimal
    method: str  # "enumeration", "heuristic"


def _score(bandwidth: np.ndarray, latency: np.ndarray, order: np.ndarray) -> tuple[float, float, int]:
    """(bottleneck, −max latency, −#hops at the bottleneck): larger is better."""
    nxt = np.roll(order, -1)
    hops = bandwidth[order, nxt]
    low = hops.min()
    return float(low), -float(latency[order, nxt].max()), -int(np.count_nonzero(hops <= low))


def upper_bound(bandwidth: np.ndarray) -> float:
    """No ring's slowest hop beats this: every device needs an outgoing and an incoming hop, and the hops at least
    as fast as the ring's slowest must form a strongly connected graph (binary search over distinct values)."""
    b = np.array(bandwidth, dtype=float)
    np.fill_diagonal(b, -np.inf)
    degree_bound = float(min(b.max(axis=1).min(), b.max(axis=0).min()))
    values = np.unique(b[np.isfinite(b)])
    values = values[values <= degree_bound]
    lo, hi = 0, len(values) - 1  # values[lo] is always feasible (the smallest value keeps the full graph)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        count, _ = connected_components(b >= values[mid], directed=True, connection="strong")
        lo, hi = (mid, hi) if count == 1 else (lo, mid - 1)
    return float(values[lo])


@lru_cache(maxsize=16)
def _permutations(items: tuple[int, ...]) -> np.ndarray:
    perms = np.array(list(itertools.permutations(items)), dtype=np.int64).reshape(-1, len(items))
    perms.setflags(write=False)
    return perms


def _enumerate(bandwidth: np.ndarray, latency: np.ndarray, start: int, rest: list[int], closed: bool) -> np.ndarray:
    """Best order starting at ``start`` over all permutations of ``rest`` (a cycle if ``closed``, else a path)."""
    if not rest:
        return np.array([start])
    perms = _permutations(tuple(rest))
    orders = np.concatenate([np.full((len(perms), 1), start), perms], axis=1)
    src, dst = (orders, np.roll(orders, -1, axis=1)) if closed else (orders[:, :-1], orders[:, 1:])
    hop_bw = bandwidth[src, dst]
    low = hop_bw.min(axis=1)
    keys = np.lexsort((np.count_nonzero(hop_bw <= low[:, None], axis=1), latency[src, dst].max(axis=1), -low))
    return orders[keys[0]]


def _best_path(bandwidth: np.ndarray, latency: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """A Hamiltonian path over ``devices`` maximising its slowest hop (exact up to 8 devices, else greedy)."""
    if len(devices) <= 2:
        return devices
    sub_b = bandwidth[np.ix_(devices, devices)]
    sub_l = latency[np.ix_(devices, devices)]
    if len(devices) <= PATH_EXACT_MAX_DEVICES:
        paths = _permutations(tuple(range(len(devices))))
        src, dst = paths[:, :-1], paths[:, 1:]
        hop_bw = sub_b[src, dst]
        low = hop_bw.min(axis=1)
        keys = np.lexsort((sub_l[src, dst].max(axis=1), -low))
        return devices[paths[keys[0]]]
    return devices[_greedy(sub_b, sub_l, 0)]


def _greedy(bandwidth: np.ndarray, latency: np.ndarray, start: int) -> np.ndarray:
    """Walk to the unvisited device with the widest hop (then lowest latency, then lowest index)."""
    n = bandwidth.shape[0]
    visited = np.zeros(n, dtype=bool)
    order = [start]
    visited[start] = True
    for _ in range(n - 1):
        cur = order[-1]
        bw = np.where(visited, -np.inf, bandwidth[cur])
        cand = np.flatnonzero(bw == bw.max())
        nxt = int(cand[np.argmin(latency[cur, cand])])
        order.append(nxt)
        visited[nxt] = True
    return np.array(order)


def _two_opt(bandwidth: np.ndarray, latency: np.ndarray, order: np.ndarray, max_rounds: int) -> np.ndarray:
    """Reverse segments to remove bottleneck hops while the score improves."""
    n = len(order)
    best = _score(bandwidth, latency, order)
    for _ in range(max_rounds):
        nxt = np.roll(order, -1)
        k = int(np.argmin(bandwidth[order, nxt]))  # the hop order[k] → order[k+1] to remove
        improved = False
        rotated = np.roll(order, -(k + 1))  # now the bad hop is rotated[-1] → rotated[0]
        for j in range(1, n):
            # reverse rotated[0..j]: the bad hop becomes rotated[-1] → rotated[j], and rotated[0] → rotated[j+1]
            cand = np.concatenate([rotated[: j + 1][::-1], rotated[j + 1 :]])
            score = _score(bandwidth, latency, cand)
            if score > best:
                order, best, improved = cand, score, True
                break
        if not improved:
            return order
    return order


def _strongly_connected(adjacency: np.ndarray) -> bool:
    count, _ = connected_components(adjacency, directed=True, connection="strong")
    return bool(count == 1)


def _heuristic(bandwidth: np.ndarray, latency: np.ndarray, host_of: np.ndarray, bound: float) -> np.ndarray:
    """Host-grouped and index orders, then (if neither reaches ``bound``) a greedy walk, then 2-opt."""
    hosts = [np.flatnonzero(host_of == h) for h in np.unique(host_of)]
    paths: dict[bytes, np.ndarray] = {}  # identical hosts (same sub-matrices) share one search
    grouped = []
    for devices in hosts:
        key = bandwidth[np.ix_(devices, devices)].tobytes() + latency[np.ix_(devices, devices)].tobytes()
        if key not in paths:
            paths[key] = np.searchsorted(devices, _best_path(bandwidth, latency, devices))
        grouped.append(devices[paths[key]])
    n = bandwidth.shape[0]
    candidates = [np.concatenate(grouped), np.arange(n)]
    order = max(candidates, key=lambda o: _score(bandwidth, latency, o))
    if _score(bandwidth, latency, order)[0] >= bound or not _strongly_connected(
        bandwidth > _score(bandwidth, latency, order)[0]
    ):
        return order
    order = max([order, _greedy(bandwidth, latency, 0)], key=lambda o: _score(bandwidth, latency, o))
    if n <= TWO_OPT_MAX_DEVICES:
        order = _two_opt(bandwidth, latency, order, max_rounds=2 * n)
    return order


def best_ring(bandwidth_GBps: np.ndarray, latency_us: np.ndarray, host_of: np.ndarray) -> RingOrder:
    """The ring order maximising the slowest hop (see the module docstring). Units as the Topology's."""
    bandwidth = np.asarray(bandwidth_GBps, dtype=float)
    latency = np.asarray(latency_us, dtype=float)
    n = bandwidth.shape[0]
    off_diagonal = np.where(np.eye(n, dtype=bool), -np.inf, bandwidth)
    # the degree bound (refined below when the heuristic falls short of it)
    bound = float(min(off_diagonal.max(axis=1).min(), off_diagonal.max(axis=0).min())) if n > 1 else float("inf")
    if n <= 2:
        order = np.arange(n)
        method, exact = "enumeration", True
    elif n <= EXACT_MAX_DEVICES:
        order = _enumerate(bandwidth, latency, 0, list(range(1, n)), closed=True)
        method, exact = "enumeration", True
    else:
        order = _heuristic(bandwidth, latency, host_of, bound)
        method, exact = "heuristic", False
    low, neg_lat, _ = _score(bandwidth, latency, order) if n > 1 else (float("inf"), 0.0, 0)
    if exact:
        bound = low  # enumeration found the optimum
    elif n > 1:
        if low >= bound:
            exact = True
        elif not _strongly_connected(bandwidth > low):  # nothing faster than `low` can close a ring
            bound, exact = low, True
        else:
            bound = upper_bound(bandwidth)
            exact = low >= bound
    return RingOrder(
        order=tuple(int(i) for i in order), bottleneck_GBps=low, max_hop_latency_us=-neg_lat,
        upper_bound_GBps=bound, exact=bool(exact), method=method,
    )
