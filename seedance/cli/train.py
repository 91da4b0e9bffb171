"""``seedance sim train`` / ``seedance real train``: data-parallel training under the validate-and-commit protocol,
optionally with one of the seed's failure scenarios F1–F8 (``--scenario F2 --variant buggy``).

Both print the same keys (``--json``: one object): steps, final_loss, replica_l2_max, param_l2_deviation, commits,
rollbacks, alarms, commit_overhead_pct, false_alarms, false_offline, false_convergence, leaked_handles, detected,
global_resync, recovery_s_mean, ... (see :mod:`seedance.history.training`). The commands are registered in the
``sim`` and ``real`` groups; this module's own ``train`` group (hidden) holds the same two commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from seedance import validation as V
from seedance.cli._common import emit_json, json_option, parse_settings, to_json
from seedance.cli._types import SEED, Integer, Number
from seedance.errors import SpecError

SCENARIO_NAMES = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8")


def _scenario(value: str | None) -> str:
    if value in (None, "", "none"):
        return ""
    if value.upper() not in SCENARIO_NAMES:
        raise SpecError("--scenario", f"unknown scenario {value!r}", f"valid: {', '.join(SCENARIO_NAMES)} or none")
    return value.upper()


def _common(fn: Any) -> Any:
    for option in reversed([
        click.option("--steps", type=Integer(1, 100_000), default=60, show_default=True, help="Training steps."),
        click.option("--commit-every", type=Integer(1, 100_000), default=10, show_default=True,
                     help="Validate and commit every K steps."),
        click.option("--scenario", default="none", show_default=True,
                     help="Failure scenario to inject: F1..F8, or none."),
        click.option("--variant", type=click.Choice(["buggy", "fixed"]), default="fixed", show_default=True,
                     help="buggy: the seed's v2.0.2 behaviour; fixed: its remedy."),
        click.option("--seed", type=SEED, default=0, show_default=True,
                     help="Seeds the data, the initial parameters, the injection and the node RNGs."),
        click.option("--set", "settings", multiple=True,
                     help="Protocol option KEY=VALUE (JSON value), repeatable, e.g. --set dim=128."),
        click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Also write summary.json here."),
        json_option,
    ]):
        fn = option(fn)
    return fn


def _report(summary: dict[str, Any], out: Path | None, as_json: bool) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(to_json(summary) + "\n", encoding="utf-8")
    if as_json:
        emit_json(summary)
        return
    keys = ("runtime", "scenario", "variant", "world_size", "steps", "final_loss", "param_l2_deviation",
            "replica_l2_max", "commits", "rollbacks", "alarms", "false_alarms", "false_offline", "false_convergence",
            "leaked_handles", "detected", "commit_overhead_pct", "recovery_s_mean", "finished")
    for key in keys:
        click.echo(f"{key:>20}: {summary.get(key)}")


def _check_out(out: Path | None) -> None:
    if out is not None:
        V.check_writable_dir("--out", out)


@click.command(name="train")
@click.option("--world-size", type=Integer(1, None), default=4, show_default=True,
              help="Ranks (simulated nodes), at most 1,024.")
@click.option("--topology", default=None, help="Preset or topology file (default: the uniform fabric).")
@click.option("--model-size", "--params", "model_size", default=None,
              help="Model parameters (7B, 1.3B, 350M, 7e9): the step's FLOPs (6 x params x tokens) and gradient "
                   "bytes (params x --bytes-per-param) go into the compute model and the allreduce.")
@click.option("--tokens-per-step", type=Integer(1, 10_000_000), default=4096, show_default=True,
              help="Tokens per rank per step (with --model-size).")
@click.option("--bytes-per-param", type=Integer(1, 8), default=2, show_default=True,
              help="Gradient bytes per parameter (2: bf16), with --model-size.")
@_common
def sim_train(world_size: int, topology: str | None, model_size: str | None, tokens_per_step: int,
              bytes_per_param: int, steps: int, commit_every: int, scenario: str, variant: str, seed: int,
              settings: tuple[str, ...], out: Path | None, as_json: bool) -> None:
    """Simulate data-parallel training under validate-and-commit (compute from the compute model, collectives as
    flow-level phases on the fabric, parameters as small real arrays)."""
    from seedance.experiments.training_run import check_world, model_settings, sim_train as run
    from seedance.models.compute import parse_params

    world = check_world(world_size)
    params = parse_params(model_size) if model_size is not None else None
    merged = model_settings(params, tokens_per_step, bytes_per_param, parse_settings(settings))
    _check_out(out)
    summary = run(world=world, steps=steps, commit_every=commit_every, scenario=_scenario(scenario),
                  variant=variant, seed=seed, settings=merged, topology=topology)
    if params is not None:
        summary["model"] = {"params": params, "tokens_per_step": tokens_per_step, "bytes_per_param": bytes_per_param,
                            "step_flops": merged["step_flops"], "grad_bytes": merged["grad_bytes"]}
    extra = ["--topology", topology] if topology else []
    if model_size is not None:
        extra += ["--model-size", model_size, "--tokens-per-step", str(tokens_per_step), "--bytes-per-param",
                  str(bytes_per_param)]
    summary["reproduce"] = _reproduce("sim", world, steps, commit_every, scenario, variant, seed, settings, extra)
    _report(summary, out, as_json)


@click.command(name="train")
@click.option("--world-size", type=Integer(1, None), default=3, show_default=True,
              help="Rank processes (at most 4 per CPU core, 5..64).")
@click.option("--timeout", "timeout_s", type=Number(1, V.MAX_REAL_DURATION_S), default=300.0, show_default=True,
              help="Give up after this many wall-clock seconds.")
@click.option("--nemesis", default="", help="Comma-separated faults the real backend applies (crash, pause, "
              "partition, loss, ...: see `seedance sim faults`), drawn from --seed; empty: none.")
@click.option("--faulty-s", "faulty_s", type=Number(0, 600, lo_open=True), default=8.0, show_default=True,
              help="Seconds of faults after every rank is ready; then everything heals.")
@_common
def real_train(world_size: int, timeout_s: float, nemesis: str, faulty_s: float, steps: int, commit_every: int,
               scenario: str, variant: str, seed: int, settings: tuple[str, ...], out: Path | None,
               as_json: bool) -> None:
    """Train for real: one OS process per rank, torch.distributed collectives (gloo here, NCCL with CUDA)."""
    import tempfile

    from seedance.experiments.training_run import protocol_config, real_train as run

    if world_size > V.max_real_nodes():
        raise SpecError("--world-size", f"{world_size} is above the ceiling {V.max_real_nodes()}",
                        V.why_real_nodes())
    name = _scenario(scenario)
    from seedance import faults

    protocol_config(steps=steps, commit_every=commit_every, scenario=name, variant=variant, seed=seed,
                    settings=parse_settings(settings))
    fault_names = faults.parse(nemesis, faults.REAL)
    _check_out(out)
    with tempfile.TemporaryDirectory(prefix="seedance-train-") as scratch:  # the run's files, unless --out keeps them
        summary = run(world=world_size, steps=steps, commit_every=commit_every, scenario=name, variant=variant,
                      seed=seed, settings=parse_settings(settings), out=out if out is not None else Path(scratch),
                      timeout_s=timeout_s, nemesis=tuple(fault_names), faulty_s=faulty_s)
    if out is None:
        summary["run_dir"] = None
    summary["reproduce"] = _reproduce("real", world_size, steps, commit_every, scenario, variant, seed, settings)
    if fault_names:
        summary["reproduce"] += f" --nemesis {','.join(fault_names)} --faulty-s {faulty_s!r}"
    _report(summary, out, as_json)


def _reproduce(group: str, world: int, steps: int, every: int, scenario: str, variant: str, seed: int,
               settings: tuple[str, ...], extra: list[str] | tuple[str, ...] = ()) -> str:
    import shlex

    args = ["seedance", group, "train", "--world-size", str(world), *extra, "--steps", str(steps), "--commit-every",
            str(every), "--scenario", scenario or "none", "--variant", variant, "--seed", str(seed)]
    for item in settings:
        args += ["--set", item]
    return shlex.join(args) + " --json"


@click.group(name="train", hidden=True)
def command() -> None:
    """Training under validate-and-commit (also `seedance sim train` and `seedance real train`)."""


command.add_command(sim_train, name="sim")
command.add_command(real_train, name="real")


@click.command(name="failure-scenarios")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for results.")
@click.option("--quick", is_flag=True, help="2 simulator seeds, F2/F3/F8 for real (about a minute here).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="First seed.")
@click.option("--no-real", "no_real", is_flag=True, help="Simulator rows only.")
@json_option
def failure_scenarios(out_dir: str, quick: bool, seed: int, no_real: bool, as_json: bool) -> None:
    """The seed's impact table for F1-F8, buggy and fixed, simulated and real: CSV, LaTeX, figure, summary.json."""
    import sys

    from pathlib import Path

    from seedance.experiments.scenarios import ROW_FIELDS
    from seedance.sweep.experiments import experiment

    V.check_writable_dir("--out", out_dir)
    result = experiment("failure-scenarios").run(
        Path(out_dir), quick=quick, seed=seed, no_real=no_real,
        progress=lambda text: print(text, file=sys.stderr) if sys.stderr.isatty() else None)
    if as_json:
        emit_json(result)
        return
    for row in result["rows"]:
        click.echo("  ".join(f"{row[k]}" for k in ROW_FIELDS))
    click.echo(f"fixed clean: {result['summary']['fixed_clean']}; buggy detected: "
               f"{result['summary']['buggy_detected']}; wrote {len(result['artifacts'])} files to {out_dir}")
