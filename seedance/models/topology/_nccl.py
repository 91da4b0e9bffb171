"""Reading nccl-tests output and fitting the alpha-beta model to it, so measurements calibrate ``B`` (seed §2.4).

nccl-tests (github.com/NVIDIA/nccl-tests) print one row per message size under a two-part header, out-of-place then
in-place, each ``time`` (µs), ``algbw`` and ``busbw`` (GB/s) and an error column (``#wrong``, or ``error`` in older
releases), and end with ``# Avg bus bandwidth : x``. Rows are identified by the column header, so the newer layout
(with a ``root`` column) and the older one (without) both parse; NCCL log lines interleaved by MPI are skipped;
``N/A`` (e.g. in-place alltoall) reads as NaN. nccl-tests' definitions (doc/PERFORMANCE.md of nccl-tests):
``algbw = S / t`` and ``busbw = algbw × factor`` with factor ``2(n−1)/n`` (allreduce), ``(n−1)/n`` (reducescatter,
allgather, alltoall) and 1 (broadcast, reduce, sendrecv).

The fit (:func:`calibrate_from_nccl_tests`): a ring collective on n devices takes ``t(S) = k·α + factor·S/B`` with
``k`` steps (allreduce 2(n−1); reducescatter, allgather, broadcast n−1; alltoall, sendrecv 1), so ``B`` is the
busbw a large message approaches and ``α`` the per-step latency. Both are found by least squares on the
*relative* error ``(model − t)/t``, which weighs the latency-bound small sizes and the bandwidth-bound large sizes
alike; the solution is constrained to ``α >= 0, 1/B >= 0`` (scipy's NNLS).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from seedance.errors import SpecError

#: Column names of the parsed table, in order.
NCCL_COLUMNS = (
    "size_bytes", "count", "dtype", "redop", "root",
    "oop_time_us", "oop_algbw_GBps", "oop_busbw_GBps", "oop_wrong",
    "ip_time_us", "ip_algbw_GBps", "ip_busbw_GBps", "ip_wrong",
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|N/A)")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\s+redop\s+(root\s+)?time\s+algbw\s+busbw\s+(#wrong|error)\s+time")

#: busbw factor and ring step count per collective, as functions of n (see the module docstring).
BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
RING_STEPS = {
    "allreduce": lambda n: 2 * (n - 1),
    "reducescatter": lambda n: n - 1,
    "allgather": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
    "reduce": lambda n: n - 1,
    "alltoall": lambda n: 1,
    "sendrecv": lambda n: 1,
}


def _value(token: str, line_number: int, column: str) -> float:
    if token == "N/A":
        return math.nan
    try:
        return float(token)
    except ValueError:
        raise SpecError(f"line {line_number}", f"{column} is {token!r}", "a number or N/A") from None


def _integer(token: str, line_number: int, column: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise SpecError(f"line {line_number}", f"{column} is {token!r}", "an integer") from None


def parse_nccl_tests(text: str) -> pd.DataFrame:
    """The result table of an nccl-tests run as a tidy DataFrame with columns :data:`NCCL_COLUMNS`.

    ``root`` is -1 where the output has no root column; ``df.attrs["avg_busbw_GBps"]`` holds the closing
    ``# Avg bus bandwidth`` (NaN if absent). No table, or a row that breaks it, raises :class:`SpecError`.
    """
    if not isinstance(text, str):
        raise SpecError("nccl-tests output", f"is a {type(text).__name__}", "the text an nccl-tests binary printed")
    rows: list[tuple] = []
    has_root: bool | None = None
    average = math.nan
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = _HEADER.match(line)
        if header:
            has_root = header.group(1) is not None
            continue
        average_match = _AVG.match(line)
        if average_match:
            average = _value(average_match.group(1), number, "Avg bus bandwidth")
            continue
        if has_root is None or not line or line.startswith("#"):
            continue
        tokens = line.split()
        width = 13 if has_root else 12
        if not tokens[0].isdigit() or len(tokens) < 4 or tokens[2].isdigit():
            continue  # an interleaved log line (NCCL INFO, MPI), not a result row
        if len(tokens) != width:
            raise SpecError(f"line {number}", f"has {len(tokens)} fields", f"{width} fields of an nccl-tests row")
        if not has_root:
            tokens.insert(4, "-1")
        count, root = (_integer(tokens[k], number, NCCL_COLUMNS[k]) for k in (1, 4))
        numbers = [_value(tok, number, col) for tok, col in zip(tokens[5:], NCCL_COLUMNS[5:])]
        rows.append((int(tokens[0]), count, tokens[2], tokens[3], root, *numbers))
    if not rows:
        raise SpecError(
            "nccl-tests output", "contains no result table",
            "the stdout of an nccl-tests binary (e.g. all_reduce_perf), header lines starting with '#'",
        )
    frame = pd.DataFrame(rows, columns=list(NCCL_COLUMNS))
    frame.attrs["avg_busbw_GBps"] = average
    return frame


def calibrate_from_nccl_tests(
    rows: pd.DataFrame | list[dict],
    collective: str,
    num_devices: int,
    *,
    placement: str = "oop",
    min_size_bytes: int = 1,
) -> tuple[float, float]:
    """Fit ``(alpha_s, bandwidth_GBps)`` of ``t(S) = k·α + factor·S/B`` to measured rows (see the module docstring).

    ``rows`` is :func:`parse_nccl_tests`'s frame (or its records); ``placement`` picks the out-of-place ("oop") or
    in-place ("ip") columns; rows below ``min_size_bytes`` or without a time are left out. ``B`` is in GB/s (1e9).
    """
    if collective not in BUSBW_FACTOR:
        raise SpecError("collective", f"is {collective!r}", f"one of {', '.join(BUSBW_FACTOR)}")
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 2:
        raise SpecError("num_devices", f"is {num_devices!r}", "an integer >= 2")
    if placement not in ("oop", "ip"):
        raise SpecError("placement", f"is {placement!r}", "'oop' (out-of-place) or 'ip' (in-place)")
    frame = pd.DataFrame(rows)
    column = f"{placement}_time_us"
    if "size_bytes" not in frame or column not in frame:
        raise SpecError("rows", "lack size_bytes or " + column, "rows from parse_nccl_tests")
    size = frame["size_bytes"].to_numpy(dtype=float)
    time_s = frame[column].to_numpy(dtype=float) * 1e-6
    keep = (size >= min_size_bytes) & np.isfinite(time_s) & (time_s > 0) & (size > 0)
    if keep.sum() < 2:
        raise SpecError("rows", f"has {int(keep.sum())} usable measurement(s)", "at least 2 sizes with a time > 0")
    size, time_s = size[keep], time_s[keep]
    steps = RING_STEPS[collective](num_devices)
    factor = BUSBW_FACTOR[collective](num_devices)
    # t = steps·α + factor·S·(1/B): unknowns x = (α, 1/B in s/byte), each row scaled by 1/t (relative error).
    design = np.column_stack([np.full_like(size, steps), factor * size]) / time_s[:, None]
    (alpha_s, inverse_bandwidth), _ = nnls(design, np.ones_like(size))
    if inverse_bandwidth <= 0:
        raise SpecError("rows", "show no growth of time with size", "measurements over a range of sizes")
    return float(alpha_s), float(1.0 / inverse_bandwidth / 1e9)
