"""Helpers shared by the sub-commands: JSON output and common option types."""

from __future__ import annotations

import json
import math
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


def check_protocol_config(protocol: str, config: dict[str, Any], nodes: int) -> None:
    """Reject an unknown or bad protocol option (``--set``) before any work: build one node with it (a node's
    constructor validates its configuration, e.g. RaftConfig)."""
    import numpy as np

    from seedance.models.protocols import registry

    spec = registry.get(protocol) if isinstance(protocol, str) and ":" not in protocol else None
    if spec is None:
        return
    defaults = dict(spec.default_config or {})
    unknown = sorted(set(config) - set(defaults)) if defaults else []
    if unknown:
        raise SpecError(f"--set {unknown[0]}", "unknown option", f"valid for {protocol}: {', '.join(defaults)}")
    spec.factory(0, max(1, nodes), np.random.default_rng(0), {**defaults, **config})


def parse_mix(text: str) -> tuple[float, float, float]:
    """``--mix read,write,cas``: three non-negative fractions summing to 1."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SpecError("--mix", f"not numbers: {text!r}", "three fractions read,write,cas, e.g. 0.5,0.4,0.1") from None
    if len(parts) != 3 or any(not math.isfinite(p) or p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6:
        raise SpecError("--mix", f"bad fractions {text!r}", "three non-negative fractions read,write,cas summing to 1")
    return parts  # type: ignore[return-value]


json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
