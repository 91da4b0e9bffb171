"""The NCCL-faithful cost model (the default): NCCL's own tuner, evaluated on our topology.

NCCL picks, for every collective call, the (algorithm, protocol) pair its tuner predicts fastest and then a number
of channels (thread blocks, each driving its own ring or tree). This module reproduces that decision and its time
estimate from the constants NCCL ships, so a prediction names what NCCL would run and costs it the way NCCL does:

``time = launch + latency(algorithm, protocol) + size / bandwidth(algorithm, protocol, channels)``

All constants are NVIDIA/nccl v2.30.7-1 (``makefiles/version.mk``), file named beside each; the formulas follow
``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` (src/graph/tuning.cc) and the channel choice of
``topoGetAlgoInfo`` (src/enqueue.cc). What NCCL measures from the machine (its topology search in
src/graph/search.cc) we derive from the :class:`~seedance.models.topology.Topology`:

- ``ring_GBps`` (NCCL: ``nChannels × bwIntra`` of the ring graph): the bottleneck hop of the best ring over one
  server's devices (the slowest distinct server). Links carry their calibrated efficiency (``_presets.py``), so this
  is the large-message ring busbw inside a server.
- ``net_GBps`` (NCCL: ``nChannels × bwInter``): what one server's NICs sustain for the multi-server ring — one channel
  per local GPU, each crossing to the next server from its own GPU, the crossings sharing their routes' links
  (contention, shared NICs); it bounds rings and trees across servers.
- Channels: NCCL's search picks a per-channel speed from ``speedArrayIntra`` / ``sm90SpeedArrayIntra``
  (src/graph/search.cc) and doubles the channels when the speed is ≥ 25 GB/s; we take the largest listed speed that
  gives at least two channels, ``nChannels = floor(ring_GBps / speed)``, doubled likewise.
- Hardware class of the intra-server hop (NVLink or PCI; NCCL ``typeIntra``): NVLink when the link graph routes
  GPU pairs over NVLink/NVSwitch, or, for a matrix topology, when the intra-server ring reaches 40 GB/s (beyond
  PCIe Gen4 ×16).
- GPU generation (NCCL ``compCapIndex``: Volta, Ampere, Hopper, Blackwell) from ``device_kinds`` (V100, A100,
  H100/H200/H800/H20, B100/B200/GB200); unknown kinds count as Ampere.
- NVLink SHARP (NVLS, NVLS-tree): Hopper or newer GPUs on an NVSwitch (a ``nvswitch`` node in the link graph, or
  ``meta["nccl"]["nvls"]``).

Two constants are ours and calibrated (see :data:`LAUNCH_OVERHEAD_US`, :data:`NVLS_LINK_EFFICIENCY`); a topology
may override them and add a per-message network latency through ``Topology.meta["nccl"]`` (keys ``launch_us``,
``net_latency_us``, ``nvls``, ``arch``, ``intra``) — used for clouds whose network is not InfiniBand (e.g. EFA).

Collectives NCCL's tuner does not cover (alltoall, sendrecv: point-to-point in NCCL) use the alpha-beta ``direct``
plan plus NCCL's p2p launch; they are reported as algorithm ``p2p``, protocol ``Simple``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.cost._fabric import Fabric, fabric_of
from seedance.models.cost.scalar import scalar_time

# --- NCCL constants (NVIDIA/nccl v2.30.7-1) ------------------------------------------------------------------------
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
#: ``baseLatencies`` (µs) per algorithm and protocol (LL, LL128, Simple): src/graph/tuning.cc, ncclTunerConstantsDefaults.
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
                   "nvls_tree": (0.0, 0.0, 0.0), "pat": (8.0, 8.0, 8.0)}
#: ``hwLatencies`` (µs per step) for NVLink, PCI and network hops: src/graph/tuning.cc, ncclTunerConstantsDefaults.
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
               "nvls_tree": (0.0, 0.0, 25.0), "pat": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0),
            "nvls_tree": (0.0, 0.0, 0.0), "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 20.9), "pat": (0.0, 0.0, 14.0)},
}
#: Per-generation tables, rows Volta, Ampere, Hopper, Blackwell; columns 1 node, 2 nodes, more (src/graph/tuning.cc).
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
PER_CH_MAX_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
#: ``nvlsEfficiency`` per generation (src/graph/tuning.cc).
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
#: ``treeCorrectionFactor[protocol][log2(size/64)]`` for tree allreduce, 64 B .. 256 MiB (src/graph/tuning.cc).
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
#: Network post overhead (µs) on x86 Intel hosts, ×3 for Simple (``getNetOverhead``, src/graph/tuning.cc).
NET_OVERHEAD_US = 1.0
#: Ring/Simple allreduce across servers: latency ×1.4 (sm80+) or ×1.9 once size/(channels·ranks) ≥ 64 B
#: ("plateau effect of ring", ``ncclTopoGetAlgoTime``, src/graph/tuning.cc).
RING_PLATEAU = (1.9, 1.4)
#: Thread thresholds (bytes per thread before another channel is used): NCCL_LL/LL128/SIMPLE_THREAD_THRESHOLD =
#: 8, 8, 64 (src/include/comm.h); ring LL's is multiplied by the rank count (src/graph/tuning.cc).
THREAD_THRESHOLD = (8, 8, 64)
#: Threads per channel: NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512
#: (src/include/device.h).
MAX_THREADS = (512, 640, 512)
#: NVLS channels: NVLS_NCHANNELS_SM90 = 16, NVLS_NCHANNELS_SM100 = 32 (src/transport/nvls.cc).
NVLS_CHANNELS = (0, 0, 16, 32)
#: Per-channel ring speeds NCCL's search tries, GB/s: ``speedArrayIntra`` and ``sm90SpeedArrayIntra``
#: (src/graph/search.cc).
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
#: NCCL caps the search at MAXCHANNELS/2 = 32 channels (src/include/device.h MAXCHANNELS 64).
MAX_CHANNELS = 32

# --- Calibrated here -----------------------------------------------------------------------------------------------
#: Host-side cost of one collective call that NCCL's tuner leaves out (kernel launch, nccl-tests' loop), µs.
#: Calibrated: the median gap between NCCL's own small-message latency (ring/tree LL, 8 ranks on NVLink: 15.0 µs)
#: and published 8 B – 4 KiB all_reduce_perf times on 8 × A100 (17.7–25.3 µs; tests/data/nccl,
#: curve a100-1x8-allreduce) is 7 µs.
LAUNCH_OVERHEAD_US = 7.0
#: NVLS bandwidth actually reached relative to NCCL's model (ring busbw × nvlsEfficiency × 2 for allreduce).
#: Calibrated against 2 × p5.48xlarge (8 × H100 each) all_reduce_perf at 16 GiB: 487 GB/s busbw
#: (tests/data/nccl, curve h100-p5-2x8-allreduce) where the model without it gives 590.
NVLS_LINK_EFFICIENCY = 0.82

ALGORITHMS_NCCL: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "nvls", "nvls_tree"),
    "reducescatter": ("ring", "nvls", "pat"),
    "allgather": ("ring", "nvls", "pat"),
    "broadcast": ("ring",),
    "alltoall": ("p2p",),
    "sendrecv": ("p2p",),
}
_ARCH = (("b100", 3), ("b200", 3), ("gb200", 3), ("gb300", 3), ("b300", 3), ("h100", 2), ("h200", 2), ("h800", 2),
         ("h20", 2), ("gh200", 2), ("a100", 1), ("a800", 1), ("a10", 1), ("a30", 1), ("a40", 1), ("v100", 0))


@dataclass(frozen=True)
class NcclView:
    """What NCCL's tuner knows about a communicator, derived from the topology (cached on the fabric)."""

    ranks: int
    nodes: int
    ppn: int
    arch: int  # 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
    intra: str  # "nvlink" or "pci"
    ring_GBps: float
    net_GBps: float
    channels: int
    nvls: bool
    launch_us: float
    net_latency_us: float


