"""``seedance trace``: the records of a simulated run, rendered again.

``seedance trace export RUN|FILE [--from S] [--to S] [--limit N] --out FILE [--json]`` reads ``trace.msgpack`` (every
record of a ``seedance sim run``, in order: its sha256 is the run's ``trace_sha256``) and writes the Chrome trace
(Trace Event Format, as ``trace.json``) of the records whose virtual time lies in ``[--from, --to]``: a window of a
run too long for its whole ``trace.json``. A malformed file exits 2 naming the record; the output is written to a
temporary name and renamed, so a failed export leaves no partial file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import click

from seedance.cli._common import emit_json, json_option
from seedance.cli._types import Integer, Number
from seedance.errors import SpecError


@click.group("trace")
def command() -> None:
    """Render a simulated run's recorded trace (trace.msgpack) again."""


def _source(run: str) -> tuple[Path, int | None]:
    """The records file of ``run`` (a run directory or the file) and the node count its summary.json gives."""
    path = Path(run)
    records = path / "trace.msgpack" if path.is_dir() else path
    if not records.is_file():
        raise SpecError("RUN", f"{records} does not exist",
                        "a `seedance sim run --out` directory or its trace.msgpack (runs with --no-trace have none)")
    nodes = None
    summary = records.parent / "summary.json"
    try:
        value = json.loads(summary.read_text(encoding="utf-8")).get("nodes")
        nodes = value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
    except (OSError, ValueError, AttributeError):
        pass  # no summary beside it: the nodes are counted from the records
    return records, nodes


@command.command("export")
@click.argument("run", metavar="RUN|FILE")
@click.option("--from", "start", type=Number(0, 1e9), default=0.0, show_default=True, metavar="S",
              help="First virtual second rendered.")
@click.option("--to", "end", type=Number(0, 1e9), default=None, metavar="S", help="Last virtual second (default: the end).")
@click.option("--limit", type=Integer(0, 10**12), default=0, show_default=True, metavar="N",
              help="Events at most (0: every event of the window).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True, help="The Chrome trace to write.")
@json_option
def export(run: str, start: float, end: float | None, limit: int, out_file: str, as_json: bool) -> int:
    """Write the Chrome trace of RUN's records between --from and --to (virtual seconds) to --out."""
    from seedance.tracing import Trace, read_records

    if end is not None and end < start:
        raise SpecError("--to", f"{end} is before --from {start}", "a time at or after --from")
    records, nodes = _source(run)
    if nodes is None:
        nodes = 1 + max((r[2] for r in read_records(records)), default=-1)
    stop = math.inf if end is None else end

    def window() -> Any:  # every record is read: the order recorded is not strictly the order of times
        for record in read_records(records):
            if start <= record[0] <= stop:
                yield record

    target = Path(out_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    trace = Trace(num_nodes=nodes)
    try:
        trace.write_chrome(tmp, records=window(), limit=limit or None,
                           metadata={"source": str(records), "from_s": start, "to_s": end},
                           rest="export a later window with a larger --from")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    shown = {**trace.last_chrome, "path": str(target), "source": str(records), "from_s": start, "to_s": end}
    if as_json:
        emit_json(shown)
    else:
        more = " (stopped at --limit)" if shown["truncated"] else ""
        click.echo(f"{shown['events']:,} events{more} of {records} into {target}")
    return 0
