"""Does the simulator predict a real run of the same protocol? ``seedance experiment sim-vs-real``.

Method:

1. A host profile (:mod:`seedance.models.host`) measured on this machine by ``seedance real profile`` (or given): its
   CPU samples, fsyncs and the calibration of the other tenants' bursts come from one real run (the *fitted*
   configuration, recorded in the profile); every other configuration is *held out* — the simulator never saw a
   run of it. On a shared machine the other tenants' busy cores are metered during each real run
   (:class:`seedance.real.profile.TenantMeter`: a condition of the machine at that moment, like its load average,
   not an outcome of the run) and given to that round's simulation, and so is the cores' speed
   (:class:`seedance.real.profile.SpeedMeter`: a fixed chunk of node-like work timed in thread CPU every 50 ms;
   its median over the run against the profile runs' scales the profile's CPU times: on a virtual machine the
   cores slow down in episodes of seconds that no CPU counter shows); the simulation on the profile alone
   (tenants and speed as when it was measured) is reported beside it (``profile_sim_*``, and ``x`` in the figure).
2. For each of ``repeats`` rounds and each configuration in it (:class:`Config`: closed-loop client count, value
   size, read fraction, fsync on or off, the crash fault or none; rounds interleaved, so a machine that drifts over
   the experiment moves every configuration alike): one real run (``seedance real run``, the protocol's processes
   on loopback) and one simulated run with the profile (``sim run --host-profile``, seed = round), the same
   protocol, nodes, clients and duration.
3. Per configuration the median over rounds of throughput, p50 and p99 on each side, the ratio predicted / real and
   its range over rounds. The headline: the median |relative error| over held-out configurations, for throughput,
   p50 and p99, and the spread check (simulated p99/p50 over real p99/p50); beside it, a 95 % bootstrap interval
   of the throughput headline from the rounds' own noise (:func:`headline_interval`).
4. Anchored (what ``sim_*`` and the headline are when the fitted configuration is among the experiment's): the
   profile's CPU times scaled by a factor fitted so that the simulator reproduces the round's own run of the
   *fitted* configuration (:func:`anchor_rounds`), one factor per round, on top of each run's metered speed and
   tenants: the speed meter follows the cores from run to run, the anchor sets their level during the round
   rather than minutes ago at profiling (the meter's own level drifted 13 % between a profile and the experiment
   after it while the nodes' speed did not); still blind to every held-out configuration. The prediction without
   the anchor stays beside it (``unanchored_sim_*``, ``anchored.unanchored_*``); with the fitted configuration
   absent, ``sim_*`` is that one.
5. The CPU both sides spend over the load (``real_cpu_cores``: the node processes' and the client process's CPU
   over the load window, every thread; ``sim_cpu_cores``: the work the simulator put on its modelled cores), and
   ``cpu_ratio`` (simulated / real, the median over configurations). A model that reproduces the throughput while
   spending half the CPU has its cores idle where the real ones are busy, so a CPU burst (a restarting process)
   costs it nothing; the ratio says how far that is so.
6. With crashes, ``slow_share`` (operations that waited out an outage) and ``aftermath_share``: of the operations
   started within :data:`AFTERMATH_S` of a restart that left a majority running, the share slower than twice the
   run's median (:func:`aftermath_share`), both sides on the same windows.

Outputs: ``rows.csv`` (one row per configuration and round), ``summary.json`` (medians, errors, provenance), and
``sim_vs_real.pdf/.png`` (predicted vs measured with the y = x line, throughput and p99).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# the report's parts live in sim_vs_real_report; figure, headline_interval, real_noise and save are imported from
# here as before
from seedance.experiments.sim_vs_real_report import (_median, figure, headline_interval, per_config_rows,  # noqa: F401
                                                     real_noise, save, summarize)


@dataclass(frozen=True)
class Config:
    """One workload of the experiment: closed-loop clients, value size, the fraction of reads (the rest writes),
    fsync on or off (off: the page cache only, ``SEEDANCE_FSYNC=0`` for real, ``storage.fsync = false`` simulated),
    and ``crash``: the crash fault's seeded schedule (SIGKILL and restart for real) in the first 60 % of the run,
    the same windows on both sides (:func:`seedance.faults.draw_schedule` from the round's seed)."""

    clients: int
    value_size: int = 0
    read_fraction: float = 0.0
    fsync: bool = True
    crash: bool = False

    def __post_init__(self) -> None:
        from seedance import validation as V

        V.integer("sim-vs-real config clients", self.clients, lo=1, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
        V.integer("sim-vs-real config value_size", self.value_size, lo=0, hi=V.MAX_VALUE_BYTES,
                  why=V.WHY_VALUE_BYTES)
        V.number("sim-vs-real config read_fraction", self.read_fraction, lo=0, hi=1, hi_open=True)

    @property
    def name(self) -> str:
        return (f"clients={self.clients}" + (f",value={self.value_size}B" if self.value_size else "")
                + (f",reads={100 * self.read_fraction:.0f}%" if self.read_fraction else "")
                + ("" if self.fsync else ",fsync=off") + (",crash" if self.crash else ""))

    @property
    def faults(self) -> tuple[str, ...]:
        return ("crash",) if self.crash else ()


# client counts; then at the fitted 8 clients: 1 KiB values, half reads, fsync off, crashes (all but 8 held out)
DEFAULT_CONFIGS = (Config(2), Config(8), Config(32), Config(8, 1024), Config(8, read_fraction=0.5),
                   Config(8, fsync=False), Config(8, crash=True))
QUICK_CONFIGS = (Config(2), Config(8), Config(32))


def measure_real(protocol: str, nodes: int, config: Config, duration_s: float, seed: int, out: Path) -> dict[str, Any]:
    """One real run, and the machine's other tenants meanwhile (busy cores less this process tree's, load)."""
    import os

    from seedance.real.clients import Workload
    from seedance.real.meters import SpeedMeter, TenantMeter
    from seedance.real.run import run_real

    workload = Workload(num_clients=config.clients, read_fraction=config.read_fraction, cas_fraction=0.0,
                        value_size_bytes=config.value_size)
    with TenantMeter() as meter, SpeedMeter() as speed:
        summary = run_real(protocol=protocol, nodes=nodes, clients=config.clients, duration_s=duration_s, seed=seed,
                           out=out, workload=workload, check=False, trace=False,  # the election is in both sides
                           nemesis=config.faults, extra_env=None if config.fsync else {"SEEDANCE_FSYNC": "0"})
    from seedance.history.events import read_jsonl
    from seedance.faults import FaultWindow

    events = read_jsonl(out / "history.jsonl")
    return {**summary, "tenant_cores": meter.busy_cores, "loadavg_1min": os.getloadavg()[0],
            "cpu_cores": cpu_cores(summary),
            # the cores' speed under the load (the processes' start-up ran the meter's chunks slower)
            "cpu_chunk_s": _median(speed.within(summary.get("load_window_monotonic_s"))),
            **window_keys(events),
            "aftermath_share": aftermath_share(events, [FaultWindow(**w) for w in summary["fault_windows"]],
                                               summary["load_start_s"], nodes)}


# How much of the speed meter's ratio the nodes feel: the simulated CPU times are scaled by the meter's ratio to
# this power. 0.5 was chosen on G4-G9's real rows (an older model: the anchored headline spread 6.1-10.0 % with the
# square root against 6.0-15.4 % with the ratio itself). Re-chosen on I1-I8's real rows (the model with spells,
# hand-back and crash resets), judged on the *fitted* configuration only: the sd of its rounds' log(simulated / real)
# around each experiment's mean was 0.108 / 0.083 / 0.079 at 0.5 / 1.0 / 1.5 (the meter tracks the nodes: within an
# experiment the real throughput moved with the meter's log ratio at a slope of -0.67, the simulator at 0.5 by
# -0.26). 1.0 (the ratio itself): the gain flattens beyond it. The held-out rows, which did not choose it, moved the
# same way (the sd over experiments of each held-out workload's mean log ratio fell in all six workloads from 0.5 to
# 1.0: 2 clients 0.111 -> 0.106, 32 clients 0.112 -> 0.095, 1 KiB 0.080 -> 0.053, half reads 0.090 -> 0.057, fsync
# off 0.176 -> 0.144, crash 0.145 -> 0.112); the experiments after it (J2-) are its validation.
METER_SENSITIVITY = 1.0


def speed_factor(profile: Any, chunk_s: float | None) -> float:
    """How much slower (> 1) or faster the nodes' cores ran during a real run than during the profile's CPU runs:
    the ratio of the speed meter's median chunks (:class:`seedance.real.profile.SpeedMeter`) to the power
    :data:`METER_SENSITIVITY`; 1 when either is missing (a profile measured before the meter existed)."""
    base = (profile.measured or {}).get("cpu_chunk_s")
    if not base or not chunk_s or base <= 0 or chunk_s <= 0:
        return 1.0
    return float((chunk_s / base) ** METER_SENSITIVITY)


def at_run(profile: Any, busy_cores: float | None, speed: float) -> Any:
    """The profile as the machine was during one real run: its other tenants, and its CPU times scaled by the
    cores' speed then."""
    return with_tenants(profile.scaled_cpu(speed) if speed != 1.0 else profile, busy_cores)


def with_tenants(profile: Any, busy_cores: float | None) -> Any:
    """The profile with the other tenants measured during a run (their bursts' length stays the profile's)."""
    import dataclasses

    from seedance.models.host import TenantProfile

    if profile.tenants is None or busy_cores is None:
        return profile
    return dataclasses.replace(profile, tenants=TenantProfile(busy_cores, profile.tenants.slice,
                                                              profile.tenants.share))


def predict(protocol: str, nodes: int, config: Config, duration_s: float, seed: int, profile: Any,
            lead_s: float = 0.0) -> dict[str, Any]:
    """The simulator's prediction of :func:`measure_real` on a host profile; ``lead_s``: how long the nodes ran
    before the load started (a real run's :func:`run_lead_s`)."""
    from seedance.real.clients import Workload
    from seedance.sim.config import NemesisConfig, SimConfig, StorageConfig, WorkloadConfig
    from seedance.sim.run import simulate

    # the real clients' timeout and pause before trying the next node (a refusal, or not-leader with no hint)
    workload = WorkloadConfig(clients=config.clients, mix=(config.read_fraction, 1.0 - config.read_fraction, 0.0),
                              op_timeout_s=Workload.op_timeout_s, not_leader_backoff_s=Workload.retry_pause_s,
                              request_bytes=64 + config.value_size, value_bytes=config.value_size, start_s=lead_s)
    result = simulate(SimConfig(protocol=protocol, nodes=nodes, duration_s=duration_s, seed=seed,
                                workload=workload, trace=False, check=False, host_profile=profile,
                                storage=StorageConfig(fsync=config.fsync), nemesis=NemesisConfig(faults=config.faults)),
                      liveness=False)
    cpu = result.stats.get("cpu_s")
    return {"throughput_ops_s": result.throughput_ops_s, "latency_ms_p50": result.latency_ms_p50,
            "latency_ms_p99": result.latency_ms_p99, "cpu_cores": None if cpu is None else cpu / duration_s,
            **window_keys(result.history),
            "aftermath_share": aftermath_share(result.history, result.faults, 0.0, nodes)}  # windows on its clock


def cpu_cores(summary: Mapping[str, Any]) -> float | None:
    """The cores a real run's processes kept busy over its load window: the node processes' CPU plus the client
    process's, over the window's length (None: a summary from before ``node_cpu_s`` was recorded)."""
    node, client = summary.get("node_cpu_s"), summary.get("client_cpu_s")
    window = summary.get("load_window_monotonic_s")
    if node is None or client is None or not window or window[1] <= window[0]:
        return None
    return float((node + client) / (window[1] - window[0]))


def run_lead_s(summary: Mapping[str, Any] | None) -> float:
    """How long a real run's nodes had run their protocol when its load started: the median over nodes of its
    summary's ``node_lead_s`` (the launcher starts the load once every node serves, so the first election is under
    way: 0.07-0.19 s here). 0 for a summary without it (a run from before it was recorded)."""
    leads = [x for x in ((summary or {}).get("node_lead_s") or []) if x is not None]
    return float(np.median(leads)) if leads else 0.0


# An operation slower than this waited out an outage (a Raft election alone takes 150-300 ms here), not a queue.
SLOW_OP_S = 0.1


def window_keys(events: Any) -> dict[str, float | None]:
    """A run's slow spells (:mod:`seedance.history.spells`): its latency windows' sd and lag-1 correlation; and
    ``slow_share``, the fraction of its ``ok`` operations slower than :data:`SLOW_OP_S`. With crashes that share
    is what the p99 sits on: three outages hold ~24 operations of 1,700-4,000, so the p99 falls inside them or in
    the regular tail by a few operations either way; the share says whether the simulator put as many there."""
    from seedance.history.spells import history_windows

    events = list(events)
    stats = history_windows(events)
    share = slow_share(events)
    if stats is None:
        return {"window_sd": None, "window_rho": None, "slow_share": share}
    return {"window_sd": stats.sd, "window_rho": None if stats.rho != stats.rho else stats.rho,
            "slow_share": share}


def slow_share(events: Any, slow_s: float = SLOW_OP_S) -> float | None:
    """The fraction of a history's ``ok`` operations that took longer than ``slow_s``, over the operations its p50
    and p99 are taken over (a real run's final reads left out); None: none completed."""
    from seedance.history.events import ok_latencies_s
    from seedance.real.run import FINAL_READ_PROCESS

    latencies = ok_latencies_s(events, exclude=lambda process: process >= FINAL_READ_PROCESS)
    return sum(latency > slow_s for latency in latencies) / len(latencies) if latencies else None


# How long after a restart its aftermath is looked for: real operations started within 150 ms of a node's restart
# were slower than the rest (13-55 % over 12 ms in 25 ms bins, against 1-5 % after that; seeds 1-4 here)
AFTERMATH_S = 0.15


def aftermath_share(events: Any, windows: Sequence[Any], offset_s: float, num_nodes: int,
                    after_s: float = AFTERMATH_S) -> float | None:
    """What a restart does to the operations around it: of the ``ok`` operations started within ``after_s`` of
    the end of a crash window that left a majority running (its nodes restart there, the leader may stay), the
    fraction slower than twice the history's median. ``windows`` are :class:`seedance.faults.FaultWindow` on the
    load's clock, ``offset_s`` the load's start on the history's. None: no such window, or no operation in one."""
    from seedance.history.events import ok_operations_s
    from seedance.real.run import FINAL_READ_PROCESS

    ends = [offset_s + w.end_s for w in windows if w.name == "crash"
            and len(w.params.get("nodes", ())) <= (num_nodes - 1) // 2]
    ops = ok_operations_s(events, exclude=lambda process: process >= FINAL_READ_PROCESS)
    if not ends or not ops:
        return None
    slow = 2.0 * float(np.median([latency for _, latency in ops]))
    after = [latency for start, latency in ops if any(end <= start < end + after_s for end in ends)]
    return sum(latency > slow for latency in after) / len(after) if after else None


def is_fitted(config: Config, fitted: Mapping[str, Any], protocol: str) -> bool:
    """Is ``config`` the configuration the profile was fitted on (its CPU run)?"""
    return (fitted.get("clients") == config.clients and config.value_size == 0 and config.read_fraction == 0
            and config.fsync and not config.crash and fitted.get("protocol", protocol) == protocol)


def anchor_cpu(rows: Sequence[Mapping[str, Any]], profile: Any, *, protocol: str, nodes: int,
               configs: Sequence[Config], duration_s: float, steps: int = 8,
               progress: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The CPU scale factor (:meth:`HostProfile.scaled_cpu`) at which the simulator reproduces this experiment's
    own real throughput of the *fitted* configuration (the median over its rounds, each simulated with its round's
    tenants; bisection on log(factor) in [1/3, 3]: the simulated throughput falls as the factor grows, nearly
    monotonically, so the factor kept is the step that came closest). Fitted on the
    fitted configuration only, so the held-out configurations stay unseen; what it removes is the machine's drift
    between the profile run and this experiment (the same code ran 16 % slower minutes later in one run). None when
    no configuration of the experiment is the fitted one."""
    fitted = [r for r in rows if not r["held_out"]]
    config = next((c for c in configs if c.name == fitted[0]["config"]), None) if fitted else None
    if config is None:
        return None
    target = float(np.median([r["real_ops_s"] for r in fitted]))

    def simulated(factor: float) -> float:
        scaled = profile.scaled_cpu(factor)
        return float(np.median([predict(protocol, nodes, config, duration_s, r["round"] + 1,
                                        at_run(scaled, r["real_tenant_cores"], r.get("real_cpu_speed", 1.0)),
                                        r.get("real_lead_s", 0.0))
                                ["throughput_ops_s"] for r in fitted]))

    if progress is not None:
        progress(f"anchoring the CPU scale on {config.name} ({len(fitted)} rounds)")
    lo, hi = np.log(1 / 3), np.log(3.0)
    tried: list[tuple[float, float, float]] = []  # (|simulated - target|, factor, simulated) of every step
    for _ in range(steps):
        mid = (lo + hi) / 2
        got = simulated(float(np.exp(mid)))
        tried.append((abs(got - target), float(np.exp(mid)), got))
        lo, hi = (mid, hi) if got > target else (lo, mid)
    factor = float(np.exp((lo + hi) / 2))
    got = simulated(factor)
    tried.append((abs(got - target), factor, got))
    # a closed loop's throughput is not quite monotonic in the factor (a few % from step to step near the target):
    # the bisection's last point is not always its best, so the factor kept is the one that came closest
    _, factor, got = min(tried)
    return {"factor": factor, "config": config.name, "real_ops_s": target, "sim_ops_s": got,
            "sim_ops_s_unscaled": float(np.median([r["sim_ops_s"] for r in fitted]))}


def anchor_rounds(rows: Sequence[Mapping[str, Any]], profile: Any, *, protocol: str, nodes: int,
                  configs: Sequence[Config], duration_s: float, steps: int = 8,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The CPU scale per round (:func:`anchor_cpu` on each round's own run of the *fitted* configuration): the
    level a round's runs are predicted at is the one the machine had during that round, a minute or so, rather than
    the experiment's median. One factor for the whole experiment let a machine that slowed between rounds move all
    of a round's held-out errors one way (J7: 26 % with one factor, 11 % per round, re-simulated on the same real
    rows); over J5-J11 the headline's sd over experiments went from 6.9 to 3.9 pp. ``factors`` maps round to
    factor; a round without a fitted run gets the geometric mean of the others (``factor``). None when no
    configuration of the experiment is the fitted one."""
    fitted = [r for r in rows if not r["held_out"]]
    if not fitted or next((c for c in configs if c.name == fitted[0]["config"]), None) is None:
        return None
    if progress is not None:
        progress(f"anchoring the CPU scale on {fitted[0]['config']} (per round, {len(fitted)} rounds)")
    per_round = {}
    for rnd in sorted({r["round"] for r in fitted}):
        per_round[rnd] = anchor_cpu([r for r in fitted if r["round"] == rnd], profile, protocol=protocol, nodes=nodes,
                                    configs=configs, duration_s=duration_s, steps=steps)
    factors = {rnd: a["factor"] for rnd, a in per_round.items()}
    return {"config": fitted[0]["config"], "factors": factors,
            "factor": float(np.exp(np.mean(np.log(list(factors.values()))))),
            "real_ops_s": float(np.median([a["real_ops_s"] for a in per_round.values()])),
            "sim_ops_s": float(np.median([a["sim_ops_s"] for a in per_round.values()])),
            "sim_ops_s_unscaled": float(np.median([a["sim_ops_s_unscaled"] for a in per_round.values()]))}


def run_experiment(*, protocol: str, out: Path, profile: Any, nodes: int = 3, configs: Sequence[Config],
                   repeats: int = 5, duration_s: float = 3.0,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every configuration ``repeats`` times on both sides; rows and the summary (see the module docstring)."""
    import pandas as pd

    fitted = (profile.measured or {}).get("config", {})
    rows = []
    # rounds interleaved (round 1 of every configuration, then round 2, ...): a machine that drifts over the
    # experiment moves every configuration's rounds alike instead of one configuration's
    for rnd in range(repeats):
        for config in configs:
            if progress is not None:
                progress(f"round {rnd + 1}/{repeats}: {config.name}")
            rows.append(_round_row(protocol, nodes, config, duration_s, rnd, profile, fitted, out))
    anchor = anchor_rounds(rows, profile, protocol=protocol, nodes=nodes, configs=configs, duration_s=duration_s,
                           progress=progress)
    _apply_anchor(rows, anchor, profile, protocol=protocol, nodes=nodes, configs=configs, duration_s=duration_s)
    frame = pd.DataFrame(rows)
    summary = summarize(frame, per_config_rows(frame, protocol), anchor, profile, protocol=protocol, nodes=nodes,
                        repeats=repeats, duration_s=duration_s, fitted=fitted)
    return {"frame": frame, "summary": summary}


def _round_row(protocol: str, nodes: int, config: Config, duration_s: float, rnd: int, profile: Any,
               fitted: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """One round of one configuration: the real run, the simulator at that run's conditions and on the profile."""
    held_out = not is_fitted(config, fitted, protocol)
    real = measure_real(protocol, nodes, config, duration_s, rnd + 1, out / "runs" / f"{config.name}-{rnd}")
    # the simulator on the profile, with the other tenants measured during this real run (an input
    # condition of the machine, like its fsync; not an outcome of the run) ...
    # ... and with the cores' speed metered during it (SpeedMeter: a fixed chunk's thread CPU)
    speed = speed_factor(profile, real.get("cpu_chunk_s"))
    # ... and the load started as long after the nodes as it did for real (the first election's progress)
    lead = run_lead_s(real)
    sim = predict(protocol, nodes, config, duration_s, rnd + 1, at_run(profile, real["tenant_cores"], speed),
                  lead)
    # ... and on the profile alone (the tenants as they were when it was measured): a pure prediction
    alone = predict(protocol, nodes, config, duration_s, rnd + 1, profile, lead) \
        if profile.tenants is not None else sim
    return {"protocol": protocol, "config": config.name, "clients": config.clients,
            "value_size": config.value_size, "read_fraction": config.read_fraction,
            "fsync": config.fsync, "crash": config.crash, "round": rnd, "held_out": held_out,
            "real_ops_s": real["throughput_ops_s"], "sim_ops_s": sim["throughput_ops_s"],
            "real_p50_ms": real["latency_ms_p50"], "sim_p50_ms": sim["latency_ms_p50"],
            "real_p99_ms": real["latency_ms_p99"], "sim_p99_ms": sim["latency_ms_p99"],
            "real_loadavg": real["loadavg_1min"], "real_tenant_cores": real["tenant_cores"],
            "real_cpu_speed": speed, "real_lead_s": lead,
            # the slow spells: the latency windows' sd (seedance.history.spells), both sides
            "real_window_sd": real["window_sd"], "sim_window_sd": sim["window_sd"],
            # the share of operations that waited out an outage (window_keys), both sides
            "real_slow_share": real["slow_share"], "sim_slow_share": sim["slow_share"],
            # the CPU both sides spent over the load (cores): does the model spend what the processes do?
            "real_cpu_cores": real["cpu_cores"], "sim_cpu_cores": sim["cpu_cores"],
            # a restart's aftermath: operations started just after it slower than twice the median
            "real_aftermath_share": real["aftermath_share"], "sim_aftermath_share": sim["aftermath_share"],
            "profile_sim_ops_s": alone["throughput_ops_s"], "profile_sim_p50_ms": alone["latency_ms_p50"],
            "profile_sim_p99_ms": alone["latency_ms_p99"]}


def _apply_anchor(rows: list[dict[str, Any]], anchor: Mapping[str, Any] | None, profile: Any, *, protocol: str,
                  nodes: int, configs: Sequence[Config], duration_s: float) -> None:
    """With an anchor, each row's prediction is the anchored one (sim_*); the one before it stays beside."""
    if anchor is None:
        return
    by_name = {config.name: config for config in configs}
    for row in rows:
        scaled = profile.scaled_cpu(anchor["factors"].get(row["round"], anchor["factor"]))
        got = predict(protocol, nodes, by_name[row["config"]], duration_s, row["round"] + 1,
                      at_run(scaled, row["real_tenant_cores"], row.get("real_cpu_speed", 1.0)),
                      row.get("real_lead_s", 0.0))
        for key, field_ in (("ops_s", "throughput_ops_s"), ("p50_ms", "latency_ms_p50"),
                            ("p99_ms", "latency_ms_p99")):
            row[f"unanchored_sim_{key}"] = row[f"sim_{key}"]
            row[f"sim_{key}"] = got[field_]
        row["sim_window_sd"] = got["window_sd"]
        row["sim_slow_share"] = got["slow_share"]
        row["sim_cpu_cores"] = got["cpu_cores"]
        row["sim_aftermath_share"] = got["aftermath_share"]


