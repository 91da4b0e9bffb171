"""The phi-accrual failure detector (Hayashibara et al. 2004) with Akka's defaults and formula."""

from __future__ import annotations

import math

import pytest

from seedance.errors import SpecError
from seedance.models.phi import PhiAccrualDetector, PhiConfig, phi_value


def test_akka_defaults():
    cfg = PhiConfig()
    assert (cfg.threshold, cfg.max_sample_size, cfg.min_std_deviation_s, cfg.acceptable_heartbeat_pause_s,
            cfg.first_heartbeat_estimate_s) == (8.0, 1000, 0.1, 3.0, 1.0)


def test_phi_at_the_mean_is_log10_2_and_grows_with_silence():
    # at elapsed == mean the logistic gives e = 1, so phi = -log10(1 - 1/2)
    assert phi_value(1.0, 1.0, 0.1) == pytest.approx(math.log10(2.0))
    values = [phi_value(t, 1.0, 0.2) for t in (0.2, 0.8, 1.0, 1.2, 1.6, 2.0, 3.0, 10.0)]
    assert values == sorted(values) and values[-1] > 100  # no overflow far in the tail
    assert phi_value(-50.0, 1.0, 0.1) == 0.0  # far below the mean: exp overflow handled


def test_regular_heartbeats_stay_available_and_silence_is_suspected():
    det = PhiAccrualDetector(PhiConfig(acceptable_heartbeat_pause_s=0.0, first_heartbeat_estimate_s=1.0))
    for k in range(50):
        det.heartbeat(float(k))
    assert det.available(49.5) and det.phi(49.5) < 1.0
    assert det.phi(49.0 + 1.0) == pytest.approx(math.log10(2.0), abs=1e-6)  # interval std 0 -> min std 0.1
    assert det.available(49.0 + 1.5) and not det.available(49.0 + 1.6)  # 5 sigma: phi 7.3; 6 sigma: 10.8
    assert det.phi(49.0 + 1.5) == pytest.approx(phi_value(1.5, 1.0, 0.1))


def test_acceptable_pause_delays_suspicion():
    quick = PhiAccrualDetector(PhiConfig(acceptable_heartbeat_pause_s=0.0))
    patient = PhiAccrualDetector(PhiConfig(acceptable_heartbeat_pause_s=3.0))
    for det in (quick, patient):
        for k in range(20):
            det.heartbeat(float(k))
    assert not quick.available(19 + 2.0) and patient.available(19 + 2.0)
    assert not patient.available(19 + 5.0)


def test_window_keeps_at_most_max_samples():
    det = PhiAccrualDetector(PhiConfig(max_sample_size=10))
    for k in range(100):
        det.heartbeat(k * 0.5)
    assert det.samples == 10
    mean, std = det.mean_std()
    assert mean == pytest.approx(0.5) and std == pytest.approx(0.0, abs=1e-9)


def test_first_heartbeat_seeds_the_window_like_akka():
    det = PhiAccrualDetector(PhiConfig(first_heartbeat_estimate_s=1.0))
    assert det.phi(123.0) == 0.0  # nothing heard yet: nothing to suspect
    det.heartbeat(10.0)
    mean, std = det.mean_std()
    assert det.samples == 2 and mean == pytest.approx(1.0) and std == pytest.approx(0.25)


@pytest.mark.parametrize("kwargs, field", [
    ({"threshold": 0}, "phi.threshold"), ({"min_std_deviation_s": float("nan")}, "phi.min_std_deviation_s"),
    ({"acceptable_heartbeat_pause_s": -1}, "phi.acceptable_heartbeat_pause_s"),
    ({"max_sample_size": 0}, "phi.max_sample_size"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        PhiConfig(**kwargs)
    assert field in str(err.value)
