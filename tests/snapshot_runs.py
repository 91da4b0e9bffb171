"""The simulations the log-compacting protocols' snapshot tests share: the faulted run (five nodes, a snapshot every
few entries set by the caller's options, each fault mix of :data:`FAULT_MIXES`, checked for linearizability and
invariant breaches), the same seed twice, and a long run watched by a protocol's own monitor."""

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


def same_trace_twice(protocol: str, options: dict[str, Any]) -> bool:
    """Whether a faulted run with ``options`` gives the same trace_sha256 when run twice with one seed."""
    config = SimConfig(protocol=protocol, nodes=5, duration_s=0.2, seed=11, protocol_config=options,
                       workload=WorkloadConfig(clients=4, keys=3, op_timeout_s=0.02),
                       nemesis=NemesisConfig(faults=("crash", "loss"), faulty_fraction=0.6), trace=True, check=False)
    return simulate(config).trace_sha256 == simulate(config).trace_sha256


def monitored_run(protocol: str, options: dict[str, Any], monitor: Any) -> list[Any]:
    """Three nodes, 8 clients, 1 simulated s, ``monitor`` observing every node each 10 ms (no breach, or the test
    fails); the final nodes."""
    config = SimConfig(protocol=protocol, nodes=3, duration_s=1.0, seed=0, protocol_config=options,
                       workload=WorkloadConfig(clients=8), trace=False, check=False)
    result = simulate(config, invariants=[lambda view: "; ".join(monitor.observe(
        [n for n in view.nodes if n is not None])) or None], invariant_every_s=0.01)
    assert result.violations == [], result.reproduce
    return [host.node for host in result.runtime.hosts]
