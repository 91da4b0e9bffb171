"""What each paper item cost: its runs, wall time and CPU time, measured from the sweeps' recorded timing columns, and
how its wall time scales with workers where runs with other worker counts were made.

``python -m seedance.paper.timings DIR [--scaling LABEL=DIR ...] [--readme README.md [--check]] [--json]
[--save-rows FILE]``

``DIR`` is a report's output directory (``<item>/results.parquet`` per item; ``seedance report`` or ``make paper``)
or a rows file saved with ``--save-rows`` (the timing columns alone, JSON). Per item, from its rows:

* runs: rows with status ok (failed ones are counted apart);
* wall: from the first run's start (``finished_at - wall_s``) to the last run's end: the sweep's elapsed time
  without the driver's start-up and the drawing (seconds, next to nothing);
* CPU: the runs' ``cpu_s`` summed: the worker processes' CPU time (a real-process item's child processes are not
  in it, so its CPU is a lower bound).

``--scaling "1 local=DIR1" --scaling "2 Dask=DIR2"`` adds, per item found in those directories too, its wall time
there and the speed-up over the first label (e.g. 1 local worker). ``--readme`` rewrites the table between the
markers ``<!-- paper-items:start -->`` and ``<!-- paper-items:end -->`` (``--check``: exit 1 when it differs instead
of writing). A missing or bad directory, label or marker exits 2 with one line.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from seedance.errors import SpecError

START, END = "<!-- paper-items:start -->", "<!-- paper-items:end -->"
COLUMNS = ("item", "status", "wall_s", "cpu_s", "finished_at")


def rows(source: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The timing columns of every run under ``source`` (a report directory or a saved rows file), item by item."""
    from seedance.paper.suite import NAMES
    from seedance.sweep import load_results

    path = Path(source)
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise SpecError(str(path), f"is not a rows file ({err})", "a file written by --save-rows") from None
        if not (isinstance(data, list) and all(isinstance(r, dict) and set(COLUMNS) <= set(r) for r in data)):
            raise SpecError(str(path), "is not a rows file", f"a JSON list of objects with {', '.join(COLUMNS)}")
        return data
    if not path.is_dir():
        raise SpecError("DIR", f"{path} does not exist", "a report's output directory or a rows file")
    out = []
    for name in NAMES:
        if (path / name / "results.parquet").is_file():
            df = load_results(path / name)
            for r in df.itertuples():
                out.append({"item": name, "status": str(r.status), "wall_s": _float(r.wall_s),
                            "cpu_s": _float(getattr(r, "cpu_s", None)), "finished_at": str(r.finished_at)})
    if not out:
        raise SpecError("DIR", f"{path} holds no <item>/results.parquet", f"items: {', '.join(NAMES)}")
    return out


