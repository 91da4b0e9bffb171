"""The host model (issue V): measured service-time distributions and shared cores in the simulator, the profile's
file format and its errors, and the real measurements behind `seedance real profile`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from seedance.errors import SpecError
from seedance.sim.config import SimConfig, WorkloadConfig
from seedance.models.host import CorePool, Empirical, HostProfile, LogNormal, load_profile
from seedance.files import atomic_write
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


def test_an_empirical_service_time_keeps_the_measured_tail_and_round_trips(tmp_path):
    """A heavier tail than a log-normal's (a mixture: 2 % of the samples 8x slower, as a disk's slow fsyncs):
    the empirical form draws it back; the log-normal fitted to the same samples does not."""
    rng = np.random.default_rng(5)
    body = 4e-4 * np.exp(0.3 * rng.standard_normal(20_000))
    samples = np.where(rng.random(20_000) < 0.02, 8 * body, body)
    empirical, lognormal = Empirical.fit(samples), LogNormal.fit(samples)
    draws = np.asarray([empirical.draw(rng) for _ in range(50_000)])
    fitted = np.asarray([lognormal.draw(rng) for _ in range(50_000)])
    for q in (50, 90, 99, 99.9):
        assert np.percentile(draws, q) == pytest.approx(np.percentile(samples, q), rel=0.08)
    assert np.percentile(fitted, 99) < 0.6 * np.percentile(samples, 99)  # the fitted shape misses the tail
    assert draws.max() <= samples.max() and empirical.median_s == pytest.approx(np.median(samples), rel=1e-9)
    assert empirical.mean_s == pytest.approx(samples.mean(), rel=0.05)
    path = tmp_path / "host.yaml"
    atomic_write(path, profile(fsync=empirical).to_yaml().encode())
    assert load_profile(path).fsync == empirical
    again = run(str(path), duration_s=0.3)
    assert again.latency_ms_p99 == run(profile(fsync=empirical), duration_s=0.3).latency_ms_p99  # deterministic


def test_cores_are_shared_first_free_first():
    pool = CorePool(2)
    assert pool.take(0.0, 1.0) == 1.0 and pool.take(0.0, 1.0) == 1.0  # two cores: both start at once
    assert pool.take(0.5, 1.0) == 2.0  # the third waits for a core
    assert pool.earliest() == 1.0


def test_loop_threads_preempt_the_storage_threads_cpu_which_falls_behind():
    """Foreground work (event loops waking from select) never waits for background work (the storage threads'
    CPU): CFS wake-up preemption. Background work waits for cores free of both and, when foreground work lands on
    its core, ends that much later, so the cores' capacity is conserved."""
    pool = CorePool(1)
    assert pool.take_background(0.0, 1.0) == 1.0  # the storage thread runs on the only core ...
    assert pool.take(0.2, 0.5) == pytest.approx(0.7)  # ... a loop that wakes runs at once, ahead of it ...
    assert pool.take_background(0.3, 1.0) == pytest.approx(2.5)  # ... which fell behind by 0.5 s: the next waits
    assert pool.take(0.8, 0.1) == pytest.approx(0.9)  # foreground work never queues behind background work
    two = CorePool(2)
    two.take(0.0, 1.0)
    assert two.take_background(0.0, 1.0) == 1.0  # the free core
    assert two.take_background(0.0, 1.0) == 2.0  # then behind the foreground's


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
    ({"wake": {"median_s": -1}}, "wake"), ({"handoff": "slow"}, "handoff"),
    ({"device": {"kind": "B200"}}, "device.kind"), ({"device": {"kind": "H100", "count": 0}}, "device.count"),
    ({"device": {"kind": "H100", "memory_GiB": -1}}, "device.memory_GiB"),
    ({"device": {"kind": "H100", "tflops": 1}}, "device: unknown field"),
    ({"tenants": {"busy_cores": -1, "slice": 1e-4}}, "tenants.busy_cores"), ({"tenants": {"busy": 1}}, "tenants"),
    ({"tenants": {"busy_cores": 1, "slice": 1e-4, "share": 3}}, "tenants.share"),
    ({"fsync": {"p": [0, 0.5, 1], "s": [1e-4, 2e-4]}}, "fsync"), ({"fsync": {"p": [0, 0.7, 0.5, 1], "s": [1] * 4}},
                                                                  "fsync"),
    ({"fsync": {"p": [0, 1], "s": [2e-4, 1e-4]}}, "fsync"), ({"fsync": {"p": [0, 1], "s": [0, "x"]}}, "fsync"),
    ({"fsync": {"p": [0, 1], "s": [0, 1], "q": 1}}, "fsync"), ({"fsync": {"p": [0.1, 1], "s": [0, 1]}}, "fsync"),
    ({"fsync_grow": {"p": [0, 1], "s": [2e-4, 1e-4]}}, "fsync_grow"), ({"block_bytes": 100}, "block_bytes"),
    ({"block_bytes": "4k"}, "block_bytes"), ({"block_bytes": True}, "block_bytes"),
    ({"gc": {"rate": 2, "pause": 1e-3}}, "gc.rate"), ({"gc": {"rate": 0.1}}, "gc"),
    ({"client_gc": {"rate": 0.1, "pause": {"median_s": -1}}}, "client_gc.pause"),
    ({"gc": {"rate": 0.1, "pause": 1e-3, "full": 2e-2}}, "gc"),
    ({"gc": {"rate": 0.1, "pause": 1e-3, "full": 2e-2, "full_first": 0, "full_period": 12}}, "gc.full_first"),
    ({"gc": {"rate": 0.1, "pause": 1e-3, "full": 2e-2, "full_first": 6, "full_period": 1.5}}, "gc.full_period"),
    ({"gc": {"rate": 0.1, "pause": 1e-3, "full": {"median_s": -1}, "full_first": 6, "full_period": 12}},
     "gc.full"),
    ({"recover_per_entry_s": -1e-6}, "recover_per_entry_s"), ({"entries": {"send_s": 1e-6}}, "entries"),
    ({"entries": {"send_s": 1e-6, "recv_s": "x", "mean_in": 1, "mean_out": 1}}, "entries"),
    ({"restart_cpu": "fast"}, "restart_cpu"),
    ({"spell": {"sigma": -0.1, "tau_s": 0.05}}, "spell.sigma"), ({"spell": {"sigma": 0.1, "tau_s": 0}}, "spell.tau_s"),
    ({"spell": {"sigma": 0.1}}, "spell"), ({"spell": {"sigma": "x", "tau_s": 0.05}}, "spell.sigma"),
    ({"reconnect_s": -0.02}, "reconnect_s"), ({"reconnect_s": "soon"}, "reconnect_s"),
    ({"handback": "slow"}, "handback"), ({"handback": {"p": [0, 1], "s": [2e-4, 1e-4]}}, "handback"),
])
def test_a_bad_profile_is_refused_naming_the_field(tmp_path, change, field):
    data = amortised().to_dict()  # every field, the optional ones (amortisation, handoff) included
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
    from seedance.real.probes import measure_fsync
    from seedance.real.meters import measure_loopback

    latencies, bandwidth = measure_fsync(tmp_path, samples=20)
    assert len(latencies) == 20 and all(t > 0 for t in latencies) and bandwidth > 0
    assert not list(tmp_path.iterdir())  # the probe file is gone
    one_way = measure_loopback(round_trips=200)
    assert len(one_way) == 200 and 0 < np.median(one_way) < 0.01


