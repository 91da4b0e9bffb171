"""``seedance real``: the same protocol nodes in real OS processes (TCP, fsync, torch.distributed).

Sub-commands: ``run`` (a protocol under client load, optionally with SIGKILL faults, judged by the checker),
``calibrate`` (measure point-to-point and collective times, fit a topology file) and ``validate`` (measured vs
predicted collective times). Heavy imports happen inside the commands so ``seedance --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from seedance import validation as V
from seedance.cli._common import emit_json, json_option, parse_settings
from seedance.models.topology.checks import check_topology_spec
from seedance.validation import parse_mix
from seedance.cli._types import SEED, TIMEOUT, Integer, Number
from seedance.errors import SpecError





def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise SpecError(name, f"{value} is not {'non-negative' if allow_zero else 'positive'}",
                        f"a {'non-negative' if allow_zero else 'positive'} number")


@click.group(name="real")
def command() -> None:
    """Run protocols, calibrate and validate on real processes (gloo here, NCCL when CUDA is available)."""


@command.command(name="run")
@click.option("--protocol", default="raft", show_default=True,
              help="Registered protocol name, or module:ATTR naming a ProtocolSpec.")
@click.option("--nodes", type=Integer(1), default=3, show_default=True,
              help="Node processes (at most 4 per CPU core, 5..64).")
@click.option("--clients", type=Integer(1, V.MAX_CLIENTS, why=V.WHY_CLIENTS), default=8, show_default=True,
              help="Closed-loop clients.")
@click.option("--duration", type=Number(0, V.MAX_REAL_DURATION_S, lo_open=True), default=10.0, show_default=True,
              help="Wall-clock seconds of load.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seeds the workload, kills and node RNGs.")
@click.option("--kill-rate", type=Number(0, 1000), default=0.0, show_default=True,
              help="SIGKILLs per second of random node processes (Poisson), each restarted after --restart-delay.")
@click.option("--restart-delay", type=Number(0, 60), default=0.3, show_default=True, help="Seconds before a restart.")
@click.option("--nemesis", default="",
              help="Comma-separated faults, the simulator's names (see `seedance sim faults`, runtime real); "
                   "empty: none.")
@click.option("--faulty-fraction", type=Number(0, 1, lo_open=True), default=0.6, show_default=True,
              help="Fraction of the load with faults (kills included); the rest is the healed phase.")
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="Record the Chrome trace (--no-trace: no per-event records, no trace.json).")
@click.option("--mix", default="0.5,0.4,0.1", show_default=True, help="read,write,cas fractions.")
@click.option("--keys", type=Integer(1, V.MAX_KEYS), default=8, show_default=True, help="Number of keys.")
@click.option("--frame-rate", type=Number(0, 1000, lo_open=True), default=None, metavar="HZ",
              help="Frame clients: per frame a burst of --writes-per-frame writes then one read (default: closed loop).")
@click.option("--writes-per-frame", type=Integer(1, 10_000), default=None, metavar="N",
              help="Writes per frame burst (implies frame clients at 60 Hz unless --frame-rate).")
@click.option("--width", type=Integer(1, 1024), default=None, help="Pixel-grid width (grid protocols: sets "
              "--set width and --keys to width x height).")
@click.option("--height", type=Integer(1, 1024), default=None, help="Pixel-grid height (see --width).")
@click.option("--value-size", type=Integer(0, V.MAX_VALUE_BYTES, why=V.WHY_VALUE_BYTES), default=0, show_default=True,
              help="Bytes per written value (0: small integers).")
@click.option("--op-timeout", type=TIMEOUT, default=1.0, show_default=True, help="Client timeout (s) -> info.")
@click.option("--set", "settings", multiple=True, help="Protocol option KEY=VALUE (JSON value), repeatable.")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address the nodes listen on; widen (e.g. 0.0.0.0) only on a trusted network.")
@click.option("--warmup", is_flag=True, help="Start the load only after a first write commits (excludes election).")
@click.option("--check/--no-check", default=True, show_default=True, help="Run the linearizability checker.")
@click.option("--check-timeout", type=TIMEOUT, default=30.0, show_default=True, help="Checker budget (s).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/real", show_default=True,
              help="Directory for history.jsonl, trace.json, summary.json and node logs.")
@json_option
def run_command(protocol: str, nodes: int, clients: int, duration: float, seed: int, kill_rate: float,
                restart_delay: float, nemesis: str, faulty_fraction: float, trace: bool, mix: str, keys: int,
                frame_rate: float | None, writes_per_frame: int | None, width: int | None, height: int | None,
                value_size: int, op_timeout: float,
                settings: tuple[str, ...], bind: str, warmup: bool, check: bool, check_timeout: float, out_dir: str,
                as_json: bool) -> int:
    """Run a protocol on --nodes real processes under client load; judge the history."""
    from seedance.models.protocols.registry import check_protocol_config
    from seedance.real.clients import Workload
    from seedance.real.node import resolve_protocol
    from seedance.real.run import run_real

    resolve_protocol(protocol)  # unknown protocol -> SpecError listing the valid names (exit 2)
    if width is not None or height is not None:  # a pixel grid: its size as protocol options, one key per pixel
        settings = (*settings, f"width={width or height}", f"height={height or width}")
        keys = (width or height) * (height or width)
    V.integer("--nodes", nodes, lo=1, hi=V.max_real_nodes(), why=V.why_real_nodes())
    V.ip_address("--bind", bind)
    check_protocol_config(protocol, parse_settings(settings), nodes)  # --set: unknown or bad options
    if clients < 1 or keys < 1:
        raise SpecError("--clients" if clients < 1 else "--keys", "must be at least 1", "a positive integer")
    _positive("--duration", duration)
    _positive("--kill-rate", kill_rate, allow_zero=True)
    _positive("--restart-delay", restart_delay, allow_zero=True)
    from seedance import faults as fault_table

    fault_names = fault_table.parse(nemesis, fault_table.REAL)  # the simulator's names and parsing
    if not (0.0 < faulty_fraction <= 1.0):
        raise SpecError("--faulty-fraction", f"{faulty_fraction!r} is out of range", "a fraction in (0, 1]")
    _positive("--op-timeout", op_timeout)
    _positive("--value-size", value_size, allow_zero=True)
    read, _, cas = parse_mix(mix)
    frames = {}
    if frame_rate is not None or writes_per_frame is not None:
        frames = {"frame_rate_hz": frame_rate or 60.0, "writes_per_frame": writes_per_frame or 1}
    workload = Workload(num_clients=clients, keys=keys, read_fraction=read, cas_fraction=cas,
                        value_size_bytes=value_size, op_timeout_s=op_timeout, **frames)
    V.check_writable_dir("--out", out_dir)  # before any process starts
    summary = run_real(protocol=protocol, nodes=nodes, clients=clients, duration_s=duration, seed=seed,
                       out=Path(out_dir), kill_rate=kill_rate, restart_delay_s=restart_delay,
                       config=parse_settings(settings), workload=workload, bind_host=bind, check=check,
                       check_timeout_s=check_timeout, warmup=warmup, nemesis=fault_names,
                       faulty_fraction=faulty_fraction, trace=trace, argv=["real", *sys.argv[sys.argv.index("real") + 1:]]
                       if "real" in sys.argv else None)
    if as_json:
        emit_json(summary)
    else:
        click.echo(f"{protocol} (real, {nodes} processes): {summary['ops_ok']} ok / {summary['ops_failed']} fail / "
                   f"{summary['ops_info']} info in {duration} s ({summary['throughput_ops_s']:.0f} ops/s, p50 "
                   f"{summary['latency_ms_p50'] or 0:.2f} ms, p99 {summary['latency_ms_p99'] or 0:.2f} ms); "
                   f"{summary['kills']} SIGKILLs, {summary['faults_applied']} fault windows; "
                   f"linearizable: {summary['linearizable']}; progress after heal: {summary['progress_after_heal']} "
                   f"({summary['ops_ok_healed']} ok)")
        click.echo(f"files in {out_dir}")
    if summary["linearizable"] is False:
        click.echo(f"seedance: safety violation; reproduce with: {summary['reproduce']}", err=True)
        return 1
    return 0


@command.command(name="calibrate")
@click.option("--world-size", type=Integer(1), required=True, help="Ranks (local processes) to measure.")
@click.option("--sizes", default="4KiB:16MiB:4", show_default=True,
              help="Calibration sizes START:END[:FACTOR] (nccl-tests' -b/-e/-f); the midpoints between them are "
                   "held out for validate.")
@click.option("--reps", type=Integer(1, 10_000), default=3, show_default=True, help="Timed rounds per repeat.")
@click.option("--warmups", type=Integer(0, 10_000), default=2, show_default=True,
              help="Untimed runs before each measurement.")
@click.option("--repeats", type=Integer(1, 100), default=3, show_default=True,
              help="Full measurements in fresh processes (>= 3 for an interval); samples are pooled.")
@click.option("--min-sample-ms", type=Number(0, 60_000), default=100.0, show_default=True,
              help="Each sample is a loop of back-to-back operations lasting at least this long (0: ~1 MiB).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True,
              help="Topology file to write (.yaml/.yml or .json); a FILE.calibration.json sidecar goes beside it.")
@json_option
def calibrate_command(world_size: int, sizes: str, reps: int, warmups: int, repeats: int, min_sample_ms: float,
                      out_file: str, as_json: bool) -> None:
    """Measure p2p and collective times with torch.distributed; fit a topology file for --topology."""
    from seedance.models.units import parse_size_range
    from seedance.real.calibrate import calibrate

    V.integer("--world-size", world_size, lo=1, hi=V.max_real_nodes(), why=V.why_real_nodes())
    sizes_list = parse_size_range(sizes, field="--sizes")
    if Path(out_file).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise SpecError("--out", f"{out_file!r} has no .yaml, .yml or .json suffix", "a topology file name")
    V.check_writable_file("--out", out_file)  # before minutes of measuring
    result = calibrate(world_size, sizes_list, Path(out_file), reps=reps,
                       warmups=warmups, repeats=repeats, min_sample_s=min_sample_ms / 1e3)
    summary = {"topology": out_file, "world_size": world_size, "backend": result["backend"], "fits": result["fits"],
               "pairs": [{k: p[k] for k in ("src", "dst", "bandwidth_GBps", "latency_us", "bandwidth_GBps_ci")}
                         for p in result["pairs"]]}
    if as_json:
        emit_json(summary)
    else:
        for p in summary["pairs"]:
            click.echo(f"{p['src']}->{p['dst']}: {p['bandwidth_GBps']:.3f} GB/s, {p['latency_us']:.1f} us")
        for name, fit in result["fits"].items():
            click.echo(f"{name}: {fit['algorithm']}, efficiency eta={fit['eta']:.3f}, per-message latency "
                       f"kappa={fit['kappa_us']:.1f} us")
        click.echo(f"wrote {out_file}")


@command.command(name="validate")
@click.option("--world-size", type=Integer(1), required=True, help="Ranks (local processes).")
@click.option("--topology", "topology_file", type=click.Path(exists=True, dir_okay=False), required=True,
              help="A calibrated topology file (from `seedance real calibrate`).")
@click.option("--sizes", default=None, help="Calibration sizes START:END[:FACTOR] (default: the calibration's).")
@click.option("--reps", type=Integer(1, 10_000), default=None,
              help="Timed rounds per repeat (default: the calibration's).")
@click.option("--warmups", type=Integer(0, 10_000), default=None, help="Untimed runs (default: the calibration's).")
@click.option("--repeats", type=Integer(1, 100), default=None,
              help="Full measurements (default: the calibration's, 3).")
@click.option("--min-sample-ms", type=Number(0, 60_000), default=None, help="Loop length per sample (default: the calibration's).")
@click.option("--figure", "figure_stem", type=click.Path(dir_okay=False), default="out/real/validate",
              show_default=True, help="Figure path without suffix (writes .pdf and .png).")
@json_option
def validate_command(world_size: int, topology_file: str, sizes: str | None, reps: int | None, warmups: int | None,
                     repeats: int | None, min_sample_ms: float | None, figure_stem: str, as_json: bool) -> None:
    """Run the calibration's schedule again and predict it with the cost model; held-out sizes are the headline."""
    from seedance.models.units import parse_size_range
    from seedance.real.validate import save_figure, validate

    V.integer("--world-size", world_size, lo=1, hi=V.max_real_nodes(), why=V.why_real_nodes())
    check_topology_spec("--topology", topology_file)
    sizes_list = parse_size_range(sizes, field="--sizes") if sizes is not None else None
    V.check_writable_file("--figure", Path(str(figure_stem) + ".pdf"))  # before minutes of measuring
    result = validate(world_size, Path(topology_file),
                      sizes_list, reps=reps,
                      warmups=warmups, repeats=repeats,
                      min_sample_s=None if min_sample_ms is None else min_sample_ms / 1e3)
    result["figure"] = [str(p) for p in save_figure(result, Path(figure_stem))]
    if as_json:
        emit_json(result)
    else:
        for r in result["rows"]:
            click.echo(f"{r['repeat']} {r['collective']:>10} {r['size_bytes']:>10} B "
                       f"{'held-out' if r['heldout'] else 'fitted  '}  measured {r['measured_s'] * 1e3:9.3f} ms  "
                       f"model {r['model_s'] * 1e3:9.3f} ms  error {r['model_rel_error'] * 100:+6.1f} %")
        def pct(key: str) -> str:
            value = result.get(key)
            return "n/a" if value is None else f"{100 * value:.1f} %"

        half = result.get("repeat_halfwidth_pp")
        click.echo(f"model-only median |error| at held-out sizes >= 1 MiB: {pct('median_abs_rel_error_heldout')} "
                   f"(+/- {'n/a' if half is None else f'{half:.1f}'} pp across {result['repeats']} repeats); "
                   f"< 1 MiB: {pct('median_abs_rel_error_heldout_lt_1MiB')}; reproducibility at calibrated sizes "
                   f"{pct('median_abs_rel_error_calibrated')}")
        click.echo(f"median |error| >= 1 MiB: {pct('median_abs_rel_error_ge_1MiB')} "
                   f"(cost model alone {pct('median_abs_model_rel_error_ge_1MiB')}, "
                   f"measurement CI half-width {pct('median_ci_half_width_ge_1MiB')}); "
                   f"< 1 MiB: {pct('median_abs_rel_error_lt_1MiB')} "
                   f"(model alone {pct('median_abs_model_rel_error_lt_1MiB')}); figure {result['figure'][0]}")


