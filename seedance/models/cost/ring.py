"""Bottleneck-aware ring orders on a heterogeneous bandwidth matrix (seed §2.4).

A ring collective moves equal chunks over every hop ``order[k] → order[k+1]`` at once, so each step lasts as long as
its slowest hop: the order that matters is the one that **maximises the minimum hop bandwidth** (a bottleneck
travelling-salesman problem), ties broken by the smallest maximum hop latency. Index order is only a candidate.

- ``n ≤ 9``: exact, by enumerating all ``(n-1)!`` cycles through device 0 (vectorised).
- ``n ≤ 14``: exact, by a dynamic programme over subsets (the best slowest hop of a path from device 0 covering a
  set and ending at a device; O(2^n·n²), vectorised per layer); latency ties are not broken.
- larger ``n``: the best of three candidates (devices grouped by host with each host's path found exactly (or
  greedily for hosts over 8 devices), hosts joined in index order; index order; a greedy widest-next walk), then —
  unless a certificate already proves it optimal — a binary search over bandwidth thresholds t, each level asking a
  local search (2-opt segment reversals and or-opt moves, vectorised) to rebuild the ring from hops ≥ t only
  (``n ≤ 512``).

Every result carries an upper bound on the optimum (each device needs one outgoing and one incoming hop, so no ring
beats ``min_i max_j B[i,j]`` nor ``min_j max_i B[i,j]``); ``exact`` is true when enumeration was used or the bound
is reached.

Certificates, cheapest first: the **host cut** — if the hops faster than the ring's slowest, merged host by host,
do not connect the hosts strongly, no ring beats it (a quotient of a strongly connected graph is strongly connected);
on multi-server clusters whose inter-server hops are the bottleneck this proves the host-grouped ring optimal in
O(n²) simple passes, and :func:`host_ring_fast` does it without scaling the matrices — then the degree bound, then
strong connectivity of the device graph itself. Speed-ups that never change a result: index order is returned at
once when no order can beat it (:func:`_identity_is_optimal`: uniform hosts such as NVSwitch servers), and hosts
with identical sub-matrices share one search (:func:`per_host`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

EXACT_MAX_DEVICES = 9
DP_MAX_DEVICES = 14
PATH_EXACT_MAX_DEVICES = 8
LOCAL_SEARCH_MAX_DEVICES = 512


@dataclass(frozen=True, kw_only=True)
class RingOrder:
    """A directed ring ``order[0] → order[1] → … → order[-1] → order[0]``."""

    order: tuple[int, ...]
    bottleneck_GBps: float  # the slowest hop
    max_hop_latency_us: float
    upper_bound_GBps: float  # no ring can have a faster slowest hop
    exact: bool  # proven optimal
    method: str  # "enumeration", "dynamic-programme", "heuristic"


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
        count, _ = connected_components(csr_matrix(b >= values[mid]), directed=True, connection="strong")
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
    if rest == list(range(start + 1, start + 1 + len(rest))) and _identity_is_optimal(bandwidth, latency, closed):
        return np.arange(start, start + 1 + len(rest))  # what the enumeration returns: the first of equals
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
        if _identity_is_optimal(sub_b, sub_l, closed=False):
            return devices  # the enumeration's first candidate, and no path beats it
        paths = _permutations(tuple(range(len(devices))))
        src, dst = paths[:, :-1], paths[:, 1:]
        hop_bw = sub_b[src, dst]
        low = hop_bw.min(axis=1)
        keys = np.lexsort((sub_l[src, dst].max(axis=1), -low))
        return devices[paths[keys[0]]]
    return devices[_greedy(sub_b, sub_l, 0)]


def _identity_is_optimal(bandwidth: np.ndarray, latency: np.ndarray, closed: bool) -> bool:
    """Whether index order (a cycle if ``closed``, else a path) already has the widest possible slowest hop and the
    least possible largest hop latency: then every order is at best tied with it, and the enumerations (whose first
    candidate is index order, kept on ties) return it. True on uniform hosts such as NVSwitch servers."""
    m = bandwidth.shape[0]
    if m < 2:
        return True
    off = ~np.eye(m, dtype=bool)
    src = np.arange(m if closed else m - 1)
    dst = (src + 1) % m
    return bool(bandwidth[src, dst].min() >= bandwidth[off].max() and latency[src, dst].max() <= latency[off].min())


def host_members(host_of: np.ndarray) -> list[np.ndarray]:
    """Device indices of each host, hosts in increasing label order, devices ascending (one sort, no per-host scan)."""
    _, inverse, counts = np.unique(np.asarray(host_of), return_inverse=True, return_counts=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    return np.split(order, np.cumsum(counts)[:-1])


def per_host(
    bandwidth: np.ndarray, latency: np.ndarray, members: list[np.ndarray], solve,
    scales: tuple[float, float] | None = None,
) -> list[np.ndarray]:
    """``solve(sub_bandwidth, sub_latency)`` → a local order, for each host's sub-matrices; hosts with identical
    sub-matrices share one call. Sub-matrices of hosts of equal size are gathered in one indexing operation.
    ``scales`` (b, l): the sub-matrices are ``bandwidth[...] / b`` and ``latency[...] * l`` (elementwise the same as
    scaling the whole matrices first)."""
    result: list[np.ndarray | None] = [None] * len(members)
    by_size: dict[int, list[int]] = {}
    for h, devices in enumerate(members):
        by_size.setdefault(len(devices), []).append(h)
    for indices in by_size.values():
        dev = np.stack([members[h] for h in indices])  # (hosts, g)
        sub_b = bandwidth[dev[:, :, None], dev[:, None, :]]
        sub_l = latency[dev[:, :, None], dev[:, None, :]]
        if scales is not None:
            sub_b, sub_l = sub_b / scales[0], sub_l * scales[1]
        keys = np.concatenate([sub_b.reshape(len(indices), -1), sub_l.reshape(len(indices), -1)], axis=1)
        solved: dict[bytes, np.ndarray] = {}
        for k, h in enumerate(indices):
            key = keys[k].tobytes()
            if key not in solved:
                solved[key] = np.asarray(solve(sub_b[k], sub_l[k]), dtype=np.int64)
            result[h] = members[h][solved[key]]
    return result  # type: ignore[return-value]


def _cut_by_hosts(bandwidth: np.ndarray, host_of: np.ndarray, low: float) -> bool:
    """A cheap proof that no ring beats ``low``: the hops faster than ``low``, merged host by host, do not connect
    the hosts strongly (any ring would have to cross between hosts on them). False when it proves nothing."""
    labels, host = np.unique(np.asarray(host_of), return_inverse=True)
    if len(labels) < 2:
        return False
    rows, cols = np.divmod(np.flatnonzero(bandwidth > low), bandwidth.shape[1])  # (much faster than np.nonzero)
    across = host[rows] != host[cols]
    if not across.any():
        return True
    h = len(labels)
    faster = csr_matrix((np.ones(int(across.sum()), dtype=bool), (host[rows[across]], host[cols[across]])),
                        shape=(h, h))
    count, _ = connected_components(faster, directed=True, connection="strong")
    return bool(count > 1)


def _degree_bound(bandwidth: np.ndarray) -> float:
    n = bandwidth.shape[0]
    if n < 2:
        return float("inf")
    off_diagonal = np.where(np.eye(n, dtype=bool), -np.inf, bandwidth)
    return float(min(off_diagonal.max(axis=1).min(), off_diagonal.max(axis=0).min()))


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


def _repair(good: np.ndarray, order: np.ndarray, max_moves: int) -> np.ndarray | None:
    """Local search for a ring using only ``good`` hops (a boolean matrix), from ``order``; None if it gets stuck.

    Moves, each vectorised over all positions: reverse the segment after a bad hop (2-opt; reversal flips the
    segment's hops, counted with prefix sums), or move an endpoint of a bad hop elsewhere (or-opt).
    """
    order = order.copy()
    n = len(order)
    bad_matrix = ~good
    for _ in range(max_moves):
        nxt = np.roll(order, -1)
        bad_hops = np.flatnonzero(bad_matrix[order, nxt])
        if bad_hops.size == 0:
            return order
        for i in bad_hops.tolist():
            moved = _improve_at(bad_matrix, np.roll(order, -i))
            if moved is not None:
                order = moved
                break
        else:
            return None
    return None


def _improve_at(bad_matrix: np.ndarray, rot: np.ndarray) -> np.ndarray | None:
    """A ring with fewer bad hops made by one move around the bad hop rot[0] -> rot[1], or None."""
    n = len(rot)
    fwd = bad_matrix[rot[:-1], rot[1:]].astype(np.int64)  # fwd[k]: rot[k] -> rot[k+1]
    rev = bad_matrix[rot[1:], rot[:-1]].astype(np.int64)  # rev[k]: rot[k+1] -> rot[k]
    cf, cr = np.concatenate([[0], np.cumsum(fwd)]), np.concatenate([[0], np.cumsum(rev)])
    # 2-opt: reverse rot[1..j] (j = 2..n-1): new hops rot[0]->rot[j], rot[1]->rot[j+1]
    j = np.arange(2, n)
    after = rot[(j + 1) % n]
    delta = (bad_matrix[rot[0], rot[j]].astype(np.int64) + bad_matrix[rot[1], after] + (cr[j] - cr[1])
             - fwd[0] - bad_matrix[rot[j], after] - (cf[j] - cf[1]))
    best = int(np.argmin(delta))
    if delta[best] < 0:
        jj = int(j[best])
        return np.concatenate([[rot[0]], rot[1 : jj + 1][::-1], rot[jj + 1 :]])
    # or-opt: move the segment rot[1..L] (L = 1..3, kept in direction) between rot[k] -> rot[k+1], k = L+1..n-1
    u = rot[0]
    for length in range(1, min(3, n - 2) + 1):
        first, last, w = rot[1], rot[length], rot[(length + 1) % n]
        k = np.arange(length + 1, n)
        x, y = rot[k], rot[(k + 1) % n]
        delta = (bad_matrix[u, w].astype(np.int64) + bad_matrix[x, first] + bad_matrix[last, y]
                 - fwd[0] - bad_matrix[last, w] - bad_matrix[x, y])
        best = int(np.argmin(delta))
        if delta[best] < 0:
            kk = int(k[best])
            segment = rot[1 : length + 1]
            rest = np.concatenate([[u], rot[length + 1 :]])  # rot[kk] sits at index kk - length
            cut = kk - length + 1
            return np.concatenate([rest[:cut], segment, rest[cut:]])
    # or-opt on the other endpoint: move u = rot[0] between rot[k] -> rot[k+1] (k = 1..n-2)
    u, t, w = rot[0], rot[n - 1], rot[1]
    k = np.arange(1, n - 1)
    x, y = rot[k], rot[k + 1]
    delta = (bad_matrix[t, w].astype(np.int64) + bad_matrix[x, u] + bad_matrix[u, y]
             - fwd[0] - bad_matrix[t, u] - bad_matrix[x, y])
    best = int(np.argmin(delta))
    if delta[best] < 0:
        kk = int(k[best])
        rest = rot[1:]  # rot[kk] sits at index kk-1
        return np.concatenate([rest[:kk], [u], rest[kk:]])
    return None


def _warnsdorff(good: np.ndarray, bandwidth: np.ndarray, start: int) -> np.ndarray:
    """A walk taking, among unvisited devices reachable by a good hop, the one with the fewest good ways onward
    (Warnsdorff's rule); the widest hop when none is good."""
    n = good.shape[0]
    visited = np.zeros(n, dtype=bool)
    remaining_in = good.sum(axis=0).astype(np.int64)  # unvisited good predecessors... updated below
    onward = good.sum(axis=1).astype(np.int64)  # good hops to unvisited devices
    order = [start]
    visited[start] = True
    onward -= good[:, start]
    for _ in range(n - 1):
        cur = order[-1]
        options = np.flatnonzero(good[cur] & ~visited)
        if options.size:
            key = onward[options] * 1e12 - bandwidth[cur, options]
            nxt = int(options[np.argmin(key)])
        else:
            nxt = int(np.argmax(np.where(visited, -np.inf, bandwidth[cur])))
        order.append(nxt)
        visited[nxt] = True
        onward -= good[:, nxt]
    del remaining_in
    return np.array(order, dtype=np.int64)


def _threshold_search(bandwidth: np.ndarray, order: np.ndarray, bound: float, budget: int) -> np.ndarray:
    """Raise the slowest hop: binary search over bandwidth values above it, repairing the ring at each level."""
    low = bandwidth[order, np.roll(order, -1)].min()
    values = np.unique(bandwidth[np.isfinite(bandwidth)])
    values = values[(values > low) & (values <= bound)]
    lo, hi = 0, len(values) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        good = bandwidth >= values[mid]
        repaired = _repair(good, order, budget)
        for start in range(min(4, len(order))):
            if repaired is not None:
                break
            repaired = _repair(good, _warnsdorff(good, bandwidth, start), budget)
        if repaired is None:
            hi = mid - 1
        else:
            order = repaired
            lo = mid + 1
    return order


def _dynamic_programme(bandwidth: np.ndarray) -> np.ndarray:
    """The cycle through device 0 maximising its slowest hop, exactly, by DP over subsets containing device 0."""
    n = bandwidth.shape[0]
    size = 1 << n
    best = np.full((size, n), -np.inf)
    parent = np.full((size, n), -1, dtype=np.int64)
    best[1, 0] = np.inf
    masks = np.arange(1, size, 2, dtype=np.int64)  # subsets containing device 0
    popcount = np.zeros(len(masks), dtype=np.int64)
    for bit in range(n):
        popcount += (masks >> bit) & 1
    for layer in range(1, n):
        current = masks[popcount == layer]
        values = best[current]  # (M, n): best slowest hop of a path covering the mask and ending at each device
        for nxt in range(1, n):
            free = current[(current >> nxt) & 1 == 0]
            if free.size == 0:
                continue
            cand = np.minimum(best[free], bandwidth[:, nxt][None, :])
            last = cand.argmax(axis=1)
            value = cand[np.arange(len(free)), last]
            target = free | (1 << nxt)
            better = value > best[target, nxt]
            best[target[better], nxt] = value[better]
            parent[target[better], nxt] = last[better]
        del values
    full = size - 1
    closing = np.minimum(best[full, 1:], bandwidth[1:, 0])
    last = int(np.argmax(closing)) + 1
    order, mask = [], full
    while last != -1 and mask:
        order.append(last)
        previous = int(parent[mask, last])
        mask ^= 1 << last
        last = previous if mask != 0 else -1
        if last == 0:
            order.append(0)
            break
    return np.array(order[::-1], dtype=np.int64)


def _strongly_connected(adjacency: np.ndarray) -> bool:
    count, _ = connected_components(csr_matrix(adjacency), directed=True, connection="strong")
    return bool(count == 1)


def _heuristic(bandwidth: np.ndarray, latency: np.ndarray, host_of: np.ndarray, bound: float) -> np.ndarray:
    """Host-grouped and index orders, then (if neither reaches ``bound``) a greedy walk, then 2-opt."""
    return _heuristic_proven(bandwidth, latency, host_of, bound)[0]


def _heuristic_proven(
    bandwidth: np.ndarray, latency: np.ndarray, host_of: np.ndarray, bound: float | None
) -> tuple[np.ndarray, bool]:
    """:func:`_heuristic`, and whether its order is proven optimal on the way (``bound`` None: the degree bound,
    computed only when needed)."""
    members = host_members(host_of)
    grouped = per_host(
        bandwidth, latency, members,
        lambda sub_b, sub_l: _best_path(sub_b, sub_l, np.arange(sub_b.shape[0])),
    )
    n = bandwidth.shape[0]
    candidates = [np.concatenate(grouped), np.arange(n)]
    order = max(candidates, key=lambda o: _score(bandwidth, latency, o))
    low = _score(bandwidth, latency, order)[0]
    if _cut_by_hosts(bandwidth, host_of, low):  # implies the strong-connectivity test below fails
        return order, True
    if bound is None:
        bound = _degree_bound(bandwidth)
    if low >= bound or not _strongly_connected(bandwidth > low):
        return order, True
    order = max([order, _greedy(bandwidth, latency, 0)], key=lambda o: _score(bandwidth, latency, o))
    if n <= LOCAL_SEARCH_MAX_DEVICES:
        order = _threshold_search(bandwidth, order, bound, budget=4 * n)
    return order, False


def host_ring_fast(bandwidth_Bps: np.ndarray, latency_s: np.ndarray, host_of: np.ndarray) -> RingOrder | None:
    """``best_ring(bandwidth_Bps / 1e9, latency_s * 1e6, host_of)`` for n > 14 when the heuristic's first two
    candidates (host-grouped, index order) are proven optimal by the host cut (:func:`_cut_by_hosts`) — the usual
    case on multi-server clusters, whose inter-server hops are the bottleneck — else None. Identical result, without
    scaling the whole matrices: only gathered entries are scaled, and the cut's threshold test ``B/1e9 > low`` is
    decided exactly on the few entries near ``low·1e9``."""
    n = bandwidth_Bps.shape[0]
    if n <= DP_MAX_DEVICES:
        return None
    members = host_members(host_of)
    grouped = per_host(
        bandwidth_Bps, latency_s, members,
        lambda sub_b, sub_l: _best_path(sub_b, sub_l, np.arange(sub_b.shape[0])), scales=(1e9, 1e6),
    )
    best = None
    for order in (np.concatenate(grouped), np.arange(n)):
        nxt = np.roll(order, -1)
        hops = bandwidth_Bps[order, nxt] / 1e9
        low = hops.min()
        key = (float(low), -float((latency_s[order, nxt] * 1e6).max()), -int(np.count_nonzero(hops <= low)))
        if best is None or key > best[0]:  # max() keeps the first of equals
            best = (key, order)
    (low, neg_lat, _), order = best
    labels, host = np.unique(np.asarray(host_of), return_inverse=True)
    if len(labels) < 2:
        return None
    # x / 1e9 > low is monotone in x (division rounds monotonically): find the least float x passing it
    threshold, limit = float(low) * 1e9, float(low)
    while threshold / 1e9 > limit:
        threshold = math.nextafter(threshold, -math.inf)
    while not threshold / 1e9 > limit:
        threshold = math.nextafter(threshold, math.inf)
    rows, cols = np.divmod(np.flatnonzero(bandwidth_Bps >= threshold), n)
    across = host[rows] != host[cols]
    if across.any():
        h = len(labels)
        faster = csr_matrix((np.ones(int(across.sum()), dtype=bool), (host[rows[across]], host[cols[across]])),
                            shape=(h, h))
        if connected_components(faster, directed=True, connection="strong")[0] == 1:
            return None
    return RingOrder(
        order=tuple(order.tolist()), bottleneck_GBps=low, max_hop_latency_us=-neg_lat, upper_bound_GBps=low,
        exact=True, method="heuristic",
    )


def best_ring(bandwidth_GBps: np.ndarray, latency_us: np.ndarray, host_of: np.ndarray) -> RingOrder:
    """The ring order maximising the slowest hop (see the module docstring). Units as the Topology's."""
    bandwidth = np.asarray(bandwidth_GBps, dtype=float)
    latency = np.asarray(latency_us, dtype=float)
    n = bandwidth.shape[0]
    proven = False
    if n <= 2:
        order = np.arange(n)
        method, exact = "enumeration", True
    elif n <= EXACT_MAX_DEVICES:
        order = _enumerate(bandwidth, latency, 0, list(range(1, n)), closed=True)
        method, exact = "enumeration", True
    elif n <= DP_MAX_DEVICES:
        order = _dynamic_programme(bandwidth)
        method, exact = "dynamic-programme", True
    else:
        order, proven = _heuristic_proven(bandwidth, latency, host_of, None)
        method, exact = "heuristic", False
    low, neg_lat, _ = _score(bandwidth, latency, order) if n > 1 else (float("inf"), 0.0, 0)
    if exact or proven:  # enumeration or the DP found the optimum, or the heuristic proved its ring optimal
        bound, exact = low, True
    elif n > 1:
        bound = _degree_bound(bandwidth)
        if low >= bound:
            exact = True
        elif not _strongly_connected(bandwidth > low):  # nothing faster than `low` can close a ring
            bound, exact = low, True
        else:
            bound = upper_bound(bandwidth)
            exact = low >= bound
    return RingOrder(
        order=tuple(np.asarray(order, dtype=np.int64).tolist()), bottleneck_GBps=low, max_hop_latency_us=-neg_lat,
        upper_bound_GBps=bound, exact=bool(exact), method=method,
    )
