"""One set of validators for every input a user gives seedance (CLI options, YAML/JSON files, JSON values).

Each raises :class:`seedance.errors.SpecError` naming the field and what would be valid, which the CLI prints as one
line with exit status 2. The rules:

* Numbers are finite (no NaN, no infinity, nothing that overflows to it such as ``1e400``) and within their range.
* Lists are not empty and hold no duplicates where a duplicate is meaningless; mappings hold no duplicate keys
  (YAML and JSON both allow them silently by default: the last one would win).
* YAML follows YAML 1.2 for numbers, so ``1e308`` is a float (PyYAML's YAML 1.1 resolver reads it as a string).
* Outputs are checked before any work starts: :func:`check_writable_dir` creates and removes a probe, so an exit 2
  leaves nothing behind.
* Sizes have a stated ceiling, chosen so that the largest accepted input finishes in reasonable time and memory on
  a small machine (measured on 2 cores): see the constants below; each message says what the limit is and why.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from seedance.errors import SpecError

# ------------------------------------------------------------------------------------------------------- ceilings
MAX_DEVICES = 1024
WHY_DEVICES = ("1,024 devices (128 eight-GPU servers) is the largest cluster the cost model and routing are sized "
               "for: predicting one collective on it takes about 3 s and 0.4 GB here, and time and memory grow "
               "quadratically beyond")
MAX_SIM_NODES = 1024
WHY_SIM_NODES = ("one simulated replica per GPU of a 1,024-GPU cluster; each protocol has its own ceiling at or "
                 "below this: 128 for raft, multipaxos, epaxos and commit)")
MAX_SIM_DURATION_S = 72 * 3600.0
WHY_SIM_DURATION = ("72 simulated hours is the seed's longest stress run; a run must also fit the memory estimate "
                    "(history and trace grow with simulated time)")
MAX_CLIENTS = 1024
WHY_CLIENTS = "each client is a simulated or real process with its own history; more only queue at the leader"
MAX_KEYS = 1_000_000
MAX_RATE_OPS_S = 1_000_000.0
MAX_TIMEOUT_S = 86_400.0
MAX_SEED = 2**63 - 1
MAX_REAL_DURATION_S = 3600.0
MAX_VALUE_BYTES = 1 << 20
WHY_VALUE_BYTES = "frames are capped at 16 MiB and an AppendEntries batches many values"


def max_real_nodes() -> int:
    """Node processes a real run may start on this machine: 4 per CPU core, at least 5, at most 64."""
    return max(5, min(64, 4 * (os.cpu_count() or 1)))


def why_real_nodes() -> str:
    return (f"each node is an OS process with its own event loop, plus client processes; this machine has "
            f"{os.cpu_count() or 1} CPU core(s), so more than {max_real_nodes()} nodes measure the scheduler, "
            f"not the protocol")


# -------------------------------------------------------------------------------------------------------- numbers
def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def number(field: str, value: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False, why: str | None = None) -> float:
    """A finite real number in [lo, hi] (bounds open when asked); bools and strings are rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number, got {value!r}", _range_text(lo, hi, lo_open, hi_open))
    x = float(value) if not isinstance(value, int) else value
    if isinstance(x, float) and not math.isfinite(x):
        raise SpecError(field, f"must be finite, got {value!r}", _range_text(lo, hi, lo_open, hi_open))
    too_low = lo is not None and (x <= lo if lo_open else x < lo)
    too_high = hi is not None and (x >= hi if hi_open else x > hi)
    if too_low or too_high:
        valid = _range_text(lo, hi, lo_open, hi_open)
        if too_high and why:
            valid += f" ({why})"
        raise SpecError(field, f"{value!r} is out of range", valid)
    return x


