"""The seed's plain matrix form: validation, :func:`from_matrix` and :func:`to_dict` (seed §2.4).

The matrix form, as a YAML/JSON mapping::

    name: my-cluster                      # optional; default: the file name without suffix ("matrix" for a dict)
    bandwidth_GBps: [[0, 300, ...], ...]  # n×n, n >= 2, GB/s per direction; diagonal ignored (a number or null);
                                          #   off-diagonal finite and > 0; may be asymmetric
    latency_us: 2.0                       # optional: a scalar or an n×n matrix, finite and >= 0; diagonal ignored.
                                          #   Default 0.0, which makes the cost exactly the seed's comm_cost.
    hosts: [0, 0, 0, 0, 1, 1, 1, 1]       # optional: server of each device (ints or strings such as host names);
                                          #   renumbered 0..H-1 in order of first appearance. Default: all on server 0
    device_kinds: [A100, A100, ...]       # optional: a kind per device, or one string for all. Default "gpu"
    description: free text                # optional, ignored

Each ordered pair (i, j) is its own link: ``routes[(i, j)] == ((i, j),)`` and
``links[(i, j)] == (B[i, j], latency[i, j])``. Every malformed input raises :class:`SpecError` naming the field
(``bandwidth_GBps[2][5]``) and what is valid; nothing is silently repaired except the host renumbering above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Real
from types import MappingProxyType

import numpy as np

from seedance.errors import SpecError
from seedance.models.topology._core import MatrixLinks, MatrixRoutes, Topology

MATRIX_FIELDS = ("name", "bandwidth_GBps", "latency_us", "hosts", "device_kinds", "description", "nccl")
#: Keys of the optional ``nccl`` mapping: Topology.meta["nccl"] overrides of the NCCL cost model
#: (seedance.models.cost.nccl): launch overhead and extra network latency in µs, NVLS on/off, GPU generation, hop class.
NCCL_FIELDS = ("launch_us", "net_latency_us", "nvls", "arch", "intra")
DEFAULT_LATENCY_US = 0.0
DEFAULT_DEVICE_KIND = "gpu"


def is_number(value: object) -> bool:
    """A real number that is not a bool (YAML/JSON ``true`` must not pass as 1)."""
    return isinstance(value, (Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def describe(value: object) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def check_number(value: object, field: str, *, positive: bool, unit: str) -> float:
    """A finite number, > 0 when ``positive`` else >= 0; SpecError naming ``field`` otherwise."""
    valid = f"a finite number {'> 0' if positive else '>= 0'} in {unit}"
    if not is_number(value):
        raise SpecError(field, f"is {describe(value)}", valid)
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or (number <= 0 if positive else number < 0):
        raise SpecError(field, f"is {number!r}", valid)
    return number


def _square(value: object, field: str, n: int | None) -> list[list[object]] | np.ndarray:
    """Check the shape of a matrix given as nested lists or a 2-D array; returns it row-indexable."""
    if isinstance(value, np.ndarray):
        if value.ndim != 2 or value.shape[0] != value.shape[1]:
            raise SpecError(field, f"has shape {value.shape}", "a square n×n matrix")
        if value.dtype.kind not in "iuf":
            raise SpecError(field, f"has dtype {value.dtype}", "a numeric matrix")
        rows: list | np.ndarray = value
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        rows = list(value)
        for i, row in enumerate(rows):
            if not isinstance(row, Sequence) or isinstance(row, (str, bytes)):
                raise SpecError(f"{field}[{i}]", f"is {describe(row)}", "a list of numbers (one row of the matrix)")
            if len(row) != len(rows):
                raise SpecError(
                    f"{field}[{i}]", f"has {len(row)} entries but there are {len(rows)} rows",
                    "a square n×n matrix (every row as long as the number of rows)",
                )
    else:
        raise SpecError(field, f"is {describe(value)}", "an n×n matrix (a list of n lists of n numbers)")
    if n is None and len(rows) < 2:
        raise SpecError(field, f"describes {len(rows)} device(s)", "an n×n matrix with n >= 2")
    if n is not None and len(rows) != n:
        raise SpecError(field, f"is {len(rows)}×{len(rows)}", f"a scalar or an {n}×{n} matrix like bandwidth_GBps")
    return rows


def check_matrix(value: object, field: str, *, positive: bool, unit: str, n: int | None = None) -> np.ndarray:
    """An n×n float matrix with valid off-diagonal entries; the diagonal (a number or null) is ignored."""
    rows = _square(value, field, n)
    size = len(rows)
    if isinstance(rows, np.ndarray):
        matrix = rows.astype(float)
        off = ~np.eye(size, dtype=bool)
        bad = off & ~(np.isfinite(matrix) & ((matrix > 0) if positive else (matrix >= 0)))
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            check_number(float(matrix[i, j]), f"{field}[{i}][{j}]", positive=positive, unit=unit)
        matrix = matrix.copy()
    else:
        matrix = np.empty((size, size), dtype=float)
        for i, row in enumerate(rows):
            for j, entry in enumerate(row):  # type: ignore[arg-type]
                if i == j:
                    if entry is not None and not is_number(entry):
                        raise SpecError(f"{field}[{i}][{j}]", f"is {describe(entry)}", "a number or null (ignored)")
                    continue
                matrix[i, j] = check_number(entry, f"{field}[{i}][{j}]", positive=positive, unit=unit)
    np.fill_diagonal(matrix, np.inf if positive else 0.0)
    return matrix


def _hosts(value: object, n: int) -> np.ndarray:
    if value is None:
        return np.zeros(n, dtype=np.int64)
    labels = list(value) if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)) else None
    if labels is None:
        raise SpecError("hosts", f"is {describe(value)}", f"a list of {n} server labels (ints or strings)")
    if len(labels) != n:
        raise SpecError("hosts", f"has {len(labels)} entries", f"one server label per device ({n})")
    numbering: dict[object, int] = {}
    host_of = np.empty(n, dtype=np.int64)
    for i, label in enumerate(labels):
        if isinstance(label, np.integer):
            label = int(label)
        if not (isinstance(label, str) and label) and not (isinstance(label, int) and not isinstance(label, bool)):
            raise SpecError(f"hosts[{i}]", f"is {describe(label)}", "a server label: an int or a non-empty string")
        host_of[i] = numbering.setdefault(label, len(numbering))
    return host_of


def _kinds(value: object, n: int) -> tuple[str, ...]:
    if value is None:
        return (DEFAULT_DEVICE_KIND,) * n
    if isinstance(value, str) and value:
        return (value,) * n
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or len(value) != n:
        raise SpecError("device_kinds", f"is {describe(value)}", f"one string for all, or a list of {n} strings")
    for i, kind in enumerate(value):
        if not isinstance(kind, str) or not kind:
            raise SpecError(f"device_kinds[{i}]", f"is {describe(kind)}", "a non-empty string such as 'A100'")
    return tuple(value)


def check_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("name", f"is {describe(value)}", "a non-empty string")
    return value


def from_matrix(
    bandwidth_GBps: object,
    latency_us: object = DEFAULT_LATENCY_US,
    *,
    name: str = "matrix",
    hosts: object = None,
    device_kinds: object = None,
    source: str = "",
    meta: Mapping[str, object] | None = None,
) -> Topology:
    """A Topology from the seed's matrix form (see the module docstring for the rules).

    >>> t = from_matrix([[0, 300], [150, 0]], 2.0, hosts=[0, 1])
    >>> float(t.bandwidth_GBps[1, 0]), float(t.latency_us[0, 1]), t.num_hosts, t.route(0, 1)
    (150.0, 2.0, 2, ((0, 1),))
    """
    name = check_name(name)
    bandwidth = check_matrix(bandwidth_GBps, "bandwidth_GBps", positive=True, unit="GB/s")
    n = bandwidth.shape[0]
    if latency_us is None:
        latency_us = DEFAULT_LATENCY_US
    if is_number(latency_us):
        scalar = check_number(latency_us, "latency_us", positive=False, unit="µs")
        latency = np.full((n, n), scalar)
        np.fill_diagonal(latency, 0.0)
    else:
        latency = check_matrix(latency_us, "latency_us", positive=False, unit="µs", n=n)
    topology = Topology(
        name=name,
        bandwidth_GBps=bandwidth,
        latency_us=latency,
        host_of=_hosts(hosts, n),
        device_kinds=_kinds(device_kinds, n),
        routes=MatrixRoutes(n),
        links={},
        graph=None,
        source=source,
        meta=MappingProxyType(dict(meta or {})),
    )
    object.__setattr__(topology, "links", MatrixLinks(topology.bandwidth_GBps, topology.latency_us))
    return topology


def matrix_from_dict(doc: Mapping[str, object], *, default_name: str, source: str) -> Topology:
    """The matrix form read from a parsed YAML/JSON mapping; unknown fields are rejected."""
    for key in doc:
        if key not in MATRIX_FIELDS:
            raise SpecError(str(key), "is not a field of the matrix form", f"valid fields: {', '.join(MATRIX_FIELDS)}")
    nccl = doc.get("nccl")
    if nccl is not None:
        if not isinstance(nccl, Mapping):
            raise SpecError("nccl", f"is {describe(nccl)}", "a mapping of " + ", ".join(NCCL_FIELDS))
        for key in nccl:
            if key not in NCCL_FIELDS:
                raise SpecError(f"nccl.{key}", "is not an NCCL model override", "one of " + ", ".join(NCCL_FIELDS))
    return from_matrix(
        doc["bandwidth_GBps"],
        doc.get("latency_us", DEFAULT_LATENCY_US),
        name=doc.get("name", default_name),  # type: ignore[arg-type]
        hosts=doc.get("hosts"),
        device_kinds=doc.get("device_kinds"),
        source=source,
        meta={"nccl": dict(nccl)} if nccl is not None else None,
    )


def to_dict(topology: Topology) -> dict[str, object]:
    """The matrix form of any Topology (graph-derived ones included); ``load`` reads it back to equal matrices.

    The diagonal is written as 0 (ignored on reading). ``latency_us`` is a scalar when all off-diagonal entries are
    equal, else the full matrix.
    """
    n = topology.num_devices
    bandwidth = np.array(topology.bandwidth_GBps, dtype=float)
    np.fill_diagonal(bandwidth, 0.0)
    off = ~np.eye(n, dtype=bool)
    latency_off = topology.latency_us[off]
    latency: object
    if latency_off.size and np.all(latency_off == latency_off[0]):
        latency = float(latency_off[0])
    else:
        latency = np.where(off, topology.latency_us, 0.0).tolist()
    document = {
        "name": topology.name,
        "bandwidth_GBps": bandwidth.tolist(),
        "latency_us": latency,
        "hosts": [int(h) for h in topology.host_of],
        "device_kinds": list(topology.device_kinds),
    }
    nccl = (topology.meta or {}).get("nccl")
    if nccl:
        document["nccl"] = {k: v for k, v in dict(nccl).items() if k in NCCL_FIELDS}
    return document
