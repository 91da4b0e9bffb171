"""Alpha-beta cost of each (collective, algorithm) on a fabric, as a size-independent :class:`Plan`.

Notation: n devices, S the collective's size (see ``collectives.SIZE_MEANING``), a hop i→j costs
``α_ij + c/B_ij`` for c bytes (α from the latency matrix, B the bandwidth matrix). A synchronous step costs its
slowest concurrent transfer. Closed forms below are for a homogeneous fabric (every B_ij = b, α_ij = α), n = 2^q
where it matters; the tests check them.

ring (hops along :func:`~seedance.models.cost.ring.best_ring`'s order, chunks of S/n; on several equal hosts, when
faster, NCCL-style channels instead — g rings each leaving every host through a different device, S/g each, see
:func:`ring_channels`):
  allreduce 2(n−1)·(α + S/(n·b)); reducescatter, allgather (n−1)·(α + S/(n·b));
  broadcast: a pipelined chain root → … (n−1 hops), ``Pipeline(n−1, α, 1/b)``;
  sendrecv: every device sends S to its successor, α + S/b.
tree (NCCL's double binary tree: two binary trees of depth D = ⌊log2 n⌋ laid over the ring order, each carrying
S/2; an interior node serves two children, so per chunk c a device moves 2c in or out):
  allreduce ``Pipeline(2D, α, 2/b)`` (reduce up then broadcast down, pipelined); broadcast ``Pipeline(D, α, 2/b)``.
rhd (recursive halving then doubling over positions of the ring order; for n not a power of two the n−p extra
devices first fold into partners, p = 2^⌊log2 n⌋, and get the result back at the end):
  allreduce 2q·α + 2(n−1)/n·S/b; reducescatter, allgather q·α + (n−1)/n·S/b.
direct (one shot: every device sends to all others at once, sharing its own port, so device i's step costs
max_j α_ij + c·max(Σ_j 1/B_ij, Σ_j 1/B_ji)):
  reducescatter, allgather, alltoall α + (n−1)/n·S/b; allreduce 2α + 2(n−1)/n·S/b (reduce-scatter + all-gather);
  broadcast α + (n−1)·S/b (the root's port carries n−1 copies); sendrecv in rank order r→r+1, α + S/b.
hierarchical (hosts of g devices, H hosts, intra-node rings in each host concurrently, then g concurrent inter-node
rings joining the devices of equal local rank, then intra-node again; needs equal g on every host):
  allreduce 2(g−1)(α_in + S/(g·b_in)) + 2(H−1)(α_out + S/(n·b_out)); reducescatter and allgather half of it;
  broadcast: a chain over host leaders then chains inside hosts.

With a link-graph Topology, concurrent transfers whose routes share a link add a line ``count·c/bandwidth_link``
to their step (the link's bandwidth scaled by the least efficiency B_ij / route bottleneck of the pairs on it).

Straggler vector τ (seconds each device arrives late). Every algorithm of allreduce, reducescatter, allgather and
alltoall makes every output depend on every input, so the collective cannot finish before ``max τ + T(S)``; for a
ring this is exact (device j after s steps is ready at ``max_{k≤s} τ_{j−k} + s·step``, and s ≥ n−1 steps run).
Pipelined broadcasts (ring, tree) need device v only when the first chunk reaches it, at ``depth_v × beat``
(beat = one chunk over one hop at the optimal chunking): ``T = max_v (τ_v − depth_v·beat) + T(S)`` (the root has
depth 0, so a late root delays everything). Direct and hierarchical broadcasts are treated as synchronising
(``max τ + T(S)``; conservative). Sendrecv pair k starts at ``max(τ_src, τ_dst)``; the slowest pair ends it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seedance.errors import SpecError
from seedance.models.cost._curves import Pipeline, Steps, Term
from seedance.models.cost._fabric import Fabric
from seedance.models.cost.ring import RingOrder, best_ring, host_ring_fast, per_host

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "rhd", "direct", "hierarchical"),
    "reducescatter": ("ring", "rhd", "direct", "hierarchical"),
    "allgather": ("ring", "rhd", "direct", "hierarchical"),
    "broadcast": ("ring", "tree", "direct", "hierarchical"),
    "alltoall": ("direct",),
    "sendrecv": ("direct", "ring"),
}
COLLECTIVES = tuple(ALGORITHMS)
DIRECT_CONTENTION_MAX_DEVICES = 256  # above this, direct algorithms skip per-link contention (O(n²) routes)


@dataclass(frozen=True, eq=False)
class Plan:
    """A collective's cost on one fabric: ``T(S) = Σ terms`` plus how τ enters (``tau``: "sync", "depth", "pairs")."""

    curve: tuple[Term, ...]
    tau: str = "sync"
    depth: np.ndarray | None = None  # "depth": hops from the root per device; the beat comes from ``beat``
    beat: Pipeline | None = None
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # "pairs": src, dst, α, s/B


