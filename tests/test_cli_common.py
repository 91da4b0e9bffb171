"""Shared CLI option parsers: one definition serves `sim run` and `real run`."""

import pytest

from seedance.cli import main
from seedance.cli._common import parse_settings, to_json
from seedance.validation import parse_mix
from seedance.errors import SpecError


def test_settings_are_json_when_they_parse_and_strings_otherwise():
    assert parse_settings(("a=1", "b=\"x\"", "c=plain", "d=[1, 2]")) == {"a": 1, "b": "x", "c": "plain", "d": [1, 2]}


@pytest.mark.parametrize("bad", ["novalue", "=1"])
def test_settings_without_key_or_equals_are_rejected(bad):
    with pytest.raises(SpecError, match="--set"):
        parse_settings((bad,))


def test_mix_accepts_three_fractions_summing_to_one():
    assert parse_mix("0.5,0.4,0.1") == (0.5, 0.4, 0.1)


@pytest.mark.parametrize("bad", ["a,b,c", "0.5,0.5", "0.6,0.6,-0.2", "0.5,0.4,0.2", "nan,0.5,0.5"])
def test_bad_mixes_are_rejected_naming_the_flag(bad):
    with pytest.raises(SpecError, match="--mix"):
        parse_mix(bad)


def test_json_output_has_no_nan():
    assert to_json({"x": float("nan"), "y": [float("inf"), 1.0]}) == '{"x": null, "y": [null, 1.0]}'


def test_bad_mix_on_the_command_line_is_one_line_and_exit_2(capsys):
    assert main(["sim", "run", "--mix", "1,1,1", "--duration", "0.1", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mix" in err[0]


def test_jsonable_is_one_rule_for_every_writer():
    import json
    import math

    import numpy as np

    from seedance.jsonable import jsonable

    value = {1: (np.float32(1.5), np.int64(3), np.bool_(True)), "a": [math.nan, -math.inf, np.array([1.0, np.nan])],
             "s": "x"}
    out = jsonable(value)
    assert out == {"1": [1.5, 3, True], "a": [None, None, [1.0, None]], "s": "x"}
    assert json.loads(json.dumps(out, allow_nan=False)) == out
    assert type(out["1"][1]) is int and type(out["1"][2]) is bool