from seedance.cli.train import real_train as _real_train  # noqa: E402  (validate-and-commit training, issue F)

command.add_command(_real_train)

from seedance.cli.consensus import soak as _soak, test_consensus as _test_consensus  # noqa: E402  (issue T)

command.add_command(_test_consensus)
command.add_command(_soak)


@command.command(name="profile")
@click.option("--nodes", type=Integer(1, 16), default=3, show_default=True, help="Raft processes for the CPU run.")
@click.option("--clients", type=Integer(1, V.MAX_CLIENTS, why=V.WHY_CLIENTS), default=8, show_default=True,
              help="Closed-loop clients of the CPU run.")
@click.option("--duration", type=Number(0.5, 600), default=3.0, show_default=True, help="Seconds of the CPU run.")
@click.option("--runs", type=Integer(1, 20), default=3, show_default=True,
              help="CPU runs pooled into the fit (seeds --seed, --seed + 1, ...): one run's luck is not the model's.")
@click.option("--seed", type=SEED, default=1, show_default=True)
@click.option("--dir", "work_dir", type=click.Path(file_okay=False), default=None,
              help="Where fsync is measured and the CPU run writes (default: beside --out).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), required=True,
              help="Host profile to write (.yaml/.yml/.json), for `sim run --host-profile`.")
