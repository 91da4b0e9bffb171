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
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from seedance.errors import HistoryError, SpecError

# ------------------------------------------------------------------------------------------------------- ceilings
MAX_DEVICES = 1024
WHY_DEVICES = ("1,024 devices (128 eight-GPU servers) is the largest cluster the cost model and routing are sized "
               "for: predicting one collective on it takes about 3 s and 0.4 GB here, and time and memory grow "
               "quadratically beyond")
MAX_SIM_NODES = 1024
WHY_SIM_NODES = ("one simulated replica per GPU of a 1,024-GPU cluster; each protocol has its own ceiling at or "
                 "below this: 128 for raft, multipaxos and epaxos")
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
def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message, shortened past ``limit`` characters (a 4,000-digit integer or a pasted file
    must not become a 4,000-character error line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"  # str() may refuse it
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text)} characters)"


def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def number(field: str, value: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False, why: str | None = None) -> float:
    """A finite real number in [lo, hi] (bounds open when asked); bools and strings are rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number, got {shown(value)}", _range_text(lo, hi, lo_open, hi_open))
    x = float(value) if not isinstance(value, int) else value
    if isinstance(x, float) and not math.isfinite(x):
        raise SpecError(field, f"must be finite, got {shown(value)}", _range_text(lo, hi, lo_open, hi_open))
    too_low = lo is not None and (x <= lo if lo_open else x < lo)
    too_high = hi is not None and (x >= hi if hi_open else x > hi)
    if too_low or too_high:
        valid = _range_text(lo, hi, lo_open, hi_open)
        if too_high and why:
            valid += f" ({why})"
        raise SpecError(field, f"{shown(value)} is out of range", valid)
    return x


def integer(field: str, value: Any, *, lo: int | None = None, hi: int | None = None, why: str | None = None) -> int:
    """An integer in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer, got {shown(value)}", _range_text(lo, hi, False, False, "an integer"))
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        valid = _range_text(lo, hi, False, False, "an integer")
        if hi is not None and value > hi and why:
            valid += f" ({why})"
        raise SpecError(field, f"{shown(value)} is out of range", valid)
    return value


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool, what: str = "a finite number") -> str:
    if lo is not None and hi is not None:
        return f"{what} in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{what} {'>' if lo_open else '>='} {_fmt(lo)}"
    if hi is not None:
        return f"{what} {'<' if hi_open else '<='} {_fmt(hi)}"
    return what


MAX_NESTING = 100
WHY_NESTING = "no seedance document nests more than a few levels, and deeper ones exhaust the recursion of readers"


def finite_tree(field: str, value: Any) -> Any:
    """``value`` unchanged if every number inside it (dicts, lists) is finite and it nests at most MAX_NESTING
    levels. Each container is visited once (a shared or self-containing one ends the walk, never loops it)."""
    stack = [(field, value, 0)]
    seen: set[int] = set()
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise SpecError(where, f"must be finite, got {item!r}", "a finite number")
            continue
        if not isinstance(item, (dict, list, tuple)) or id(item) in seen:
            continue
        seen.add(id(item))
        if depth >= MAX_NESTING:
            raise SpecError(where, f"nests more than {MAX_NESTING} levels", f"at most {MAX_NESTING} ({WHY_NESTING})")
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}", v, depth + 1) for k, v in item.items())
        else:
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(item))
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
def json_hooks(where: str, error: type[SpecError] | type[HistoryError] = SpecError) -> dict[str, Any]:
    """json.loads hooks refusing duplicate keys, NaN/Infinity and floats that overflow, raising ``error`` naming
    ``where`` (a spec's field, a history's line)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise error(where, f"duplicate key {key!r}", "each key at most once per object")
            out[key] = value
        return out

    def constant(name: str) -> Any:
        raise error(where, f"{name} is not a number JSON allows", "a finite number")

    def finite(text: str) -> float:
        if not math.isfinite(value := float(text)):
            raise error(where, f"{text} overflows to infinity", "a finite number (|x| < 1.8e308)")
        return value

    return {"object_pairs_hook": pairs, "parse_constant": constant, "parse_float": finite}


def loads_json(text: str, where: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, no number that overflows, no integer too long to convert,
    no nesting beyond the parser's recursion; errors name ``where`` and the line."""
    try:
        doc = json.loads(text, **json_hooks(where))
    except json.JSONDecodeError as err:
        raise SpecError(where, f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})",
                        "valid JSON") from None
    except RecursionError:
        raise SpecError(where, "nests too deeply to parse", f"at most {MAX_NESTING} levels ({WHY_NESTING})") from None
    except ValueError as err:  # int() of a literal beyond Python's digit limit (SpecError is ours: passed on)
        if isinstance(err, SpecError):
            raise
        raise long_integer_error(where, text) from None
    return finite_tree(where, doc)  # nesting bounded


def long_integer_error(where: str, text: str) -> SpecError:
    """The error for a JSON text holding an integer literal too long to convert, naming its line."""
    limit = _int_digits()
    match = re.search(r"[0-9]{%d,}" % (limit + 1), text)
    line = text.count("\n", 0, match.start()) + 1 if match else 0
    digits = len(match.group()) if match else limit + 1
    return SpecError(where, f"line {line}: an integer of {digits} digits", f"an integer of at most {limit} digits")


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# YAML 1.2 core schema floats: 1e308, 1.5, .5, -2E-3 (YAML 1.1 needs a dot and a signed exponent)
_FLOAT_12 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_TAG = "tag:yaml.org,2002:"
_NOT_JSON_TAGS = ("binary", "set", "omap", "pairs", "timestamp")  # YAML 1.1 types no seedance input means; a plain
# date (2024-01-01) is a string, as in JSON and YAML 1.2's core schema