def _arch_of(kinds: tuple[str, ...]) -> int:
    found = []
    for kind in set(kinds):
        low = str(kind).lower()
        found.append(next((index for name, index in _ARCH if name in low), 1))
    return min(found) if found else 1  # NCCL tunes for the oldest GPU (minCompCap)


def _nccl_meta(topology: Any) -> dict:
    meta = getattr(topology, "meta", None) or {}
    extra = meta.get("nccl", {}) if hasattr(meta, "get") else {}
    if not isinstance(extra, dict) and not hasattr(extra, "get"):
        raise SpecError("meta.nccl", "is not a mapping", "keys launch_us, net_latency_us, nvls, arch, intra")
    return dict(extra)


def _number(extra: dict, key: str, default: float) -> float:
    value = extra.get(key, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not (value >= 0 and math.isfinite(value)):
        raise SpecError(f"nccl.{key}", f"is {extra.get(key)!r}", "finite microseconds >= 0")
    return value


def _host_ring_busbw(fabric: Fabric, members: np.ndarray) -> float:
    """Busbw (GB/s) of the best ring over one server's devices (its bottleneck hop)."""
    from seedance.models.cost.ring import best_ring

    if len(members) < 2:
        return float("inf")
    sub_b = fabric.bandwidth_Bps[np.ix_(members, members)] / 1e9
    sub_l = fabric.latency_s[np.ix_(members, members)] * 1e6
    order = best_ring(sub_b, sub_l, np.zeros(len(members), dtype=np.int64)).order
    hops = [(order[k], order[(k + 1) % len(order)]) for k in range(len(order))]
    return float(min(sub_b[i, j] for i, j in hops))


def _net_busbw(fabric: Fabric, hosts: list[np.ndarray]) -> float:
    """Busbw (GB/s) one server's NICs sustain for the multi-server ring: NCCL runs one channel per local GPU, channel k
    leaving server h from its ring position k-1 for position k of server h+1; the g concurrent crossings share the
    links of their routes (contention included), so ``net = g / max seconds-per-byte`` of one crossing."""
    from seedance.models.cost._algorithms import _hop_lines
    from seedance.models.cost.ring import best_ring

    def ring(members: np.ndarray) -> np.ndarray:
        if len(members) < 2:
            return members
        sub_b = fabric.bandwidth_Bps[np.ix_(members, members)] / 1e9
        sub_l = fabric.latency_s[np.ix_(members, members)] * 1e6
        return members[list(best_ring(sub_b, sub_l, np.zeros(len(members), dtype=np.int64)).order)]

    first, second = ring(hosts[0]), ring(hosts[1])
    g = min(len(first), len(second))
    src = np.array([first[(k - 1) % g] for k in range(g)], dtype=np.int64)
    dst = np.array([second[k] for k in range(g)], dtype=np.int64)
    _, slopes = _hop_lines(fabric, src, dst, 1.0)
    slope = float(np.max(slopes))
    return g * 1e-9 / slope if slope > 0 else float("inf")


def _uses_nvlink(topology: Any, fabric: Fabric, members: np.ndarray) -> bool:
    graph = getattr(topology, "graph", None)
    if graph is not None and len(members) >= 2:
        route = topology.routes.get((int(members[0]), int(members[1])), ())
        kinds = {graph.edges[u, v].get("kind") for u, v in route if graph.has_edge(u, v)}
        return bool(kinds & {"nvlink", "nvswitch"})
    if len(members) < 2:
        return True
    sub = fabric.bandwidth_Bps[np.ix_(members, members)]
    off = sub[~np.eye(len(members), dtype=bool)]
    return float(off.min()) >= 40e9


def _has_nvswitch(topology: Any) -> bool:
    graph = getattr(topology, "graph", None)
    if graph is None:
        return False
    return any(data.get("kind") == "nvswitch" for _, data in graph.nodes(data=True))


def view_of(topology: Any) -> NcclView:
    """The :class:`NcclView` of a Topology or matrix tuple (cached on its fabric)."""
    fabric = fabric_of(topology)
    cached = fabric.cache.get("nccl_view")
    if cached is not None:
        return cached
    extra = _nccl_meta(topology)
    n = fabric.num_devices
    hosts = fabric.hosts()
    nodes = len(hosts)
    ppn = max(len(h) for h in hosts)
    kinds = tuple(getattr(topology, "device_kinds", ()) or ())
    arch = extra.get("arch")
    if arch is None:
        arch = _arch_of(kinds)
    elif arch not in (0, 1, 2, 3):
        raise SpecError("nccl.arch", f"is {arch!r}", "0 (Volta), 1 (Ampere), 2 (Hopper) or 3 (Blackwell)")
    intra = extra.get("intra")
    if intra is None:
        intra = "nvlink" if _uses_nvlink(topology, fabric, hosts[0]) else "pci"
    elif intra not in ("nvlink", "pci"):
        raise SpecError("nccl.intra", f"is {intra!r}", "nvlink or pci")
    if n == 1:
        ring, net = float("inf"), float("inf")
    else:
        seen: dict[bytes, float] = {}  # identical servers (same sub-matrix) share one ring search
        for members in hosts:
            key = fabric.bandwidth_Bps[np.ix_(members, members)].tobytes()
            if key not in seen:
                seen[key] = _host_ring_busbw(fabric, members)
        ring = min(seen.values())  # NCCL's channels run at the slowest server's ring speed
        net = _net_busbw(fabric, hosts) if nodes > 1 else float("inf")
    speeds = SPEEDS_INTRA_SM90 if arch >= 2 else SPEEDS_INTRA
    channels = 1
    if math.isfinite(ring):
        speed = next((s for s in speeds if ring / s >= 2), speeds[-1])
        channels = max(1, int(ring // speed))
        if speed >= 25.0:
            channels *= 2
        channels = min(channels, MAX_CHANNELS)
    nvls = extra.get("nvls")
    if nvls is None:
        nvls = arch >= 2 and _has_nvswitch(topology)
    view = NcclView(
        ranks=n, nodes=nodes, ppn=ppn, arch=int(arch), intra=str(intra), ring_GBps=ring, net_GBps=net,
        channels=channels, nvls=bool(nvls) and ppn > 1,
        launch_us=_number(extra, "launch_us", LAUNCH_OVERHEAD_US),
        net_latency_us=_number(extra, "net_latency_us", 0.0),
    )
    fabric.cache["nccl_view"] = view
    return view


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


@dataclass(frozen=True)
class Entry:
    """One (algorithm, protocol) candidate: latency (µs), algorithm bandwidth (GB/s) with all channels, channels,
    per-channel byte threshold for dropping channels, and whether the plateau / tree correction apply."""

    algorithm: str
    protocol: str
    latency_us: float
    bw_GBps: float
    channels: int
    threshold_bytes: float  # nc is reduced while size < nc * threshold_bytes
    plateau: float  # latency multiplier once size/(channels·ranks) >= 64 (1.0: none)
    tree_correction: bool


def _entries(view: NcclView, collective: str) -> list[Entry]:
    """NCCL's bandwidth and latency table for one collective (ncclTopoTuneModel, src/graph/tuning.cc)."""
    n, nodes, arch = view.ranks, view.nodes, view.arch
    nsteps = 2 * (n - 1) if collective == "allreduce" else (n - 1 if collective in ("reducescatter", "allgather")
                                                            else n)
    out = []
    for algorithm in ALGORITHMS_NCCL[collective]:
        if not _algorithm_applies(view, algorithm):
            continue
        for p, proto in enumerate(PROTOCOLS):
            if algorithm in ("nvls", "nvls_tree", "pat") and proto != "Simple":
                continue
            if proto == "LL128" and view.intra != "nvlink":
                continue  # LL128 is enabled only up to NVLink paths (typeIntra <= PATH_NVB, src/graph/tuning.cc)
            channels = NVLS_CHANNELS[arch] if algorithm in ("nvls", "nvls_tree") else view.channels
            if algorithm in ("nvls", "nvls_tree") and channels < 2:
                continue
            alg = _algorithm_bandwidth(view, collective, algorithm, proto, channels, nsteps)
            if alg <= 0:
                continue
            latency = _latency(view, collective, algorithm, p, nsteps)
            plateau = 1.0
            if algorithm == "ring" and proto == "Simple" and nodes > 1 and collective == "allreduce":
                plateau = RING_PLATEAU[1] if arch >= 1 else RING_PLATEAU[0]
            threads = MAX_THREADS[p]
            threshold = THREAD_THRESHOLD[p] * (n if (algorithm == "ring" and proto == "LL") else 1)
            out.append(Entry(
                algorithm=algorithm, protocol=proto, latency_us=latency, bw_GBps=alg, channels=channels,
                threshold_bytes=threads * threshold if algorithm in ("ring", "tree") else 0.0,
                plateau=plateau, tree_correction=(algorithm == "tree" and collective == "allreduce"),
            ))
    return out


def _algorithm_applies(view: NcclView, algorithm: str) -> bool:
    """Whether NCCL considers ``algorithm`` on this system at all."""
    if algorithm == "p2p":
        return False
    if algorithm in ("nvls", "nvls_tree") and not view.nvls:
        return False
    if algorithm == "nvls_tree" and view.nodes == 1:
        return False  # "Disable NVLS Tree on a single node"
    if algorithm == "nvls" and view.nodes > 1:
        return False  # multi-node NVLS needs CollNet (IB SHARP), not modelled
    if algorithm == "pat" and view.nodes != view.ranks:
        return False  # PAT: one GPU per node only
    return True


def _algorithm_bandwidth(view: NcclView, collective: str, algorithm: str, proto: str, channels: int,
                         nsteps: int) -> float:
    """The algorithm bandwidth (GB/s, all channels) of one (algorithm, protocol): the bus bandwidth NCCL's table
    gives, capped per protocol, converted by the algorithm's steps."""
    n, nodes, ppn, arch = view.ranks, view.nodes, view.ppn, view.arch
    index2 = min(nodes, 3) - 1
    index1 = arch if nodes == 1 else 0  # multi-node LL: CPU vendor row (Intel); we assume Intel hosts
    ll_max = LL_MAX_BW[index1][index2]
    if algorithm in ("nvls", "nvls_tree"):
        per = view.ring_GBps / channels * NVLS_EFFICIENCY[arch] * NVLS_LINK_EFFICIENCY
        intra_bw = per * (channels - 1) / channels
        intra_bw *= 2.0 if collective == "allreduce" else (ppn - 1) / ppn
        inter_bw = view.net_GBps / channels * (2 if nodes <= 2 and algorithm == "nvls_tree" else 1)
        cap = PER_CH_MAX_NVLS_TREE_BW[arch][index2] if algorithm == "nvls_tree" else math.inf
        bw = min(intra_bw, inter_bw, cap)
        bus = channels * bw
    elif algorithm == "tree":
        if nodes == 1:
            total = view.ring_GBps
        elif nodes == 2:
            total = min(view.ring_GBps, 2 * view.net_GBps)
        else:
            total = min(view.ring_GBps, view.net_GBps)
        bus = total
    else:  # ring, pat
        bus = min(view.ring_GBps, view.net_GBps)
    if algorithm == "ring" and proto == "LL":
        bus = min(ll_max, bus * 0.5)
    if algorithm == "ring" and proto == "LL128":
        bus = min(bus * 0.92, channels * PER_CH_MAX_RING_LL128_BW[arch][index2])
    if algorithm == "tree" and collective == "allreduce":
        bus = min(bus * 0.92, channels * PER_CH_MAX_TREE_BW[arch][index2])
    if algorithm == "tree" and proto == "LL":
        bus = min(bus / 3.8, ll_max)
    if algorithm == "tree" and proto == "LL128":
        bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0),
                  channels * PER_CH_MAX_TREE_LL128_BW[arch][index2])
    if algorithm == "pat":
        bus *= 0.75
    if algorithm in ("ring", "nvls", "nvls_tree"):
        return bus * n / nsteps
    if algorithm == "tree":
        return bus * 0.5
    return bus  # pat: NCCL leaves allgather/reducescatter non-ring bandwidth unconverted


def _latency(view: NcclView, collective: str, algorithm: str, p: int, nsteps: int) -> float:
    """The latency (µs) of one (algorithm, protocol number ``p``): base plus the hops of the algorithm."""
    n, nodes, ppn = view.ranks, view.nodes, view.ppn
    proto = PROTOCOLS[p]
    intra_hw = view.intra
    hw_name = intra_hw if nodes == 1 else "net"
    base = BASE_LATENCY_US[algorithm][p]
    intra_lat = HW_LATENCY_US[intra_hw][algorithm][p]
    inter_lat = (HW_LATENCY_US["net"]["tree"][p] if ppn == 1 else HW_LATENCY_US["net"][algorithm][p])
    inter_lat += view.net_latency_us
    if algorithm == "ring":
        lat_hw = HW_LATENCY_US[hw_name]["ring"][p]
        if collective == "broadcast":
            if proto == "Simple":
                lat_hw = HW_LATENCY_US[hw_name]["tree"][p]
            if nodes > 1:
                lat_hw += view.net_latency_us
            return base + nsteps * lat_hw
        net_overhead = (NET_OVERHEAD_US * (3 if proto == "Simple" else 1)) if nodes > 1 else 0.0
        lat_in = max(intra_lat, net_overhead)
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if collective == "allreduce" else nodes - 1)
        return base + (nsteps - inter_steps) * lat_in + inter_steps * inter_lat
    if algorithm == "tree":
        return base + 2 * ((ppn - 1) * intra_lat + _log2i(nodes) * inter_lat)
    if algorithm == "nvls":
        return intra_lat + (inter_lat if nodes > 1 else 0.0)
    if algorithm == "nvls_tree":
        return base + intra_lat + 2 * _log2i(nodes) * inter_lat
    return base + _log2i(nodes) * (inter_lat / 3.5) + n * 2.8  # pat


