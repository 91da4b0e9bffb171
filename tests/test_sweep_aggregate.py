"""Aggregation across seeds: bootstrap confidence intervals (scipy.stats.bootstrap), degenerate groups."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from seedance.errors import SpecError
from seedance.sweep import aggregate, mean_ci


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for protocol, mu in (("raft", 100.0), ("epaxos", 50.0)):
        for seed in range(12):
            rows.append({"protocol": protocol, "seed": seed, "status": "ok", "tput": mu + rng.normal(0, 5),
                         "lin": seed != 3 or protocol != "raft"})
    rows.append({"protocol": "raft", "seed": 99, "status": "failed", "tput": None, "lin": None})
    rows.append({"protocol": "one", "seed": 0, "status": "ok", "tput": 7.0, "lin": True})
    rows.append({"protocol": "flat", "seed": 0, "status": "ok", "tput": 3.0, "lin": True})
    rows.append({"protocol": "flat", "seed": 1, "status": "ok", "tput": 3.0, "lin": True})
    rows.append({"protocol": "gap", "seed": 0, "status": "ok", "tput": None, "lin": True})
    rows.append({"protocol": "text", "seed": 0, "status": "ok", "tput": 1.0, "lin": "true"})
    rows.append({"protocol": "text", "seed": 1, "status": "ok", "tput": 1.0, "lin": "false"})
    rows.append({"protocol": "text", "seed": 2, "status": "ok", "tput": 1.0, "lin": "unknown"})
    return pd.DataFrame(rows)


def test_intervals_contain_the_mean_and_are_deterministic():
    df = frame()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # degenerate groups must not warn
        table = aggregate(df, by=["protocol"], metrics=["tput", "lin"], seed=1, n_resamples=2000)
    again = aggregate(df, by=["protocol"], metrics=["tput", "lin"], seed=1, n_resamples=2000)
    pd.testing.assert_frame_equal(table, again)
    other = aggregate(df, by=["protocol"], metrics=["tput"], seed=2, n_resamples=2000)
    rows = table.set_index("protocol")
    assert list(table.columns) == ["protocol", "n", "tput_mean", "tput_lo", "tput_hi", "lin_mean", "lin_lo", "lin_hi"]
    assert rows.loc["raft", "n"] == 12  # the failed run is left out
    for protocol in ("raft", "epaxos"):
        r = rows.loc[protocol]
        values = df[(df.protocol == protocol) & (df.status == "ok")]["tput"]
        assert r.tput_mean == pytest.approx(values.mean())
        assert r.tput_lo < r.tput_mean < r.tput_hi
        assert r.tput_hi - r.tput_lo < 4 * values.std()  # an interval of the mean, not of the values
    assert rows.loc["raft", "lin_mean"] == pytest.approx(11 / 12)
    assert other.set_index("protocol").loc["raft", "tput_lo"] != rows.loc["raft", "tput_lo"]
    # degenerate groups: one value, all equal, none
    assert tuple(rows.loc["one", ["n", "tput_mean", "tput_lo", "tput_hi"]]) == (1, 7.0, 7.0, 7.0)
    assert tuple(rows.loc["flat", ["n", "tput_mean", "tput_lo", "tput_hi"]]) == (2, 3.0, 3.0, 3.0)
    assert rows.loc["gap", "n"] == 1 and np.isnan(rows.loc["gap", "tput_mean"])
    assert rows.loc["text", "n"] == 3 and rows.loc["text", "lin_mean"] == 0.5  # "unknown" is missing


def test_coverage_of_the_interval():
    """Roughly 95 % of 95 % intervals over fresh samples contain the true mean (a loose check of the method)."""
    rng = np.random.default_rng(0)
    hits = sum(lo <= 10.0 <= hi for lo, hi in
               (mean_ci(rng.normal(10.0, 2.0, size=20), seed=k, n_resamples=999)[1:] for k in range(200)))
    assert 170 <= hits <= 200


def test_bad_arguments_name_the_field():
    with pytest.raises(SpecError, match="no column 'nope'"):
        aggregate(frame(), by=["nope"], metrics=["tput"])
    with pytest.raises(SpecError, match="confidence"):
        aggregate(frame(), by=["protocol"], metrics=["tput"], confidence=1.5)
