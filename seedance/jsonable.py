"""Plain JSON values for what the framework writes: one rule for reports, summaries, point files and ``--json``.

:func:`compact_encoder` is the fast way to write many small documents (history lines, trace events): the text of
``json.dumps(obj, separators=(",", ":"), allow_nan=False, default=default)``, with the C encoder made once.

:func:`jsonable` turns a nested structure into strict-JSON-ready values: mapping keys become strings, tuples lists,
numpy scalars and arrays Python numbers and lists, and non-finite floats (NaN, ±inf: invalid in strict JSON) None,
i.e. ``null`` — a missing value. Anything else is returned as it is, for ``json.dumps`` to accept or refuse.
numpy is never imported here (the CLI starts without it): a numpy value cannot exist unless numpy was loaded.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any


def compact_encoder(default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """An ``encode(obj) -> str`` giving exactly ``json.dumps(obj, separators=(",", ":"), allow_nan=False,
    default=default)`` (ASCII, keys in insertion order; NaN and infinities raise ValueError, what ``default`` cannot
    turn into JSON raises TypeError). ``json.dumps`` makes a new C encoder for every call, which is most of the cost
    of a small document; this makes it once (without the C accelerator: the plain encoder)."""
    encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=default)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    ascii_string = json.encoder.encode_basestring_ascii
    c_encode = make(None, encoder.default, ascii_string, None, ":", ",", False, False, False)

    def encode(obj: Any) -> str:
        if type(obj) is str:
            return ascii_string(obj)
        return "".join(c_encode(obj, 0))

    return encode


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
