"""One real run: launch nodes, drive clients, inject SIGKILLs, then judge the history (``seedance real run``).

Rules (issue D item 2; the simulator's summary format):

* The run directory gets ``history.jsonl`` (seedance.analysis.history format), ``trace.json`` (Chrome trace),
  ``summary.json`` and one ``node-<i>.log`` per node. The summary has the simulator's keys plus ``"backend": "real"``.
* ``kill_rate`` is SIGKILLs per second: a Poisson process drawn from the seed picks a random live node, kills its
  process group and restarts it (a new incarnation, rebuilt from the protocol factory and its durable state) after
  ``restart_delay_s``. Faults stop at the end of the load phase; the final reads run with every node up.
* The same checker as the simulator's judges the history (key-value model). Nothing here knows the protocol.
* ``warmup`` (``--warmup``): one write must commit before the load phase starts (so throughput excludes the first
  election); it is in the history (process 2,000,000) but not in the summary's counts.
* Timing (``duration``) is wall-clock, so real runs do not reproduce bit for bit; the seed fixes the workload and
  the kill schedule's draws, and the summary records the command that reruns it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seedance.analysis.history import Event, summarize, write_jsonl
from seedance.provenance import reproduce_command, run_metadata
from seedance.real import trace as trace_mod
from seedance.real.clients import ClientPool, Workload
from seedance.real.launcher import LocalLauncher
from seedance.real.storage import atomic_write
from seedance.real.trace import TraceRecorder

log = logging.getLogger("seedance.real.run")

FINAL_READ_PROCESS = 1_000_000


def judge(events: list[Event], timeout_s: float = 30.0) -> bool | str:
    """The shared linearizability checker's verdict on a key-value history (``"unknown"`` if it gave up)."""
    try:
        from seedance.analysis.linearizability import check
    except ImportError:  # the checker is not installed in this checkout
        log.warning("seedance.analysis.linearizability is missing: verdict 'unknown'")
        return "unknown"
    result = check(events, model="kv", timeout_s=timeout_s) if _accepts_timeout(check) else check(events, model="kv")
    valid = result.get("valid") if isinstance(result, Mapping) else getattr(result, "valid", result)
    return valid if isinstance(valid, bool) else "unknown"


def _accepts_timeout(fn: Any) -> bool:
    import inspect

    try:
        return "timeout_s" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


async def _killer(launcher: LocalLauncher, rate: float, restart_delay_s: float, rng: np.random.Generator,
                  until: float, counts: dict[str, int], trace: TraceRecorder) -> None:
    pending_restarts: list[asyncio.Task] = []

    async def restart(rank: int) -> None:
        await asyncio.sleep(restart_delay_s)
        launcher.spawn(rank)
        counts["restarts"] += 1

    try:
        while True:
            wait = float(rng.exponential(1.0 / rate))
            if time.monotonic() + wait >= until:
                break
            await asyncio.sleep(wait)
            live = [r for r in range(launcher.num_nodes) if launcher.alive(r)]
            if not live:
                continue
            rank = live[int(rng.integers(len(live)))]
            launcher.kill(rank)
            trace.record("crash", rank, "SIGKILL")
            counts["kills"] += 1
            log.info("SIGKILLed node %d (incarnation %d)", rank, launcher.nodes[rank].incarnation)
            pending_restarts.append(asyncio.ensure_future(restart(rank)))
    finally:
        await asyncio.gather(*pending_restarts, return_exceptions=True)


async def _watchdog(launcher: LocalLauncher) -> None:
    while True:
        launcher.raise_if_failed()
        await asyncio.sleep(0.1)


