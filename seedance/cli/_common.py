"""Helpers shared by the sub-commands: JSON output and common option types."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click

from seedance import validation
from seedance.errors import SpecError


def _default(obj: Any) -> Any:
    np = sys.modules.get("numpy")  # not imported here (the CLI starts fast); no numpy value exists without it
    if np is None:
        raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """Replace NaN/inf (invalid JSON) by null, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Strict JSON (no NaN) for one object, numpy values converted."""
    return json.dumps(_finite(json.loads(json.dumps(obj, default=_default))), allow_nan=False)


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