def table(topology: Any, collective: str) -> list[Entry]:
    """NCCL's (algorithm, protocol) table for ``collective`` on ``topology`` (cached)."""
    fabric = fabric_of(topology)
    key = ("nccl_entries", collective)
    found = fabric.cache.get(key)
    if found is None:
        found = _entries(view_of(topology), collective)
        fabric.cache[key] = found
    return found


def _compiled(topology: Any, collective: str, algorithm: str, protocol: str) -> tuple:
    """The candidates of one call as plain tuples, for a fast scalar loop (cached on the fabric)."""
    fabric = fabric_of(topology)
    key = ("nccl_compiled", collective, algorithm, protocol)
    found = fabric.cache.get(key)
    if found is not None:
        return found
    view = view_of(topology)
    rows = []
    for e in table(topology, collective) if view.ranks > 1 else ():
        if (algorithm != "auto" and e.algorithm != algorithm) or (protocol != "auto" and e.protocol != protocol):
            continue
        corr = TREE_CORRECTION[PROTOCOLS.index(e.protocol)] if e.tree_correction else None
        plateau_size = 64.0 * e.channels * view.ranks if e.plateau != 1.0 else math.inf
        rows.append((e.latency_us, e.latency_us * e.plateau, plateau_size, e.bw_GBps * 1000.0, e.channels,
                     e.threshold_bytes, corr, e.algorithm, e.protocol))
    if not rows and view.ranks > 1 and collective not in ("alltoall", "sendrecv"):
        valid = sorted({e.algorithm for e in table(topology, collective)})
        raise SpecError("algorithm", f"{algorithm}/{protocol} is not available for {collective} on this topology",
                        "auto or one of " + ", ".join(valid) + "; protocols LL, LL128, Simple")
    found = (view, tuple(rows))
    fabric.cache[key] = found
    return found


