"""A small measured host for simulator tests of the host model (spells, disk stalls): two cores, textbook-sized
service times, amortised wake-ups; and a seeded Raft run on it."""

from __future__ import annotations

from typing import Any

from seedance.models.host import HostProfile, LogNormal
from seedance.sim.config import SimConfig, WorkloadConfig
from seedance.sim.run import simulate


def small_host(**over: Any) -> HostProfile:
    base = dict(cores=2, cpu={"message": LogNormal(30e-6), "client": LogNormal(8e-6)}, io_per_input=LogNormal(45e-6),
                fsync=LogNormal(1.2e-4, 0.3, 1e-3), write_bandwidth_GBps=1.0, loopback=LogNormal(2e-5),
                client_per_op=LogNormal(1e-4), wake=LogNormal(8e-5), client_wake=LogNormal(1e-4),
                handoff=LogNormal(3e-5), measured={"config": {"protocol": "raft", "clients": 8}})
    base.update(over)
    return HostProfile(**base)


def run_on(host: HostProfile, seed: int = 1, duration_s: float = 2.0, trace: bool = False, **config: Any) -> Any:
    """A seeded 3-node Raft run of 8 closed-loop writers on ``host`` (``config``: more SimConfig fields)."""
    return simulate(SimConfig(protocol="raft", nodes=3, duration_s=duration_s, seed=seed, trace=trace, check=False,
                              workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0)), host_profile=host, **config),
                    liveness=False)
