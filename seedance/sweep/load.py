"""Loading a sweep specification: a YAML/JSON file, a dict or a spec, in a size, validated as a whole and (by default)
point by point against its runner. Apart from :mod:`seedance.sweep.spec` (the spec's schema) because the point-by-point
check needs the expansion (:mod:`seedance.sweep.expand`), which builds on the schema."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from seedance.errors import SpecError
from seedance.sweep.expand import points
from seedance.sweep.spec import SweepSpec, check_size, sized, spec_error


def load_spec(source: str | os.PathLike[str] | dict[str, Any] | SweepSpec, *, check_points: bool = True,
              size: str = "full") -> SweepSpec:
    """A validated :class:`SweepSpec` from a YAML/JSON file, a dict or a spec, in ``size`` (full or quick: see the
    module docstring).

    With ``check_points`` (default) every point's parameters also pass the runner's own validation, so an unknown
    or bad parameter is refused before any point runs.
    """
    from seedance import validation

    check_size(size)
    where = ""
    if isinstance(source, SweepSpec):
        spec = source
    else:
        if isinstance(source, dict):
            doc = source
        else:
            path = Path(source)
            if not path.is_file():
                raise SpecError("SPEC", f"{path} is not a file", "a YAML or JSON sweep specification")
            doc = validation.load_file(path, "SPEC")
            where = str(path)
        if not isinstance(doc, dict):
            raise SpecError(where or "spec", f"expected a mapping, got {type(doc).__name__}",
                            "a YAML mapping with name, runner, fixed, axes, repetitions, timeout_s")
        doc = sized(doc, size, where)
        try:
            spec = SweepSpec.model_validate(doc)
        except ValidationError as err:
            raise spec_error(err, where) from None
    if check_points and not spec._points_checked:
        from seedance.provenance import spec_hash
        from seedance.sweep.registry import validate_params

        seen: set[str] = set()
        for params in points(spec):
            key = spec_hash(params)
            if key not in seen:
                seen.add(key)
                try:
                    validate_params(spec.runner, params)
                except SpecError as err:
                    if not where:
                        raise
                    raise SpecError(f"{where}: {err.field}", err.problem, err.valid) from None
        spec._points_checked = True
    return spec
