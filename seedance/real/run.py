"""One real run: launch nodes, drive clients, inject SIGKILLs, then judge the history (``seedance real run``).

Rules (issue D item 2; the simulator's summary format):

* The run directory gets ``history.jsonl`` (seedance.history.events format), ``trace.json`` (Chrome trace),
  ``summary.json`` and one ``node-<i>.log`` per node. The summary has the simulator's keys plus ``"backend": "real"``.
* Phases, as in the simulator: with any fault (``kill_rate`` > 0 or a ``nemesis`` list) the first
  ``faulty_fraction`` (0.6) of the load is the faulty phase; then every fault is removed (rules cleared, paused
  nodes continued, dead nodes restarted: :meth:`seedance.real.nemesis.RealNemesis.heal`) and the rest of the load
  is the healed phase. After the load, with every node up, a final read of every key (process 1,000,000 and up)
  makes an acknowledged write lost at any point visible to the checker; ``final_reads`` says how many keys were read.
* ``nemesis`` takes the simulator's fault names (those :mod:`seedance.faults` marks ``real``); the schedule is drawn
  from the simulator's nemesis generator, so it equals the simulated run's for the same seed, nodes and duration.
* ``kill_rate`` is SIGKILLs per second in the faulty phase: a Poisson process drawn from the seed picks a random
  live node, kills its process group and restarts it (a new incarnation, rebuilt from the protocol factory and its
  durable state) after ``restart_delay_s``.
* Summary keys shared with the simulator: ``healed_at_s`` (on the history's clock: seconds since the launcher
  started; without faults, when the load started), ``ops_ok_healed`` (ok operations completed at or after it,
  bookkeeping processes excluded), ``progress_after_heal`` (it is positive: real runs have no fault-free baseline
  to recover towards); also ``first_ok_after_heal_s`` (heal to the first ok) and ``throughput_healed_ops_s``. ``trace_sha256`` hashes the merged trace's canonical records
  (:meth:`seedance.tracing.Trace.sha256`); with ``trace=False`` (``--no-trace``) nothing is recorded, no
  ``trace.json`` is written, and it is the empty trace's hash.
* The same checker as the simulator's judges the history (key-value model). Nothing here knows the protocol.
* ``warmup`` (``--warmup``): one write must commit before the load phase starts (so throughput excludes the first
  election); it is in the history (process 2,000,000) but not in the summary's counts.
* Timing (``duration``) is wall-clock, so real runs do not reproduce bit for bit; the seed fixes the workload and
  the kill schedule's draws, and the summary records the command that reruns it.
* CPU over the load window: ``client_cpu_s`` (this process: the clients, the nemesis) and ``node_cpu_s`` (the node
  processes, every thread, every incarnation: :meth:`LocalLauncher.cpu_s`); the simulator's ``cpu_s`` is the same
  sum of its modelled cores' work, so the two say whether the model spends the CPU the processes do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hashlib
import json
import logging
import os
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seedance import faults
from seedance.history.events import Event, ReplicaEvent, merge_by_time, summarize
from seedance.history.jsonl import write_jsonl
from seedance.history.summary import protocol_summary
from seedance.errors import SpecError
from seedance.faults import FaultWindow, draw_schedule
from seedance.provenance import reproduce_command, run_metadata
from seedance.real import trace as trace_mod
from seedance.real.clients import ClientPool, Workload
from seedance.real.launcher import LocalLauncher
from seedance.real.nemesis import RealNemesis
from seedance.files import atomic_write
from seedance.real.trace import TraceRecorder

log = logging.getLogger("seedance.real.run")

FINAL_READ_PROCESS = 1_000_000
TRACE_ENV = "SEEDANCE_TRACE"  # "0": node processes record no trace
PYPROFILE_ENV = "SEEDANCE_PYPROFILE"  # a directory: each process's cProfile (see _client_profiler, node.main)


def nemesis_rng(seed: int) -> np.random.Generator:
    """The schedule's generator: the simulator's (fourth child of the root seed), so both draw the same windows."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3])