def test_the_loopbacks_cpu_is_measured_and_taken_out_of_its_latency():
    """Both ends' CPU per one-way trip is most of it here (their syscalls: the nodes' frame I/O charges them); the
    profile keeps the rest, with the probe's shape."""
    from seedance.real.meters import LOOPBACK_KEEP_MIN, loopback_beyond_cpu, measure_loopback_with_cpu

    samples, cpu = measure_loopback_with_cpu(round_trips=300)
    assert len(samples) == 300 and cpu is not None and 0 < cpu < 2 * np.mean(samples)
    kept, share = loopback_beyond_cpu(samples, cpu)
    assert LOOPBACK_KEEP_MIN <= share <= 1 and np.allclose(kept, np.asarray(samples) * share)
    assert loopback_beyond_cpu([2e-5, 4e-5], 1.5e-5) == ([1e-5, 2e-5], 0.5)  # mean 30 us, half of it CPU
    assert loopback_beyond_cpu([2e-5], 1.0)[1] == LOOPBACK_KEEP_MIN and loopback_beyond_cpu([2e-5], None)[1] == 1.0


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
    assert host.fsync_grow is not None and host.block_bytes >= 512  # the allocating fsyncs, from the run or probe
    assert host.measured["gc"]["node"]["items"] > 0 and host.measured["gc"]["client"]["items"] > 0
    # the hand-back under load and the spells' windows, from the CPU runs (spells fitted or, if none, said so)
    assert host.handback is not None and host.handback.median_s > 0 and "storage thread -> loop" in result.output
    # ... and the first half under load (the thread's wake-up, the lock), every fsync of the runs timed
    assert host.handover is not None and host.handover.median_s > 0 and "loop -> storage thread" in result.output
    # the disk's stalls looked for on the shared clock (found or not: the records carry it), and said
    stalls = host.measured["disk_stalls"]
    assert isinstance(stalls["events"], int) and stalls["seconds"] > 0 and "disk stalls:" in result.output
    assert (host.disk_stalls is None) == (stalls["events"] == 0)
    assert host.measured["spells"]["real"]["windows"] > 0 and "slow spells" in result.output
    assert run(str(out), duration_s=0.3).ops_ok > 0
    calibration = host.measured["cpu_calibration"]  # the CPU level set so the profile reproduces its own run
    assert 0.5 <= calibration["factor"] <= 2.0 and "CPU scale calibrated" in result.output


def test_the_cpu_calibration_recovers_the_level_the_profile_run_ran_at():
    """A profile whose own run was 1.4x slower than the simulator makes of its samples: the calibration finds
    that factor from the run's throughput alone and records it."""
    from seedance.experiments.sim_vs_real import Config, predict
    from seedance.experiments.host_profile import calibrate_cpu

    host = profile(fsync=LogNormal(2e-4, 0.3, 1e-3))  # CPU-bound: the default's 3.7 ms fsync hides the CPU
    real = predict("raft", 3, Config(8), 1.0, 1, host.scaled_cpu(1.4))["throughput_ops_s"]
    calibrated = calibrate_cpu(host, real_ops_s=real, nodes=3, clients=8, duration_s=1.0)
    record = calibrated.measured["cpu_calibration"]
    assert record["factor"] == pytest.approx(1.4, rel=0.08) and record["sim_ops_s"] == pytest.approx(real, rel=0.05)
    assert record["sim_ops_s_before"] > 1.15 * real
    assert calibrated.cpu["message"].median_s == pytest.approx(record["factor"] * host.cpu["message"].median_s)
    assert calibrate_cpu(host, real_ops_s=0.0, nodes=3, clients=8, duration_s=1.0) is host  # no run: as it was


# ------------------------------------------------------------------------------------ amortisation (issue V, round 2)
def amortised(**over) -> HostProfile:
    base = dict(wake=LogNormal(80e-6), io_per_input=LogNormal(40e-6), client_wake=LogNormal(100e-6),
                handoff=LogNormal(70e-6, 0.3, 3e-4), fsync=LogNormal(1.2e-4, 0.1, 4e-4),
                connect=LogNormal(2e-3, 0.5, 1e-2), accept=LogNormal(1e-4), sync_cpu=LogNormal(60e-6))
    base.update(over)
    return profile(**base)


def test_amortisation_cpu_per_op_falls_with_concurrency_and_is_deterministic():
    """One wake-up serves every input queued behind it: at 32 clients far fewer wake-ups per operation than at 2,
    so the simulated throughput grows with clients faster than with a constant per-input cost."""
    low, high = run(amortised(), clients=2, duration_s=0.5), run(amortised(), clients=32, duration_s=0.5)
    assert run(amortised(), clients=32, duration_s=0.5).throughput_ops_s == high.throughput_ops_s  # per seed
    wakes = {c: sum(h.wakeups for h in r.runtime.hosts) / max(r.ops_ok, 1) for c, r in ((2, low), (32, high))}
    assert wakes[32] < 0.5 * wakes[2]
    # the same total CPU per input at low load, charged as a constant: no amortisation, so less gain at 32
    flat = profile(io_per_input=LogNormal(120e-6), fsync=LogNormal(1.2e-4, 0.1, 4e-4))
    gain_flat = run(flat, clients=32, duration_s=0.5).throughput_ops_s / run(flat, clients=2,
                                                                              duration_s=0.5).throughput_ops_s
    assert high.throughput_ops_s / low.throughput_ops_s > gain_flat


def test_a_clients_first_request_to_a_node_waits_for_the_connection():
    slow = run(amortised(connect=LogNormal(0.2)), clients=8, duration_s=0.5)
    assert slow.latency_ms_p50 < 50 and slow.latency_ms_p99 >= 200  # only each client's first operation pays
    assert run(amortised(connect=None), clients=8, duration_s=0.5).latency_ms_p99 < 50


def test_inputs_a_node_schedules_for_its_next_turn_join_its_busy_period(monkeypatch):
    """The real loop runs a zero-delay timer (call_later(0): Raft's FLUSH and WRITE) and a durability notice
    (call_soon) after a select that does not block, in the busy period that scheduled them: no wake-up. Only inputs
    from outside the loop (requests, messages, fsync completions, timers with a delay) find it idle and wake it."""
    from seedance.sim.runtime import PERSISTED, TIMER, Runtime

    seen = []  # (kind, arrived when the previous input's CPU ended, started a busy period)
    arrive, handle = Runtime._arrive, Runtime._handle

    def spy_arrive(self, host, kind, value):
        spy_arrive.at_end[host.node_id] = not host.inbox and host.busy_until == self.env.now
        arrive(self, host, kind, value)

    def spy_handle(self, host, kind, value, now):
        seen.append((kind, spy_arrive.at_end.get(host.node_id, False), host.woke))
        handle(self, host, kind, value, now)

    spy_arrive.at_end = {}
    monkeypatch.setattr(Runtime, "_arrive", spy_arrive)
    monkeypatch.setattr(Runtime, "_handle", spy_handle)
    result = run(amortised(), clients=2, duration_s=0.3)
    own = [woke for kind, at_end, woke in seen if kind in (TIMER, PERSISTED) and at_end]
    assert own and not any(own)
    assert len(own) > result.ops_ok  # FLUSH, WRITE and the leader's durability notice: several per operation
    assert sum(woke for *_, woke in seen) > result.ops_ok  # outside inputs still wake the loop


