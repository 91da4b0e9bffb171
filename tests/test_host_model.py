"""The host model (issue V): measured service-time distributions and shared cores in the simulator, the profile's
file format and its errors, and the real measurements behind `seedance real profile`."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from seedance.errors import SpecError
from seedance.sim.config import SimConfig, WorkloadConfig
from seedance.models.host import CorePool, HostProfile, LogNormal, load_profile
from seedance.real.storage import atomic_write
from seedance.sim.run import simulate


def profile(cores: int = 2, **over) -> HostProfile:
    base = dict(cores=cores, cpu={"message": LogNormal(35e-6, 1.0, 4e-4), "timer": LogNormal(23e-6, 0.9, 3e-4),
                                  "client": LogNormal(8e-6, 0.8, 1e-4), "persisted": LogNormal(18e-6, 1.3, 4e-4)},
                io_per_input=LogNormal(145e-6), fsync=LogNormal(3.7e-3, 1.0, 1.3e-2), write_bandwidth_GBps=0.38,
                loopback=LogNormal(9e-6, 0.56, 2e-3), client_per_op=LogNormal(160e-6),
                measured={"config": {"protocol": "raft", "clients": 8}})
    base.update(over)
    for kind in ("collective", "work"):
        base["cpu"].setdefault(kind, LogNormal(0.0))
    return HostProfile(**base)


def run(host, *, clients=8, seed=1, duration_s=1.0):
    return simulate(SimConfig(protocol="raft", nodes=3, duration_s=duration_s, seed=seed, trace=False, check=False,
                              workload=WorkloadConfig(clients=clients, mix=(0.0, 1.0, 0.0)), host_profile=host),
                    liveness=False)


def test_lognormal_fit_recovers_its_parameters():
    rng = np.random.default_rng(3)
    samples = 2e-3 * np.exp(0.7 * rng.standard_normal(20_000))
    fit = LogNormal.fit(samples)
    assert fit.median_s == pytest.approx(2e-3, rel=0.03) and fit.sigma == pytest.approx(0.7, rel=0.03)
    assert fit.cap_s == pytest.approx(np.quantile(samples, 0.999))
    draws = [fit.draw(rng) for _ in range(5000)]
    assert max(draws) <= fit.cap_s and np.median(draws) == pytest.approx(2e-3, rel=0.05)


def test_cores_are_shared_first_free_first():
    pool = CorePool(2)
    assert pool.take(0.0, 1.0) == 1.0 and pool.take(0.0, 1.0) == 1.0  # two cores: both start at once
    assert pool.take(0.5, 1.0) == 2.0  # the third waits for a core
    assert pool.earliest() == 1.0


def test_a_profiled_simulation_has_spread_is_deterministic_and_feels_its_cores():
    host = profile()
    a, b = run(host), run(host)
    assert a.throughput_ops_s == b.throughput_ops_s and a.latency_ms_p99 == b.latency_ms_p99
    assert a.latency_ms_p99 > 1.5 * a.latency_ms_p50  # service times have a tail: p99 is not p50
    plain = simulate(SimConfig(protocol="raft", nodes=3, duration_s=1.0, seed=1, trace=False, check=False,
                               workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0))), liveness=False)
    assert plain.latency_ms_p99 < a.latency_ms_p50  # the textbook constants are far faster than this host
    # 3 node processes and the client process on 1 core queue behind each other; on 16 they do not (a fast
    # constant fsync, so that the CPU is what limits)
    fast = LogNormal(1e-5)
    one, many = run(profile(cores=1, fsync=fast), clients=32), run(profile(cores=16, fsync=fast), clients=32)
    assert one.throughput_ops_s < 0.8 * many.throughput_ops_s


def test_profiles_round_trip_and_are_part_of_the_reproduce_command(tmp_path):
    path = tmp_path / "host.yaml"
    atomic_write(path, profile().to_yaml().encode())
    again = load_profile(path)
    assert again == profile()
    result = run(str(path), duration_s=0.3)
    assert f"--host-profile {path}" in result.reproduce


@pytest.mark.parametrize("change, field", [
    ({"cores": 0}, "cores"), ({"cores": True}, "cores"), ({"fsync": {"median_s": -1}}, "fsync"),
    ({"fsync": {"median": 1}}, "fsync"), ({"cpu": {"bogus": 1e-6}}, "cpu"), ({"loopback": "fast"}, "loopback"),
    ({"write_bandwidth_GBps": float("nan")}, "write_bandwidth_GBps"), ({"extra": 1}, "unknown field"),
])
def test_a_bad_profile_is_refused_naming_the_field(tmp_path, change, field):
    data = profile().to_dict()
    data.update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        SimConfig(host_profile=str(path))
    assert field in str(info.value)


def test_a_missing_profile_file_is_one_line(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        SimConfig(host_profile=str(tmp_path / "nope.yaml"))


def test_fsync_and_loopback_are_measured_for_real(tmp_path):
    from seedance.real.profile import measure_fsync, measure_loopback

    latencies, bandwidth = measure_fsync(tmp_path, samples=20)
    assert len(latencies) == 20 and all(t > 0 for t in latencies) and bandwidth > 0
    assert not list(tmp_path.iterdir())  # the probe file is gone
    one_way = measure_loopback(round_trips=200)
    assert len(one_way) == 200 and 0 < np.median(one_way) < 0.01


@pytest.mark.slow
def test_real_profile_command_writes_a_usable_profile(tmp_path):
    from click.testing import CliRunner

    from seedance.cli import cli

    out = tmp_path / "host.yaml"
    result = CliRunner().invoke(cli, ["real", "profile", "--duration", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    host = load_profile(out)
    assert host.cores >= 1 and host.cpu["message"].median_s > 0 and host.fsync.median_s > 0
    assert host.measured["config"]["clients"] == 8 and "filesystem" in host.measured
    assert run(str(out), duration_s=0.3).ops_ok > 0
