"""``seedance check``: judge a recorded history.

``seedance check linearizable FILE|- --model register|cas-register|kv [--timeout S] [--json]`` reads a JSON Lines
history (``-``: from stdin) (format: :mod:`seedance.history.events`) and runs :func:`seedance.history.linearizability.check`.

Exit status: 0 linearizable, 1 not linearizable, 3 unknown (the time budget ran out), 2 bad input (one line on
stderr naming the file and line, e.g. ``seedance: error: h.jsonl line 17: ...``). With ``--json`` the verdict is one object:
``{"valid": true|false|"unknown", "ops": n, "elapsed_s": x, "first_violation": {...}|null, "model", "keys",
"file"}``.
"""

from __future__ import annotations

import click

from seedance import validation
from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import Progress, progress_option
from seedance.cli._types import Number

EXIT_VALID, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3


@click.group("check")
def command() -> None:
    """Judge recorded histories (linearizability, causal consistency)."""


@command.command("linearizable")
@click.argument("history_file", metavar="FILE|-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--model", type=click.Choice(["register", "cas-register", "kv"]), default="kv", show_default=True,
              help="register: read/write; cas-register: read/write/cas; kv: a cas register per key.")
@click.option("--timeout", "timeout_s", type=Number(0, validation.MAX_TIMEOUT_S), default=None, metavar="S",
              help="Give up after S seconds with verdict 'unknown' (exit 3). Default: no limit.")
@click.option("--per-key", is_flag=True, help="With --json, add per-key statistics (ops, steps, seconds).")
@json_option
@progress_option
def linearizable(history_file: str, model: str, timeout_s: float | None, per_key: bool, as_json: bool,
                 show_progress: bool | None) -> int:
    """Is the history in FILE (or stdin, for -) linearizable? Exit 0 yes, 1 no, 3 unknown (timeout), 2 bad input."""
    import sys

    from seedance.history.events import parse_lines, read_jsonl
    from seedance.history.linearizability import check

    steps = Progress(show_progress, "check linearizable")
    steps.phase(f"reading {'stdin' if history_file == '-' else history_file}")
    events = parse_lines(sys.stdin) if history_file == "-" else read_jsonl(history_file)
    steps.phase(f"checking {len(events)} events under model {model}")
    result = check(events, model=model, timeout_s=timeout_s)
    steps.done()
    if as_json:
        emit_json({**result.to_dict(per_key=per_key), "file": history_file})
    else:
        click.echo(_summary(result, history_file))
    if result.valid is True:
        return EXIT_VALID
    return EXIT_INVALID if result.valid is False else EXIT_UNKNOWN


def _summary(result, history_file: str) -> str:
    verdict = {True: "linearizable", False: "NOT linearizable"}.get(result.valid, "unknown (time budget spent)")
    lines = [f"{history_file}: {verdict} under model {result.model} "
             f"({result.ops} operations, {len(result.per_key)} key(s) checked, {result.elapsed_s:.3f} s)"]
    if result.first_violation:
        lines.append(f"  key {result.first_violation['key']!r}: {result.first_violation['explanation']}")
    return "\n".join(lines)


@command.command("causal")
@click.argument("history_file", metavar="FILE|-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--nodes", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Replicas that must converge (default: those that appear in the replica events).")
@click.option("--settle", "settle_s", type=Number(0, validation.MAX_TIMEOUT_S), default=0.1, show_default=True,
              metavar="S", help="Writes invoked within S seconds of the history's end may still be in flight.")
@json_option
def causal(history_file: str, nodes: int | None, settle_s: float, as_json: bool) -> int:
    """Is the history in FILE (or stdin) causally consistent (Bouajjani et al. POPL'17 bad patterns: CyclicCO,
    WriteCOInitRead, ThinAirRead, WriteCORead, CyclicCF) and, with replica events, converged? Exit 0 yes, 1 no,
    2 bad input."""
    import sys

    from seedance.history import causal as causal_check
    from seedance.history.events import parse_lines, read_jsonl

    events = (parse_lines(sys.stdin, replicas=True) if history_file == "-"
              else read_jsonl(history_file, replicas=True))
    result = causal_check.check(events, nodes=nodes, settle_s=settle_s)
    if as_json:
        emit_json({**result, "file": history_file})
    else:
        verdict = "causally consistent" if result["valid"] else "NOT causally consistent / not converged"
        click.echo(f"{history_file}: {verdict} ({result['ops']} operations, {result['elapsed_s']:.3f} s)")
        for anomaly in result["anomalies"][:5]:
            click.echo(f"  {anomaly['type']}: {anomaly['explanation']}")
    return EXIT_VALID if result["valid"] else EXIT_INVALID

