"""Helpers shared by the benchmark scripts (imported as ``_timing``: scripts run from this folder): timing, a
process's peak RSS, a Dask LocalCluster for a block, and writing the JSON document."""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeats`` wall-clock runs of ``fn`` in seconds: the least disturbed by a shared machine."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_rss_kib() -> int:
    """This process's peak RSS (KiB): Linux's ``VmHWM`` of its address space, else ``ru_maxrss``. (On Linux
    ``ru_maxrss`` also counts the parent's high-water mark carried across ``exec``, so a child started by a big
    benchmark process would report the parent's size.)"""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextlib.contextmanager
def scheduler_for(workers: int, dask: bool) -> Iterator[str | None]:
    """A Dask LocalCluster of ``workers`` processes (one thread each, on 127.0.0.1) for the block, its scheduler's
    address given; ``None`` (the local pool) when not ``dask``."""
    if not dask:
        yield None
        return
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address="127.0.0.1:0")
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def write_json(out_dir: str | Path, name: str, document: dict[str, Any]) -> Path:
    """``out_dir/name.json`` (the folder made if needed), announced on stderr."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    return path