def _float(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def item_cost(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs, failed runs, elapsed wall seconds (first start to last end) and summed CPU seconds of one item."""
    ends = [datetime.fromisoformat(r["finished_at"]).timestamp() for r in runs]
    starts = [end - (r["wall_s"] or 0.0) for end, r in zip(ends, runs)]
    cpu = [r["cpu_s"] for r in runs if r["cpu_s"] is not None]
    return {"runs": sum(r["status"] == "ok" for r in runs), "failed": sum(r["status"] != "ok" for r in runs),
            "wall_s": round(max(ends) - min(starts), 2), "cpu_s": round(sum(cpu), 2) if cpu else None}


def summary(main: list[dict[str, Any]], scaling: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Per item (in the paper's order) its cost in ``main``, and its wall time and speed-up in each ``scaling`` run
    (the speed-up is over the first label's wall time)."""
    from seedance.paper.suite import NAMES

    scaling = scaling or {}
    items = []
    for name in NAMES:
        mine = [r for r in main if r["item"] == name]
        if not mine:
            continue
        entry = {"item": name, **item_cost(mine), "scaling": {}}
        base = None
        for k, (label, other) in enumerate(scaling.items()):
            theirs = [r for r in other if r["item"] == name]
            if not theirs:
                continue
            wall = item_cost(theirs)["wall_s"]
            base = wall if k == 0 else base
            entry["scaling"][label] = {"wall_s": wall,
                                       "speedup": round(base / wall, 2) if base is not None and wall > 0 else None}
        items.append(entry)
    total = {"runs": sum(i["runs"] for i in items), "failed": sum(i["failed"] for i in items),
             "wall_s": round(sum(i["wall_s"] for i in items), 2),
             "cpu_s": round(sum(i["cpu_s"] or 0.0 for i in items), 2)}
    return {"items": items, "total": total, "labels": list(scaling)}


def clock(seconds: float | None) -> str:
    """``7.3 s``, ``6 min 21 s``, ``1 h 43 min`` (under a second: two significant digits, never 0)."""
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(round(seconds % 60)):02d} s"
    return f"{int(seconds // 3600)} h {int(round(seconds % 3600 / 60)):02d} min"


def markdown(result: dict[str, Any]) -> str:
    """The README's table: per item runs, wall, CPU, then per scaling label its wall time and speed-up."""
    labels = result["labels"]
    head = ["item", "runs (failed)", "wall", "CPU (workers)", *[f"{label} workers" for label in labels]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i in result["items"]:
        cells = [f"`{i['item']}`", f"{i['runs']:,} ({i['failed']})", clock(i["wall_s"]), clock(i["cpu_s"])]
        for label in labels:
            s = i["scaling"].get(label)
            cells.append("–" if s is None else f"{clock(s['wall_s'])} ({s['speedup']:.2f}×)"
                         if s["speedup"] is not None else clock(s["wall_s"]))
        lines.append("| " + " | ".join(cells) + " |")
    t = result["total"]
    lines.append("| " + " | ".join(["all", f"{t['runs']:,} ({t['failed']})", clock(t["wall_s"]), clock(t["cpu_s"]),
                                    *["" for _ in labels]]) + " |")
    return "\n".join(lines) + "\n"


def replace_table(text: str, table: str, where: str = "README") -> str:
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SpecError(where, f"needs one {START} and one {END} after it", "the markers around the paper's table")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}{END}{tail}"


def save_rows(path: Path, data: list[dict[str, Any]]) -> None:
    """The rows as a JSON list, one run a line."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in data) + "\n]\n", encoding="utf-8")


def _scaling(specs: list[str]) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label.strip() or not path:
            raise SpecError("--scaling", f"{spec!r} is not LABEL=DIR", 'e.g. --scaling "1 local=out/w1"')
        out[label.strip()] = rows(path)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m seedance.paper.timings", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a report's output directory, or a rows file (--save-rows)")
    parser.add_argument("--scaling", action="append", default=[], metavar="LABEL=DIR",
                        help="the same items run with other workers (first: the baseline of the speed-ups)")
    parser.add_argument("--readme", help="rewrite the table between the paper-items markers of this file")
    parser.add_argument("--check", action="store_true", help="with --readme: exit 1 if the table differs")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")
    parser.add_argument("--save-rows", metavar="FILE", help="write DIR's timing rows (and the scaling runs') to FILE")
    args = parser.parse_args(argv)
    try:
        main_rows, scaling = rows(args.dir), _scaling(args.scaling)
        result = summary(main_rows, scaling)
        table = markdown(result)
        if args.save_rows:
            save_rows(Path(args.save_rows), main_rows)
            for label, extra in scaling.items():
                save_rows(Path(args.save_rows).with_suffix(f".{label.replace(' ', '-').lower()}.json"), extra)
        if args.readme:
            path = Path(args.readme)
            if not path.is_file():
                raise SpecError("--readme", f"{path} does not exist", "a Markdown file with the paper-items markers")
            text = path.read_text(encoding="utf-8")
            new = replace_table(text, table, str(path))
            if args.check:
                if new != text:
                    print(f"{path}: the paper-items table differs from {args.dir}'s", file=sys.stderr)
                    return 1
            elif new != text:
                path.write_text(new, encoding="utf-8")
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else table, end="" if not args.json else "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