def test_zero_delay_inputs_run_before_inputs_that_arrived_while_their_scheduler_ran(monkeypatch):
    """asyncio order: a zero-delay timer or call_soon scheduled by a handler runs in the loop's next turn, before an
    input whose bytes arrived meanwhile (its reader callback wakes its task one turn later). So a leader's FLUSH
    closes the batch before the requests that arrived while it handled the one that armed it."""
    from seedance.sim.runtime import Runtime

    arrived, pending, late = {}, {}, []  # id(value) -> (time, scheduler's start or None); per host: pending timers
    started, count = {}, [0]
    arrive, handle = Runtime._arrive, Runtime._handle

    def spy_arrive(self, host, kind, value):
        at_end = bool(host.inbox) and host.busy_until == self.env.now
        arrived[id(value)] = (self.env.now, started.get(host.node_id) if at_end else None)
        if at_end:
            pending.setdefault(host.node_id, set()).add(id(value))
            count[0] += 1
        arrive(self, host, kind, value)

    def spy_handle(self, host, kind, value, now):
        at, scheduler = arrived.pop(id(value), (now, None))
        mine = pending.get(host.node_id, set())
        if id(value) in mine:
            mine.discard(id(value))
        else:  # an input from outside: none of the zero-delay inputs still waiting was scheduled before it arrived
            late.extend(at for v in mine if arrived.get(v, (0, None))[1] is not None and at > arrived[v][1])
        started[host.node_id] = now
        handle(self, host, kind, value, now)

    monkeypatch.setattr(Runtime, "_arrive", spy_arrive)
    monkeypatch.setattr(Runtime, "_handle", spy_handle)
    result = run(amortised(), clients=8, duration_s=0.3)
    assert count[0] > result.ops_ok / 4  # a zero-delay input often finds others queued (8 clients)
    assert not late


def test_wake_up_cost_adds_latency_at_low_load():
    cheap, woken = amortised(wake=LogNormal(0.0)), amortised(wake=LogNormal(300e-6))
    assert run(woken, clients=2, duration_s=0.5).latency_ms_p50 > run(cheap, clients=2, duration_s=0.5).latency_ms_p50 + 0.5


def test_fit_amortisation_recovers_wake_and_per_item_cost():
    from seedance.real.profile_fit import fit_amortisation

    rng = np.random.default_rng(5)
    items = rng.integers(1, 12, 4000)
    cpu_ns = (90e3 + 45e3 * items) * np.exp(0.3 * rng.standard_normal(items.size) - 0.045)
    wake, per_item = fit_amortisation(list(zip(cpu_ns, items)))
    assert wake == pytest.approx(90e-6, rel=0.15) and per_item == pytest.approx(45e-6, rel=0.1)
    assert fit_amortisation([(1e5, 1)] * 20) == (0.0, pytest.approx(1e-4))  # one batch size: no intercept to fit


def test_profiles_with_amortisation_and_a_gpu_round_trip(tmp_path):
    from seedance.models.host import DeviceProfile

    from seedance.models.host import TenantProfile

    host = amortised(device=DeviceProfile(kind="H200", name="NVIDIA H200", memory_GiB=139.8, count=1,
                                          kernel_launch_s=LogNormal(6e-6, 0.2, 2e-5), h2d_GBps=50.0),
                     tenants=TenantProfile(0.5, LogNormal(3e-5, 1.4, 3e-3), 0.7))
    path = tmp_path / "gpu.yaml"
    atomic_write(path, host.to_yaml().encode())
    assert load_profile(path) == host
    assert "device" not in profile().to_dict() and "wake" not in profile().to_dict()  # old readers: no nulls


def test_busy_periods_and_the_handoff_are_measured_on_a_real_loop():
    """The profile hook on a real asyncio loop: items handled in one turn share a period; an idle loop's round trip
    to a worker thread and back takes a positive, bounded time."""
    import asyncio

    from seedance.real.meters import measure_handoff, measure_wake
    from seedance.real.loop_hooks import BusyPeriods

    async def main():
        busy = BusyPeriods(asyncio.get_running_loop())
        for batch in (1, 3, 1, 5):
            await asyncio.sleep(0.002)  # idle: the next select may block
            for _ in range(batch):
                busy.items += 1
                busy.kinds[1] += 1  # a timer
                sum(range(2000))  # some CPU in the period
        await asyncio.sleep(0.002)
        return busy.periods

    periods = asyncio.run(main())
    assert [p[1] for p in periods] == [1, 3, 1, 5] and all(p[0] > 0 for p in periods)
    assert [p[4][1] for p in periods] == [1, 3, 1, 5] and all(sum(p[4]) == p[1] for p in periods)
    samples = measure_handoff(round_trips=50)
    assert len(samples) == 50 and 0 < np.median(samples) < 0.05
    # a real idle loop woken by single messages from another process; 3 ms apart, so that a loaded machine's late
    # sender rarely lets two messages coalesce into one read (a coalesced read is not a single-message wake-up)
    wakes = measure_wake(wakeups=60, gap_s=0.003)
    assert len(wakes) >= 20 and all(w > 0 for w in wakes) and np.median(wakes) < 5e-3


def test_the_profile_hooks_records_are_not_traversed_by_the_garbage_collector():
    """A profiled node keeps up to 50,000 busy-period records; were any of them tracked by the collector (a list
    inside each one was), every full collection of the profiled process would traverse them, and the profile would
    record its own bookkeeping as the nodes' collection pauses (14-22 ms full collections that unprofiled runs never
    had). After two collections the records must all be untracked."""
    import asyncio
    import gc

    from seedance.real.loop_hooks import BusyPeriods

    async def main():
        busy = BusyPeriods(asyncio.get_running_loop())
        for _ in range(200):
            await asyncio.sleep(0.0001)  # long enough for the loop's select to block: the period closes
            busy.items += 1
            busy.kinds[0] += 1
        return busy.periods

    periods = asyncio.run(main())
    assert len(periods) > 100
    gc.collect()  # a record's inner tuple is untracked in the first collection it survives, the record in the next
    gc.collect()
    assert not any(gc.is_tracked(p) for p in periods)


