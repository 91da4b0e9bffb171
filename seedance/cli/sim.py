"""``seedance sim``: run a protocol in the simulator (virtual time, modelled fabric, seeded faults)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from seedance import validation as V
from seedance.cli._common import emit_json, json_option, parse_settings
from seedance.models.topology.checks import check_topology_spec
from seedance.validation import parse_mix
from seedance.cli._progress import Progress, progress_option
from seedance.cli._types import SEED, TIMEOUT, Integer, Number
from seedance.errors import SpecError



def _key_dist(text: str) -> dict[str, Any]:
    name, _, arg = text.partition(":")
    valid = "uniform, zipf[:S] (default S=1.1) or conflict[:P] (default P=0.5)"
    try:
        if name == "uniform" and not arg:
            return {"key_distribution": "uniform"}
        if name == "zipf":
            return {"key_distribution": "zipf", **({"zipf_s": float(arg)} if arg else {})}
        if name == "conflict":
            return {"key_distribution": "conflict", **({"conflict_rate": float(arg)} if arg else {})}
    except ValueError:
        raise SpecError("--key-dist", f"bad parameter in {text!r}", valid) from None
    raise SpecError("--key-dist", f"unknown key distribution {text!r}", valid)




@click.group(name="sim")
def command() -> None:
    """Simulate protocols in virtual time over a modelled GPU fabric, with seeded faults."""


@command.command(name="run")
@click.option("--protocol", default="raft", show_default=True, help="Registered protocol name.")
@click.option("--nodes", type=Integer(1, V.MAX_SIM_NODES, why=V.WHY_SIM_NODES), default=5, show_default=True,
              help=f"Protocol nodes (node i on device i), 1..{V.MAX_SIM_NODES} (consensus protocols: 1..128).")
@click.option("--topology", default=None, help="Preset name or YAML/JSON file; default: uniform switch fabric.")
@click.option("--hosts", type=Integer(1, V.MAX_DEVICES, why=V.WHY_DEVICES), default=None, help="Servers of a preset topology (default: fewest that fit).")
@click.option("--nodes-per-host", type=Integer(1, V.MAX_SIM_NODES), default=None,
              help="Place this many nodes on each server (default: node i on device i).")
@click.option("--clients", type=Integer(0, V.MAX_CLIENTS, why=V.WHY_CLIENTS), default=16, show_default=True,
              help="Closed-loop clients.")
@click.option("--duration", type=Number(0, V.MAX_SIM_DURATION_S, lo_open=True, why=V.WHY_SIM_DURATION), default=5.0,
              show_default=True, help=f"Simulated seconds (at most {V.MAX_SIM_DURATION_S:g} = 72 h; the run must fit the memory "
                   "estimate).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Root seed of every random choice.")
@click.option("--nemesis", default="", help="Comma-separated faults (see `seedance sim faults`); empty: none.")
@click.option("--faulty-fraction", type=Number(0, 1, lo_open=True), default=0.6, show_default=True,
              help="Fraction of the run with faults; the rest is the healed phase.")
@click.option("--workload", type=click.Choice(["closed", "open", "frame"]), default="closed", show_default=True,
              help="closed loop, open loop (--rate), or frame (--frame-rate bursts of --writes-per-frame writes and "
                   "a read).")
@click.option("--frame-rate", type=Number(0, 1000, lo_open=True), default=None, metavar="HZ",
              help="Frames per second per client (implies --workload frame; default 60 there).")
@click.option("--writes-per-frame", type=Integer(1, 10_000), default=None, metavar="N",
              help="Writes per frame burst (implies --workload frame; default 1).")
@click.option("--width", type=Integer(1, 1024), default=None, help="Pixel-grid width (grid protocols: sets "
              "--set width and --keys to width x height).")
@click.option("--height", type=Integer(1, 1024), default=None, help="Pixel-grid height (see --width).")
@click.option("--rate", type=Number(0, V.MAX_RATE_OPS_S, lo_open=True), default=1000.0, show_default=True, help="Open-loop arrivals per second.")
@click.option("--mix", default="0.5,0.4,0.1", show_default=True, help="read,write,cas fractions.")
@click.option("--keys", type=Integer(1, V.MAX_KEYS), default=8, show_default=True, help="Number of keys.")
@click.option("--key-dist", default="uniform", show_default=True, help="uniform | zipf[:S] | conflict[:P].")
@click.option("--op-timeout", type=TIMEOUT, default=0.5, show_default=True, help="Client timeout (s) -> info.")
@click.option("--value-size", type=Integer(0, V.MAX_VALUE_BYTES, why=V.WHY_VALUE_BYTES), default=0, show_default=True,
              help="Bytes per written value (0: small integers), as `real run --value-size`: entries, messages and "
                   "durable writes carry them.")
@click.option("--set", "settings", multiple=True, help="Protocol option KEY=VALUE (JSON value), repeatable.")
@click.option("--extra", default=None,
              help='Settings without a flag, as JSON by section, e.g. \'{"cpu": {"message_s": 5e-6}}\'.')
@click.option("--check/--no-check", default=True, show_default=True, help="Run the linearizability checker.")
@click.option("--check-timeout", type=TIMEOUT, default=30.0, show_default=True, help="Checker budget (s).")
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="Record the trace (--no-trace: no records, no trace.json; trace_sha256 is the empty trace's).")
@click.option("--trace-events", type=Integer(0, 10**12), default=1_000_000, show_default=True, metavar="N",
              help="Events of trace.json at most (the first N: a viewer loads about a million in seconds); 0: every "
                   "event. trace.msgpack keeps every record; `seedance trace export` renders any window of it.")
@click.option("--background", multiple=True, metavar="OP:SIZE@PERIOD",
              help="Training traffic among every device on the same links, e.g. allreduce:1GiB@0.2 (repeatable).")
@click.option("--host-profile", default=None, metavar="FILE",
              help="A measured host (`seedance real profile`): service-time distributions and shared cores.")
@click.option("--monitor/--no-monitor", default=True, show_default=True,
              help="Run the protocol's invariant monitor after every input; stop on a breach.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/sim", show_default=True,
              help="Directory for history.jsonl, trace.msgpack, trace.json, summary.json.")
@json_option
@progress_option
def run_command(protocol: str, nodes: int, topology: str | None, hosts: int | None, nodes_per_host: int | None,
                clients: int, duration: float,
                seed: int, nemesis: str, faulty_fraction: float, workload: str, frame_rate: float | None,
                writes_per_frame: int | None, width: int | None, height: int | None, rate: float, mix: str, keys: int,
                key_dist: str, op_timeout: float, value_size: int, settings: tuple[str, ...], extra: str | None, check: bool,
                check_timeout: float, trace: bool, trace_events: int, background: tuple[str, ...],
                host_profile: str | None, monitor: bool,
                out_dir: str, as_json: bool, show_progress: bool | None) -> int:
    """Run one seeded simulation; write its history, Chrome trace and summary to --out."""
    from seedance.models.protocols import registry
    from seedance.models.protocols.registry import check_protocol_config
    from seedance.provenance import run_metadata
    from seedance.sim import CpuConfig, NemesisConfig, SimConfig, StorageConfig, WorkloadConfig, write_outputs
    from seedance.sim.collector import skip_final_collection
    from seedance.sim.config import parse_extra

    registry.get(protocol)  # unknown protocol -> SpecError listing the valid names (exit 2)
    from seedance.sim import ceilings

    ceilings.check(protocol, nodes, duration, nodes_field="--nodes", duration_field="--duration")
    from seedance import faults as fault_table

    faults = fault_table.parse(nemesis, fault_table.SIM)  # same parsing as `real run --nemesis`
    more = parse_extra(extra)
    protocol_settings = parse_settings(settings)
    frame: dict[str, Any] = {}
    if frame_rate is not None or writes_per_frame is not None:
        workload = "frame"
    if workload == "frame":
        frame = {"frame_rate_hz": 60.0 if frame_rate is None else frame_rate,
                 "writes_per_frame": 1 if writes_per_frame is None else writes_per_frame}
    if width is not None or height is not None:
        grid = {"width": width or height, "height": height or width}
        protocol_settings = {**protocol_settings, **grid}
        keys = grid["width"] * grid["height"]
    config = SimConfig(
        protocol=protocol, nodes=nodes, duration_s=duration, seed=seed, topology=topology, topology_hosts=hosts,
        nodes_per_host=nodes_per_host,
        protocol_config=protocol_settings,
        workload=WorkloadConfig(mode=workload, clients=clients, rate_ops_s=rate, mix=parse_mix(mix), keys=keys,
                                op_timeout_s=op_timeout, **_key_dist(key_dist), **frame,
                                **({"value_bytes": value_size, "request_bytes": 64 + value_size} if value_size else {}),
                                **more.get("workload", {})),
        nemesis=NemesisConfig(faults=faults, faulty_fraction=faulty_fraction, **more.get("nemesis", {})),
        cpu=CpuConfig(**more.get("cpu", {})), storage=StorageConfig(**more.get("storage", {})),
        check=check, check_timeout_s=check_timeout, trace=trace, background=background, monitor=monitor,
        host_profile=host_profile,
    )
    check_protocol_config(protocol, dict(config.protocol_config), nodes)  # --set: unknown or bad options
    check_topology_spec("--topology", topology, hosts, nodes_field="--hosts")
    ceilings.check_memory(config)  # refused before it starts when the estimate exceeds MemAvailable
    ceilings.check_disk(config, str(out_dir))  # ... or when what it would write exceeds the free disk
    V.check_writable_dir("--out", out_dir)  # before any work: nothing half-written after an exit 2
    steps = Progress(show_progress, "sim run")
    result = _simulate_with_progress(config, steps)
    metadata = run_metadata(seed=seed, spec=config.describe())
    metadata["reproduce"] = result.reproduce
    steps.phase(f"writing history, trace and summary to {out_dir}")
    summary = write_outputs(result, Path(out_dir), metadata=metadata, chrome_events=trace_events or None)
    steps.done()
    skip_final_collection()  # the process exits after the report: no last traversal of the run's heap
    return _report(summary, result, protocol, duration, seed, out_dir, as_json)


def _simulate_with_progress(config: Any, steps: Progress) -> Any:
    """``simulate(config)`` with a progress bar in simulated seconds, then each phase after it (checking...)."""
    from seedance.sim import simulate

    bar = steps.bar(config.duration_s, unit="sim-s", desc="simulating",
                    fmt="{l_bar}{bar}| {n:.3f}/{total:.3f} sim-s [{elapsed}<{remaining}]")

    def progress(now: float) -> None:
        bar.update(now - bar.n)

    def phase(text: str) -> None:
        if bar is not None:
            bar.close()
        steps.phase(text)

    try:
        return simulate(config, progress=progress if bar is not None else None, phase=phase)
    finally:
        if bar is not None:
            bar.close()


def _report(summary: dict[str, Any], result: Any, protocol: str, duration: float, seed: int, out_dir: str,
            as_json: bool) -> int:
    """Print the run's summary (one JSON object with --json); exit 1 on a safety violation, naming how to
    reproduce it."""
    if as_json:
        emit_json(summary)
    else:
        click.echo(f"{protocol}: {summary['ops_ok']} ok / {summary['ops_failed']} fail / {summary['ops_info']} info "
                   f"in {duration} sim-s ({summary['throughput_ops_s']:.0f} ops/s, p50 "
                   f"{summary['latency_ms_p50'] or 0:.3f} ms, p99 {summary['latency_ms_p99'] or 0:.3f} ms); "
                   f"linearizable: {summary['linearizable']}; progress after heal: {summary['progress_after_heal']}")
        click.echo(f"trace sha256 {summary['trace_sha256']}; files in {out_dir}")
    if summary["linearizable"] is False or result.violations:
        for at, problem in result.violations[:3]:
            click.echo(f"seedance: invariant breach at t={at:.6f} s (seed {seed}): {problem}", err=True)
        click.echo(f"seedance: safety violation; reproduce with: {result.reproduce}", err=True)
        return 1
    return 0


@command.command(name="faults")
@json_option
def faults_command(as_json: bool) -> None:
    """List every fault kind: name, runtimes that apply it, what it does, parameters and their draws."""
    from seedance import faults

    if as_json:
        emit_json({"faults": list(faults.names(faults.SIM)), "table": [f.to_dict() for f in faults.TABLE]})
    else:
        click.echo(faults.table_text())


from seedance.cli.train import sim_train as _sim_train  # noqa: E402  (validate-and-commit training, issue F)

command.add_command(_sim_train)
