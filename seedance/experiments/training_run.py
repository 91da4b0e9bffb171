"""Running validate-and-commit training: in the simulator (:func:`sim_train`) and on real processes
(:func:`real_train`), with one of the seed's scenarios F1–F8 injected, summarised by :mod:`.training`.

Both runners build the same :mod:`seedance.models.protocols.commit` nodes from the same protocol config (the
scenario's injection is drawn from ``seed``), so a scenario's buggy and fixed variants are reproducible on demand.

Simulator specifics: the run stops once every rank has reported its final parameters at the same epoch (or at
``max_sim_s`` of virtual time). F5 needs the fabric: when the injected step's allreduce starts, the runner cuts the
injected rank off from the others (messages both ways) for the injection's ``heal_after_s``; a collective whose
group spans the cut hangs and ends at its timeout, as the simulator's collectives do across any partition (an NCCL
allreduce across a cut hangs until its watchdog fires).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from seedance.history.training import Tally, summarize
from seedance.errors import SpecError
from seedance.models.protocols.commit import SPEC, CommitConfig
from seedance.models.protocols.commit.node import PERSISTENT
from seedance.monitor.memory import MEMCHECK_ENV

MAX_TRAIN_RANKS = 1024
WHY_TRAIN_RANKS = ("one rank per GPU of the seed's largest cluster (128 eight-GPU servers); every rank is a "
                   "simulated node with real parameter arrays and its own collective results: at 1,024 ranks a "
                   "step costs about 0.4 CPU s here")
DEFAULT_TOKENS_PER_STEP = 4096  # per rank: two 2,048-token sequences
# above FANOUT_ABOVE ranks a simulated run heartbeats SCALE_FANOUT ring successors (the protocol's heartbeat_fanout)
# unless told otherwise: every rank heartbeating every peer is 1,024 x 1,023 messages per 50 ms period at 1,024
FANOUT_ABOVE = 32
SCALE_FANOUT = 4


def model_settings(model_size: float | None, tokens_per_step: int, bytes_per_param: int,
                   settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``settings`` plus the step's FLOPs and gradient bytes of a ``model_size``-parameter model
    (:func:`seedance.models.compute.training_step`); unchanged without a model size."""
    from seedance.models.compute import training_step

    out = dict(settings or {})
    if model_size is None:
        return out
    for key in ("step_flops", "grad_bytes"):
        if key in out:
            raise SpecError(f"--set {key}", "conflicts with --model-size (which sets it)",
                            "give either --model-size or --set step_flops/grad_bytes")
    flops, grad_bytes = training_step(model_size, tokens_per_step, bytes_per_param)
    return {**out, "step_flops": flops, "grad_bytes": grad_bytes}


def check_world(world: Any) -> int:
    """A simulated training run's ranks: 1 .. :data:`MAX_TRAIN_RANKS` (the error names the ceiling and why)."""
    from seedance.validation import integer

    return integer("--world-size", world, lo=1, hi=MAX_TRAIN_RANKS, why=f"the ceiling: {WHY_TRAIN_RANKS}")


SUMMARY_KEYS = ("steps", "final_loss", "replica_l2_max", "commits", "rollbacks", "commit_overhead_pct",
                "false_alarms", "false_offline", "leaked_handles")


