"""Helpers shared by the sub-commands: JSON output and common option types."""

from __future__ import annotations

import json
import math
from typing import Any

import click
import numpy as np


def _default(obj: Any) -> Any:
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


json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
