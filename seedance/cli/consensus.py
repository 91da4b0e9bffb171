"""``seedance real test-consensus`` (what ``make test-consensus`` runs) and ``seedance real soak``.

``test-consensus`` takes its settings either from options or, with ``--from-env``, from the make variables
(GPU_COUNT, TEST_DURATION, CONSISTENCY_CHECK_LEVEL, MEMCHECK_ENABLE, SCENARIO, VARIANT, SEED, NEMESIS,
COMMIT_EVERY, METRICS_PORT, MEMCHECK_DRIFT_PCT, OUT; see :data:`seedance.experiments.consensus_check.VARIABLES` for
the defaults). A bad value stops it before any process starts: one line naming the variable (or option) and what
is allowed, exit status 2. A run that fails a check exits with status 1 and names the cause.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from seedance.cli._common import emit_json, json_option
from seedance.cli._progress import Progress, progress_option
from seedance.errors import SpecError

# option -> make variable (the options are the variables, spelled as options)
_OPTIONS = {"ranks": "GPU_COUNT", "duration": "TEST_DURATION", "level": "CONSISTENCY_CHECK_LEVEL",
            "memcheck": "MEMCHECK_ENABLE", "scenario": "SCENARIO", "variant": "VARIANT", "seed": "SEED",
            "nemesis": "NEMESIS", "commit_every": "COMMIT_EVERY", "metrics_port": "METRICS_PORT",
            "drift_threshold": "MEMCHECK_DRIFT_PCT", "out": "OUT"}


def _reporter(show: bool | None, command: str, duration_s: float) -> Any:
    """A progress callback: a bar on a terminal (or with --progress), else one status line every 30 s."""
    progress = Progress(show, command)
    bar = progress.bar(duration_s, unit="s", desc=command, fmt="{desc}: {n:.0f}/{total:.0f} s |{bar}| {postfix}")
    last = [0.0]

    def update(state: Any, elapsed_s: float) -> None:
        commits = sum(r["commits"] for r in state.ranks.values()) // max(1, state.world)
        rollbacks = max(r["rollbacks"] for r in state.ranks.values())
        text = f"commits {commits}, rollbacks {rollbacks}, replica L2 max {state.divergence_max:.3g}"
        if bar is not None:
            bar.n = min(elapsed_s, duration_s)
            bar.set_postfix_str(text, refresh=True)
        elif show is not False and time.monotonic() - last[0] >= 30.0:
            last[0] = time.monotonic()
            click.echo(f"{command}: {elapsed_s:.0f}/{duration_s:.0f} s, {text}", err=True)

    update.close = lambda: bar.close() if bar is not None else None  # type: ignore[attr-defined]
    return update


def _finish(report: dict[str, Any], as_json: bool, command: str) -> None:
    from seedance.analysis.consensus_check import report_lines

    if as_json:
        emit_json(report)
    else:
        for line in report_lines(report):
            click.echo(line)
    if not report["passed"]:
        click.echo(f"seedance: {command} failed: " + "; ".join(report["causes"][:6]), err=True)
        raise click.exceptions.Exit(1)


@click.command(name="test-consensus")
@click.option("--from-env", "from_env", is_flag=True,
              help="Read the settings from the make variables (GPU_COUNT, TEST_DURATION, CONSISTENCY_CHECK_LEVEL, "
                   "MEMCHECK_ENABLE, SCENARIO, VARIANT, SEED, NEMESIS, COMMIT_EVERY, METRICS_PORT, "
                   "MEMCHECK_DRIFT_PCT, OUT); `make test-consensus` uses this.")
@click.option("--ranks", default=None, metavar="N", help="Ranks: one per GPU with CUDA, CPU processes on gloo otherwise [4].")
@click.option("--duration", default=None, metavar="DURATION",
              help="Wall time of the run from its launch: 300s, 5m, 1h [300s].")
@click.option("--level", default=None, metavar="basic|full", help="Consistency checks: basic or full [full].")
@click.option("--memcheck/--no-memcheck", default=None, help="Memory monitor [on].")
@click.option("--scenario", default=None, metavar="NAME", help="F1..F4, F6..F8 or none [none], injected throughout.")
@click.option("--variant", default=None, metavar="buggy|fixed", help="buggy or fixed [fixed].")
@click.option("--seed", default=None, metavar="N", help="Seed [0].")
@click.option("--nemesis", default=None, metavar="FAULTS", help="Real faults: subset of crash,pause,partition, or none [all three].")
@click.option("--commit-every", "commit_every", default=None, metavar="K", help="Steps between commits [10].")
@click.option("--metrics-port", "metrics_port", default=None, metavar="PORT",
              help="Prometheus endpoint on 127.0.0.1:PORT during the run (0: off) [0].")
@click.option("--drift-threshold", "drift_threshold", default=None, metavar="PCT",
              help="Memory drift over the run (in % of the mean) that counts as a leak [1.0].")
@click.option("--out", default=None, metavar="DIR", help="Directory for report.json, figure.pdf/png, commits.trace.json "
              "[out/test-consensus].")
@progress_option
@json_option
def test_consensus(from_env: bool, show_progress: bool | None, as_json: bool, **given: Any) -> None:
    """The seed's verification command: real training under the commit protocol with faults injected throughout,
    checked for consistency (and memory), for a wall-clock duration. Exit 0: passed; 1: a check failed; 2: bad
    input."""
    from seedance.experiments import consensus_check as C

    options = {k: v for k, v in given.items() if v is not None}
    if from_env:
        if options:
            raise SpecError("--from-env", f"cannot be combined with --{next(iter(options)).replace('_', '-')}",
                            "set the make variables instead")
        values = {name: os.environ.get(name) for name in C.VARIABLES}
        opts = C.options_from(values)
    else:
        values = {_OPTIONS[k]: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items()}
        opts = C.options_from(values, names={var: "--" + opt.replace("_", "-") for opt, var in _OPTIONS.items()})
    update = _reporter(show_progress, "test-consensus", opts.duration_s)
    try:
        report = C.run_test_consensus(opts, progress=update, argv=sys.argv,
                                      port_name="METRICS_PORT" if from_env else "--metrics-port")
    finally:
        update.close()
    _finish(report, as_json, "test-consensus")


@click.command(name="soak")
@click.option("--duration", required=True, metavar="DURATION", help="Wall time from launch: 600s, 10m, 72h.")
@click.option("--ranks", default="2", show_default=True, help="Rank processes.")
@click.option("--scenario", default="none", show_default=True, help="F1..F4, F6..F8 or none (F8 buggy: the leak).")
@click.option("--variant", default="fixed", show_default=True, help="buggy or fixed.")
@click.option("--commit-every", "commit_every", default="1", show_default=True, help="Steps between commits.")
@click.option("--seed", default="0", show_default=True)
@click.option("--interval", default="1.0", show_default=True, help="Seconds between memory samples.")
@click.option("--drift-threshold", "drift_threshold", default="1.0", show_default=True,
              help="Memory drift over the run (in % of the mean) that counts as a leak.")
@click.option("--metrics-port", "metrics_port", default="0", show_default=True,
              help="Prometheus endpoint on 127.0.0.1:PORT during the run (0: off).")
@click.option("--out", default="out/soak", show_default=True, help="Directory for report.json and the figure.")
@progress_option
@json_option
def soak(duration: str, ranks: str, scenario: str, variant: str, commit_every: str, seed: str, interval: str,
         drift_threshold: str, metrics_port: str, out: str, show_progress: bool | None, as_json: bool) -> None:
    """The memory monitor on its own over a long fault-free commit-protocol run: per-period table, slope and its
    confidence interval, leak verdict, handle/fd/thread counts at start and end. Exit 1 on a leak."""
    from seedance import validation as V
    from seedance.experiments import consensus_check as C

    duration_s = C.parse_duration("--duration", duration, lo=5.0)
    world = C.parse_int("--ranks", ranks, 1, C.max_ranks()[0], C.max_ranks()[1])
    name = C.parse_choice("--scenario", scenario, C.SCENARIO_NAMES, none_ok=True)
    kind = C.parse_choice("--variant", variant, ("buggy", "fixed"))
    every = C.parse_int("--commit-every", commit_every, 1, 10_000)
    seed_value = C.parse_int("--seed", seed, 0, 2**63 - 1)
    interval_s = C.parse_duration("--interval", interval, lo=0.05, hi=60.0)
    drift = C._parse_pct("--drift-threshold", drift_threshold)
    port = C.parse_int("--metrics-port", metrics_port, 0, 65535)
    V.check_writable_dir("--out", out)
    update = _reporter(show_progress, "soak", duration_s)
    try:
        report = C.run_soak(ranks=world, duration_s=duration_s, scenario=name, variant=kind, seed=seed_value,
                            commit_every=every, interval_s=interval_s, drift_threshold_pct=drift,
                            metrics_port=port, out=out, progress=update, argv=sys.argv)
    finally:
        update.close()
    _finish(report, as_json, "soak")


@click.group(name="consensus", hidden=True)
def command() -> None:
    """The seed's verification command and the memory soak (also `seedance real test-consensus` / `real soak`)."""


command.add_command(test_consensus)
command.add_command(soak)