def test_fit_by_kind_separates_costly_items_from_the_wake_up_that_the_pooled_fit_confounds():
    """Followers' periods hold one costly item (an AppendEntries: decode, hand the fsync to the storage thread),
    the leader's several cheap ones (timers): the pooled fit's one per-item cost moves the costly items into
    ``wake``; the fit by kind recovers the wake-up and each kind's cost."""
    from seedance.models.host import ITEM_KINDS as PERIOD_KINDS
    from seedance.real.profile_fit import fit_amortisation, fit_amortisation_by_kind

    rng = np.random.default_rng(5)
    message, timer, done = PERIOD_KINDS.index("message"), PERIOD_KINDS.index("timer"), PERIOD_KINDS.index("fsync_done")
    periods = []
    for i in range(3000):
        kinds = [0] * len(PERIOD_KINDS)
        if i % 2:  # a follower: one AppendEntries or one fsync completion
            kinds[message if i % 4 == 1 else done] = 1
        else:  # the leader: a few timers and messages
            kinds[timer], kinds[message] = 1 + i % 5, i % 3
        cpu = 40e-6 + 100e-6 * kinds[message] + 10e-6 * kinds[timer] + 90e-6 * kinds[done]
        periods.append((int(cpu * rng.lognormal(0.0, 0.05) * 1e9), sum(kinds), 0, 0, kinds))
    pooled_wake, _ = fit_amortisation(periods)
    fit = fit_amortisation_by_kind(periods)
    assert fit["wake_s"] == pytest.approx(40e-6, rel=0.1) and pooled_wake > 1.5 * fit["wake_s"]
    assert fit["per_kind_s"]["message"] == pytest.approx(100e-6, rel=0.05)
    assert fit["per_kind_s"]["timer"] == pytest.approx(10e-6, abs=3e-6)
    assert set(fit["per_kind_s"]) == {"message", "timer", "fsync_done"} and fit["items"]["fsync_done"] == 750
    assert fit_amortisation_by_kind([p[:4] for p in periods]) is None  # an older runtime's periods: no kinds
    probed = fit_amortisation_by_kind(periods, wake_s=40e-6)  # the wake-up given (the direct probe's)
    assert probed["wake_s"] == 40e-6 and probed["per_kind_s"]["message"] == pytest.approx(100e-6, rel=0.05)


def test_other_tenants_hold_cores_for_their_share_and_preempt():
    from seedance.models.host import TenantProfile

    def mean_wall(busy: float) -> float:
        pool = CorePool(2, TenantProfile(busy, LogNormal(50e-6, 1.0, 2e-3)), np.random.default_rng(7))
        return float(np.mean([pool.take(i * 1e-3, 100e-6) - i * 1e-3 for i in range(2000)]))

    idle, half, most = mean_wall(0.0), mean_wall(1.0), mean_wall(1.8)
    assert idle == pytest.approx(100e-6) and idle < half < most  # waits and preemptions grow with their share
    busy = TenantProfile(1.0, LogNormal(50e-6, 1.0, 2e-3))
    a = CorePool(2, busy, np.random.default_rng(7))
    b = CorePool(2, busy, np.random.default_rng(7))
    assert [a.take(t, 1e-4) for t in np.arange(0, 0.05, 1e-3)] == [b.take(t, 1e-4) for t in np.arange(0, 0.05, 1e-3)]
    host = amortised(tenants=busy)
    assert run(host, clients=8, duration_s=0.3).latency_ms_p50 > run(amortised(), clients=8, duration_s=0.3).latency_ms_p50
    assert run(host, clients=8, duration_s=0.3).throughput_ops_s == run(host, clients=8, duration_s=0.3).throughput_ops_s


def test_tenants_are_measured_for_real():
    import time

    from seedance.real.meters import TenantMeter, measure_tenants

    busy, late = measure_tenants(cycles=100)
    assert busy >= 0 and len(late) == 100 and min(late) == 0.0
    with TenantMeter(interval_s=0.02) as meter:
        time.sleep(0.1)
    assert meter.busy_cores is not None and meter.busy_cores >= 0


def test_connection_set_ups_at_one_node_queue_and_are_fitted_from_sorted_times():
    from seedance.real.profile_fit import fit_connects

    fitted = fit_connects([0.002 + 0.001 * k for k in (3, 0, 5, 1, 2, 4, 7, 6)])
    assert fitted["accept"].median_s == pytest.approx(0.001) and fitted["connect"].median_s == pytest.approx(0.002)
    assert fit_connects([]) == {"connect": None, "accept": None}
    queued = amortised(connect=LogNormal(1e-3), accept=LogNormal(5e-3))
    few, many = run(queued, clients=4, duration_s=0.5), run(queued, clients=32, duration_s=0.5)
    assert many.latency_ms_p99 > 2 * few.latency_ms_p99  # 32 set-ups at the leader wait for each other


def test_costs_by_kind_are_charged_per_kind_and_round_trip():
    """``io_per_kind``: each item pays its kind's cost (fsync completions and the fsync hand-off to the storage
    thread included); kinds without one pay ``io_per_input``; the file format keeps it and names a bad kind."""
    base = amortised()
    assert run(base, clients=2, duration_s=0.3).throughput_ops_s == run(
        amortised(io_per_kind={}), clients=2, duration_s=0.3).throughput_ops_s  # empty: exactly the pooled cost
    heavy = amortised(io_per_kind={"fsync_done": LogNormal(400e-6), "fsync_start": LogNormal(400e-6)})
    light = amortised(io_per_kind={"timer": LogNormal(0.0), "persisted": LogNormal(0.0)})
    low = {name: run(p, clients=2, duration_s=0.3) for name, p in (("base", base), ("heavy", heavy),
                                                                     ("light", light))}
    assert low["heavy"].latency_ms_p50 > low["base"].latency_ms_p50 + 0.5  # two fsyncs per write on the path
    assert low["light"].latency_ms_p50 < low["base"].latency_ms_p50
    back = HostProfile.from_dict(yaml.safe_load(heavy.to_yaml()))
    assert back.io_per_kind == heavy.io_per_kind and "io_per_kind" not in base.to_dict()
    with pytest.raises(SpecError, match="io_per_kind"):
        HostProfile.from_dict({**base.to_dict(), "io_per_kind": {"disk": 1e-4}})


def test_storage_thread_cpu_inside_the_fsync_overlaps_its_wait():
    """``fsync_cpu``: the storage thread's CPU measured inside the timed write + fsync is already in the fsync's
    wall time: it holds a core during the wait (contention) instead of delaying the fsync (as ``sync_cpu`` does);
    the profile splits the measured CPU per fsync between them."""
    from seedance.real.profile_fit import sync_cpus

    before = amortised(sync_cpu=LogNormal(300e-6))
    during = amortised(sync_cpu=LogNormal(0.0), fsync_cpu=LogNormal(300e-6))
    free = amortised(sync_cpu=LogNormal(0.0))
    p50 = {name: run(p, clients=2, duration_s=0.3).latency_ms_p50 for name, p in
           (("before", before), ("during", during), ("free", free))}
    assert p50["during"] < p50["before"] - 0.1 and p50["during"] >= p50["free"]
    assert HostProfile.from_dict(yaml.safe_load(during.to_yaml())).fsync_cpu == LogNormal(300e-6)
    split = sync_cpus(200e-6, 150e-6)
    assert split["sync_cpu"].median_s == pytest.approx(50e-6) and split["fsync_cpu"] == LogNormal(150e-6)
    assert sync_cpus(200e-6, None) == {"sync_cpu": LogNormal(200e-6)} and sync_cpus(None, 1e-4) == {"sync_cpu": None}