@json_option
def profile_command(nodes: int, clients: int, duration: float, runs: int, seed: int, work_dir: str | None,
                    out_file: str, as_json: bool) -> None:
    """Measure this machine's service-time distributions (fsync, loopback, CPU per input, client CPU per op)."""
    from seedance.experiments.host_profile import profile_host
    from seedance.files import atomic_write

    if Path(out_file).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise SpecError("--out", f"{out_file!r} has no .yaml, .yml or .json suffix", "a host profile file name")
    V.check_writable_file("--out", out_file)  # before seconds of measuring
    where = Path(work_dir) if work_dir else Path(out_file).resolve().parent / (Path(out_file).stem + ".work")
    V.check_writable_dir("--dir", where)
    profile = profile_host(where, nodes=nodes, clients=clients, duration_s=duration, seed=seed, runs=runs)
    Path(out_file).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(out_file), profile.to_yaml().encode())
    data = profile.to_dict()
    if as_json:
        emit_json({"profile": out_file, **data})
        return
    click.echo(f"cores {profile.cores}; fsync median {profile.fsync.median_s * 1e3:.3f} ms (sigma "
               f"{profile.fsync.sigma:.2f}); loopback one-way {profile.loopback.median_s * 1e6:.1f} us; client "
               f"{profile.client_per_op.median_s * 1e6:.0f} us/op; frame I/O {profile.io_per_input.median_s * 1e6:.0f}"
               f" us/input")
    for kind, dist in profile.cpu.items():
        if dist.median_s:
            click.echo(f"  {kind}: median {dist.median_s * 1e6:.0f} us, sigma {dist.sigma:.2f}")
    if profile.wake is not None and profile.client_wake is not None:
        per_item = (", ".join(f"{k} {v.median_s * 1e6:.0f}" for k, v in profile.io_per_kind.items())
                    if profile.io_per_kind else f"{profile.io_per_input.median_s * 1e6:.0f}")
        click.echo(f"amortisation: node {profile.wake.median_s * 1e6:.0f} us per wake-up + per item ({per_item}) us;"
                   f" client {profile.client_wake.median_s * 1e6:.0f} us per wake-up")
    if profile.write is not None and profile.restart is not None:
        click.echo(f"write without fsync median {profile.write.median_s * 1e6:.0f} us; node restart (spawn to "
                   f"serving) median {profile.restart.median_s * 1e3:.1f} ms")
    runs_seen = profile.measured.get("raft_runs") or []
    if runs_seen:
        click.echo(f"CPU runs pooled: {len(runs_seen)}, throughput "
                   + " / ".join(f"{r['throughput_ops_s']:.0f}" for r in runs_seen) + " ops/s")
    if profile.tenants is not None:
        click.echo(f"other tenants: {profile.tenants.busy_cores:.2f} busy cores during the run (share "
                   f"{profile.tenants.share:.2f}); load average {profile.measured.get('loadavg_1min', 0.0):.2f}")
    calibration = profile.measured.get("cpu_calibration")
    if calibration:
        click.echo(f"CPU scale calibrated to the profile run's {calibration['real_ops_s']:.0f} ops/s: "
                   f"x{calibration['factor']:.2f} (simulated {calibration['sim_ops_s_before']:.0f} -> "
                   f"{calibration['sim_ops_s']:.0f} ops/s)")
    if profile.handback is not None:
        click.echo(f"storage thread -> loop under load: median {profile.handback.median_s * 1e6:.0f} us, tail "
                   f"{profile.handback.cap_s * 1e6:.0f} us")
    if profile.handover is not None:
        click.echo(f"loop -> storage thread under load: median {profile.handover.median_s * 1e6:.0f} us, tail "
                   f"{profile.handover.cap_s * 1e6:.0f} us")
    stalls = profile.measured.get("disk_stalls") or {}
    if stalls.get("events") is not None:
        lengths = ", ".join(f"{d * 1e3:.0f}" for d in stalls["durations_s"])
        click.echo(f"disk stalls: {stalls['events']} in {stalls['seconds']:.0f} s of runs ({stalls['fsyncs_held']} "
                   f"fsyncs held over {stalls['factor']:.0f}x their median)" + (f", {lengths} ms" if lengths else ""))
    spells = profile.measured.get("spells") or {}
    if profile.spell is not None:
        click.echo(f"slow spells: latency windows' sd {spells['real']['sd']:.3f} (simulated with the spells "
                   f"{(spells.get('simulated_with_spell') or {}).get('sd') or float('nan'):.3f}); factor sigma "
                   f"{profile.spell.sigma:.3f}, tau {profile.spell.tau_s * 1e3:.0f} ms")
    elif spells.get("real"):
        click.echo(f"slow spells: none fitted (latency windows' sd {spells['real']['sd']:.3f})")
    click.echo(f"wrote {out_file}")


@command.command(name="gpu-check")
@click.option("--out", type=click.Path(file_okay=False), default="out/gpu-check", show_default=True,
              help="Directory for gpu-check.json, the figures and summary.txt.")
@click.option("--train-seconds", type=Number(5, 600), default=20.0, show_default=True,
              help="Wall-clock seconds of each training run (F2, then F4).")
@click.option("--no-profile", is_flag=True, help="Skip the host profile.")
def gpu_check_command(out: str, train_seconds: float, no_profile: bool) -> None:
    """What this project's GPU paths do on this CUDA server, in one command (`make gpu-check`, ~5 min); without
    CUDA it says so in one line and exits 0."""
    from seedance import validation as V
    from seedance.experiments.gpu_check import run_gpu_check

    V.check_writable_dir("--out", out)  # before anything, CUDA or not: an exit 2 leaves nothing half-written
    result = run_gpu_check(Path(out), train_s=train_seconds, profile=not no_profile)
    if result is not None and not all(r["passed"] for r in result["training"].values()):
        raise SystemExit(1)
