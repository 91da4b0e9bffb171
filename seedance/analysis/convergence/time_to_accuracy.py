"""Time to accuracy: iterations from the empirical runs × (compute + communication) per iteration on a fabric.

    time_to_accuracy_s = iterations_to_target × (compute_s + communication_s)

* ``iterations_to_target`` comes from the small problem's runs (:mod:`.training`): the first horizon at which the
  seed-mean gap reaches the target.
* ``compute_s`` (:class:`ComputeModel`): a nominal model of ``parameters`` (default 1.3e9) trained on
  ``tokens_per_device`` tokens per device per iteration costs 6·parameters·tokens FLOPs (forward + backward,
  Kaplan et al. 2020 §2.1) at ``mfu`` × the device's peak dense bf16 FLOP/s (NVIDIA datasheets: V100 125 (fp16
  tensor), A100 312, H100 SXM 989 TFLOP/s). A synchronous step waits for the slowest device of the topology.
  Compression's own encode/decode time is not modelled.
* ``communication_s`` (:func:`communication_time`): the small problem's gradient stands in for the nominal model's
  (same compressor *ratio* k/d and levels s, applied to d = ``parameters``). Payloads that sum on the wire (fp32,
  fp16, bf16) use **allreduce** of ``wire_bytes(d)``; sparsified, quantised and sign payloads cannot be summed without
  decoding, so they use **allgather** (size = devices × wire_bytes(d), the cost model's convention), as
  implementations do (e.g. Horovod/GRACE). Local SGD averages fp32 models every H steps: allreduce / H per step.
  Times come from :func:`seedance.models.cost.collective_time` with ``algorithm="auto"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from seedance.errors import SpecError
from seedance.models.compression import Compressor
from seedance.models.cost import collective_time
from seedance.models.topology import Topology, load

# Peak dense bf16/fp16 tensor FLOP/s per device kind (vendor datasheets), matched by substring, longest first.
PEAK_FLOPS = {"H100": 989e12, "A100": 312e12, "V100": 125e12}

FABRICS = {  # label -> (preset, nodes)
    "nvlink-node (dgx-a100)": ("dgx-a100", None),
    "pcie-server (pcie-8gpu)": ("pcie-8gpu", None),
    "infiniband-4-nodes (dgx-a100 x4)": ("dgx-a100", 4),
    "infiniband-4-nodes (hgx-h100 x4)": ("hgx-h100", 4),
    "mixed-generations (mixed)": ("mixed", None),
}


@dataclass(frozen=True, kw_only=True)
class ComputeModel:
    """Compute time of one iteration of the nominal model (see the module docstring)."""

    parameters: float = 1.3e9
    tokens_per_device: int = 4096
    mfu: float = 0.4

    def peak_flops(self, device_kind: str) -> float:
        for key in sorted(PEAK_FLOPS, key=len, reverse=True):
            if key.lower() in device_kind.lower():
                return PEAK_FLOPS[key]
        raise SpecError("device_kinds", f"no peak FLOP/s known for {device_kind!r}", "one of " + ", ".join(PEAK_FLOPS))

    def seconds(self, topology: Topology) -> float:
        flops = 6.0 * self.parameters * self.tokens_per_device
        slowest = min(self.peak_flops(kind) for kind in topology.device_kinds)
        return flops / (self.mfu * slowest)


def communication_time(
    compressor: Compressor, parameters: float, topology: Topology, *, period_H: int = 1
) -> tuple[float, str, int]:
    """Seconds per iteration, the collective used and the bytes per device for the nominal gradient."""
    d = int(parameters)
    per_device = compressor.wire_bytes(d)
    if compressor.summable or period_H > 1:
        cost = collective_time("allreduce", per_device, topology)
        return cost.time_s / period_H, "allreduce" if period_H == 1 else f"allreduce/{period_H}", per_device
    cost = collective_time("allgather", per_device * topology.num_devices, topology)
    return cost.time_s, "allgather", per_device


def load_fabric(label: str) -> Topology:
    if label not in FABRICS:
        raise SpecError("topology", f"unknown fabric {label!r}", "one of " + ", ".join(FABRICS))
    name, nodes = FABRICS[label]
    return load(name, nodes=nodes)


def time_to_accuracy(
    iterations: int | None, compressor: Compressor, topology: Topology, compute: ComputeModel, *, period_H: int = 1
) -> dict:
    """One row's timing: per-iteration compute and communication and their product with the iteration count."""
    compute_s = compute.seconds(topology)
    communication_s, collective, wire_bytes = communication_time(
        compressor, compute.parameters, topology, period_H=period_H
    )
    per_iteration = compute_s + communication_s
    return {
        "compute_s_per_iteration": compute_s,
        "communication_s_per_iteration": communication_s,
        "collective": collective,
        "wire_bytes_per_device": wire_bytes,
        "time_to_accuracy_s": None if iterations is None else iterations * per_iteration,
    }