def test_scaling_the_cpu_scales_every_cpu_time_and_no_latency():
    """Every CPU time scales; latencies do not, except a durable write's wall time by its own CPU's share of it."""
    base = amortised(io_per_kind={"message": LogNormal(30e-6), "fsync_done": LogNormal(20e-6)},
                     fsync_cpu=LogNormal(10e-6))
    slow = base.scaled_cpu(2.0)
    assert slow.cpu["message"].median_s == 2 * base.cpu["message"].median_s
    assert slow.cpu["message"].sigma == base.cpu["message"].sigma
    for name in ("io_per_input", "client_per_op", "wake", "client_wake", "sync_cpu", "fsync_cpu"):
        assert getattr(slow, name).median_s == pytest.approx(2 * getattr(base, name).median_s), name
    assert slow.io_per_kind["fsync_done"].median_s == pytest.approx(40e-6)
    for name in ("loopback", "handoff", "connect", "accept", "tenants", "write_bandwidth_GBps"):
        assert getattr(slow, name) == getattr(base, name), name
    share = base.fsync_cpu.median_s / base.fsync.median_s  # the storage thread's CPU inside the fsync's wall time
    assert slow.fsync.median_s == pytest.approx(base.fsync.median_s * (1 + share))
    assert slow.fsync.sigma == base.fsync.sigma
    measured = dataclasses.replace(base, fsync=Empirical((0.0, 0.5, 1.0), (100e-6, 200e-6, 900e-6)),
                                   fsync_cpu=LogNormal(100e-6), write=LogNormal(20e-6), write_cpu=LogNormal(10e-6))
    fast = measured.scaled_cpu(0.5)  # half the CPU: the CPU half of the wall halves, the device's half stays
    assert fast.fsync.s == pytest.approx((75e-6, 150e-6, 675e-6))
    assert fast.write.median_s == pytest.approx(15e-6)
    assert dataclasses.replace(base, fsync_cpu=None).scaled_cpu(2.0).fsync == base.fsync  # no CPU part measured
    assert run(slow, clients=8, duration_s=0.3).throughput_ops_s < run(base, clients=8, duration_s=0.3).throughput_ops_s
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SpecError, match="cpu scale factor"):
            base.scaled_cpu(bad)


def test_a_profile_pools_its_cpu_runs(tmp_path):
    """Two real Raft runs (seeds 1 and 2) pooled: every node's handler samples of both runs are in the fit, each run
    is recorded, and the run kept for the tenants' calibration is the one of (lower) median throughput."""
    import json as json_

    from seedance.real.profile import measure_cpu

    # 1 s per run: the windows skip the first 0.3 s and need 5 operations per 50 ms window, which 2 clients on a
    # loaded machine (load 9 on 2 cores) did not reach in the 0.2 s a 0.5 s run left (windows None)
    cpu = measure_cpu(tmp_path, nodes=3, clients=2, duration_s=1.0, seed=1, runs=2)
    assert len(cpu["runs"]) == 2 and all(r["throughput_ops_s"] > 0 for r in cpu["runs"])
    assert cpu["summary"]["throughput_ops_s"] == min(r["throughput_ops_s"] for r in cpu["runs"])
    per_run = []
    for index in range(2):
        files = sorted((tmp_path / f"raft-{index}").glob("node-*/cpu-profile-*.json"))
        assert len(files) == 3
        per_run.append(sum(len(v) for f in files for v in json_.loads(f.read_text())["handler_ns"].values()))
    assert all(n > 0 for n in per_run) and cpu["inputs"] == sum(per_run)
    # every fsync's return from the storage thread to the loop, and the runs' latency windows (the slow spells)
    assert len(cpu["handback_s"]) > 50 and 0 < np.median(cpu["handback_s"]) < 0.05
    first = cpu["group_commit"]["handover_quantiles_s"]  # the first half under load, recorded beside the model
    assert 0 < first[0] <= first[1] <= first[2] <= first[3] < 0.5
    assert cpu["windows"] is not None and cpu["windows"].windows >= 4
    assert (tmp_path / "client-profile-0.json").is_file() and (tmp_path / "client-profile-1.json").is_file()
    # the nodes' collections come from a run without the CPU profile (whose records change how they collect)
    plain = tmp_path / "raft-gc"
    assert cpu["gc_source"] == "an unprofiled run"
    assert len(list(plain.glob("node-*/gc-profile-*.json"))) == 3 and not list(plain.glob("node-*/cpu-profile-*"))
    recorded = [json_.loads(f.read_text()) for f in plain.glob("node-*/gc-profile-*.json")]
    assert cpu["gc"]["node"]["items"] == sum(r["items"] for r in recorded) > 0


def test_fsync_off_draws_the_write_alone_and_needs_it_measured():
    """``storage.fsync = false`` (the real ``SEEDANCE_FSYNC=0``): a durable write waits for ``write`` (the page
    cache) instead of the fsync, with ``write_cpu`` on a core; a profile without ``write`` is refused, naming the
    field, rather than simulated with the fsync's times."""
    from seedance.sim.config import StorageConfig

    host = amortised(fsync=LogNormal(2e-3, 0.2, 5e-3), write=Empirical((0.0, 0.5, 1.0), (5e-6, 1e-5, 4e-5)),
                     write_cpu=LogNormal(8e-6))

    def go(p, fsync):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.3, seed=1, trace=False, check=False,
                                  workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0)), host_profile=p,
                                  storage=StorageConfig(fsync=fsync)), liveness=False)

    on, off = go(host, True), go(host, False)
    assert off.throughput_ops_s > 1.2 * on.throughput_ops_s and off.latency_ms_p50 < on.latency_ms_p50
    assert go(host, False).throughput_ops_s == off.throughput_ops_s  # seeded
    again = HostProfile.from_dict(yaml.safe_load(host.to_yaml()))
    assert again.write == host.write and again.write_cpu == host.write_cpu
    with pytest.raises(SpecError, match="storage.fsync"):
        go(amortised(), False)
    with pytest.raises(SpecError, match="storage.fsync"):
        StorageConfig(fsync="no")


def test_a_crashed_node_restarts_after_the_measured_restart_time():
    """``restart`` (spawn to serving, probed on the real launcher) delays a crashed node's recovery: with a long
    restart the crash fault's run commits less."""
    from seedance.sim.config import NemesisConfig

    def go(p):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=1.0, seed=2, trace=False, check=False,
                                  workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0)), host_profile=p,
                                  nemesis=NemesisConfig(faults=("crash",))), liveness=False)

    quick, slow = go(amortised(restart=LogNormal(1e-3))), go(amortised(restart=LogNormal(0.3)))
    assert slow.throughput_ops_s < quick.throughput_ops_s
    assert HostProfile.from_dict(yaml.safe_load(amortised(restart=LogNormal(0.02, 0.1)).to_yaml())).restart == \
        LogNormal(0.02, 0.1)


