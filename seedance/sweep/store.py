"""Where a sweep's results live: one JSON file per run, then one Parquet dataset built from them.

Layout of ``DIR``::

    spec.json            the validated spec (what ``--only`` reruns read)
    points/<key>.json    one run: params, seed, status ok | failed, metrics, error, traceback, provenance
    runs/<key>/          files a runner writes (real, experiment, train on real processes)
    logs/                the worker processes' stderr
    results.parquet      one row per run of the spec (rebuilt from points/ at the end of every sweep)

A metric that is NaN or infinite is stored as missing (strict JSON). Every file is written atomically (temp file,
fsync, rename, fsync of the directory), so a sweep killed at any moment leaves each point file whole or absent,
never torn; a leftover ``*.tmp`` is ignored. A point file is the only record of a run: the Parquet file is derived
and can always be rebuilt (:func:`build_dataset`).

Columns of a row: every parameter (nested ones dotted: ``set.heartbeat_s``; lists as JSON text), every metric (a
metric named like a parameter or a bookkeeping column is stored as ``metric.<name>``), then ``seed``, ``point`` (the
run's key), ``spec_hash``, ``sweep``, ``runner``, ``status``, ``error``, ``wall_s``, ``cpu_s`` (the worker process's
CPU time for the run), ``finished_at`` (UTC, ISO 8601), ``git_commit``, ``version.<package>`` and ``reproduce``. A
column whose values mix types (e.g. ``linearizable``: true, false or "unknown") is stored as text.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from seedance.errors import SpecError
from seedance.jsonable import jsonable
from seedance.files import atomic_write

POINTS = "points"
RESULTS = "results.parquet"
SPEC = "spec.json"
BOOKKEEPING = ("seed", "point", "spec_hash", "sweep", "runner", "status", "error", "wall_s", "cpu_s", "finished_at",
               "git_commit", "reproduce")


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/.lock`` for one driver at a time (released by the kernel when the driver
    exits or is killed, so a ``kill -9`` leaves no stale lock)."""

    def __init__(self, out: Path) -> None:
        self.path = out / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> DirectoryLock:
        import fcntl
        import os

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise SpecError("--out", f"another sweep (pid {holder}) is running in {self.path.parent}",
                            "wait for it, or use another --out directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        import os

        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def point_path(out: Path, key: str) -> Path:
    return out / POINTS / f"{key}.json"


def write_point(out: Path, record: Mapping[str, Any]) -> Path:
    """Write one run's record atomically (NaN becomes null: strict JSON)."""
    path = point_path(out, record["point"])
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(jsonable(dict(record)), sort_keys=True, allow_nan=False, default=str)
    atomic_write(path, (text + "\n").encode())
    return path


def read_point(path: Path) -> dict[str, Any] | None:
    """A point file's record, or None when it is unreadable (then the run counts as not done)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) and "point" in record and "status" in record else None


def finished(out: Path, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The records of ``keys`` whose point file exists and says ``ok`` (failed runs are run again)."""
    done = {}
    folder = out / POINTS
    if not folder.is_dir():
        return done
    present = {p.stem for p in folder.glob("*.json")}
    for key in keys:
        if key in present:
            record = read_point(point_path(out, key))
            if record is not None and record.get("status") == "ok":
                done[key] = record
    return done


def row(record: Mapping[str, Any]) -> dict[str, Any]:
    """One flat row of a point record (see the module docstring for the columns)."""
    from seedance.sweep.runners import flatten

    params = flatten(record.get("params") or {})
    out: dict[str, Any] = dict(params)
    reserved = set(BOOKKEEPING) | set(params)
    for name, value in flatten(record.get("metrics") or {}).items():
        out[f"metric.{name}" if name in reserved else name] = value
    for name in BOOKKEEPING:
        out[name] = record.get(name)
    for name, version in (record.get("versions") or {}).items():
        out[f"version.{name}"] = version
    return out


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {}
    for r in rows:
        for name in r:
            columns.setdefault(name, [])
    for name in columns:
        values = [r.get(name) for r in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1:
            values = [None if v is None else (json.dumps(v) if isinstance(v, bool) else str(v)) for v in values]
        columns[name] = values
    return pa.table({name: pa.array(values) for name, values in columns.items()})


def build_dataset(out: Path, keys: Iterable[str] | None = None) -> Path:
    """(Re)write ``DIR/results.parquet`` atomically from the point files of ``keys`` (default: every point file),
    one row per run in ``keys`` order."""
    import pyarrow.parquet as pq

    folder = out / POINTS
    if keys is None:
        keys = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    rows = []
    for key in keys:
        path = point_path(out, key)
        record = read_point(path) if path.exists() else None
        if record is not None:
            rows.append(row(record))
    table = _table(rows)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    target = out / RESULTS
    atomic_write(target, sink.getvalue())
    return target


def load_results(path: str | Path) -> Any:
    """The results as a pandas DataFrame, one row per run: ``path`` is a sweep directory or its Parquet file."""
    import pandas as pd

    target = Path(path)
    if target.is_dir():
        target = target / RESULTS
    if not target.is_file():
        raise SpecError("results", f"{target} does not exist", "a sweep directory (DIR of `seedance sweep --out DIR`) "
                        "or its results.parquet")
    try:
        return pd.read_parquet(target)
    except (OSError, ValueError) as err:
        raise SpecError("results", f"cannot read {target} ({type(err).__name__}: {err})",
                        "a Parquet file written by `seedance sweep`") from None