def protocol_config(*, steps: int, commit_every: int, scenario: str, variant: str, seed: int,
                    settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    config = {"steps": steps, "commit_every": commit_every, "scenario": scenario or "", "variant": variant,
              "seed": seed}
    for key, value in (settings or {}).items():
        if key in config:
            raise SpecError(f"--set {key}", "has its own option", "use --steps / --commit-every / --scenario / "
                            "--variant / --seed")
        config[key] = value
    CommitConfig.from_mapping(config)  # every key and value checked before any work
    return config


def _done(nodes: list[Any], steps: int) -> bool:
    alive = [n for n in nodes if n is not None]
    if not alive or any(n.phase != "done" or (n.step < steps and n.stop_at is None) for n in alive):
        return False
    return len({n.epoch for n in alive}) == 1


def sim_config(*, world: int = 4, steps: int = 60, commit_every: int = 10, scenario: str = "",
               variant: str = "fixed", seed: int = 0, settings: Mapping[str, Any] | None = None, topology: Any = None,
               max_sim_s: float = 600.0, nemesis: tuple[str, ...] = (), faulty_fraction: float = 0.6) -> Any:
    """The SimConfig of one simulated training run, every input checked (the ranks against
    :data:`MAX_TRAIN_RANKS`, the protocol config, the simulator's ceilings), nothing run."""
    from seedance.sim.config import NemesisConfig, SimConfig, WorkloadConfig

    check_world(world)
    settings = dict(settings or {})
    if world > FANOUT_ABOVE and "heartbeat_fanout" not in settings:  # O(world) heartbeats per period, not O(world²)
        settings["heartbeat_fanout"] = SCALE_FANOUT
    config = protocol_config(steps=steps, commit_every=commit_every, scenario=scenario, variant=variant, seed=seed,
                             settings=settings)
    return SimConfig(protocol=SPEC, nodes=world, duration_s=max_sim_s, seed=seed, topology=topology,
                     protocol_config=config, workload=WorkloadConfig(clients=0),
                     nemesis=NemesisConfig(faults=tuple(nemesis), faulty_fraction=faulty_fraction))


def sim_train(*, world: int = 4, steps: int = 60, commit_every: int = 10, scenario: str = "", variant: str = "fixed",
              seed: int = 0, settings: Mapping[str, Any] | None = None, topology: Any = None,
              max_sim_s: float = 600.0, nemesis: tuple[str, ...] = (), faulty_fraction: float = 0.6,
              keep_params: bool = False,
              actions: tuple[tuple[float, Callable[[Any], None]], ...] = ()) -> dict[str, Any]:
    """One simulated training run; its summary (the real runner's keys, plus ``sim_time_s``, ``trace_sha256``).
    ``actions``: more scripted ``(time_s, fn(runtime))`` calls (samplers, for instance)."""
    from seedance.sim.kernel import call_at
    from seedance.sim.run import simulate
    from simpy.core import StopSimulation

    sim = sim_config(world=world, steps=steps, commit_every=commit_every, scenario=scenario, variant=variant,
                     seed=seed, settings=settings, topology=topology, max_sim_s=max_sim_s, nemesis=nemesis,
                     faulty_fraction=faulty_fraction)
    cfg = CommitConfig.from_mapping(sim.protocol_config)
    state: dict[str, Any] = {"done_at": None}
    faulty = bool(nemesis)

    def poll(runtime: Any) -> None:
        nodes = [h.node if h.up else None for h in runtime.hosts]
        healed = not faulty or runtime.env.now >= max_sim_s * faulty_fraction
        if cfg.scenario == "F5":  # the cut must have healed and every rank heard again
            at = cut.get("healed_at")
            healed = healed and at is not None and runtime.env.now >= at + settle_s
        if healed and _done(nodes, steps) and all(h.up for h in runtime.hosts):
            state["done_at"] = runtime.env.now
            raise StopSimulation(None)
        call_at(runtime.env, runtime.env.now + 0.1, lambda _e: poll(runtime))

    tally = Tally()  # the Observe values, folded as they come (memory flat with the steps)

    def tap(runtime: Any) -> None:
        def keep(node_id: int, effect: Any, at: float) -> None:
            tally.add(node_id, effect.key, effect.value)

        # the summary is made here, from these; the run's own replica events (hashable copies, and the protocol
        # summary made from them again) would cost O(world) per rank per vote and are not kept
        runtime.observe_sink = keep

    calls: list[Any] = [(0.0, tap), (0.1, poll), *actions]
    cut: dict[str, Any] = {}
    settle_s = cfg.phi_acceptable_pause_s + 10 * cfg.heartbeat_s
    if cfg.scenario == "F5":
        calls.append((0.0, lambda runtime: _install_partition(runtime, cfg, world, cut)))
    wall = time.perf_counter()
    result = simulate(sim, actions=calls, liveness=False, stop_on_violation=False)
    crashed = {rec[2] for rec in result.trace.records if len(rec) > 2 and rec[1] == "crash"}
    if cfg.scenario == "F5":  # every verdict across the cut is true (each side was unreachable to the other)
        crashed |= set(range(world))
    leaked = sum(h.engine.buffers.live - len(PERSISTENT) for h in result.runtime.hosts if h.up)
    summary = summarize(tally, world=world, crashed=crashed, leaked=leaked,
                        monitor_breaches=len(result.violations), keep_params=keep_params)
    return {"runtime": "sim", "scenario": cfg.scenario or None, "variant": cfg.variant, "seed": seed,
            "commit_every": commit_every, "heartbeat_fanout": cfg.heartbeat_fanout, "steps_requested": steps, **summary,
            "finished": state["done_at"] is not None, "sim_time_s": state["done_at"],
            **({"partition": cut} if cut else {}),
            "violations": [v for _, v in result.violations][:5], "trace_sha256": result.trace_sha256,
            "wall_s": time.perf_counter() - wall}


def _install_partition(runtime: Any, cfg: CommitConfig, world: int, cut: dict[str, Any]) -> None:
    """F5: cut the injected rank off when the injected step's allreduce starts; heal later (see module doc)."""
    from seedance.models.protocols.commit.scenarios import draw
    from seedance.sim.kernel import call_at

    inj = draw("F5", seed=cfg.seed, world=world, steps=cfg.inject_period or cfg.steps,  # as the nodes draw it
               commit_every=cfg.commit_every, dim=cfg.dim,
               epoch_steps=cfg.epoch_steps, collective_timeout_s=cfg.collective_timeout_s,
               heartbeat_s=cfg.heartbeat_s, acceptable_pause_s=cfg.phi_acceptable_pause_s)
    minority = {inj.rank}
    pairs = [(a, b) for a in range(world) for b in range(world) if (a in minority) != (b in minority)]
    state = {"on": False, "done": False}

    def heal(_event: Any) -> None:
        runtime.network.block(pairs, -1)
        state["on"] = False
        cut["healed_at"] = runtime.env.now
        if runtime._tracing:
            runtime._record((runtime.env.now, "annotate", -1, "partition-healed", {}))

    def watch(_host: Any = None) -> None:
        if state["done"]:
            return
        if any(h.up and h.node.phase == "train" and h.node.step >= inj.steps[0] for h in runtime.hosts):
            state["done"] = state["on"] = True
            now = runtime.env.now
            cut["at"] = now
            runtime.network.block(pairs, +1)
            if runtime._tracing:
                runtime._record((now, "annotate", -1, "partition", {"minority": sorted(minority)}))
            call_at(runtime.env, now + inj.params["heal_after_s"], heal)

    runtime.after_input.append(watch)
    cut["minority"] = sorted(minority)


# ---------------------------------------------------------------------------------------------------- real
def real_train(*, world: int = 3, steps: int = 40, commit_every: int = 10, scenario: str = "",
               variant: str = "fixed", seed: int = 0, settings: Mapping[str, Any] | None = None,
               out: str | Path, timeout_s: float = 300.0, extra_env: Mapping[str, str] | None = None,
               keep_params: bool = False, nemesis: tuple[str, ...] = (), faulty_s: float = 8.0,
               duration_s: float | None = None, memcheck_s: float | None = None,
               on_poll: Callable[[Path, float], None] | None = None) -> dict[str, Any]:
    """One real data-parallel run (``world`` processes, torch.distributed: gloo here, NCCL with CUDA).

    ``nemesis``: the simulator's fault names that the real backend applies (``seedance.faults``: crash = SIGKILL and
    restart from the atomic checkpoint, pause = SIGSTOP/SIGCONT, partitions and message faults by the nodes' own
    rules), drawn from ``seed`` over the first ``faulty_s`` seconds after every rank is ready, then healed; the run
    ends when every rank has finished after the heal.

    ``duration_s`` (a long run): the run lasts that many wall seconds from its launch instead of ``steps`` (the
    protocol's ``deadline_s`` on the machine's monotonic clock: the ranks stop together at the first commit after
    it, whichever of them restarted meanwhile), the scenario's injection repeats every
    ``inject_period`` steps (default: the first multiple of ``commit_every`` and ``epoch_steps`` ≥ 60) and the
    learning rate cycles (``lr_cycle`` 4), so faults keep biting for the whole run; faults last at most 60 % of
    it. ``memcheck_s``: every rank samples its memory, fds, threads and buffer handles at that interval
    (:mod:`seedance.monitor.memory`). ``on_poll(run_dir, elapsed_s)`` is called about every 0.2 s while it runs.
    """
    from seedance import faults as fault_table
    from seedance.real.launcher import LocalLauncher

    if scenario == "F5":
        raise SpecError("--scenario", "F5 needs a partition during a collective, which only the simulator injects "
                        "here", "F1, F2, F3, F4, F6, F7, F8 (or `seedance sim train --scenario F5`)")
    # real processes on a shared machine: heartbeats every 100 ms, 1 s of acceptable pause, 5 s collective deadline
    real_defaults = {"heartbeat_s": 0.1, "phi_acceptable_pause_s": 1.0, "collective_timeout_s": 5.0}
    merged = {**real_defaults, **dict(settings or {})}
    if duration_s is not None:
        steps = 1_000_000_000  # an upper bound: the ranks stop on time
        t0 = time.monotonic()
        merged = _long_run_settings(merged, commit_every, t0 + float(duration_s))
        faulty_s = min(faulty_s, 0.6 * duration_s)
        timeout_s = max(timeout_s, duration_s + 180.0)
    extra_env = {**dict(extra_env or {}), **({MEMCHECK_ENV: repr(float(memcheck_s))} if memcheck_s else {})}
    nemesis = fault_table.parse(nemesis, fault_table.REAL) if nemesis else ()
    config = protocol_config(steps=steps, commit_every=commit_every, scenario=scenario, variant=variant, seed=seed,
                             settings=merged)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    wall = time.perf_counter()
    finished = False
    with LocalLauncher(protocol="commit", num_nodes=world, run_dir=run_dir, seed=seed, config=config,
                       extra_env=dict(extra_env or {}),
                       **({"t0_monotonic": t0} if duration_s is not None else {})) as launch:
        launch.start_all()
        deadline = time.monotonic() + timeout_s
        if nemesis:
            launch.wait_ready(60.0)
            healed_at = _run_faults(launch, nemesis, seed, faulty_s, world,
                                    poll=(lambda: on_poll(run_dir, time.monotonic() - launch.t0_monotonic))
                                    if on_poll is not None else None)
        while time.monotonic() < deadline:
            launch.raise_if_failed()
            elapsed = time.monotonic() - launch.t0_monotonic
            if on_poll is not None:
                on_poll(run_dir, elapsed)
            if _finished(run_dir, world, steps, elapsed, duration_s, healed_at if nemesis else None, merged,
                         lambda: time.monotonic() - launch.t0_monotonic):
                finished = True
                break
            time.sleep(0.2)
    events = []
    for path in sorted(run_dir.glob("node-*/state/observations.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    crashed = set(range(world)) if nemesis else set()  # under faults, suspicion is the detector's job
    summary = summarize(events, world=world, keep_params=keep_params, crashed=crashed)
    return {"runtime": "real", "scenario": scenario or None, "variant": variant, "seed": seed,
            "commit_every": commit_every, "steps_requested": None if duration_s is not None else steps,
            **({"duration_s": duration_s, "config": config} if duration_s is not None else {}),
            **summary, "finished": finished,
            **({"nemesis": list(nemesis), "healed_at_s": healed_at} if nemesis else {}),
            "wall_s": time.perf_counter() - wall, "run_dir": str(run_dir)}


def _long_run_settings(settings: dict[str, Any], commit_every: int, deadline_s: float) -> dict[str, Any]:
    """A long run's protocol settings: the ranks stop at ``deadline_s`` (monotonic clock), the injection repeats
    every ``inject_period`` steps (the first multiple of ``commit_every`` and ``epoch_steps`` >= 60), the learning
    rate cycles through 4 epochs; what ``settings`` says wins."""
    epoch_steps = int(settings.get("epoch_steps", 15))
    period = math.lcm(commit_every, epoch_steps)
    return {"deadline_s": deadline_s, "inject_period": period * max(1, math.ceil(60 / period)), "lr_cycle": 4,
            **settings}


def _finished(run_dir: Path, world: int, steps: int, elapsed: float, duration_s: float | None,
              healed_at: float | None, settings: Mapping[str, Any], since_launch: Callable[[], float]) -> bool:
    """Whether every rank has finished, at one epoch: its time up (a long run, ``duration_s``) or its ``steps``
    done. Under faults (``healed_at``) the detectors first get time to settle after the heal, and only the finals
    of the last epoch count."""
    if duration_s is not None and elapsed < duration_s:  # no rank stops before its time is up
        return False
    finals = _real_finals(run_dir, world)
    if healed_at is not None:
        settle = float(settings["phi_acceptable_pause_s"]) + 10 * float(settings["heartbeat_s"])
        if since_launch() < healed_at + settle:
            return False
        latest = _max_epoch(run_dir, world)
        finals = {r: f for r, f in finals.items() if f["epoch"] >= latest}
    on_time = duration_s is not None and len({f["step"] for f in finals.values()}) == 1
    return len(finals) == world and (on_time or all(f["step"] >= steps for f in finals.values())) \
        and len({f["epoch"] for f in finals.values()}) == 1


def _run_faults(launch: Any, nemesis: tuple[str, ...], seed: int, faulty_s: float, world: int,
                poll: Callable[[], None] | None = None) -> float:
    """Apply the seeded schedule for ``faulty_s`` seconds, heal; the launcher-relative time of the heal. ``poll``
    is called about every 0.5 s meanwhile."""
    import asyncio

    from seedance.faults import draw_schedule
    from seedance.real.nemesis import RealNemesis
    from seedance.real.run import nemesis_rng
    from seedance.real.trace import TraceRecorder

    schedule = draw_schedule(nemesis, num_nodes=world, faulty_end_s=faulty_s, rng=nemesis_rng(seed))
    recorder = TraceRecorder(None, launch.t0_monotonic)

    async def ticker() -> None:
        while True:
            poll()
            await asyncio.sleep(0.5)

    async def drive() -> float:
        nem = RealNemesis(launch, schedule, faulty_end_s=faulty_s, trace=recorder)
        tick = asyncio.ensure_future(ticker()) if poll is not None else None
        try:
            await nem.run(time.monotonic())
        finally:
            if tick is not None:
                tick.cancel()
            await nem.close()
        return (nem.healed_at_monotonic or time.monotonic()) - launch.t0_monotonic

    try:
        return asyncio.run(drive())
    finally:
        recorder.close()


def _max_epoch(run_dir: Path, world: int) -> int:
    """The highest epoch any rank reported (rollbacks, resyncs, votes, commits, finals)."""
    best = 0
    for rank in range(world):
        try:
            text = (run_dir / f"node-{rank}" / "state" / "observations.jsonl").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            try:
                value = json.loads(line).get("value")
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and isinstance(value.get("epoch"), int):
                best = max(best, value["epoch"])
    return best


def _real_finals(run_dir: Path, world: int) -> dict[int, dict[str, Any]]:
    finals: dict[int, dict[str, Any]] = {}
    for rank in range(world):
        path = run_dir / f"node-{rank}" / "state" / "observations.jsonl"
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if '"final"' in line:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                if record.get("key") == "final":
                    finals[rank] = {**record["value"], "wall": float(record.get("time", 0.0))}
    return finals
