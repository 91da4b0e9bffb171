"""The host's slow spells (issue V): the spell process, its fit from a run's latency windows, the simulator's
spells and the storage thread's measured hand-back, and both in a profile."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from _host_helpers import run_on, small_host

from seedance.history.events import Event
from seedance.history.spells import latency_windows, operation_latencies, pooled
from seedance.models.host import (CorePool, Empirical, HostProfile, LogNormal, SpellProcess, SpellProfile, fit_spell,
                                  ou_window_shape)


def _factor_series(spell: SpellProfile, seed: int, seconds: float, step: float = 0.001) -> np.ndarray:
    process = SpellProcess(spell, np.random.default_rng(seed))
    return np.array([process.factor(t) for t in np.arange(0.0, seconds, step)])


def test_the_spell_process_has_its_sd_and_time_and_leaves_the_item_rate_unchanged():
    spell = SpellProfile(0.25, 0.05)
    g = _factor_series(spell, 1, 300.0)
    logs = np.log(g)
    assert logs.std() == pytest.approx(0.25, rel=0.08)
    # items come at rate 1 / g: over a long run as many as without spells (the costs were fitted with them in)
    assert np.mean(1.0 / g) == pytest.approx(1.0, abs=0.02)
    lag = 50  # 50 ms apart: correlated as exp(-lag / tau)
    centred = logs - logs.mean()
    rho = float(np.mean(centred[:-lag] * centred[lag:]) / centred.var())
    assert rho == pytest.approx(math.exp(-0.05 / 0.05), abs=0.08)
    assert np.array_equal(g[:2000], _factor_series(spell, 1, 2.0))  # a pure function of its generator
    assert not np.array_equal(g[:2000], _factor_series(spell, 2, 2.0))


def test_the_window_shape_of_an_ou_process_matches_its_simulation():
    spell = SpellProfile(0.3, 0.04)
    logs = np.log(_factor_series(spell, 3, 400.0))
    windows = logs[: len(logs) // 50 * 50].reshape(-1, 50).mean(axis=1)  # 50 ms windows
    kept, rho = ou_window_shape(0.05 / 0.04)
    assert windows.var() / logs.var() == pytest.approx(kept, rel=0.1)
    assert np.corrcoef(windows[:-1], windows[1:])[0, 1] == pytest.approx(rho, abs=0.05)


def _synthetic_history(spell: SpellProfile | None, *, seconds: float = 30.0, clients: int = 4, seed: int = 7,
                       reads: bool = False) -> list[Event]:
    """Closed-loop operations of ~2 ms (log-normal, sigma 0.3), each stretched by the spells' factor at its start;
    with ``reads``, every other operation a read that takes a third of a write."""
    rng = np.random.default_rng(seed)
    process = SpellProcess(spell, np.random.default_rng(seed + 1)) if spell is not None else None
    events = []
    for client in range(clients):
        t, n = 0.0, 0
        while t < seconds:
            read = reads and n % 2 == 1
            latency = 2e-3 * (1 / 3 if read else 1.0) * math.exp(0.3 * rng.standard_normal())
            latency *= process.factor(t) if process is not None else 1.0
            f = "read" if read else "write"
            events.append(Event(process=client, type="invoke", f=f, key="k", value=None if read else n, time=t))
            events.append(Event(process=client, type="ok", f=f, key="k", value=n, time=t + latency))
            t += latency
            n += 1
    return sorted(events, key=lambda e: e.time)


def test_spells_are_recovered_from_a_latency_series_and_none_are_seen_without_them():
    truth = SpellProfile(0.2, 0.08)
    stats = latency_windows(operation_latencies(_synthetic_history(truth)))
    fitted = fit_spell(stats.sd, stats.rho, 0.05)
    assert fitted.sigma == pytest.approx(truth.sigma, rel=0.2)
    assert fitted.tau_s == pytest.approx(truth.tau_s, rel=0.35)
    # without spells the windows vary by their sampling noise only, which is removed
    quiet = latency_windows(operation_latencies(_synthetic_history(None)))
    assert quiet.raw_sd > 0.02 and quiet.sd < 0.02
    # reads and writes of different latency mixed: each is measured against its own median, not one bimodal series
    mixed = latency_windows(operation_latencies(_synthetic_history(None, reads=True)))
    assert mixed.sd < 0.03
    both = pooled([stats, quiet])
    assert both.windows == stats.windows + quiet.windows and quiet.sd < both.sd < stats.sd
    assert fit_spell(0.0, 0.5, 0.05) is None and fit_spell(0.1, -0.2, 0.05) is None
    assert latency_windows(np.empty((0, 2))) is None


def test_a_stall_window_is_clipped_not_taken_for_a_spell():
    """One window 18x slower than the rest (a collection, a disk hiccup) is a tail event: it must not lift the
    windows' sd (a profile run's went from 0.10 to 0.40 with one, and its fitted spells' sigma to 0.55)."""
    truth = SpellProfile(0.2, 0.08)
    latencies = operation_latencies(_synthetic_history(truth))
    clean = latency_windows(latencies)
    stalled = latencies.copy()
    start = stalled[0, 0] + 0.3 + 100 * 0.05  # the 101st window: each of its operations 18x as slow
    inside = (stalled[:, 0] >= start) & (stalled[:, 0] < start + 0.05)
    stalled[inside, 1] *= 18.0
    stats = latency_windows(stalled)
    assert clean.stalls == 0 and stats.stalls == 1
    assert stats.sd == pytest.approx(clean.sd, rel=0.1) and stats.rho == pytest.approx(clean.rho, abs=0.1)
    assert pooled([stats, clean]).stalls == stats.stalls and stats.to_dict()["stalls"] == stats.stalls