def integer(field: str, value: Any, *, lo: int | None = None, hi: int | None = None, why: str | None = None) -> int:
    """An integer in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer, got {value!r}", _range_text(lo, hi, False, False, "an integer"))
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        valid = _range_text(lo, hi, False, False, "an integer")
        if hi is not None and value > hi and why:
            valid += f" ({why})"
        raise SpecError(field, f"{value} is out of range", valid)
    return value


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool, what: str = "a finite number") -> str:
    if lo is not None and hi is not None:
        return f"{what} in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{what} {'>' if lo_open else '>='} {_fmt(lo)}"
    if hi is not None:
        return f"{what} {'<' if hi_open else '<='} {_fmt(hi)}"
    return what


def finite_tree(field: str, value: Any) -> Any:
    """``value`` unchanged if every number inside it (dicts, lists) is finite."""
    stack = [(field, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise SpecError(where, f"must be finite, got {item!r}", "a finite number")
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
    return value


# ---------------------------------------------------------------------------------------------------------- lists
def non_empty(field: str, items: Any, valid: str = "at least one entry") -> Any:
    if isinstance(items, (list, tuple, set, frozenset, dict)) and len(items) == 0:
        raise SpecError(field, "is empty", valid)
    return items


def no_duplicates(field: str, items: Iterable[Any], what: str = "entry") -> list[Any]:
    seen: list[Any] = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=repr) if isinstance(item, (list, dict)) else item
        if key in seen:
            raise SpecError(field, f"{what} {item!r} is given twice", f"each {what} at most once")
        seen.append(key)
    return list(items) if not isinstance(items, list) else items


def ip_address(field: str, text: str) -> str:
    """A literal IPv4/IPv6 address or ``localhost``."""
    if text == "localhost":
        return text
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise SpecError(field, f"{text!r} is not an IP address",
                        "an IPv4 or IPv6 address such as 127.0.0.1 or 0.0.0.0, or localhost") from None
    return text


# ----------------------------------------------------------------------------------------------------- YAML, JSON
def _no_dup_pairs(where: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise SpecError(where, f"duplicate key {key!r}", "each key at most once per object")
            out[key] = value
        return out

    return hook


def _no_constants(where: str):
    def hook(name: str) -> Any:
        raise SpecError(where, f"{name} is not a number JSON allows", "a finite number")

    return hook


def _finite_float(where: str):
    def hook(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise SpecError(where, f"{text} overflows to infinity", "a finite number (|x| < 1.8e308)")
        return value

    return hook


def loads_json(text: str, where: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, no number that overflows; errors name ``where``."""
    try:
        return json.loads(text, object_pairs_hook=_no_dup_pairs(where), parse_constant=_no_constants(where),
                          parse_float=_finite_float(where))
    except json.JSONDecodeError as err:
        raise SpecError(where, f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})",
                        "valid JSON") from None


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# YAML 1.2 core schema floats: 1e308, 1.5, .5, -2E-3 (YAML 1.1 needs a dot and a signed exponent)
_FLOAT_12 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


class StrictYamlLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe YAML with duplicate mapping keys rejected and YAML 1.2 floats."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise SpecError(f"line {key_node.start_mark.line + 1}", "a mapping key is not a scalar",
                                "plain keys") from None
            if key in out:
                raise SpecError(f"line {key_node.start_mark.line + 1}", f"duplicate key {key!r}",
                                "each key at most once per mapping")
            out[key] = self.construct_object(value_node, deep=deep)
        return out


StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, StrictYamlLoader.construct_mapping)
StrictYamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+.0123456789"))


def loads_yaml(text: str, where: str) -> Any:
    """Strict YAML (see :class:`StrictYamlLoader`); every number finite; errors name ``where`` and the line."""
    try:
        doc = yaml.load(text, Loader=StrictYamlLoader)  # noqa: S506 - a safe loader
    except SpecError as err:
        raise SpecError(where, f"{err.field}: {err.problem}", err.valid) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(where, f"YAML syntax error{at}: {problem}", "valid YAML or JSON") from None
    return finite_tree(where, doc)


