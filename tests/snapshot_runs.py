"""The faulted simulation both log-compacting protocols' snapshot tests run: five nodes, a snapshot every few
entries (set by the caller's options), each fault mix of :data:`FAULT_MIXES`, checked for linearizability and
invariant breaches."""

from __future__ import annotations

from typing import Any

from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

FAULT_MIXES = [("crash",), ("partition", "loss"), ("crash", "partition-halves", "duplicate")]


def faulted_run(protocol: str, options: dict[str, Any], faults: tuple[str, ...]) -> tuple[Any, list[Any]]:
    """The run (linearizable, no breach, or the test fails naming how to reproduce it) and its live nodes."""
    config = SimConfig(protocol=protocol, nodes=5, duration_s=0.4, seed=3, protocol_config=options,
                       workload=WorkloadConfig(clients=4, keys=3, op_timeout_s=0.02),
                       nemesis=NemesisConfig(faults=faults, faulty_fraction=0.6), trace=True, check=True)
    result = simulate(config)
    assert result.linearizable is True, result.reproduce
    assert result.violations == [], result.reproduce
    return result, [host.node for host in result.runtime.hosts if host.up]


def snapshots_sent(result: Any) -> int:
    """InstallSnapshot messages the run's trace shows sent."""
    return sum(record[1] == "send" and record[3] == "InstallSnapshot" for record in result.trace)
