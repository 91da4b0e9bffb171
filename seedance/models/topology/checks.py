"""Bounds of a topology argument before it is built (the CLI's, a sweep's, the paper's): a preset's server count, or
a file's strictness and ceilings (:func:`seedance.validation.check_topology_doc`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from seedance.validation import (MAX_DEVICES, MAX_TOPOLOGY_FILE_BYTES, TOPOLOGY_FILE, WHY_DEVICES,
                                 check_topology_doc, integer, load_file)


def _preset_devices_per_server(name: str) -> int:
    from seedance.models.topology._presets import PRESETS, preset

    spec = PRESETS[name]
    return preset(name, spec.min_nodes).num_devices // spec.min_nodes


def check_topology_spec(field: str, spec: Any, nodes: int | None = None, *, nodes_field: str = "--nodes") -> None:
    """Bounds of a topology argument before it is built: a preset's server count (devices ≤ MAX_DEVICES, at least
    its minimum), or a file's size, duplicate keys, finite numbers, matrix order / device count and value
    ceilings. The topology model itself validates everything else when it loads."""
    from seedance.models.topology._presets import PRESETS  # on use: listing the CLI loads no networkx

    if spec is None:
        return
    if isinstance(spec, str) and spec in PRESETS:
        if nodes is None:
            return
        per = _preset_devices_per_server(spec)
        integer(nodes_field, nodes, lo=PRESETS[spec].min_nodes, hi=MAX_DEVICES // per,
                why=f"{per} devices per {spec} server; " + WHY_DEVICES)
        return
    if not isinstance(spec, (str, os.PathLike)) or not Path(spec).is_file():
        return  # the model's own "not a preset and no such file" message
    doc = load_file(spec, field, max_bytes=MAX_TOPOLOGY_FILE_BYTES, expected=TOPOLOGY_FILE)
    check_topology_doc(field, doc)
