"""The SimPy runtime: drives protocol nodes in virtual time over a modelled fabric, with seeded faults.

Modules by concept: :mod:`.runtime` (the adapter that performs a node's effects; CPU model), :mod:`.network`
(contended links, network faults), :mod:`.storage` (fsync and crash semantics), :mod:`.collectives`,
:mod:`.nemesis` (the seeded fault schedule), :mod:`.workload` (clients and histories), :mod:`.trace` (Chrome trace
export and the run's sha256), :mod:`.config` and :mod:`.run` (``simulate(config) -> SimResult``).
"""

from seedance.sim.config import CpuConfig, NemesisConfig, SimConfig, StorageConfig, WorkloadConfig
from seedance.sim.nemesis import FAULTS
from seedance.sim.run import SimResult, SimView, simulate, write_outputs

__all__ = ["CpuConfig", "FAULTS", "NemesisConfig", "SimConfig", "SimResult", "SimView", "StorageConfig",
           "WorkloadConfig", "simulate", "write_outputs"]
