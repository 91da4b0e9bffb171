"""Loading a topology by name or file: :func:`load` and :func:`from_dict`.

``load(spec)`` takes a preset name, a path to a YAML/JSON file (matrix form or link-graph form, told apart by their
fields: ``bandwidth_GBps`` means the matrix form, ``devices``/``links`` the link graph), or an already parsed mapping.
Files are parsed with ``yaml.safe_load`` (JSON is valid YAML; ``.json`` files go through ``json`` for exact errors);
syntax errors become :class:`SpecError` naming the file, line and column.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from seedance.errors import SpecError
from seedance.validation import StrictYamlLoader, finite_tree, loads_json
from seedance.models.topology._core import Topology
from seedance.models.topology._graph import graph_from_dict, is_graph_doc
from seedance.models.topology._matrix import matrix_from_dict
from seedance.models.topology._presets import PRESETS, preset, preset_names

_Loader = StrictYamlLoader  # safe; duplicate keys rejected; YAML 1.2 floats (1e308 is a number)


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
    """Parse YAML (or JSON) text, turning syntax errors into one-line SpecErrors."""
    if as_json:
        try:
            json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(path, f"JSON syntax error at line {err.lineno} column {err.colno}: {err.msg}",
                            "valid JSON") from None
        return loads_json(text, path)  # no duplicate keys, NaN or overflowing numbers
    try:
        return finite_tree(path, yaml.load(text, Loader=_Loader))  # noqa: S506 - a safe loader
    except SpecError as err:  # a duplicate key, from the strict loader
        raise SpecError(path, f"{err.field}: {err.problem}", err.valid) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(path, f"YAML syntax error{where}: {problem}", "valid YAML or JSON") from None


def load_file(path: str | os.PathLike[str]) -> Topology:
    """A Topology from a YAML/JSON file in the matrix or link-graph form."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        problem = f"cannot be read ({type(err).__name__}: {err})"
        raise SpecError(str(file), problem, "a readable UTF-8 text file") from None
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