def test_running_peers_reach_a_restarted_node_at_their_next_reconnect():
    """``reconnect_s`` (the real transport's retry interval for a refused peer): a running peer's messages to a
    restarted node leave once its connection is up again, a seeded uniform point within the interval, together;
    none earlier. Without it (an older profile) they leave at once. The test protocol's primary sends node 1 a
    heartbeat every 10 ms; node 1 is down from 0.3 to 0.6 s."""
    from _real_kv_protocol import SPEC

    def go(p):
        return simulate(SimConfig(protocol=SPEC, nodes=3, duration_s=1.0, seed=3, trace=True, check=False,
                                  protocol_config={"heartbeat_s": 0.01}, host_profile=p,
                                  workload=WorkloadConfig(clients=1, mix=(1.0, 0.0, 0.0))),
                        liveness=False, actions=[(0.3, lambda rt: rt.crash(1)), (0.6, lambda rt: rt.restart(1))])

    def sends_to_1(result):
        return sorted(r[0] for r in result.trace.of_kind("send") if r[2] == 0 and r[4] == 1 and r[0] >= 0.6)

    quick = sends_to_1(go(amortised(restart=LogNormal(1e-3))))
    slow = sends_to_1(go(amortised(restart=LogNormal(1e-3), reconnect_s=0.2)))
    assert quick[0] - 0.6 < 0.011 and np.diff(quick[:10]).min() > 0.005  # a heartbeat each 10 ms, from the restart
    up = slow[0]
    assert 0.6 < up <= 0.8 and slow.count(up) >= int((up - 0.6) / 0.01)  # those sent meanwhile leave at the up time
    assert slow == sends_to_1(go(amortised(restart=LogNormal(1e-3), reconnect_s=0.2)))  # seeded
    assert HostProfile.from_dict(yaml.safe_load(amortised(reconnect_s=0.02).to_yaml())).reconnect_s == 0.02


def test_writes_without_fsync_and_restarts_are_measured_for_real(tmp_path):
    from seedance.real.probes import measure_restart, measure_write

    walls, cpus = measure_write(tmp_path, samples=30)
    assert len(walls) == len(cpus) == 30 and all(w > 0 for w in walls) and all(c >= 0 for c in cpus)
    assert not list(tmp_path.iterdir())  # the probe's state is gone
    restarts = measure_restart(tmp_path, restarts=3)
    assert len(restarts) == 3 and all(0 < r < 30 for r in restarts)


def test_an_fsync_that_allocates_a_file_block_draws_its_own_kind():
    """``fsync_grow``: an append that reaches a new block of its file (larger values: more often) waits for the
    allocating fsync's measured time, the rest for ``fsync``. With a slow allocating kind 1 KiB values commit less
    than small ones; without it (or with it equal to ``fsync``) the value size barely matters; and it round-trips."""
    slow = amortised(fsync=LogNormal(3e-4, 0.1, 1e-3), fsync_grow=LogNormal(9e-4, 0.1, 3e-3), block_bytes=4096)
    plain = amortised(fsync=LogNormal(3e-4, 0.1, 1e-3))

    def go(p, value_bytes):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.5, seed=1, trace=False, check=False,
                                  workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0), value_bytes=value_bytes,
                                                          request_bytes=64 + value_bytes), host_profile=p),
                        liveness=False).throughput_ops_s

    small, large = go(slow, 0), go(slow, 1024)
    assert large < 0.8 * small  # most 1 KiB appends allocate; few small ones do
    assert small > 0.9 * go(plain, 0)  # small appends rarely allocate: about the plain profile's
    assert abs(go(plain, 1024) / go(plain, 0) - 1) < 0.05
    again = HostProfile.from_dict(yaml.safe_load(slow.to_yaml()))
    assert again.fsync_grow == slow.fsync_grow and again.block_bytes == 4096


def test_sim_storage_knows_which_writes_reach_a_new_block():
    from seedance.models.protocols.contract import Persist, PersistLog
    from seedance.sim.storage import Storage

    storage = Storage(fsync_s=1e-4, write_bandwidth_GBps=1.0, block_bytes=4096)
    storage.stage(PersistLog(key="log", start=0, entries=("a",), size_bytes=100))
    assert storage.grows  # the file's first block
    storage.sync_done_s(0.0)
    assert not storage.grows  # consumed by the sync it was booked for
    storage.stage(PersistLog(key="log", start=1, entries=("b",), size_bytes=3000))
    assert not storage.grows  # 3,100 bytes: still the first block
    storage.stage(PersistLog(key="log", start=2, entries=("c",), size_bytes=1000))
    assert storage.grows  # 4,100 bytes: into the second
    storage.sync_done_s(0.0)
    storage.stage(PersistLog(key="log", start=1, entries=("d",), size_bytes=10))
    assert not storage.grows  # truncated to one entry at the mean size (1,366 bytes), then 10 more
    storage.stage(Persist(key="term", value=1, size_bytes=16))
    assert storage.grows  # a value is written as a new file


def test_the_real_storage_counts_appends_into_a_new_block(tmp_path):
    from seedance.models.protocols.contract import PersistLog
    from seedance.models.wire import Codec
    from seedance.real.storage import DiskStorage

    storage = DiskStorage(tmp_path / "s", Codec(()), fsync=False)
    block = storage.block_bytes
    assert block >= 512

    def append(start, size):
        storage.stage(PersistLog(key="log", start=start, entries=("x" * size,)))
        storage.sync()
        return storage.grown

    assert append(0, 10) == 1  # the first block
    assert append(1, 10) == 1  # inside it
    assert append(2, block) == 2  # past its end
    assert (tmp_path / "s" / "logs").exists()


def test_allocating_fsyncs_are_probed_for_real_and_chosen_from_the_run_when_it_has_enough(tmp_path):
    from seedance.real.profile_fit import fsync_grow_kind
    from seedance.real.probes import measure_fsync_grow

    within, grow, block = measure_fsync_grow(tmp_path, samples=10)
    assert len(within) == len(grow) == 10 and all(x > 0 for x in within + grow) and block >= 512
    assert not list(tmp_path.iterdir())  # the probe's file is gone
    run_within = [3e-4] * 100
    kind, source = fsync_grow_kind(run_within, [5e-4] * 60, [1e-4] * 10, [1.5e-4] * 10)
    assert source == "run" and kind.median_s == pytest.approx(5e-4)
    kind, source = fsync_grow_kind(run_within, [5e-4] * 3, [1e-4] * 10, [1.5e-4] * 10)
    assert source.startswith("run shifted") and kind.median_s == pytest.approx(3.5e-4)


def test_garbage_collection_pauses_stretch_the_tail_and_round_trip():
    """``gc`` / ``client_gc``: now and then an item (an operation) runs an older-generation collection that holds
    the process's core for its pause; every operation waiting on that process stalls, so p99 grows far more than
    p50 and the throughput barely moves. Seeded, and it round-trips."""
    from seedance.models.host import GcProfile

    base = amortised()
    paused = amortised(gc=GcProfile(2e-3, LogNormal(2e-3, 0.2, 5e-3)),
                       client_gc=GcProfile(2e-3, Empirical((0.0, 0.5, 1.0), (1e-3, 2e-3, 4e-3))))
    quiet, noisy = run(base, duration_s=1.0), run(paused, duration_s=1.0)
    assert noisy.latency_ms_p99 > 1.15 * quiet.latency_ms_p99
    assert noisy.latency_ms_p50 < 1.1 * quiet.latency_ms_p50
    assert noisy.throughput_ops_s > 0.85 * quiet.throughput_ops_s
    assert run(paused, duration_s=1.0).latency_ms_p99 == noisy.latency_ms_p99
    again = HostProfile.from_dict(yaml.safe_load(paused.to_yaml()))
    assert again.gc == paused.gc and again.client_gc == paused.client_gc


