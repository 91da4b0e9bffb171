"""What each paper item costs and how it scales with workers: every chosen item's sweep (``paper/specs/NAME.yaml`` in
``--size``) run with 1 and 2 local worker processes and on a Dask LocalCluster of 2 worker processes (one thread
each, on 127.0.0.1), each into its own directory, then summarised by :mod:`seedance.paper.timings` from the runs'
recorded timing columns (per item: runs, wall from the first run's start to the last run's end, the workers' CPU).

By default the items whose spec lets runs share the CPU (``max_workers`` unset): sim-vs-real and memory run one at a
time on real processes, so more workers do not apply to them. The Dask cluster is started before the item's clock
and closed after it, as a running cluster would be. The host's load average before each measurement is recorded:
the machine is shared, so a speed-up below 2 on 2 cores may be the host's and not the pool's (``benchmarks/
sweep_scaling.py`` measures the machine's own ceiling).

Usage: ``python benchmarks/paper_items.py [--out DIR] [--size quick|full] [--items a,b] [--modes local1,local2,dask2]
[--readme README.md --main REPORT_DIR]``. Writes ``DIR/paper_items.json`` and keeps each mode's sweeps under
``DIR/paper-items/<mode>/<item>`` (resumable: a rerun into the same DIR runs only what is missing, so delete it to
measure again). With ``--readme``, the README's paper-items table is rewritten from ``--main`` (the report's own run,
e.g. ``make run``'s directory) with these runs as its scaling columns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _timing import scheduler_for, write_json

from seedance.paper import timings
from seedance.paper.suite import NAMES, load_item_spec
from seedance.provenance import run_metadata
from seedance.sweep import run_sweep

MODES = {"local1": ("1 local", 1, False), "local2": ("2 local", 2, False), "dask2": ("2 Dask", 2, True)}


def run_mode(items: list[str], size: str, out: Path, workers: int, dask: bool) -> dict:
    with scheduler_for(workers, dask) as scheduler:
        load = os.getloadavg()[0]
        walls = {}
        for name in items:
            spec = load_item_spec(name, size).sweep
            start = time.perf_counter()
            summary = run_sweep(spec, out / name, workers=1 if dask else workers, progress=False, scheduler=scheduler)
            walls[name] = {"driver_wall_s": round(time.perf_counter() - start, 2), "failed": summary.points_failed}
        return {"load_avg_1min_before": load, "items": walls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--size", default="quick", choices=["quick", "full"])
    parser.add_argument("--items", default=None, help="comma-separated (default: every item without max_workers)")
    parser.add_argument("--modes", default="local1,local2,dask2", help=f"of {', '.join(MODES)}")
    parser.add_argument("--readme", default=None, help="rewrite this README's paper-items table (needs --main)")
    parser.add_argument("--main", default=None, help="the report's output directory the table's main columns are from")
    args = parser.parse_args(argv)
    items = args.items.split(",") if args.items else [n for n in NAMES if load_item_spec(n, args.size).workers is None]
    modes = args.modes.split(",")
    for bad in [n for n in items if n not in NAMES] + [m for m in modes if m not in MODES]:
        print(f"error: unknown item or mode {bad!r}; items: {', '.join(NAMES)}; modes: {', '.join(MODES)}",
              file=sys.stderr)
        return 2
    if args.readme and not args.main:
        print("error: --readme: needs --main REPORT_DIR (the run the table's main columns come from)", file=sys.stderr)
        return 2
    root = Path(args.out) / "paper-items"
    measured, scaling = {}, {}
    for mode in modes:
        label, workers, dask = MODES[mode]
        print(f"{label}: {', '.join(items)} ({args.size})", file=sys.stderr)
        measured[label] = run_mode(items, args.size, root / mode, workers, dask)
        scaling[label] = timings.rows(root / mode)
    main_rows = timings.rows(args.main) if args.main else scaling[MODES[modes[-1]][0]]
    result = timings.summary(main_rows, scaling)
    print(timings.markdown(result))
    if args.readme:
        path = Path(args.readme)
        path.write_text(timings.replace_table(path.read_text(encoding="utf-8"), timings.markdown(result), args.readme),
                        encoding="utf-8")
    write_json(args.out, "paper_items", {"size": args.size, "items": items, "measured": measured,
                                         "summary": result, "cpus": os.cpu_count(),
                                         "metadata": run_metadata(seed=None, spec=vars(args))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
