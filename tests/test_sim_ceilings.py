"""The simulator's per-protocol ceilings, the memory estimate's refusal, and one run above the old 32-node limit."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from seedance.cli import main
from seedance.errors import SpecError
from seedance.sim import SimConfig, WorkloadConfig
from seedance.sim import ceilings
from seedance.sim.network import Network, StarRoutes, uniform_topology



def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("protocol", "nodes", "limit"), [("raft", 129, 128), ("multipaxos", 200, 128),
                                                           ("epaxos", 129, 128)])
def test_node_ceiling_names_limit_and_reason(protocol, nodes, limit, tmp_path):
    code, out, err = run_cli(["sim", "run", "--protocol", protocol, "--nodes", str(nodes), "--duration", "0.01",
                              "--out", str(tmp_path / "o")])
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line
    assert f"--nodes: {nodes} nodes exceed the {protocol} ceiling of {limit}" in line
    assert "one replica per eight-GPU server" in line  # the reason
    assert not (tmp_path / "o").exists()


def test_causal_allows_1024_and_refuses_more(tmp_path):
    code, _, err = run_cli(["sim", "run", "--protocol", "causal", "--nodes", "1025", "--out", str(tmp_path / "o")])
    assert code == 2 and "--nodes" in err and "1,024-GPU cluster" in err and len(err.strip().splitlines()) == 1
    ceilings.check("causal", 1024, 1.0)  # at the ceiling: accepted


def test_duration_ceiling_is_72_hours(tmp_path):
    code, _, err = run_cli(["sim", "run", "--protocol", "raft", "--duration", "259201", "--out", str(tmp_path / "o")])
    assert code == 2 and "--duration" in err and "72" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SpecError, match=r"duration_s: .* ceiling of 259200 s.*72 h"):
        ceilings.check("raft", 5, 72 * 3600.0 + 1)
    with pytest.raises(SpecError, match="nodes: 129 nodes exceed the raft ceiling of 128"):
        SimConfig(protocol="raft", nodes=129)  # the config itself refuses, not only the CLI


def test_memory_estimate_refuses_before_starting(tmp_path, monkeypatch):
    out = tmp_path / "o"
    monkeypatch.setenv("SEEDANCE_MEM_AVAILABLE", "256MiB")
    code, stdout, err = run_cli(["sim", "run", "--protocol", "raft", "--nodes", "5", "--duration", "600",
                                 "--out", str(out)])
    assert code == 2 and stdout == ""
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "memory: the run needs an estimated" in line and "GiB" in line and "0.25 GiB is available" in line
    assert not out.exists()  # refused before any work
    # the same run fits when more is available (estimate is a pure function of the config)
    config = SimConfig(protocol="raft", nodes=5, duration_s=600.0)
    estimate = ceilings.check_memory(config, available=1 << 50)
    assert estimate["total"] > 256 << 20
    with pytest.raises(SpecError, match="memory: .*estimated"):
        ceilings.check_memory(config, available=256 << 20)


def test_memory_estimate_grows_with_duration_nodes_and_trace():
    def total(**kw):
        base = dict(protocol="raft", nodes=5, duration_s=1.0)
        return ceilings.estimate_memory(SimConfig(**{**base, **kw}))["total"]

    assert total(duration_s=10.0) > total(duration_s=1.0)
    assert total(nodes=64) > total(nodes=5)
    assert total(trace=False) < total(trace=True)
    assert total(workload=WorkloadConfig(clients=64)) > total(workload=WorkloadConfig(clients=4))


def test_bad_available_memory_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEDANCE_MEM_AVAILABLE", "lots")
    code, _, err = run_cli(["sim", "run", "--duration", "0.01", "--out", str(tmp_path / "o")])
    assert code == 2 and "SEEDANCE_MEM_AVAILABLE" in err and len(err.strip().splitlines()) == 1


def test_star_routes_are_lazy_and_match_the_rule():
    routes = StarRoutes(1024)
    assert len(routes) == 1024 * 1023
    assert routes[(3, 1000)] == ((3, "switch"), ("switch", 1000))
    assert routes.get((5, 5)) is None and (7, 7) not in routes and (0, 1024) not in routes
    topology = uniform_topology(4)
    network = Network(topology, 4, np.random.default_rng(0))
    assert network.uncontended_s(0, 3, 0) == pytest.approx(20e-6)


def test_causal_above_the_old_limit_converges(tmp_path):
    """64 replicas (the old ceiling was 32): the grid converges, with no causal violation."""
    code, out, err = run_cli(["sim", "run", "--protocol", "causal", "--nodes", "64", "--topology", "dgx-a100",
                              "--workload", "frame", "--width", "16", "--height", "16", "--clients", "4",
                              "--duration", "0.1", "--json", "--out", str(tmp_path / "o")])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["nodes"] == 64 and summary["ops_ok"] > 0
    assert summary["converged"] is True and summary["causal_violations"] == 0
    assert summary["replica_events"] >= 64 * summary["ops_ok"] // 2  # each write reached every replica


def test_memory_estimate_of_spilled_recording_and_compacted_logs_stops_growing():
    """History and trace spill to disk, Raft's log is compacted and the check holds a window of operations, so a
    long Raft run's estimate is flat in its duration, with the check or without; the check's term is its window
    (100 operations a key when the keys are many)."""
    def total(hours, **kw):
        config = SimConfig(protocol="raft", nodes=5, duration_s=hours * 3600.0, **kw)
        return ceilings.estimate_memory(config)["total"]

    assert total(1) == total(72) < 1 << 30
    assert total(1, check=True) == total(72, check=True) < 1 << 30
    assert total(72, check=True) - total(72, check=False) == ceilings.CHECK_WINDOW_OPS * ceilings.PER_CHECKED_OP_BYTES
    ceilings.check_memory(SimConfig(protocol="raft", nodes=5, duration_s=72 * 3600.0, check=True),
                          available=8 << 30)  # refused before the windows
    window = ceilings._check_window
    assert window(WorkloadConfig(keys=8)) == ceilings.CHECK_WINDOW_OPS
    assert window(WorkloadConfig(keys=1000)) == 1000 * ceilings.CHECK_KEY_WINDOW_OPS


def test_a_run_that_would_not_fit_on_the_disk_is_refused_before_it_starts(tmp_path, monkeypatch):
    out = tmp_path / "o"
    monkeypatch.setenv("SEEDANCE_DISK_AVAILABLE", "64MiB")
    code, stdout, err = run_cli(["sim", "run", "--protocol", "raft", "--nodes", "5", "--duration", "30",
                                 "--out", str(out)])
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "disk: the run would write an estimated" in err and "0.06 GiB is free" in err and "--no-trace" in err
    assert not out.exists()  # refused before any work
    config = SimConfig(protocol="raft", nodes=5, duration_s=30.0)
    assert ceilings.estimate_disk(config)["total"] > ceilings.estimate_disk(SimConfig(
        protocol="raft", nodes=5, duration_s=3.0))["total"] > ceilings.estimate_disk(SimConfig(
            protocol="raft", nodes=5, duration_s=3.0, trace=False))["total"]
    assert ceilings.check_disk(config, str(out), available=1 << 50)["total"] > 64 << 20


def test_bad_available_disk_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEDANCE_DISK_AVAILABLE", "plenty")
    code, _, err = run_cli(["sim", "run", "--duration", "0.01", "--out", str(tmp_path / "o")])
    assert code == 2 and "SEEDANCE_DISK_AVAILABLE" in err and len(err.strip().splitlines()) == 1


def test_the_estimate_is_at_or_above_the_measured_peaks():
    """Peak RSS measured by `sim run` (ru_maxrss, trace and monitor on) on 2026-12-07: the estimate must not fall
    below them, or a run the machine cannot hold would start instead of being refused. EPaxos had: 757 MB estimated
    for 776 MB at 6 s, since its never-compacted instances (about 1.3 KB per replica per operation) were counted as
    130 B per write; Multi-Paxos without snapshots had 769 MB for 2,426 MB at 20 s. EPaxos's instances are compacted
    since (``snapshot_instances``; the runs without are those of the tree before it)."""
    measured = [  # (protocol, duration s, check, protocol options, peak MB)
        ("epaxos", 2.0, False, {}, 329), ("epaxos", 6.0, False, {"snapshot_instances": 0}, 776),
        ("epaxos", 6.0, False, {}, 580), ("epaxos", 20.0, False, {}, 741), ("epaxos", 40.0, False, {}, 796),
        ("epaxos", 20.0, False, {"snapshot_instances": 0}, 2431),
        ("multipaxos", 5.0, True, {}, 348), ("multipaxos", 20.0, True, {}, 362),
        ("multipaxos", 20.0, True, {"snapshot_slots": 0}, 2426),
        ("raft", 5.0, True, {}, 146), ("raft", 20.0, True, {}, 181),
    ]
    for protocol, duration, check, options, peak_mb in measured:
        config = SimConfig(protocol=protocol, nodes=5, duration_s=duration, check=check, protocol_config=options,
                           workload=WorkloadConfig(clients=16))
        assert ceilings.estimate_memory(config)["total"] >= peak_mb * (1 << 20), (protocol, duration, options)


def test_the_estimate_counts_epaxos_latency_samples_up_to_their_ring():
    """An EPaxos replica keeps its own commands' latest LATENCY_SAMPLES (commit, execution) latencies at 16 B each
    (epaxos/latency.py): the estimate counts them, one ring per replica with clients, full on a long run."""
    from seedance.models.protocols.epaxos.node import LATENCY_SAMPLES

    assert ceilings.EPAXOS_LATENCY_SAMPLES == LATENCY_SAMPLES

    def parts(seconds):
        return ceilings.estimate_memory(SimConfig(protocol="epaxos", nodes=5, duration_s=seconds,
                                                  workload=WorkloadConfig(clients=16)))

    long, longer = parts(3600.0), parts(7200.0)
    assert long["logs"] == longer["logs"]  # instances compacted, latency rings full: flat in the duration
    ring = 5 * LATENCY_SAMPLES * ceilings.EPAXOS_LATENCY_BYTES  # five replicas with clients, each ring full
    instances = 2 * 65536 * 5  # twice snapshot_instances per replica
    assert long["logs"] == instances * (ceilings.EPAXOS_INSTANCE_BYTES + 5 * ceilings.EPAXOS_PAIR_BYTES) + ring
    short = parts(0.01)  # a few hundred operations: as many samples
    assert short["logs"] == short["ops"] * 5 * (ceilings.EPAXOS_INSTANCE_BYTES + 5 * ceilings.EPAXOS_PAIR_BYTES) \
        + short["ops"] * ceilings.EPAXOS_LATENCY_BYTES