def load_file(path: str | os.PathLike[str], field: str, *, max_bytes: int = 64 << 20) -> Any:
    """A YAML or JSON file (by suffix), strictly parsed; ``max_bytes`` bounds the parse time (a 1,024-device
    matrix in YAML is about 8 MB)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise SpecError(field, f"{file} is {size} bytes",
                            f"at most {max_bytes >> 20} MiB (parsing is slow and the models cap sizes well below)")
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(field, f"cannot read {file} ({type(err).__name__})", "a readable UTF-8 YAML/JSON file") from None
    if file.suffix.lower() == ".json":
        return finite_tree(field, loads_json(text, f"{field} {file}"))
    return loads_yaml(text, f"{field} {file}")


# -------------------------------------------------------------------------------------------------------- outputs
def check_writable_dir(field: str, path: str | os.PathLike[str]) -> Path:
    """Prove that ``path`` is (or can be made) a directory we can write files into, then leave no trace: missing
    directories are created for the probe and removed again."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise SpecError(field, f"{target} exists and is not a directory", "a directory path")
    created: list[Path] = []
    try:
        missing = []
        p = target
        while not p.exists():
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
        probe = target / f".seedance-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SpecError(field, f"cannot write to {target} ({err.strerror or type(err).__name__})",
                        "a writable directory") from None
    finally:
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass
    return target


def check_writable_file(field: str, path: str | os.PathLike[str]) -> Path:
    """Prove that a file can be written at ``path`` (its directory is checked as above; an existing directory at
    ``path`` is refused)."""
    target = Path(path)
    if target.is_dir():
        raise SpecError(field, f"{target} is a directory", "a file path")
    check_writable_dir(field, target.parent if str(target.parent) else Path("."))
    return target


# ----------------------------------------------------------------------------------------------------- topologies
MAX_TOPOLOGY_FILE_BYTES = 16 << 20
MAX_BANDWIDTH_GBPS = 1e9
MAX_LATENCY_US = 1e9


def _preset_devices_per_server(name: str) -> int:
    from seedance.models.topology import PRESETS, preset

    spec = PRESETS[name]
    return preset(name, spec.min_nodes).num_devices // spec.min_nodes


def check_topology_spec(field: str, spec: Any, nodes: int | None = None, *, nodes_field: str = "--nodes") -> None:
    """Bounds of a topology argument before it is built: a preset's server count (devices ≤ MAX_DEVICES, at least
    its minimum), or a file's size, duplicate keys, finite numbers, matrix order / device count and value
    ceilings. The topology model itself validates everything else when it loads."""
    from seedance.models.topology import PRESETS

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
    doc = load_file(spec, field, max_bytes=MAX_TOPOLOGY_FILE_BYTES)
    check_topology_doc(field, doc)


def check_topology_doc(field: str, doc: Any) -> None:
    """Ceilings of a parsed topology document (matrix or link-graph form)."""
    if not isinstance(doc, dict):
        return
    for key in ("bandwidth_GBps", "devices"):
        value = doc.get(key)
        if isinstance(value, list) and len(value) > MAX_DEVICES:
            raise SpecError(f"{field}.{key}", f"has {len(value)} devices", f"at most {MAX_DEVICES} ({WHY_DEVICES})")
    ceilings = {"bandwidth_GBps": (MAX_BANDWIDTH_GBPS, "GB/s: faster than any link by many orders of magnitude, and "
                                   "sizes divided by it must not underflow"),
                "latency_us": (MAX_LATENCY_US, "µs (over 16 minutes): beyond any fabric, and sums of it must not "
                               "overflow")}
    stack: list[tuple[str, Any]] = [(field, doc)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k in ceilings:
                    _ceiling(f"{where}.{k}", v, *ceilings[k])
                stack.append((f"{where}.{k}", v))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))


def _ceiling(where: str, value: Any, hi: float, unit_why: str) -> None:
    values = value if isinstance(value, list) else [value]
    flat: list[Any] = []
    for v in values:
        flat.extend(v if isinstance(v, list) else [v])
    for v in flat:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > hi:
            raise SpecError(where, f"{v!r} is too large", f"at most {hi:g} {unit_why}")


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


def parse_mix(text: str, field: str = "--mix") -> tuple[float, float, float]:
    """A workload mix ``read,write,cas`` (``--mix``; ``field`` names it in errors): three non-negative fractions
    summing to 1."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SpecError(field, f"not numbers: {text!r}", "three fractions read,write,cas, e.g. 0.5,0.4,0.1") from None
    if len(parts) != 3 or any(not math.isfinite(p) or p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6:
        raise SpecError(field, f"bad fractions {text!r}", "three non-negative fractions read,write,cas summing to 1")
    return parts  # type: ignore[return-value]
