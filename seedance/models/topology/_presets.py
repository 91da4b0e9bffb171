"""Preset clusters, built as link graphs from published hardware figures (seed §2.4).

Every preset takes ``nodes`` (servers). With ``nodes > 1`` the servers are joined by InfiniBand through a
rail-optimised fat tree, as in NVIDIA's DGX SuperPOD reference architecture: NIC k of every server plugs into leaf
switch k ("rail" k), and the leaves meet at one logical spine. The fabric is modelled non-blocking (each leaf's uplink
carries the sum of its downlinks), so the NIC is the bottleneck of any inter-server route, as it is in a full-bisection
SuperPOD. A rail-matched pair crosses one switch, a cross-rail pair three.

Modelling choices, each a documented simplification:
- The six (A100) or four (H100) NVSwitch chips of a server are one non-blocking ``nvswitch`` node: every GPU spreads
  its NVLinks evenly over all chips and NCCL stripes over all of them, so a GPU pair sees the GPU's full NVLink rate.
- With one NIC per GPU (DGX A100/H100, ``pcie-8gpu``) NIC k is linked to GPU k itself: the link stands for the path
  through the PCIe switch they share, and keeps GPU k on its own rail k (the NIC NCCL pairs it with; a NIC linked to
  the shared switch would let routing tie-breaks put two GPUs on one NIC). With one NIC per GPU pair (DGX-1) the NIC
  hangs off the pair's PCIe switch. The CPU root complexes and the inter-socket link (kind ``upi``) complete the PCIe tree, which
  only ``pcie-8gpu`` and the DGX-1's non-NVLink pairs route GPU traffic over. Two GPUs of one server never route
  through the network (NCCL uses P2P or shared memory inside a node), so one server alone and one server of N agree.
- Bandwidths are per direction; ``efficiency`` turns the nominal rate into what NCCL's ring achieves on the link
  (calibration notes beside each constant, published measurements in :data:`PUBLISHED_BUSBW_GBps`).
- ``mixed`` alternates DGX A100 (even server index) and DGX-1 V100 (odd) servers, so it needs ``nodes >= 2`` and
  defaults to 2. A DGX-1 has four EDR (100 Gb/s) NICs, one per GPU pair; NIC k (GPUs 2k, 2k+1) joins rail 2k, and an
  HDR leaf runs that port at EDR rate, so every A100↔V100 route is limited by the V100 server's EDR NIC.
- Not modelled: NVLink SHARP / InfiniBand SHARP in-network reductions, NCCL's PXN relaying through a peer GPU, and
  congestion inside the fat tree (it is non-blocking here).

Graph nodes are named ``n<server>.gpu<i>``, ``n<server>.nvswitch``, ``n<server>.pcie<p>``, ``n<server>.cpu<s>``,
``n<server>.nic<rail>``, ``ib.leaf<rail>`` and ``ib.spine``; devices are indexed server-major. A preset's name is the
preset name for one server and ``<name>-<N>nodes`` otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seedance.errors import SpecError

if TYPE_CHECKING:  # networkx and the routing code load when a preset is built, not when names are listed
    import networkx as nx

    from seedance.models.topology._core import Topology

# --- Link rates (GB/s per direction, nominal) -------------------------------------------------------------------
#: NVLink 3 (A100): 12 links × 25 GB/s per direction = 300 GB/s (600 GB/s bidirectional). Source: NVIDIA A100
#: Tensor Core GPU Architecture whitepaper (2020), "Third-generation NVLink"; NVIDIA DGX A100 System Architecture
#: whitepaper (2020): 8 A100 joined by six NVSwitch chips.
NVLINK3_LINKS_PER_GPU = 12
NVLINK3_LINK_GBPS = 25.0
#: NVLink 4 (H100 SXM5): 18 links × 25 GB/s per direction = 450 GB/s (900 GB/s bidirectional). Source: NVIDIA H100
#: Tensor Core GPU Architecture whitepaper (2022), "Fourth-generation NVLink"; HGX H100: four third-generation
#: NVSwitch chips.
NVLINK4_LINKS_PER_GPU = 18
NVLINK4_LINK_GBPS = 25.0
#: NVLink 2 (V100 SXM2): 6 links × 25 GB/s per direction (300 GB/s bidirectional). Source: NVIDIA Tesla V100 GPU
#: Architecture whitepaper (2017); DGX-1 with V100 wires them as a hybrid cube-mesh (:data:`DGX1_V100_NVLINKS`).
NVLINK2_LINK_GBPS = 25.0
#: PCIe Gen3/Gen4/Gen5 ×16: 8/16/32 GT/s × 16 lanes × 128b/130b ÷ 8 = 15.75/31.5/63.0 GB/s per direction (PCI-SIG
#: PCI Express Base Specification 3.0/4.0/5.0 signalling rates).
PCIE_GEN3_X16_GBPS = 15.75
PCIE_GEN4_X16_GBPS = 31.5
PCIE_GEN5_X16_GBPS = 63.0
#: InfiniBand per NIC: EDR 100 Gb/s = 12.5 GB/s, HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s per direction (IBTA
#: data rates). DGX A100: eight ConnectX-6 HDR compute NICs, one per GPU (DGX A100 User Guide / System Architecture
#: whitepaper); DGX H100: eight ConnectX-7 NDR 400 Gb/s, one per GPU (DGX H100 User Guide); DGX-1 (V100): four EDR
#: 100 Gb/s NICs, one per pair of GPUs (DGX-1 with Tesla V100 System Architecture whitepaper, 2017).
IB_EDR_GBPS = 12.5
IB_HDR_GBPS = 25.0
IB_NDR_GBPS = 50.0
#: Inter-socket link of the PCIe-only server: Intel UPI at 10.4 GT/s moves 2 bytes per transfer, 20.8
#: GB/s per direction per link, and two-socket Xeon Scalable servers have two or three links (Intel Xeon Scalable
#: platform documentation); modelled as two links, 41.6 GB/s. (AMD's xGMI socket links are of the same order.)
#: The DGX-1's Xeon E5-2698 v4 pair has two QPI links at 9.6 GT/s, 19.2 GB/s per direction each: 38.4 GB/s.
UPI_GBPS = 41.6
QPI_GBPS = 38.4

# --- Efficiencies (fraction of nominal a ring collective reaches on the link) ------------------------------------
#: A100 NVLink3: "Each NVLink has a line rate of 25GB/s (in each direction) which converts to ~20GB/s effective
#: bandwidth with a 128B payload size ... some other bottlenecks on the GPUs limits it to ~230GB/s" for an 8-GPU
#: allreduce at 8 GB (S. Jeaugey, NCCL maintainer, github.com/NVIDIA/nccl-tests/issues/149, 2023-07-05). NCCL's own
#: tuning model caps sm80 bus bandwidth at 235 GB/s (NVIDIA/nccl src/graph/tuning.cc, ``compCap80``). 230/300.
EFFICIENCY_NVLINK3 = 230.0 / 300.0
#: H100 NVLink4: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink
#: bandwidth of 370GB/s, which you can observe as BusBw ... when running with NCCL_ALGO=RING" (S. Jeaugey,
#: github.com/NVIDIA/nccl-tests/issues/212, 2024-05-06). 370/450. The ~480 GB/s busbw of NVLink SHARP (in-switch
#: reduction, NVLS) in the same thread is not a link rate and is not modelled.
EFFICIENCY_NVLINK4 = 370.0 / 450.0
#: V100 NVLink2: the 128-byte-payload argument above (25 GB/s line → ~20 GB/s effective per link), applied to NVLink2
#: links of the same 25 GB/s rate. No published nccl-tests result for a DGX-1 (V100) was found to check it against.
EFFICIENCY_NVLINK2 = 20.0 / 25.0
#: PCIe: assumed 0.8 (25.2 of 31.5 GB/s for Gen4 ×16, around what CUDA's bandwidthTest typically reports). No
#: published nccl-tests result for an 8×A100 PCIe server was found; treat ``pcie-8gpu`` as uncalibrated.
EFFICIENCY_PCIE = 0.8
#: Inter-socket link: assumed 0.5. "On PCI systems, the performance you get is usually determined by the bandwidth
#: your CPU and memory can deliver" (S. Jeaugey, github.com/NVIDIA/nccl/issues/1639, 2025-03-14) - so the socket
#: crossing is made the bottleneck of a PCIe-only ring; the value itself is not from a measurement.
EFFICIENCY_UPI = 0.5
#: InfiniBand: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (NVIDIA, github.com/NVIDIA/nccl-tests/issues/290,
#: 2025-03-03) = 0.92-0.96 of 50 GB/s; over HDR, users report allreduce busbw of 91 and 96 GB/s with 4 HDR NICs per
#: 8-GPU server (nccl-tests issues #100 and #119) = 0.91-0.96 of 4 × 25 GB/s. 0.94 is the middle of both ranges.
EFFICIENCY_IB = 0.94

#: Published nccl-tests allreduce bus bandwidths for large messages (GB/s) the presets are calibrated against, with
#: their sources (see the efficiency constants). Keys: (preset, nodes). Multi-node figures are per server with one NIC
#: per GPU: eight NICs × the per-NIC rate quoted above.
PUBLISHED_BUSBW_GBps: dict[tuple[str, int], tuple[float, float, str]] = {
    ("dgx-a100", 1): (225.0, 235.0, "nccl-tests#149 (~230 GB/s at 8 GB); NCCL tuning.cc sm80 cap 235 GB/s"),
    ("hgx-h100", 1): (360.0, 375.0, "nccl-tests#212 (~370 GB/s effective NVLink4, NCCL_ALGO=RING)"),
    ("dgx-a100", 2): (8 * 22.75, 8 * 24.0, "nccl-tests#100 and #119: 91-96 GB/s over 4 HDR NICs"),
    ("hgx-h100", 2): (8 * 46.0, 8 * 48.0, "nccl-tests#290: 46-48 GB/s per NDR NIC"),
}

# --- Latencies (µs per link) ------------------------------------------------------------------------------------
#: Chosen so a device pair's route latency equals NCCL's per-step hardware latency of its low-latency (LL)
#: protocol in its own cost model (NVIDIA/nccl src/graph/tuning.cc, ``hwLat``: NVLink 0.6, PCI 1.0, NET 2.7 µs):
#: GPU→NVSwitch→GPU = 2 × 0.3; GPU→PCIe switch→GPU = 2 × 0.5; a rail-matched inter-server pair crosses a
#: GPU→NIC PCIe link on each side and two InfiniBand links: 2 × 0.5 + 2 × 0.85 = 2.7.
LATENCY_NVLINK_US = 0.6
LATENCY_NVSWITCH_US = 0.3
LATENCY_PCIE_US = 0.5
LATENCY_UPI_US = 0.5  # no published per-hop figure found; assumed equal to a PCIe hop
LATENCY_IB_US = 0.85

#: Hybrid cube-mesh of DGX-1 (V100): GPU pairs and their NVLink count (1 or 2), six links per GPU. Source: DGX-1 with
#: Tesla V100 System Architecture whitepaper (2017), figure of the NVLink topology (also what `nvidia-smi topo -m`
#: prints as NV1/NV2 on a DGX-1V).
DGX1_V100_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}


@dataclass(frozen=True, kw_only=True)
class _Nic:
    node: str
    rail: int
    bandwidth_GBps: float


def _link(g: nx.Graph, u: str, v: str, kind: str, bandwidth: float, latency: float, efficiency: float) -> None:
    g.add_edge(u, v, kind=kind, bandwidth_GBps=bandwidth, latency_us=latency, efficiency=efficiency)


def _pcie_tree(
    g: nx.Graph, k: int, gpus: list[str], nic_bandwidth: float, nics_per_switch: int, pcie: float,
    sockets: float = UPI_GBPS,
) -> list[_Nic]:
    """Two CPU sockets, two PCIe switches per socket, two GPUs per switch, ``nics_per_switch`` NICs per switch."""
    prefix = f"n{k}"
    for socket in range(2):
        g.add_node(f"{prefix}.cpu{socket}", role="switch", kind="cpu", host=k)
    _link(g, f"{prefix}.cpu0", f"{prefix}.cpu1", "upi", sockets, LATENCY_UPI_US, EFFICIENCY_UPI)
    nics = []
    for p in range(len(gpus) // 2):
        switch = f"{prefix}.pcie{p}"
        g.add_node(switch, role="switch", kind="pcie_switch", host=k)
        _link(g, switch, f"{prefix}.cpu{p * 2 // (len(gpus) // 2)}", "pcie", pcie, LATENCY_PCIE_US, EFFICIENCY_PCIE)
        for gpu in gpus[2 * p: 2 * p + 2]:
            _link(g, gpu, switch, "pcie", pcie, LATENCY_PCIE_US, EFFICIENCY_PCIE)
        for r in range(nics_per_switch):
            rail = p * 2 + r * (2 // nics_per_switch)
            nic = f"{prefix}.nic{rail}"
            g.add_node(nic, role="switch", kind="nic", host=k)
            # One NIC per GPU: NIC ``rail`` is the one NCCL pairs with GPU ``rail``; its PCIe link stands for the path
            # through the switch they share, so routes keep GPU k on rail k. One NIC per switch: shared by its GPUs.
            owner = f"{prefix}.gpu{rail}" if nics_per_switch == 2 else switch
            _link(g, nic, owner, "pcie", pcie, LATENCY_PCIE_US, EFFICIENCY_PCIE)
            nics.append(_Nic(node=nic, rail=rail, bandwidth_GBps=nic_bandwidth))
    return nics


def _gpus(g: nx.Graph, k: int, kind: str, count: int = 8) -> list[str]:
    gpus = [f"n{k}.gpu{i}" for i in range(count)]
    for gpu in gpus:
        g.add_node(gpu, role="device", kind=kind, host=k)
    return gpus


def _nvswitch_server(g: nx.Graph, k: int, kind: str, nvlink: float, efficiency: float, nic: float, pcie: float):
    gpus = _gpus(g, k, kind)
    fabric = f"n{k}.nvswitch"
    g.add_node(fabric, role="switch", kind="nvswitch", host=k)
    for gpu in gpus:
        _link(g, gpu, fabric, "nvswitch", nvlink, LATENCY_NVSWITCH_US, efficiency)
    return _pcie_tree(g, k, gpus, nic, nics_per_switch=2, pcie=pcie)


def _dgx_a100(g: nx.Graph, k: int) -> list[_Nic]:
    return _nvswitch_server(
        g, k, "A100", NVLINK3_LINKS_PER_GPU * NVLINK3_LINK_GBPS, EFFICIENCY_NVLINK3, IB_HDR_GBPS, PCIE_GEN4_X16_GBPS
    )


def _hgx_h100(g: nx.Graph, k: int) -> list[_Nic]:
    return _nvswitch_server(
        g, k, "H100", NVLINK4_LINKS_PER_GPU * NVLINK4_LINK_GBPS, EFFICIENCY_NVLINK4, IB_NDR_GBPS, PCIE_GEN5_X16_GBPS
    )


def _pcie_server(g: nx.Graph, k: int) -> list[_Nic]:
    gpus = _gpus(g, k, "A100-PCIe")
    return _pcie_tree(g, k, gpus, IB_HDR_GBPS, nics_per_switch=2, pcie=PCIE_GEN4_X16_GBPS)


def _dgx1_v100(g: nx.Graph, k: int) -> list[_Nic]:
    gpus = _gpus(g, k, "V100")
    for (a, b), count in DGX1_V100_NVLINKS.items():
        _link(g, gpus[a], gpus[b], "nvlink", count * NVLINK2_LINK_GBPS, LATENCY_NVLINK_US, EFFICIENCY_NVLINK2)
    return _pcie_tree(g, k, gpus, IB_EDR_GBPS, nics_per_switch=1, pcie=PCIE_GEN3_X16_GBPS, sockets=QPI_GBPS)


def _join(g: nx.Graph, nics: list[_Nic]) -> None:
    """Rail-optimised, non-blocking fat tree: one leaf per rail, one logical spine (see the module docstring)."""
    rails = sorted({nic.rail for nic in nics})
    g.add_node("ib.spine", role="switch", kind="ib_switch")
    for rail in rails:
        leaf = f"ib.leaf{rail}"
        g.add_node(leaf, role="switch", kind="ib_switch")
        members = [nic for nic in nics if nic.rail == rail]
        for nic in members:
            _link(g, nic.node, leaf, "infiniband", nic.bandwidth_GBps, LATENCY_IB_US, EFFICIENCY_IB)
        uplink = sum(nic.bandwidth_GBps for nic in members)
        _link(g, leaf, "ib.spine", "infiniband", uplink, LATENCY_IB_US, EFFICIENCY_IB)


@dataclass(frozen=True, kw_only=True)
class Preset:
    name: str
    description: str
    servers: Callable[[int], list[Callable[[nx.Graph, int], list[_Nic]]]]
    default_nodes: int = 1
    min_nodes: int = 1


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="dgx-a100",
            description="DGX A100: 8×A100 SXM4, NVLink3 via NVSwitch (300 GB/s per GPU per direction), 8 HDR NICs",
            servers=lambda nodes: [_dgx_a100] * nodes,
        ),
        Preset(
            name="hgx-h100",
            description="HGX/DGX H100: 8×H100 SXM5, NVLink4 via NVSwitch (450 GB/s per GPU per direction), 8 NDR NICs",
            servers=lambda nodes: [_hgx_h100] * nodes,
        ),
        Preset(
            name="pcie-8gpu",
            description="8×A100 PCIe, no NVLink: PCIe Gen4 switches under two CPU sockets joined by UPI, 8 HDR NICs",
            servers=lambda nodes: [_pcie_server] * nodes,
        ),
        Preset(
            name="mixed",
            description="DGX A100 and DGX-1 (V100, NVLink2 hybrid cube-mesh, 4 EDR NICs) servers alternating",
            servers=lambda nodes: [_dgx_a100 if k % 2 == 0 else _dgx1_v100 for k in range(nodes)],
            default_nodes=2,
            min_nodes=2,
        ),
    )
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str, nodes: int | None = None) -> Topology:
    """The preset cluster ``name`` with ``nodes`` servers (default: 1; 2 for ``mixed``).

    Presets are immutable and cached (a 128-server preset takes seconds to route), so equal arguments return the
    same object.
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise SpecError("topology", f"unknown preset {name!r}", f"one of {', '.join(PRESETS)}")
    spec = PRESETS[name]
    if nodes is None:
        nodes = spec.default_nodes
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < spec.min_nodes:
        raise SpecError("nodes", f"is {nodes!r}", f"an integer >= {spec.min_nodes} for preset {name!r}")
    return _build(name, nodes)


# Per-call software latency of a collective, added once per call by the cost model (Topology.meta). NCCL's own tuning
# model starts every collective at a base latency before adding per-step hardware latencies: in NVIDIA/nccl
# src/graph/tuning.cc, ``baseLat`` Ring/LL = 3.6 µs (the Ring/LL entry of the 2.8-era table; later releases list a
# few µs more). Without it the model predicts ~1 µs for an 8-byte allreduce where nccl-tests shows ~10 µs.
NCCL_BASE_LATENCY_US = 3.6


@functools.lru_cache(maxsize=16)
def _build(name: str, nodes: int) -> Topology:
    import networkx as nx

    from seedance.models.topology._graph import from_graph

    spec = PRESETS[name]
    g = nx.Graph()
    nics: list[_Nic] = []
    for k, build in enumerate(spec.servers(nodes)):
        nics += build(g, k)
    if nodes > 1:
        _join(g, nics)
    return from_graph(
        g,
        name=name if nodes == 1 else f"{name}-{nodes}nodes",
        source=f"preset:{name}",
        meta={
            "preset": name,
            "nodes": nodes,
            "description": spec.description,
            "base_latency_us": NCCL_BASE_LATENCY_US,
        },
    )