async def _drive(launcher: LocalLauncher, workload: Workload, duration_s: float, seed: int, kill_rate: float,
                 restart_delay_s: float, counts: dict[str, int], trace: TraceRecorder,
                 warmup: bool = False) -> list[Event]:
    pool = ClientPool(num_nodes=launcher.num_nodes, lookup=launcher.addresses.lookup, key=launcher.key, workload=workload, seed=seed,
                      t0_monotonic=launcher.t0_monotonic, trace=trace)
    watchdog = asyncio.ensure_future(_watchdog(launcher))
    try:
        if warmup:
            await pool.warm_up()
        load = asyncio.ensure_future(pool.run(duration_s))
        tasks = [load]
        if kill_rate > 0:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
            tasks.append(asyncio.ensure_future(
                _killer(launcher, kill_rate, restart_delay_s, rng, time.monotonic() + duration_s, counts,
                        trace)))
        phase = asyncio.gather(*tasks)
        done, _ = await asyncio.wait([phase, watchdog], return_when=asyncio.FIRST_COMPLETED)
        if watchdog in done:
            phase.cancel()
            watchdog.result()  # raises NodeFailure
        await phase
        await asyncio.to_thread(launcher.wait_ready, 30.0)
        await pool.final_reads(within_s=max(5.0, 10 * workload.op_timeout_s))
    finally:
        watchdog.cancel()
        await pool.close()
    return pool.events


def run_real(*, protocol: str, nodes: int, clients: int, duration_s: float, seed: int, out: Path,
             kill_rate: float = 0.0, restart_delay_s: float = 0.3, config: Mapping[str, Any] | None = None,
             workload: Workload | None = None, bind_host: str = "127.0.0.1", check: bool = True,
             argv: list[str] | None = None, extra_env: Mapping[str, str] | None = None,
             check_timeout_s: float = 30.0, warmup: bool = False) -> dict[str, Any]:
    """Run ``protocol`` on ``nodes`` real processes and return the summary (also written to ``out``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("node-*"), *out.glob("launcher.trace.jsonl")]:  # a previous run's state would be recovered, not started fresh
        if stale.is_dir():
            import shutil

            shutil.rmtree(stale)
        else:
            stale.unlink()
    workload = workload or Workload(num_clients=clients)
    counts = {"kills": 0, "restarts": 0}
    spec = {"protocol": protocol, "nodes": nodes, "clients": clients, "duration_s": duration_s,
            "kill_rate": kill_rate, "config": dict(config or {}), "workload": workload.__dict__}
    with LocalLauncher(protocol=protocol, num_nodes=nodes, run_dir=out, seed=seed, config=config or {},
                       bind_host=bind_host, extra_env=extra_env or {}) as launcher:
        launcher.start_all()
        launcher.wait_ready()
        trace = TraceRecorder(out / "launcher.trace.jsonl", launcher.t0_monotonic)
        try:
            events = asyncio.run(_drive(launcher, workload, duration_s, seed, kill_rate, restart_delay_s, counts,
                                        trace, warmup))
        finally:
            trace.close()
    history_path = write_jsonl(events, out / "history.jsonl")
    trace_sha = trace_mod.merge([*out.glob("node-*.trace.jsonl"), out / "launcher.trace.jsonl"], out / "trace.json",
                                nodes, {"backend": "real", "protocol": protocol, "seed": seed})
    summary: dict[str, Any] = {"protocol": protocol, "seed": seed, "backend": "real"}
    summary.update(summarize(events, duration_s, exclude=lambda process: process >= FINAL_READ_PROCESS))
    summary["linearizable"] = judge(events, check_timeout_s) if check else "unknown"
    summary.update({"trace_sha256": trace_sha, "history": str(history_path), "trace": str(out / "trace.json"),
                    "nodes": nodes, "clients": clients, "duration_s": duration_s, "kill_rate": kill_rate,
                    "kills": counts["kills"], "restarts": counts["restarts"],
                    "reproduce": reproduce_command(argv) if argv is not None else _default_reproduce(spec, seed, out),
                    "provenance": run_metadata(seed=seed, spec=spec, argv=argv)})
    atomic_write(out / "summary.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return summary


def _default_reproduce(spec: Mapping[str, Any], seed: int, out: Path) -> str:
    return (f"seedance real run --protocol {spec['protocol']} --nodes {spec['nodes']} --clients {spec['clients']} "
            f"--duration {spec['duration_s']} --seed {seed} --kill-rate {spec['kill_rate']} --out {out}")
