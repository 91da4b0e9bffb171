"""Helpers shared by the sub-commands: JSON output and common option types."""

from __future__ import annotations

import json
from typing import Any

import click

from seedance import validation
from seedance.errors import SpecError
from seedance.jsonable import jsonable


def to_json(obj: Any) -> str:
    """Strict JSON (no NaN) for one object, numpy values converted."""
    return json.dumps(jsonable(obj), allow_nan=False)


def emit_json(obj: Any) -> None:
    """Print exactly one JSON object on stdout."""
    click.echo(to_json(obj))


def parse_settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs as a dict; VALUE is JSON when it parses, else the plain string."""
    config: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SpecError("--set", f"expected KEY=VALUE, got {pair!r}", "e.g. --set heartbeat_s=0.05")
        if key in config:
            raise SpecError("--set", f"{key} is set twice", "each KEY at most once")
        try:
            json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
        except ValueError:  # NaN, Infinity, 1e400: json.loads accepts them, loads_json says why not
            config[key] = validation.loads_json(raw, f"--set {key}")
        else:
            config[key] = validation.loads_json(raw, f"--set {key}")
    return config


json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