class _AliasFound(Exception):
    """An alias (``*name``) in a document: refused (see :func:`loads_yaml`), its name found by an event pass."""


class StrictYamlLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe YAML close to what JSON can say: duplicate mapping keys, anchors/aliases, integers too long to convert
    and the YAML 1.1 types binary, set, omap, pairs and timestamp (``!!timestamp``) are refused; floats follow YAML
    1.2 and a plain date (``2024-01-01``) stays a string."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        # a node constructed twice is the target of an alias: a self-referential one (``a: &a [*a]``) makes a
        # cycle and nested ones ("billion laughs") an exponential tree, so any alias is refused
        if node in self.constructed_objects or node in self.recursive_objects:
            raise _AliasFound
        return super().construct_object(node, deep=deep)

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

    def construct_yaml_int(self, node: Any) -> int:
        if len(node.value) > _int_digits():  # 60-base ints (1:2:3...) would grow quadratically long
            raise SpecError(f"line {node.start_mark.line + 1}", f"an integer of {len(node.value)} characters",
                            f"an integer of at most {_int_digits()} digits")
        return super().construct_yaml_int(node)

    def refuse_tag(self, node: Any) -> Any:
        raise SpecError(f"line {node.start_mark.line + 1}", f"{node.tag.replace(_TAG, '!!')} values are not supported",
                        "numbers, strings, booleans, null, lists and mappings")


StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, StrictYamlLoader.construct_mapping)
StrictYamlLoader.add_constructor(_TAG + "int", StrictYamlLoader.construct_yaml_int)
for _tag in _NOT_JSON_TAGS:
    StrictYamlLoader.add_constructor(_TAG + _tag, StrictYamlLoader.refuse_tag)
StrictYamlLoader.add_implicit_resolver(_TAG + "float", _FLOAT_12, list("-+.0123456789"))
StrictYamlLoader.yaml_implicit_resolvers = {  # (a copy of the base's, made by the line above) no implicit dates
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TAG + "timestamp"]
    for first, resolvers in StrictYamlLoader.yaml_implicit_resolvers.items()}


def _int_digits() -> int:
    """The longest integer literal accepted: Python's own limit on converting digits to an int (4,300 by
    default), beyond which int() raises; no seedance field needs a tenth of it."""
    return sys.get_int_max_str_digits() or 4300


def loads_yaml(text: str, where: str) -> Any:
    """Strict YAML (see :class:`StrictYamlLoader`); every number finite, nesting bounded; errors name ``where`` and
    the line."""
    try:
        doc = yaml.load(text, Loader=StrictYamlLoader)  # noqa: S506 - a safe loader
    except SpecError as err:
        raise SpecError(where, f"{err.field}: {err.problem}", err.valid) from None
    except _AliasFound:
        alias = next(e for e in yaml.parse(text, Loader=_BASE_LOADER) if isinstance(e, yaml.AliasEvent))  # its name
        raise SpecError(where, f"line {alias.start_mark.line + 1}: YAML alias *{alias.anchor} is not supported (an "
                        "alias may refer to itself or multiply a document beyond any size)",
                        "plain YAML without anchors (&name) and aliases (*name): write the value out") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(where, f"YAML syntax error{at}: {problem}", "valid YAML or JSON") from None
    return finite_tree(where, doc)


class _PlainDumper(yaml.SafeDumper):
    """Writes an object referenced twice in full, never as an anchor and alias (which :func:`loads_yaml` refuses)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dumps_yaml(doc: Any) -> str:
    """YAML text of ``doc`` (keys in their order) that :func:`loads_yaml` reads back: no anchors or aliases."""
    return yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False)


MAX_SPEC_FILE_BYTES = 1 << 20  # specs, host profiles, calibrations, curve indexes: a few kB each; YAML parsing of a
# mapping-heavy document runs at about 0.1 MB/s here, so a 64 MiB one would take minutes


def read_text(path: str | os.PathLike[str], field: str, expected: str, *,
              max_bytes: int = MAX_SPEC_FILE_BYTES) -> str:
    """The text of the file at ``path``: refused (naming it and ``expected``) if it cannot be read, is larger than
    ``max_bytes``, is not UTF-8 or holds NUL bytes (a binary file)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise SpecError(field, f"{file} is {size:,} bytes", f"at most {max_bytes >> 20} MiB ({expected}: parsing "
                            "is slow, and no valid one comes near)")
        raw = file.read_bytes()
    except OSError as err:
        raise SpecError(field, f"cannot read {file} ({err.strerror or type(err).__name__})", expected) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(field, f"{file} is not UTF-8 text (byte {err.start}: a binary file?)", expected) from None
    if "\x00" in text:
        raise SpecError(field, f"{file} holds NUL bytes (a binary file?)", expected)
    return text


def load_file(path: str | os.PathLike[str], field: str, *, max_bytes: int = MAX_SPEC_FILE_BYTES,
              expected: str = "a readable UTF-8 YAML/JSON file") -> Any:
    """A YAML or JSON file (by suffix), strictly parsed; ``max_bytes`` bounds the parse time (topologies allow
    MAX_TOPOLOGY_FILE_BYTES: a 1,024-device matrix in YAML is about 8 MB); ``expected`` says what the file should be
    when it cannot be read as text."""
    file = Path(path)
    text = read_text(file, field, expected, max_bytes=max_bytes)
    if file.suffix.lower() == ".json":
        return loads_json(text, f"{field} {file}")
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
TOPOLOGY_FILE = "a UTF-8 YAML/JSON topology file (the matrix form, bandwidth_GBps, or the link graph, devices and links)"
MAX_BANDWIDTH_GBPS = 1e9
MAX_LATENCY_US = 1e9


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