def choose(topology: Any, collective: str, size: float, algorithm: str = "auto", protocol: str = "auto"):
    """(time_s, algorithm, protocol, channels) of NCCL's choice at ``size`` (or of the forced algorithm/protocol)."""
    view, rows = _compiled(topology, collective, algorithm, protocol)
    if view.ranks == 1:
        return 0.0, ALGORITHMS_NCCL[collective][0], "Simple", 1
    if collective in ("alltoall", "sendrecv"):
        return _p2p(topology, collective, size, view)
    best, pick, used = math.inf, None, 1
    for lat, lat_plateau, plateau_size, bw, nch, thr, corr, name, proto in rows:
        if corr is not None and size >= 64:
            log_size = (int(size) >> 6).bit_length() - 1
            if log_size < 23:
                bw = bw * corr[log_size]
        nc = nch
        if thr and size < nch * thr:
            nc = max(1, min(nch, int(size // thr) + 1))
            bw = bw * nc / nch
        t = (lat_plateau if size >= plateau_size else lat) + size / bw
        if t < best:
            best, pick, used = t, (name, proto), nc
    return (best + view.launch_us) * 1e-6, pick[0], pick[1], used


def _p2p(topology: Any, collective: str, size: float, view: NcclView):
    seconds, _ = scalar_time(collective, float(size), fabric_of(topology), "direct")
    # NCCL p2p: one Simple-protocol step per peer exchange; its latency is the ring/Simple step of the hop class
    hop = HW_LATENCY_US["net" if view.nodes > 1 else view.intra]["ring"][2] + (view.net_latency_us if view.nodes > 1
                                                                              else 0.0)
    return seconds + (view.launch_us + hop) * 1e-6, "p2p", "Simple", view.channels


def valid_algorithms(collective: str) -> tuple[str, ...]:
    return ALGORITHMS_NCCL[collective]