def ring_of(fabric: Fabric) -> RingOrder:
    if "ring" not in fabric.cache:
        fast = host_ring_fast(fabric.bandwidth_Bps, fabric.latency_s, fabric.host_of)
        fabric.cache["ring"] = fast or best_ring(fabric.bandwidth_Bps / 1e9, fabric.latency_s * 1e6, fabric.host_of)
    return fabric.cache["ring"]


def _contention(fabric: Fabric, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lines (0, count/effective bandwidth) per byte per transfer for links shared by ≥ 2 of the transfers.

    Without a link graph each ordered pair is its own link, so only repeated pairs contend.
    """
    n = fabric.num_devices
    pair, count = np.unique(np.asarray(src) * n + np.asarray(dst), return_counts=True)
    if not fabric.routes or not fabric.links:
        shared = count >= 2
        i, j = np.divmod(pair[shared], n)
        return np.zeros(int(shared.sum())), count[shared] * fabric.seconds_per_byte_at(i, j)
    ids, owners, link_bps = fabric.route_links(pair)
    if ids.size == 0:
        return np.zeros(0), np.zeros(0)
    uses = np.bincount(ids, weights=count[owners], minlength=len(link_bps))
    # efficiency of a pair: its B over the slowest link of its route; a shared link gets its pairs' least
    slowest = np.full(len(pair), np.inf)
    np.minimum.at(slowest, owners, link_bps[ids])
    i, j = np.divmod(pair, n)
    with np.errstate(invalid="ignore"):  # a device paired with itself: inf / inf; such pairs own no link
        pair_efficiency = np.minimum(1.0, fabric.bandwidth_Bps[i, j] / slowest)
    link_efficiency = np.ones(len(link_bps))
    np.minimum.at(link_efficiency, ids, pair_efficiency[owners])
    shared = np.flatnonzero(uses >= 2)
    return np.zeros(len(shared)), uses[shared] / (link_bps[shared] * link_efficiency[shared])


def _hop_lines(fabric: Fabric, src: np.ndarray, dst: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Lines of concurrent transfers src[k]→dst[k], each of ``fraction``·S bytes, including link contention."""
    a = fabric.latency_s[src, dst]
    s = fabric.seconds_per_byte_at(src, dst) * fraction
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    key = ("contention", src.tobytes(), dst.tobytes())  # reused across terms and plans
    if key not in fabric.cache:
        fabric.cache[key] = _contention(fabric, src, dst)
    ca, cs = fabric.cache[key]
    return np.concatenate([a, ca]), np.concatenate([s, cs * fraction])


def ring_channels(fabric: Fabric) -> list[np.ndarray]:
    """The rings the ring algorithms run concurrently, each carrying an equal share of the data (cached).

    One bottleneck-aware ring, or — on several hosts of g ≥ 2 devices each, when it is faster — g rings as NCCL's
    channels: ring r visits every host's intra-node ring from local position r, so each channel leaves a host
    through a different device (and NIC); the rings share intra-node hops, which then contend.
    """
    if "ring_channels" in fabric.cache:
        return fabric.cache["ring_channels"]
    single = [np.array(ring_of(fabric).order, dtype=np.int64)]
    chosen = single
    hosts = fabric.hosts()
    if len(hosts) >= 2 and len({len(h) for h in hosts}) == 1 and len(hosts[0]) >= 2:
        rings = _host_groups(fabric)
        stacked = np.stack(rings)  # (hosts, g)
        multi = [np.concatenate([stacked[:, k:], stacked[:, :k]], axis=1).ravel() for k in range(len(rings[0]))]

        def key(channels: list[np.ndarray]) -> tuple[float, float]:
            steps = _ring_steps(fabric, channels, 1, 1.0)
            return float(steps.slope_s_per_byte.max()), float(steps.intercept_s.max())

        chosen = multi if key(multi) < key(single) else single
    fabric.cache["ring_channels"] = chosen
    return chosen


def _ring_steps(fabric: Fabric, channels: list[np.ndarray], count: float, fraction: float) -> Steps:
    """``count`` ring steps; every channel moves ``fraction``/len(channels)·S over each of its hops at once.

    Latency: a ring's latency is the sum of its hops' latencies. A piece of data crosses each hop of its ring once per
    ``len(ring)`` steps, and the pipelined steps overlap, so a step costs the *mean* hop latency of its channel (the
    slowest channel's), not the largest hop's: one slow network hop in a ring of NVLink hops is paid once per round,
    not at every step. Homogeneous rings are unchanged."""
    src = np.concatenate(channels)
    dst = np.concatenate([np.roll(c, -1) for c in channels])
    a, s = _hop_lines(fabric, src, dst, fraction / len(channels))
    mean = max(float(fabric.latency_s[c, np.roll(c, -1)].mean()) for c in channels)
    return Steps.of(count, np.full(len(a), mean), s)


def _direct_steps(fabric: Fabric, fraction: float, devices: np.ndarray | None = None) -> Steps:
    """One shot of all-to-all traffic, ``fraction``·S bytes per ordered pair, each device's port shared."""
    inv = fabric.seconds_per_byte
    a = fabric.latency_s.max(axis=1)
    s = np.maximum(inv.sum(axis=1), inv.sum(axis=0)) * fraction
    n = fabric.num_devices
    if fabric.routes and n <= DIRECT_CONTENTION_MAX_DEVICES:
        src, dst = np.nonzero(~np.eye(n, dtype=bool))
        ca, cs = _contention(fabric, src, dst)
        a = np.concatenate([a, ca + fabric.latency_s.max()])
        s = np.concatenate([s, cs * fraction])
    return Steps.of(1, a, s)


def _rhd_terms(fabric: Fabric, order: np.ndarray, halves: int) -> list[Steps]:
    """Recursive halving (reduce-scatter) ``halves`` = 1, or halving + doubling (allreduce) = 2, as Steps.

    Positions index ``order``; the extra n−p devices fold into partners first and get results back last.
    """
    n = len(order)
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    terms = []
    if extra:
        src, dst = order[p:], order[:extra]
        terms.append(Steps.of(1, *_hop_lines(fabric, src, dst, 1.0)))
    positions = np.arange(p)
    distance, fraction = p // 2, 0.5
    while distance >= 1:
        partner = positions ^ distance
        terms.append(Steps.of(halves, *_hop_lines(fabric, order[positions], order[partner], fraction)))
        distance //= 2
        fraction /= 2
    if extra:
        back = 1.0 if halves == 2 else 1.0 / n  # the full result (allreduce) or the device's own shard
        terms.append(Steps.of(1, *_hop_lines(fabric, order[:extra], order[p:], back)))
    return terms


def _tree_edges(order: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent→child edges of two heap-layout binary trees over ``order`` (the second shifted by one), and depth."""
    n = len(order)
    child = np.arange(1, n)
    parent = (child - 1) // 2
    shifted = np.roll(order, -1)
    src = np.concatenate([order[parent], shifted[parent]])
    dst = np.concatenate([order[child], shifted[child]])
    return src, dst, int(np.floor(np.log2(n))) if n > 1 else 0


def _tree_pipeline(fabric: Fabric, order: np.ndarray, up_and_down: bool) -> Pipeline:
    src, dst, depth = _tree_edges(order)
    both_src = np.concatenate([src, dst])
    both_dst = np.concatenate([dst, src])
    alpha = float(fabric.latency_s[both_src, both_dst].max())
    slope = float(fabric.seconds_per_byte_at(both_src, both_dst).max())
    return Pipeline(hops=2 * depth if up_and_down else depth, alpha_s=alpha, slope_s_per_byte=2 * slope)


def _chain(fabric: Fabric, chain: np.ndarray) -> Pipeline:
    if len(chain) < 2:
        return Pipeline(hops=0, alpha_s=0.0, slope_s_per_byte=0.0)
    src, dst = chain[:-1], chain[1:]
    a, s = _hop_lines(fabric, src, dst, 1.0)
    return Pipeline(hops=len(chain) - 1, alpha_s=float(a.max()), slope_s_per_byte=float(s.max()))


def _host_groups(fabric: Fabric) -> list[np.ndarray]:
    """Each host's devices in its own best ring order; SpecError unless every host has the same count."""
    hosts = fabric.hosts()
    sizes = {len(h) for h in hosts}
    if len(sizes) != 1:
        raise SpecError(
            "algorithm", f"hierarchical needs the same number of devices on every host, got {sorted(sizes)}",
            "another algorithm (ring, tree, rhd, direct) or auto",
        )
    if "host_rings" not in fabric.cache:  # identical hosts (same sub-matrices) share one search
        fabric.cache["host_rings"] = per_host(
            fabric.bandwidth_Bps, fabric.latency_s, hosts,
            lambda sub_b, sub_l: best_ring(sub_b / 1e9, sub_l * 1e6, np.zeros(len(sub_b), dtype=np.int64)).order,
        )
    return fabric.cache["host_rings"]


def _hierarchical(fabric: Fabric, collective: str) -> list[Term]:
    rings = _host_groups(fabric)
    g, hosts = len(rings[0]), len(rings)
    n = fabric.num_devices
    intra_src = np.concatenate([r for r in rings])
    intra_dst = np.concatenate([np.roll(r, -1) for r in rings])
    by_rank = np.stack(rings, axis=1)  # by_rank[r] = devices of local rank r, host by host
    inter_src = by_rank.ravel()
    inter_dst = np.roll(by_rank, -1, axis=1).ravel()

    def intra(count: float) -> Steps:
        return Steps.of(count, *_hop_lines(fabric, intra_src, intra_dst, 1.0 / g))

    def inter(count: float) -> Steps:
        return Steps.of(count, *_hop_lines(fabric, inter_src, inter_dst, 1.0 / n))

    if collective == "allreduce":
        return [intra(g - 1), inter(2 * (hosts - 1)), intra(g - 1)]
    if collective in ("reducescatter", "allgather"):
        return [intra(g - 1), inter(hosts - 1)]
    # broadcast: root's host leads; a chain over the devices of the root's local rank, then chains inside hosts
    root_rank = int(np.flatnonzero(by_rank == 0)[0] // hosts) if np.any(by_rank == 0) else 0
    leaders = np.roll(by_rank[root_rank], -int(np.flatnonzero(by_rank[root_rank] == 0)[0]))
    inside = max((_chain(fabric, np.roll(r, -int(np.flatnonzero(r == lead)[0]))) for r, lead in
                  zip(rings, by_rank[root_rank])), key=lambda p: (p.slope_s_per_byte, p.alpha_s))
    return [_chain(fabric, leaders), inside]


def build_plan(fabric: Fabric, collective: str, algorithm: str) -> Plan:
    """The :class:`Plan` of ``collective`` by ``algorithm`` on ``fabric`` (cached on the fabric)."""
    key = ("plan", collective, algorithm)
    if key in fabric.cache:
        return fabric.cache[key]
    n = fabric.num_devices
    # only what the algorithm needs: the bottleneck-aware ring for ring, tree and rhd; channels for ring
    order = np.array(ring_of(fabric).order, dtype=np.int64) if algorithm in ("ring", "tree", "rhd") else None
    channels = ring_channels(fabric) if n > 1 and algorithm == "ring" else [order]
    if n == 1:
        plan = Plan(curve=())
    elif algorithm == "hierarchical":
        plan = Plan(curve=tuple(_hierarchical(fabric, collective)))
    elif collective == "allreduce":
        plan = {
            "ring": lambda: Plan(curve=(_ring_steps(fabric, channels, 2 * (n - 1), 1.0 / n),)),
            "tree": lambda: Plan(curve=(_tree_pipeline(fabric, order, up_and_down=True),)),
            "rhd": lambda: Plan(curve=tuple(_rhd_terms(fabric, order, halves=2))),
            "direct": lambda: Plan(curve=(Steps.of(2, *_lines(_direct_steps(fabric, 1.0 / n))),)),
        }[algorithm]()
    elif collective in ("reducescatter", "allgather"):
        plan = {
            "ring": lambda: Plan(curve=(_ring_steps(fabric, channels, n - 1, 1.0 / n),)),
            "rhd": lambda: Plan(curve=tuple(_rhd_terms(fabric, order, halves=1))),
            "direct": lambda: Plan(curve=(_direct_steps(fabric, 1.0 / n),)),
        }[algorithm]()
    elif collective == "alltoall":
        plan = Plan(curve=(_direct_steps(fabric, 1.0 / n),))
    elif collective == "broadcast":
        root_first = None if order is None else np.roll(order, -int(np.flatnonzero(order == 0)[0]))
        if algorithm == "ring":
            pipe = _chain(fabric, root_first)
            plan = Plan(curve=(pipe,), tau="depth", depth=_positions(root_first), beat=pipe)
        elif algorithm == "tree":
            pipe = _tree_pipeline(fabric, root_first, up_and_down=False)
            depth = np.empty(n)
            depth[root_first] = np.floor(np.log2(np.arange(n) + 1))  # heap depth of each position
            plan = Plan(curve=(pipe,), tau="depth", depth=depth, beat=pipe)
        else:  # direct: the root's port carries n-1 copies
            inv = fabric.seconds_per_byte
            plan = Plan(curve=(Steps.of(1, [fabric.latency_s[0].max()], [inv[0].sum()]),))
    else:  # sendrecv
        src = order if algorithm == "ring" else np.arange(n)
        dst = np.roll(src, -1)
        a, s = _hop_lines(fabric, src, dst, 1.0)
        plan = Plan(
            curve=(Steps.of(1, a, s),), tau="pairs",
            pairs=(src, dst, fabric.latency_s[src, dst], fabric.seconds_per_byte_at(src, dst)),
        )
    fabric.cache[key] = plan
    return plan


def _lines(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    return steps.intercept_s, steps.slope_s_per_byte


def _positions(chain: np.ndarray) -> np.ndarray:
    depth = np.empty(len(chain))
    depth[chain] = np.arange(len(chain))
    return depth