def test_older_collections_are_recorded_for_real_and_fitted_per_item():
    import gc

    from seedance.real.profile_fit import fit_gc
    from seedance.real.loop_hooks import GcPauses

    recorder = GcPauses()
    gc.collect(1)
    gc.collect(2)
    recorded = recorder.close()
    assert [p[0] for p in recorded["pauses"]] == [1, 2] and all(p[1] > 0 and p[2] > 0 for p in recorded["pauses"])
    assert recorded["pauses"][0][2] + recorded["pauses"][0][1] <= recorded["pauses"][1][2]  # starts in order
    gc.collect(1)
    assert len(recorder.pauses) == 2  # closed: no longer recording
    fitted = fit_gc([1e-3, 2e-3], 1000)
    assert fitted.rate == pytest.approx(2e-3) and 1e-3 <= fitted.pause.median_s <= 2e-3
    assert fit_gc([], 1000) is None


def test_full_collections_come_where_the_interpreter_counts_them_and_a_restart_counts_again():
    """CPython runs a full (generation-2) collection once ``threshold2`` generation-1 ones have passed; a node
    forked from the zygote inherits its counts. The profile runs showed it: each leader's 6th older collection was
    its one full one (14-20 ms, against 0.5-3.8 ms), its followers' three never were. Fitted so (per item beyond
    the few every process makes at its start), and drawn so: the ``full_first``-th collection of an incarnation,
    then every 12th, is full; a restarted node counts from 0."""
    import gc

    from seedance.models.host import GcProfile
    from seedance.real.profile_fit import fit_gc

    # two leaders (18k items: 5 young collections, then a full one) and their followers (3k items: 3 young ones)
    leader = [(1, 1.2e-3), (1, 6e-4), (1, 7e-4), (1, 9e-4), (1, 7e-4), (2, 1.66e-2)]
    follower = [(1, 1.3e-3), (1, 6e-4), (1, 7e-4)]
    processes = [(18_000, leader), (3_000, follower), (3_000, follower),
                 (18_000, [(1, 1.8e-3), *leader[1:5], (2, 2.0e-2)])]
    pauses = [s for _, seq in processes for _, s in seq]
    fitted = fit_gc(pauses, 42_000, processes)
    # collections = start + rate x items through (3k, 3) and (18k, 6): 2.4 + 2e-4 per item; the full one is a
    # process's 6th, so the 4th (6 - 2.4, rounded) of those drawn per item (the start's are not drawn)
    assert fitted.rate == pytest.approx(2e-4) and fitted.full_first == 4
    assert fitted.full_period == gc.get_threshold()[2] + 2
    assert 1.66e-2 <= fitted.full.median_s <= 2.0e-2 and max(fitted.pause.s) < 2e-3  # the young ones apart
    pooled = fit_gc(pauses[:3], 3_000, [(3_000, follower)])  # no full collection seen: pooled, as before
    assert pooled.full is None and pooled.rate == pytest.approx(1e-3)

    profile = GcProfile(1.0, LogNormal(1e-3), LogNormal(2e-2), 6, 12)  # every item collects: count them
    counted = [0]
    drawn = [profile.draw(np.random.default_rng(0), counted) for _ in range(30)]
    assert [i + 1 for i, pause in enumerate(drawn) if pause == pytest.approx(2e-2)] == [6, 18, 30]
    assert counted == [30] and GcProfile(1.0, LogNormal(1e-3)).draw(np.random.default_rng(0), counted) == 1e-3
    again = HostProfile.from_dict(yaml.safe_load(amortised(gc=profile).to_yaml()))
    assert again.gc == profile

    from seedance.sim.config import SimConfig, WorkloadConfig
    from seedance.sim.run import simulate

    seen = {}

    def crash(runtime):
        seen["before"] = runtime.hosts[0].collections[0]
        runtime.crash(0)

    def restart(runtime):
        runtime.restart(0)
        seen["after"] = runtime.hosts[0].collections[0]

    simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.6, seed=1, trace=False, check=False,
                       workload=WorkloadConfig(clients=4, mix=(0.0, 1.0, 0.0)),
                       host_profile=amortised(gc=GcProfile(0.05, LogNormal(1e-4), LogNormal(2e-4), 6, 12))),
             actions=[(0.4, crash), (0.45, restart)], liveness=False)
    assert seen["before"] > 0 and seen["after"] == 0


def test_entries_a_message_carries_cost_per_entry_around_the_profiles_mean():
    """``entries``: sending and receiving cost per log entry carried, centred on the profile run's mean entries per
    message (where the per-kind costs hold them): at the mean nothing changes; costs counted from zero entries
    slow a batching run; an item's negative share is carried, never a negative CPU; it round-trips."""
    from types import SimpleNamespace

    from seedance.models.host import EntryCosts, carried_entries
    from seedance.models.protocols.raft.messages import AppendEntries, command_entry
    from seedance.sim.runtime import Runtime

    plain = run(amortised(), duration_s=0.5).throughput_ops_s
    centred = run(amortised(entries=EntryCosts(4e-6, 5e-6, 1.8, 1.8)), duration_s=0.5).throughput_ops_s
    costly = run(amortised(entries=EntryCosts(2e-4, 2e-4, 0.0, 0.0)), duration_s=0.5).throughput_ops_s
    assert abs(centred / plain - 1) < 0.05 and costly < 0.8 * plain
    batch = AppendEntries(term=1, leader_id=0, prev_log_index=0, prev_log_term=0, leader_commit=0,
                          entries=tuple(command_entry(1, 1, i, "write", "k", i) for i in range(3)))
    assert carried_entries(batch) == 3 and carried_entries("ping") == 0
    host = SimpleNamespace(owed=-3e-6)
    assert Runtime._owe(host, 2e-6) == 0.0 and host.owed == pytest.approx(-1e-6)  # carried, not negative
    assert Runtime._owe(host, 2e-6) == pytest.approx(1e-6) and host.owed == 0.0
    again = HostProfile.from_dict(yaml.safe_load(amortised(entries=EntryCosts(4e-6, 5e-6, 1.8, 1.8)).to_yaml()))
    assert again.entries == EntryCosts(4e-6, 5e-6, 1.8, 1.8)
    with pytest.raises(SpecError, match="entries.send_s"):
        EntryCosts(-1.0, 0.0, 0.0, 0.0)


def test_the_frame_paths_cost_per_entry_is_measured_for_real():
    from seedance.real.probes import measure_entry_codec

    send_s, recv_s = measure_entry_codec(entries=16, repeats=10)
    assert 0 < send_s < 1e-3 and 0 < recv_s < 1e-3


