"""Message sizes in bytes: parsing, ranges and formatting, with nccl-tests' conventions.

Rules:

- A size is a whole number of bytes, written ``<number>[<unit>]``; the number may be a decimal or use an exponent
  (``1e9``, ``1.5GiB``), and the result must be an integer number of bytes (``1.3B`` is rejected).
- Units (case-insensitive, an optional space before them):

  ==================  ==========================================================
  ``B`` or none       bytes
  ``KB MB GB TB PB``  decimal (SI): 1 KB = 1000 B, 1 GB = 10^9 B
  ``KiB … PiB``       binary (IEC): 1 KiB = 1024 B, 1 GiB = 2^30 B
  ``K M G T P``       binary, as nccl-tests' ``-b 8 -e 8G`` reads them (1 G = 2^30 B)
  ==================  ==========================================================

  Only bytes are spoken here: a unit ending in a lowercase ``b`` (``Mb``, ``Gib``) reads as bits and is rejected.
- A range ``START:END[:FACTOR]`` lists START, START·FACTOR, START·FACTOR², … while ≤ END, as nccl-tests'
  ``-b START -e END -f FACTOR`` does (FACTOR defaults to 2 and is an integer ≥ 2).
- Anything else — garbage, NaN, infinity, negative, zero (unless allowed), fractional bytes, more than
  :data:`MAX_SIZE_BYTES` — raises :class:`seedance.errors.SpecError` naming ``size`` and the valid forms.

:func:`format_size` writes the exact, shortest unit form, so ``parse_size(format_size(n)) == n``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from seedance.errors import SpecError

MAX_SIZE_BYTES = 2**62  # 4 EiB: far beyond any message, small enough to stay exact in int64
MAX_RANGE_POINTS = 4096

_UNITS: dict[str, int] = {"": 1, "B": 1}
for _prefix, _power in (("K", 1), ("M", 2), ("G", 3), ("T", 4), ("P", 5)):
    _UNITS[_prefix] = 1024**_power
    _UNITS[_prefix + "B"] = 1000**_power
    _UNITS[_prefix + "IB"] = 1024**_power

VALID_SIZE = (
    "a whole number of bytes such as 8B, 1024, 1e9, 512KB (KB=1000), 4MiB (MiB=2^20), 1GiB or 8G (G=2^30, as "
    "nccl-tests)"
)
VALID_RANGE = (
    "START:END[:FACTOR] such as 8B:8GiB or 1KiB:1MiB:4 (sizes START·FACTOR^k up to END, FACTOR an integer >= 2)"
)

_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, *, field: str = "size", allow_zero: bool = False) -> int:
    """Bytes in ``text`` (see the module rules).

    >>> parse_size("4MiB"), parse_size("512KB"), parse_size("1e9"), parse_size("8G")
    (4194304, 512000, 1000000000, 8589934592)
    """
    if isinstance(text, bool):
        raise SpecError(field, f"{text!r} is not a size", VALID_SIZE)
    if isinstance(text, int):
        value = text
    else:
        if not isinstance(text, str):
            raise SpecError(field, f"{text!r} is not a size", VALID_SIZE)
        match = _SIZE_RE.match(text)
        if not match:
            raise SpecError(field, f"cannot parse {text!r}", VALID_SIZE)
        number, unit = match.group(1), match.group(2).upper()
        if len(match.group(2)) > 1 and match.group(2).endswith("b"):
            raise SpecError(field, f"{match.group(2)!r} in {text!r} reads as bits; sizes are in bytes (B)", VALID_SIZE)
        if unit not in _UNITS:
            raise SpecError(field, f"unknown unit {match.group(2)!r} in {text!r}", VALID_SIZE)
        try:
            mantissa = Decimal(number)
        except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
            raise SpecError(field, f"cannot parse {text!r}", VALID_SIZE) from None
        if mantissa.adjusted() > 30:  # 10^30 bytes and up: reject before exact arithmetic grows huge
            raise SpecError(field, f"{text!r} is too large (at most {MAX_SIZE_BYTES} bytes)", VALID_SIZE)
        exact = mantissa * _UNITS[unit]
        if exact != exact.to_integral_value():
            raise SpecError(field, f"{text!r} is not a whole number of bytes", VALID_SIZE)
        value = int(exact)
    if value < 0:
        raise SpecError(field, f"{text!r} is negative", VALID_SIZE)
    if value == 0 and not allow_zero:
        raise SpecError(field, f"{text!r} is zero", VALID_SIZE)
    if value > MAX_SIZE_BYTES:
        raise SpecError(field, f"{text!r} is too large (at most {MAX_SIZE_BYTES} bytes)", VALID_SIZE)
    return value


def parse_size_range(text: str, *, field: str = "size") -> list[int]:
    """The sizes of ``START:END[:FACTOR]``, or the one size of a plain SIZE (nccl-tests ``-b -e -f``).

    >>> parse_size_range("8B:64B")
    [8, 16, 32, 64]
    """
    if not isinstance(text, str):
        raise SpecError(field, f"{text!r} is not a size or size range", VALID_RANGE)
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0], field=field)]
    if len(parts) not in (2, 3):
        raise SpecError(field, f"cannot parse range {text!r}", VALID_RANGE)
    start = parse_size(parts[0], field=field)
    end = parse_size(parts[1], field=field)
    factor = 2
    if len(parts) == 3:
        raw = parts[2].strip()
        if not raw.isdigit() or int(raw) < 2:
            raise SpecError(field, f"factor {parts[2]!r} in {text!r} is not an integer >= 2", VALID_RANGE)
        factor = int(raw)
    if end < start:
        raise SpecError(field, f"range {text!r} ends before it starts", VALID_RANGE)
    sizes = [start]
    while sizes[-1] * factor <= end:
        sizes.append(sizes[-1] * factor)
        if len(sizes) > MAX_RANGE_POINTS:  # pragma: no cover - factor >= 2 and MAX_SIZE_BYTES bound it to ~62
            raise SpecError(field, f"range {text!r} has more than {MAX_RANGE_POINTS} sizes", VALID_RANGE)
    return sizes


def format_size(size_bytes: int) -> str:
    """The exact, shortest form of ``size_bytes``: the largest binary unit dividing it, else decimal, else bytes.

    >>> format_size(4194304), format_size(512000), format_size(1000), format_size(7)
    ('4MiB', '512KB', '1KB', '7B')
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise SpecError("size", f"{size_bytes!r} is not a whole, non-negative number of bytes", VALID_SIZE)
    if size_bytes == 0:
        return "0B"
    for suffix, factor in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes % factor == 0:
            binary = f"{size_bytes // factor}{suffix}"
            break
    else:
        binary = f"{size_bytes}B"
    for suffix, factor in (("PB", 1000**5), ("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if size_bytes % factor == 0:
            decimal = f"{size_bytes // factor}{suffix}"
            return decimal if len(decimal) < len(binary) else binary
    return binary


def human_size(size_bytes: float) -> str:
    """A rounded, binary-unit label for tables and axes (``1.5GiB``); not meant to be parsed back."""
    value = float(size_bytes)
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or suffix == "TiB":
            return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.3g}{suffix}"
        value /= 1024
    return f"{value}PiB"  # pragma: no cover
