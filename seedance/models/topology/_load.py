"""Loading a topology by name or file: :func:`load` and :func:`from_dict`.

``load(spec)`` takes a preset name, a path to a YAML/JSON file (matrix form or link-graph form, told apart by their
fields: ``bandwidth_GBps`` means the matrix form, ``devices``/``links`` the link graph), or an already parsed mapping.
Files are parsed by :func:`seedance.validation.loads_yaml` (JSON is valid YAML; ``.json`` files go through
:func:`~seedance.validation.loads_json` for exact errors): syntax errors, duplicate keys, aliases, non-finite numbers
and over-long integers become one :class:`SpecError` naming the file and line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from seedance.errors import SpecError
from seedance.validation import MAX_TOPOLOGY_FILE_BYTES, TOPOLOGY_FILE, loads_json, loads_yaml, read_text
from seedance.models.topology._core import Topology
from seedance.models.topology._graph import graph_from_dict, is_graph_doc
from seedance.models.topology._matrix import matrix_from_dict
from seedance.models.topology._presets import PRESETS, preset, preset_names

def from_dict(doc: object, *, default_name: str = "matrix", source: str = "") -> Topology:
    """A Topology from a parsed YAML/JSON mapping in either form."""
    if not isinstance(doc, Mapping):
        raise SpecError(source or "topology", f"is a {type(doc).__name__}", "a mapping (the matrix or link-graph form)")
    for key in doc:
        if not isinstance(key, str):
            raise SpecError(repr(key), "is not a valid field name", "string field names")
    if "bandwidth_GBps" in doc:
        return matrix_from_dict(doc, default_name=default_name, source=source)
    if is_graph_doc(doc):
        return graph_from_dict(doc, default_name=default_name, source=source)
    raise SpecError(
        "bandwidth_GBps", "is missing",
        "a matrix-form file needs bandwidth_GBps (n×n); a link-graph file needs devices and links",
    )


def parse_text(text: str, *, path: str = "<text>", as_json: bool = False) -> object:
    """Parse YAML (or JSON) text strictly (:mod:`seedance.validation`), turning every fault into one-line SpecErrors
    naming ``path``."""
    return loads_json(text, path) if as_json else loads_yaml(text, path)


def load_file(path: str | os.PathLike[str]) -> Topology:
    """A Topology from a YAML/JSON file in the matrix or link-graph form."""
    file = Path(path)
    text = read_text(file, str(file), TOPOLOGY_FILE, max_bytes=MAX_TOPOLOGY_FILE_BYTES)
    doc = parse_text(text, path=str(file), as_json=file.suffix.lower() == ".json")
    return from_dict(doc, default_name=file.stem, source=str(file))


def load(spec: object, nodes: int | None = None) -> Topology:
    """A preset name, a file path, or a parsed mapping, as a Topology.

    ``nodes`` (servers) applies to presets only (default: the preset's own, 1 except ``mixed``); for files and
    mappings it must be None or 1.

    >>> load("dgx-a100").num_devices, load("dgx-a100", nodes=2).num_hosts
    (8, 2)
    """
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, Mapping):
        _single("a mapping", nodes)
        return from_dict(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise SpecError("topology", f"is a {type(spec).__name__}", "a preset name or a path to a YAML/JSON file")
    if isinstance(spec, str) and spec in PRESETS:
        return preset(spec, nodes)
    if not Path(spec).is_file():
        raise SpecError(
            "topology", f"{str(spec)!r} is not a preset and no such file was found",
            f"a preset ({', '.join(preset_names())}) or a path to a YAML/JSON file",
        )
    _single("a file", nodes)
    return load_file(spec)


def _single(what: str, nodes: object) -> None:
    if nodes is not None and nodes != 1:
        raise SpecError("nodes", f"is {nodes!r} but the topology is {what}", "--nodes applies to presets only")