def test_a_spell_scales_every_cost_on_the_cores():
    spell = SpellProfile(0.4, 0.02)
    factor = SpellProcess(spell, np.random.default_rng(5))
    pool = CorePool(1, spell=SpellProcess(spell, np.random.default_rng(5)))
    end = pool.take(0.5, 1e-4)
    assert end == pytest.approx(0.5 + 1e-4 * factor.factor(0.5))
    assert pool.take_background(end, 1e-4) == pytest.approx(end + 1e-4 * factor.factor(end))


def _host(**over) -> HostProfile:
    return small_host(**over)


def _run(host: HostProfile, seed: int = 1, duration_s: float = 2.0, trace: bool = False):
    return run_on(host, seed, duration_s, trace)


def test_a_simulated_run_with_spells_varies_from_window_to_window_and_stays_reproducible():
    plain = _run(_host())
    spelled = _host(spell=SpellProfile(0.3, 0.05))
    a, b = _run(spelled), _run(spelled)
    assert a.throughput_ops_s == b.throughput_ops_s and a.latency_ms_p99 == b.latency_ms_p99
    quiet = latency_windows(operation_latencies(plain.history))
    moving = latency_windows(operation_latencies(a.history))
    assert quiet.sd < 0.1 and moving.sd > 3 * quiet.sd and moving.rho > 0.2  # seed 1: 0.05 and 0.23, rho 0.59
    assert a.latency_ms_p99 / a.latency_ms_p50 > plain.latency_ms_p99 / plain.latency_ms_p50
    # the same number of items in the same time, spells or not (the factor's 1 / g averages to 1)
    assert a.throughput_ops_s == pytest.approx(plain.throughput_ops_s, rel=0.08)


def test_the_loop_has_a_write_back_after_the_measured_hand_back():
    slow = _host(handback=Empirical((0.0, 1.0), (5e-4, 5e-4)))
    fast = _run(_host(), trace=True, duration_s=0.5)
    late = _run(slow, trace=True, duration_s=0.5)

    def write_round_trips(result):
        return [r[5] - r[0] for r in result.trace.records if r[1] == "persist"]

    assert min(write_round_trips(late)) >= 5e-4 > np.median(write_round_trips(fast))
    assert late.latency_ms_p50 > fast.latency_ms_p50 + 0.5  # the leader's and a follower's write, in turn


def test_the_storage_thread_starts_after_the_measured_hand_over():
    """The first half under load (the thread's wake-up on a busy machine, the lock): where the profile has it, it
    replaces the idle probe's half of ``handoff``; the write's round trip starts with it."""
    late = _run(_host(handover=Empirical((0.0, 1.0), (5e-4, 5e-4))), trace=True, duration_s=0.5)
    fast = _run(_host(), trace=True, duration_s=0.5)

    def write_round_trips(result):
        return [r[5] - r[0] for r in result.trace.records if r[1] == "persist"]

    assert min(write_round_trips(late)) >= 5e-4 > np.median(write_round_trips(fast))
    assert late.latency_ms_p50 > fast.latency_ms_p50 + 0.5  # the leader's and a follower's write, in turn


def test_a_profile_with_spells_and_a_hand_back_round_trips(tmp_path):
    from seedance.models.host import load_profile
    from seedance.files import atomic_write

    host = _host(spell=SpellProfile(0.15, 0.03), handback=Empirical.fit([3e-5, 5e-5, 6e-5, 1.5e-4, 4e-4]),
                 handover=Empirical.fit([7e-5, 9e-5, 1e-4, 3.5e-4, 8e-4]))
    path = tmp_path / "host.yaml"
    atomic_write(path, host.to_yaml().encode())
    assert load_profile(path) == host
    assert host.scaled_cpu(1.3).spell == host.spell  # a CPU scale leaves the spells' shape alone


def test_the_spells_are_calibrated_so_the_simulator_reproduces_the_real_windows():
    from seedance.history.spells import WindowStats
    from seedance.experiments.host_profile import calibrate_spell

    host = _host()
    real = WindowStats(sd=0.12, rho=0.5, windows=150, noise_sd=0.03, raw_sd=0.124)
    fitted = calibrate_spell(host, real, nodes=3, clients=8, duration_s=2.0)
    record = fitted.measured["spells"]
    assert fitted.spell is not None and fitted.spell.sigma > 0.12 * 0.9  # the latency moves less than the CPU
    assert 0.2 <= record["elasticity"] <= 1.5 and record["real"]["sd"] == 0.12
    assert record["simulated_with_spell"]["sd"] == pytest.approx(0.12, rel=0.35)
    # windows that vary no more than the simulator's own, or do not agree with their neighbours: no spells
    assert calibrate_spell(host, dataclasses.replace(real, sd=0.005), nodes=3, clients=8,
                           duration_s=1.0).spell is None
    assert calibrate_spell(host, dataclasses.replace(real, rho=float("nan")), nodes=3, clients=8,
                           duration_s=1.0).spell is None
    assert calibrate_spell(host, None, nodes=3, clients=8, duration_s=1.0).measured["spells"]["fitted"] is None
