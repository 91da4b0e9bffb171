"""Plain JSON values for what the framework writes: one rule for reports, summaries, point files and ``--json``.

:func:`jsonable` turns a nested structure into strict-JSON-ready values: mapping keys become strings, tuples lists,
numpy scalars and arrays Python numbers and lists, and non-finite floats (NaN, ±inf: invalid in strict JSON) None,
i.e. ``null`` — a missing value. Anything else is returned as it is, for ``json.dumps`` to accept or refuse.
numpy is never imported here (the CLI starts without it): a numpy value cannot exist unless numpy was loaded.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` with plain JSON types throughout (see the module docstring)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.ndarray):
            return jsonable(value.tolist())
        if isinstance(value, np.generic):
            return jsonable(value.item())
    return value