def judge(events: list[Event], timeout_s: float = 30.0, model: str = "kv") -> bool | str:
    """The shared linearizability checker's verdict (the protocol's model; ``"unknown"`` if it gave up)."""
    try:
        from seedance.history.linearizability import check
    except ImportError:  # the checker is not installed in this checkout
        log.warning("seedance.history.linearizability is missing: verdict 'unknown'")
        return "unknown"
    result = check(events, model=model, timeout_s=timeout_s) if _accepts_timeout(check) else check(events, model=model)
    valid = result.get("valid") if isinstance(result, Mapping) else getattr(result, "valid", result)
    return valid if isinstance(valid, bool) else "unknown"


def _accepts_timeout(fn: Any) -> bool:
    import inspect

    try:
        return "timeout_s" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _client_profiler() -> Any:
    """SEEDANCE_PYPROFILE=DIR: a cProfile of this (the clients') process over the load phase, written to
    ``DIR/client-PID.prof`` (node processes write ``DIR/node-RANK-PID.prof`` at their stop)."""
    if not os.environ.get(PYPROFILE_ENV):
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


async def _watchdog(launcher: LocalLauncher) -> None:
    while True:
        launcher.raise_if_failed()
        await asyncio.sleep(0.1)


async def _drive(launcher: LocalLauncher, workload: Workload, duration_s: float, seed: int, kill_rate: float,
                 restart_delay_s: float, counts: dict[str, Any], trace: TraceRecorder,
                 warmup: bool = False, schedule: list[FaultWindow] | None = None,
                 faulty_end_s: float = 0.0) -> list[Event]:
    from seedance.real.node import resolve_protocol

    pool = ClientPool(num_nodes=launcher.num_nodes, lookup=launcher.addresses.lookup, key=launcher.key,
                      workload=workload, seed=seed, t0_monotonic=launcher.t0_monotonic, trace=trace,
                      routing=resolve_protocol(launcher.protocol).routing)
    nemesis = RealNemesis(launcher, schedule or [], faulty_end_s=faulty_end_s, trace=trace,
                          restart_delay_s=restart_delay_s)
    faulty = kill_rate > 0 or bool(schedule)
    watchdog = asyncio.ensure_future(_watchdog(launcher))
    # the clients run in this process: freeze what it already holds (an experiment's earlier rounds, the caller's
    # data), so the load generator's collections scan the run's own objects only. Unfrozen, the oldest
    # generation's collections of a fresh process took 118-135 ms, three per 3 s run at 32 clients, each stalling
    # every client (the protocol's throughput does not contain them), and how many landed in a run depended on the
    # caller's heap; frozen, none in a run (32 clients: 3,454 / 2,648 ops/s unfrozen, 4,142 / 4,862 frozen)
    froze = not gc.get_freeze_count()  # a caller that froze its own heap keeps it as it was
    if froze:
        gc.collect()
        gc.freeze()
    try:
        if warmup:
            await pool.warm_up()
        t_start = time.monotonic()
        cpu_start = time.process_time()
        node_cpu_start = launcher.cpu_s()
        counts["load_start_s"] = t_start - launcher.t0_monotonic
        # how long each node's protocol had run when the load started (its first election is under way)
        started = [launcher.started_monotonic(rank) for rank in range(launcher.num_nodes)]
        counts["node_lead_s"] = [None if s is None else t_start - s for s in started]
        if launcher.store_up_monotonic is not None:  # the nodes were spawned after it (a test checks the order)
            counts["store_up_s"] = launcher.store_up_monotonic - launcher.t0_monotonic
        profiler = _client_profiler()
        load = asyncio.ensure_future(pool.run(duration_s))
        tasks = [load]
        if faulty:
            tasks.append(asyncio.ensure_future(nemesis.run(t_start)))
        if kill_rate > 0:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
            tasks.append(asyncio.ensure_future(nemesis.kill_loop(kill_rate, rng, t_start)))
        phase = asyncio.gather(*tasks)
        done, _ = await asyncio.wait([phase, watchdog], return_when=asyncio.FIRST_COMPLETED)
        if watchdog in done:
            phase.cancel()
            watchdog.result()  # raises NodeFailure
        await phase
        t_end = time.monotonic()
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(Path(os.environ[PYPROFILE_ENV]) / f"client-{os.getpid()}.prof")
        counts["load_end_s"] = t_end - launcher.t0_monotonic
        counts["load_window_monotonic_s"] = [t_start, t_end]  # for meters outside the run (SpeedMeter.within)
        counts["client_cpu_s"] = time.process_time() - cpu_start  # the client process (this one) during the load
        counts["node_cpu_s"] = launcher.cpu_s() - node_cpu_start  # the node processes, every incarnation
        if faulty:
            await nemesis.heal()  # already done at the end of the faulty phase; a no-op then
            counts["healed_at_s"] = nemesis.healed_at_monotonic - launcher.t0_monotonic
        else:
            counts["healed_at_s"] = counts["load_start_s"]
        await asyncio.to_thread(launcher.wait_ready, 30.0)
        counts["final_reads"] = await pool.final_reads(within_s=max(5.0, 10 * workload.op_timeout_s))
    finally:
        if froze:
            gc.unfreeze()
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)
        await nemesis.close()
        await pool.close()
        counts.update(kills=nemesis.kills, restarts=nemesis.restarts, faults_applied=nemesis.applied,
                      messages=nemesis.control.totals())
    return pool.events