def test_a_restart_takes_its_cpu_on_a_shared_core_and_more_for_a_longer_log(tmp_path):
    """``restart_cpu`` and ``recover_per_entry_s``: the restarted process's CPU (from the real restarts, and per
    recovered log entry from restarts on a copy of a run's logs) runs on a shared core, so the crash fault's run
    commits less when restarts are CPU-heavy; the records of a real log are counted; the fit's medians."""
    from seedance.models.protocols.contract import PersistLog
    from seedance.models.wire import Codec
    from seedance.real.profile_fit import fit_recovery
    from seedance.real.probes import log_entries
    from seedance.real.storage import DiskStorage
    from seedance.sim.config import NemesisConfig

    def go(p):
        return simulate(SimConfig(protocol="raft", nodes=3, duration_s=1.0, seed=2, trace=False, check=False,
                                  workload=WorkloadConfig(clients=8, mix=(0.0, 1.0, 0.0)), host_profile=p,
                                  nemesis=NemesisConfig(faults=("crash",))), liveness=False)

    light = amortised(restart=LogNormal(0.02), restart_cpu=LogNormal(1e-3), recover_per_entry_s=0.0)
    heavy = amortised(restart=LogNormal(0.02), restart_cpu=LogNormal(0.02), recover_per_entry_s=2e-4)
    assert go(heavy).throughput_ops_s < go(light).throughput_ops_s
    again = HostProfile.from_dict(yaml.safe_load(heavy.to_yaml()))
    assert again.restart_cpu == heavy.restart_cpu and again.recover_per_entry_s == 2e-4
    storage = DiskStorage(tmp_path / "state", Codec(()), fsync=False)
    storage.stage(PersistLog(key="log", start=0, entries=tuple(range(5))))
    storage.sync()
    assert log_entries(tmp_path / "state") == 5
    fit = fit_recovery(([0.02, 0.021], [0.018, 0.019]), ([0.05], [0.0485]), entries=6000)
    assert fit["recover_per_entry_s"] == pytest.approx(5e-6) and fit["restart_cpu"].median_s > 0


def test_the_storage_thread_runs_only_while_the_loop_lets_go_of_the_interpreters_lock(monkeypatch):
    """A node's storage thread shares one interpreter with its loop: each of its steps (before the syscall, and
    after it to hand the result back) waits until the loop thread is idle (its inbox empty, its input done) or has
    waited the switch interval; while the thread runs its own CPU the loop waits. A costly loop makes writes wait."""
    from seedance.sim.runtime import Runtime
    from seedance.sim.storage_thread import SWITCH_INTERVAL_S

    granted = []  # (waited from, granted at, the loop idle then)
    try_lock = Runtime._lock_try

    def spy(self, event):
        host = event.args[0]
        before = len(host.lock_waiters)
        waiting_since = host.lock_waiters[0][1] if before else None
        now = self.env.now
        idle = not host.inbox and host.busy_until <= now + 1e-12  # before the thread's own CPU
        try_lock(self, event)
        if before and len(host.lock_waiters) < before:
            granted.append((waiting_since, now, idle))

    monkeypatch.setattr(Runtime, "_lock_try", spy)
    costly = amortised(cpu={"message": LogNormal(400e-6, 0.5, 3e-3), "timer": LogNormal(23e-6, 0.9, 3e-4),
                            "client": LogNormal(300e-6, 0.5, 3e-3), "persisted": LogNormal(18e-6, 1.3, 4e-4)})
    result = run(costly, clients=8, duration_s=0.3)
    assert result.ops_ok > 0 and len(granted) > result.ops_ok  # two steps per write (groups of writes)
    waits = np.asarray([at - since for since, at, _ in granted])
    # every step ran with the loop idle, except one that waited the switch interval out
    assert all(idle or wait >= SWITCH_INTERVAL_S - 1e-9 for (_, _, idle), wait in zip(granted, waits))
    assert np.quantile(waits, 0.9) > 100e-6  # a busy loop kept the thread waiting
    monkeypatch.setattr(Runtime, "_lock_try", try_lock)
    cheap = amortised()
    assert run(cheap, clients=8, duration_s=0.3).throughput_ops_s == run(cheap, clients=8, duration_s=0.3).throughput_ops_s


def test_a_real_executor_job_waits_for_the_loop_thread_to_let_go_of_the_lock():
    """What the simulator's lock model rests on, measured on this interpreter: a job submitted to a one-thread
    executor (the real runtime's storage thread) while the loop thread keeps running Python starts only after it
    stops (here ~2 ms of loop work, under the 5 ms switch interval), not ~40 us after the submission."""
    import asyncio
    import concurrent.futures
    import time

    executor = concurrent.futures.ThreadPoolExecutor(1)

    async def once(busy_s: float) -> float:
        loop = asyncio.get_running_loop()
        submitted = time.perf_counter()
        future = loop.run_in_executor(executor, time.perf_counter)
        end = submitted + busy_s
        while time.perf_counter() < end:  # the loop thread's own work, holding the lock
            pass
        return await future - submitted

    async def main() -> list[float]:
        out = []
        for _ in range(20):
            await asyncio.sleep(0.001)
            out.append(await once(2e-3))
        return out

    try:
        started = asyncio.run(main())
    finally:
        executor.shutdown()
    assert np.median(started) >= 1.9e-3


def test_the_cores_count_the_work_they_take_and_a_run_reports_it_over_its_load():
    pool = CorePool(2)
    pool.take(0.0, 1.0)
    pool.take_background(0.0, 0.5)
    assert pool.work_s == pytest.approx(1.5)  # foreground and background alike
    from _host_helpers import run_on, small_host

    result = run_on(small_host(), duration_s=1.0)
    cores = result.stats["cpu_s"] / 1.0
    assert 0.0 < cores <= 2.0  # the load window's work, on two cores
    # more clients, more work on the same cores: the count follows the load, it is not a constant
    busier = simulate(SimConfig(protocol="raft", nodes=3, duration_s=1.0, seed=1, trace=False, check=False,
                                workload=WorkloadConfig(clients=32, mix=(0.0, 1.0, 0.0)), host_profile=small_host()),
                      liveness=False)
    assert busier.stats["cpu_s"] > 1.2 * result.stats["cpu_s"]
    plain = simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.3, seed=1, trace=False, check=False),
                     liveness=False)
    assert "cpu_s" not in plain.stats  # no modelled cores, nothing to count


def test_fsyncs_a_collection_held_are_left_out_of_the_hand_over_and_fsync_samples():
    """A collection of the node's own process holds its storage thread's hand-over (the interpreter's lock): such
    fsync records are found by their span (submit -> the loop has the result) and the collection's, so the
    simulator, which draws the collections apart, does not draw their pause a second time from these tails."""
    from seedance.real.profile_fit import gc_held

    ms = 1_000_000
    # (group, handback, wall, cpu, grew, handover, end): spans [end - wall - handover, end + handback]
    syncs = [(1, ms // 10, ms // 3, 0, 0, ms // 10, t * ms) for t in (10, 20, 30, 40)]
    pauses = [(2, 5 * ms, 18 * ms), (1, ms, 39 * ms + ms // 2)]  # 18-23 ms: the 2nd; 39.5-40.5 ms: the 4th
    assert gc_held(syncs, pauses) == {1, 3}
    assert gc_held(syncs, [(2, 5 * ms)]) == set()  # an older record without the start: none
    assert gc_held([s[:6] for s in syncs], pauses) == set()  # older fsync records without their end: none