def healed_summary(events: list[Event], healed_at_s: float, load_end_s: float) -> dict[str, Any]:
    """Liveness in the healed phase (the simulator's keys, the first ok after the heal, the healed throughput).

    ``ops_ok_healed``: operations (final reads and warm-up excluded) that completed ``ok`` at or after
    ``healed_at_s``; ``first_ok_after_heal_s``: from the heal to the first of them (None if none);
    ``throughput_healed_ops_s``: ``ops_ok_healed`` over the healed part of the load phase.
    """
    oks = sorted(e.time for e in events if e.type.value == "ok" and e.process < FINAL_READ_PROCESS
                 and e.time >= healed_at_s)
    span = load_end_s - healed_at_s
    return {"healed_at_s": healed_at_s, "ops_ok_healed": len(oks), "progress_after_heal": bool(oks),
            "first_ok_after_heal_s": oks[0] - healed_at_s if oks else None,
            "throughput_healed_ops_s": len(oks) / span if span > 0 else None}


def run_real(*, protocol: str, nodes: int, clients: int, duration_s: float, seed: int, out: Path,
             kill_rate: float = 0.0, restart_delay_s: float = 0.3, config: Mapping[str, Any] | None = None,
             workload: Workload | None = None, bind_host: str = "127.0.0.1", check: bool = True,
             argv: list[str] | None = None, extra_env: Mapping[str, str] | None = None,
             check_timeout_s: float = 30.0, warmup: bool = False, nemesis: tuple[str, ...] = (),
             faulty_fraction: float = 0.6, window_s: tuple[float, float] | None = None, gap_s: float | None = None,
             trace: bool = True) -> dict[str, Any]:
    """Run ``protocol`` on ``nodes`` real processes and return the summary (also written to ``out``)."""
    nemesis = faults.parse(nemesis, faults.REAL)
    if not 0.0 < faulty_fraction <= 1.0:
        raise SpecError("--faulty-fraction", f"{faulty_fraction!r} is out of range", "a fraction in (0, 1]")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("node-*"), *out.glob("launcher.trace.jsonl")]:  # a previous run's state would be recovered, not started fresh
        if stale.is_dir():
            import shutil

            shutil.rmtree(stale)
        else:
            stale.unlink()
    workload = workload or Workload(num_clients=clients)
    counts: dict[str, Any] = {"kills": 0, "restarts": 0}
    faulty = kill_rate > 0 or bool(nemesis)
    faulty_end_s = faulty_fraction * duration_s if faulty else 0.0
    schedule = draw_schedule(nemesis, num_nodes=nodes, faulty_end_s=faulty_end_s, rng=nemesis_rng(seed),
                             window_s=window_s, gap_s=gap_s) if nemesis else []
    spec = {"protocol": protocol, "nodes": nodes, "clients": clients, "duration_s": duration_s,
            "kill_rate": kill_rate, "config": dict(config or {}), "workload": workload.__dict__,
            "nemesis": list(nemesis), "faulty_fraction": faulty_fraction}
    with LocalLauncher(protocol=protocol, num_nodes=nodes, run_dir=out, seed=seed, config=config or {},
                       bind_host=bind_host, extra_env={**(extra_env or {}), **({} if trace else {TRACE_ENV: "0"})}
                       ) as launcher:
        launcher.start_all()
        launcher.wait_ready()
        recorder = TraceRecorder(out / "launcher.trace.jsonl" if trace else None, launcher.t0_monotonic)
        try:
            events = asyncio.run(_drive(launcher, workload, duration_s, seed, kill_rate, restart_delay_s, counts,
                                        recorder, warmup, schedule, faulty_end_s))
        finally:
            recorder.close()
    replicas = read_observations(out)
    history_path = write_jsonl(merge_by_time(events, replicas) if replicas else events, out / "history.jsonl")
    if trace:
        trace_sha = trace_mod.merge([*out.glob("node-*.trace.jsonl"), out / "launcher.trace.jsonl"],
                                    out / "trace.json", nodes, {"backend": "real", "protocol": protocol, "seed": seed})
    else:
        trace_sha = hashlib.sha256().hexdigest()  # the empty trace's, as the simulator reports with --no-trace
    summary: dict[str, Any] = {"protocol": protocol, "seed": seed, "backend": "real"}
    summary.update(summarize(events, duration_s, exclude=lambda process: process >= FINAL_READ_PROCESS))
    from seedance.real.node import resolve_protocol

    model = resolve_protocol(protocol).checker
    summary["linearizable"] = judge(events, check_timeout_s, model) if check and model else "unknown"
    if replicas:
        summary["replica_events"] = len(replicas)
    summary.update(protocol_summary(resolve_protocol(protocol), events, replicas, nodes))
    summary.update(healed_summary(events, counts["healed_at_s"], counts["load_end_s"]))
    summary.update({"trace_sha256": trace_sha, "history": str(history_path),
                    "trace": str(out / "trace.json") if trace else None,
                    "nodes": nodes, "clients": clients, "duration_s": duration_s, "kill_rate": kill_rate,
                    "kills": counts["kills"], "restarts": counts["restarts"],
                    "nemesis": list(nemesis), "faults": [w.name for w in schedule],
                    # the windows themselves, on the load's clock (the simulator's result has them as `faults`)
                    "fault_windows": [dataclasses.asdict(w) for w in schedule],
                    "faults_applied": counts.get("faults_applied", 0), "messages": counts.get("messages"),
                    "load_start_s": counts["load_start_s"], "node_lead_s": counts.get("node_lead_s"),
                    "store_up_s": counts.get("store_up_s"),
                    "final_reads": counts["final_reads"],
                    "load_window_monotonic_s": counts.get("load_window_monotonic_s"),
                    "client_cpu_s": counts.get("client_cpu_s"), "node_cpu_s": counts.get("node_cpu_s"),
                    "reproduce": reproduce_command(argv) if argv is not None else _default_reproduce(spec, seed, out),
                    "provenance": run_metadata(seed=seed, spec=spec, argv=argv)})
    atomic_write(out / "summary.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return summary


def read_observations(out: Path) -> list[ReplicaEvent]:
    """Every node's replica events (``node-*/state/observations.jsonl``, written by its runtime), in time order."""
    found: list[ReplicaEvent] = []
    for path in sorted(out.glob("node-*/state/observations.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
                found.append(ReplicaEvent(node=obj["node"], f=obj["f"], key=obj.get("key"), value=obj.get("value"),
                                          time=obj["time"]))
            except (ValueError, KeyError, TypeError) as err:  # a torn last line of a killed node
                log.warning("%s: skipping an unreadable observation (%s)", path, err)
    found.sort(key=lambda e: e.time)
    return found


def _default_reproduce(spec: Mapping[str, Any], seed: int, out: Path) -> str:
    return (f"seedance real run --protocol {spec['protocol']} --nodes {spec['nodes']} --clients {spec['clients']} "
            f"--duration {spec['duration_s']} --seed {seed} --kill-rate {spec['kill_rate']}"
            + (f" --nemesis {','.join(spec['nemesis'])}" if spec.get("nemesis") else "")
            + (f" --faulty-fraction {spec['faulty_fraction']!r}" if spec.get("faulty_fraction", 0.6) != 0.6 else "")
            + "".join(f" --set {shlex.quote(f'{key}={json.dumps(value)}')}"
                      for key, value in sorted(spec.get("config", {}).items()))
            + f" --out {out}")
