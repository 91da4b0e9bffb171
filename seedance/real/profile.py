"""``seedance real profile``: measure this machine's service-time distributions for the simulator's host model.

Method (each part a measurement of the real backend's own code paths on this machine):

* fsync: the profile run's own (each node's storage thread times its write + fsync: three processes sharing one
  disk, as in every run). A probe alone is recorded beside it (``measured.fsync_probe``: 300 appends of 128 bytes
  each followed by ``os.fsync``) and used only if the run recorded none; write bandwidth: 4 writes of 8 MiB, each
  fsynced.
* log entries carried (``entries``): an AppendEntries of 64 entries against an empty one through the real frame
  path (the protocol codec and an authenticated connection over a socket pair), encode and decode timed apart:
  the CPU per entry sent and received (here ~4 and ~5-7 us). The profile run counts the messages received and sent
  and their entries; their means are the zero point (the per-kind costs were fitted at them).
* garbage collections (``gc``, ``client_gc``): every older-generation collection (``gc.callbacks``: generation and
  wall time); per process kind the rate per handled item (operation) and the pauses' quantiles. The nodes' come from
  one more run without the CPU profile (:func:`plain_gc`: the profile's own records made its nodes collect three
  times as often and gave their leaders a full collection the unprofiled runs never had), the client process's
  from the CPU runs.
* allocating fsyncs (``fsync_grow``, ``block_bytes``): the run's fsyncs are split by whether an append of theirs
  reached a new block of its file (the real storage counts them); ``fsync`` is the others, ``fsync_grow`` these
  (where the run had >= 50; else the others shifted by a probe's step: 100 fsynced 64-byte appends into a new block
  against 100 within one). Larger values allocate more often, so this is what a held-out value size costs.
* the shared disk's stalls (``disk_stalls``, :func:`split_stalls`): each fsync record carries its end on the
  monotonic clock that every process shares, so the nodes' fsyncs over 20x their kind's median that overlap in time
  are found to be one stop of the device. Their count over the runs' seconds is the stalls' rate, their union spans
  the lengths drawn; the fsync quantiles leave them out.
* write without fsync (``write``, ``write_cpu``): 300 log appends of one Raft-shaped entry through the real storage
  code with ``fsync=False`` (what a node does under ``SEEDANCE_FSYNC=0``), wall time and thread CPU; a probe, so a
  configuration with fsync off is never fitted.
* restart (``restart``, ``restart_cpu``, ``recover_per_entry_s``): 8 SIGKILL + restarts of the nodes of an idle Raft
  cluster, each timed from the spawn (a fork of the launcher's zygote) to the node serving again with its durable
  state recovered, and the restarted process's CPU until then (``/proc/<pid>/task/*/schedstat``); then one restart
  per node on a copy of the first CPU run's durable state: its extra CPU over the empty log's, per recovered entry
  (here ~19 ms on an empty log, ~55 ms on a 4,800-entry one).
* loopback: 2,000 round trips of a 64-byte message to an echo process over TCP on 127.0.0.1; one-way = RTT / 2,
  less the share of it that is the two ends' CPU (this thread's and the echo process's over the trips: their send
  and receive syscalls, which the nodes' per-item frame I/O already charges; 66-100 % of it here, depending on
  whether the cores were awake), so the simulator adds only the rest (wake-ups, the kernel's path) to a message.
* handoff: 1,000 round trips from an idle asyncio loop to a one-thread executor and back (the path of every fsync in
  the real runtime: submit to the storage thread, its wake-up, the result handed back through the loop's self-pipe).
  Its second half under load (``handback``) is the CPU runs' own: every fsync's time from the storage thread having
  the interpreter's lock again after the write to the loop running its completion (here median 56-103 us, p90
  143-225 us, where the idle probe's half is 15 us). So is its first half (``handover``): from the loop's submit to
  the thread running the job (median 74-119 us, p90 250-400 us).
* slow spells (``spell``): each CPU run's latencies in 50 ms windows (:mod:`seedance.history.spells`: the window
  medians' sd beyond their sampling noise, and their lag-1 correlation), pooled; fitted as an Ornstein-Uhlenbeck
  factor on every CPU cost by :func:`calibrate_spell` (on eleven profiles here: sd 0.08-0.17 of the windows' log
  latency, sigma 0.14-0.30 of the factor, tau 26-98 ms).
* CPU: ``--runs`` real Raft runs (``--nodes`` processes, ``--clients`` closed-loop clients, ``--duration`` s, fsync
  on; 3 runs by default, seeds ``--seed``, ``--seed`` + 1, ...; their samples pooled, so the fit is not one run's
  luck — three 3 s runs of the profile's configuration spanned 8.5-13 % in throughput here; the run of median
  throughput is the one the tenants' share is calibrated to) with
  ``SEEDANCE_CPU_PROFILE=1``: every node samples the loop thread's CPU time (``thread_time``) of each input it
  handles (handler and effect execution), by input kind, and records its loop's *busy periods* (from a wake-up out
  of ``select`` to the next ``select`` that may block; :class:`seedance.real.runtime.BusyPeriods`): the CPU outside
  the timed handlers and the items handled in each (inputs and fsync completions). The client process records its
  own busy periods (CPU, replies handled). Amortisation is fitted per process kind as
  ``CPU(period) = wake + per_item * items`` by non-negative least squares weighted by 1 / items (the variance of a
  period grows with its items), pooled over the nodes: ``wake`` and ``io_per_input`` for the nodes, ``client_wake``
  and ``client_per_op`` for the client process. The nodes' periods are also fitted by kind,
  ``CPU = wake + sum_k cost_k * items_k`` (inputs by kind, fsync completions, fsyncs handed to the storage thread):
  that ``wake`` and ``io_per_kind`` are what the simulator uses (the pooled fit stays as ``io_per_input``, for kinds
  never seen), since one average per-item cost over items whose mix changes with load (a follower's costly
  AppendEntries and fsync completions, one per period; a leader's cheap zero-delay timers, several per period) puts
  part of the costly items into ``wake``. The client process also times each connection it opens (TCP,
  handshake, first frame): ``connect``. Each node also reports its whole process's CPU: what its other threads
  used (the storage thread's writes and fsyncs) per fsync is ``sync_cpu``.
* tenants (a shared machine): for about half a second, 1,000 cycles of 0.1 ms of CPU then a 0.3 ms sleep by one
  thread (a node's duty cycle); the lateness of each wake-up beyond the quietest one is how long another tenant's
  burst kept a core from a waking process (fitted log-normal: the bursts' ``slice``); the machine's busy CPU over the probe (``/proc/stat``) less this process's own
  is the other tenants' ``busy_cores``. :class:`TenantMeter` measures the same ``busy_cores`` during any run (this
  process tree's CPU subtracted), so ``experiment sim-vs-real`` can give the simulator the tenants of each real run.
* Fits: log-normal per kind by maximum likelihood (location 0), capped at the 99.9th percentile.

The profile records the machine (CPU model, cores, kernel, the filesystem of the directory, load average) and the
configuration it was measured with, so ``experiment sim-vs-real`` can tell fitted from held-out configurations.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from seedance.history.spells import pooled
from seedance.models.host import KINDS, Empirical, HostProfile, LogNormal, TenantProfile
from seedance.real.meters import (SpeedMeter, TenantMeter, loopback_beyond_cpu, measure_handoff,
                                  measure_loopback_with_cpu, measure_tenants, measure_wake)
from seedance.real.probes import (log_entries, machine_facts, measure_entry_codec, measure_fsync, measure_fsync_grow,
                                  measure_write, restart_samples)
from seedance.real.profile_fit import (add_gc, entry_costs, sync_cpus, fit_amortisation, fit_amortisation_by_kind,
                                       fit_connects, fit_gc, fit_recovery, fsync_grow_kind, gc_held, split_stalls)

# what a profile keeps of a run (node_lead_s: how long the nodes ran before the load, which the calibrations'
# simulated runs reproduce)
RUN_FIELDS = ("throughput_ops_s", "latency_ms_p50", "latency_ms_p99", "ops_ok", "node_lead_s")
RUNS = 3  # CPU runs a profile pools by default


def measure_cpu(work_dir: Path, *, nodes: int, clients: int, duration_s: float, seed: int, runs: int = 1,
                wake_probe_s: float | None = None) -> dict[str, Any]:
    """Handler CPU samples per input kind, frame I/O per input and client CPU per op, from ``runs`` real Raft runs
    (seeds ``seed``, ``seed + 1``, ...), pooled: one run's luck (which processes shared a core, the machine's other
    work during its few seconds) is not the model's. ``summary`` is the run of median throughput; ``runs`` lists
    every run's throughput and latencies."""
    p = _cpu_pool()
    for index in range(runs):
        _cpu_run(p, work_dir, index, runs=runs, nodes=nodes, clients=clients, duration_s=duration_s, seed=seed)
    gc_source = "cpu-profile runs"
    plain = plain_gc(work_dir / "raft-gc", nodes=nodes, clients=clients, duration_s=duration_s, seed=seed + runs)
    if plain is not None:
        p.gcs["node"], gc_source = plain, "an unprofiled run"
    return _cpu_result(p, runs=runs, duration_s=duration_s, wake_probe_s=wake_probe_s, gc_source=gc_source)


def _cpu_pool() -> SimpleNamespace:
    """What the CPU runs pool, empty."""
    return SimpleNamespace(
        handler={k: [] for k in KINDS},
        periods=[],
        syncs=[],
        held=set(),  # the fsync records a collection of their process held (gc_held)
        client_periods=[],
        connects=[],
        summaries=[],
        tenant_cores=[],
        other_threads_s=0.0,  # CPU of the nodes' other threads than the loop (the storage thread: writes, fsyncs)
        # older-generation garbage collections, for the nodes and the client process: [pause samples (s), items
        # handled, processes: each one's (items handled, its collections in order as (generation, s))]
        gcs={"node": [[], 0, []], "client": [[], 0, []]},
        chunks=[],  # the speed meter's chunks during the runs (SpeedMeter)
        windows=[],  # each run's latency windows (the slow spells: seedance.history.spells)
        carried={},  # messages received / sent and the log entries they carried
    )


def _cpu_run(p: SimpleNamespace, work_dir: Path, index: int, *, runs: int, nodes: int, clients: int,
             duration_s: float, seed: int) -> None:
    """One CPU-profiled real Raft run (seed ``seed + index``), its records pooled into ``p``."""
    from seedance.real.clients import CLIENT_PROFILE_ENV, Workload
    from seedance.real.run import run_real
    from seedance.real.runtime import CPU_PROFILE_ENV

    run_dir = work_dir / ("raft" if runs == 1 else f"raft-{index}")
    client_file = work_dir / f"client-profile-{index}.json"
    client_file.unlink(missing_ok=True)
    before = os.environ.get(CLIENT_PROFILE_ENV)
    os.environ[CLIENT_PROFILE_ENV] = str(client_file)  # this process runs the clients
    try:
        with TenantMeter() as meter, SpeedMeter() as speed:
            summary = run_real(protocol="raft", nodes=nodes, clients=clients, duration_s=duration_s,
                               seed=seed + index, out=run_dir,
                               workload=Workload(num_clients=clients, read_fraction=0.0, cas_fraction=0.0),
                               check=False, extra_env={CPU_PROFILE_ENV: "1"}, trace=False)
    finally:
        if before is None:
            os.environ.pop(CLIENT_PROFILE_ENV, None)
        else:
            os.environ[CLIENT_PROFILE_ENV] = before
    p.summaries.append(summary)
    p.windows.append(run_windows(run_dir / "history.jsonl"))
    p.chunks.extend(speed.within(summary.get("load_window_monotonic_s")))  # the load's, not the start-up's
    if meter.busy_cores is not None:
        p.tenant_cores.append(meter.busy_cores)
    for path in sorted(run_dir.glob("node-*/cpu-profile-*.json")):
        data = json.loads(path.read_text())
        if "process_cpu_ns" in data:
            p.other_threads_s += max(0, data["process_cpu_ns"] - data["loop_cpu_ns"]) / 1e9
        p.periods.extend(data.get("busy_periods", []))
        pauses = (data.get("gc") or {}).get("pauses", [])
        p.held.update(len(p.syncs) + i for i in gc_held(data.get("syncs", []), pauses))
        p.syncs.extend(data.get("syncs", []))
        add_gc(p.gcs["node"], data)
        for key, value in (data.get("carried") or {}).items():
            p.carried[key] = p.carried.get(key, 0) + int(value)
        for kind, samples in data["handler_ns"].items():
            p.handler.setdefault(kind, []).extend(s / 1e9 for s in samples)
    client_data = json.loads(client_file.read_text()) if client_file.exists() else {}
    p.client_periods.extend(client_data.get("busy_periods", []))
    add_gc(p.gcs["client"], client_data)
    p.connects.extend(client_data.get("connects_s", []))


def _cpu_result(p: SimpleNamespace, *, runs: int, duration_s: float, wake_probe_s: float | None,
                gc_source: str) -> dict[str, Any]:
    """The CPU runs' fits and records (see :func:`measure_cpu`)."""
    ordered = sorted(p.summaries, key=lambda r: r.get("throughput_ops_s") or 0.0)
    summary = ordered[(len(ordered) - 1) // 2]
    stalled, disk_stalls, stall_record = split_stalls(p.syncs, runs * duration_s, p.held)
    stall_record["gc_held_fsyncs"] = len(p.held)
    stalled |= p.held  # neither a service time nor a stall: the collections are drawn apart
    wake, per_item = fit_amortisation(p.periods)
    by_kind = fit_amortisation_by_kind(p.periods)
    by_kind_probed = fit_amortisation_by_kind(p.periods, wake_s=wake_probe_s) if wake_probe_s is not None else None
    client_wake, client_per_op = fit_amortisation(p.client_periods)
    items = np.asarray([period[1] for period in p.periods], dtype=float)
    client_items = np.asarray([period[1] for period in p.client_periods], dtype=float)
    return {"handler": p.handler, "wake_s": wake, "io_per_input_s": per_item, "client_wake_s": client_wake,
            "client_per_op_s": client_per_op, "summary": summary, "connects_s": p.connects,
            "runs": [{k: r.get(k) for k in RUN_FIELDS} for r in p.summaries],
            "inputs": sum(len(v) for v in p.handler.values()),
            # the run's fsyncs, within the files' last blocks and allocating a new one (older runtimes: all within),
            # less those the shared device's stalls held (split_stalls: drawn as stalls, not as a service time)
            "fsync_s": [s[2] / 1e9 for i, s in enumerate(p.syncs)
                        if len(s) > 2 and s[2] > 0 and not (len(s) > 4 and s[4]) and i not in stalled],
            "fsync_grow_s": [s[2] / 1e9 for i, s in enumerate(p.syncs)
                             if len(s) > 4 and s[2] > 0 and s[4] and i not in stalled],
            "disk_stalls": disk_stalls, "disk_stall_record": stall_record,
            # from the storage thread holding the lock after its write to the loop running the completion
            "handback_s": [s[1] / 1e9 for i, s in enumerate(p.syncs) if s[1] > 0 and i not in p.held],
            # from the loop's submit to the storage thread running the job (its wake-up, the lock)
            "handover_s": [s[5] / 1e9 for i, s in enumerate(p.syncs) if len(s) > 5 and s[5] > 0 and i not in p.held],
            "tenant_cores": float(np.mean(p.tenant_cores)) if p.tenant_cores else None,
            "gc": {who: {"pauses_s": pauses, "items": items, "processes": processes}
                   for who, (pauses, items, processes) in p.gcs.items()},
            "gc_source": gc_source,
            "cpu_chunk_s": float(np.median(p.chunks)) if p.chunks else None,
            "windows": pooled(p.windows),
            "carried": p.carried,
            "sync_cpu_s": p.other_threads_s / len(p.syncs) if p.syncs else None,
            "busy_periods": {"node": len(p.periods), "node_items_mean": float(items.mean()) if items.size else None,
                             "node_pooled": {"wake_s": wake, "per_item_s": per_item},
                             **({"node_by_kind": by_kind} if by_kind else {}),
                             **({"node_by_kind_probed_wake": by_kind_probed} if by_kind_probed else {}),
                             "client": len(p.client_periods),
                             "client_items_mean": float(client_items.mean()) if client_items.size else None},
            "group_commit": {"syncs": len(p.syncs),
                             "group_mean": float(np.mean([s[0] for s in p.syncs])) if p.syncs else None,
                             "handoff_median_s": float(np.median([s[1] for s in p.syncs]) / 1e9) if p.syncs else None,
                             # the first half under load: submitted -> the storage thread runs the job (the lock
                             # and a core), its 10th / 50th / 90th / 99th percentiles (s); beside the model, which
                             # draws the idle probe's half and waits for the lock itself
                             **({"handover_quantiles_s": [float(q) / 1e9 for q in np.quantile(
                                 [s[5] for s in p.syncs], [0.1, 0.5, 0.9, 0.99])]}
                                if p.syncs and all(len(s) > 5 for s in p.syncs) else {}),
                             # the storage thread's CPU inside the timed write + fsync (already in the fsync's wall
                             # time), per fsync: how much of sync_cpu overlaps the wait rather than preceding it
                             **({"cpu_in_fsync_mean_s": float(np.mean([s[3] for s in p.syncs]) / 1e9)}
                                if p.syncs and all(len(s) > 3 for s in p.syncs) else {})}}


def plain_gc(run_dir: Path, *, nodes: int, clients: int, duration_s: float, seed: int) -> list[Any] | None:
    """The nodes' older-generation collections in a run without the CPU profile (``GC_PROFILE_ENV``: only the
    collections and the items handled are recorded), pooled as :func:`add_gc` does; None if none was recorded.

    The CPU profile's own records make its processes collect more often and longer: measured here at 8 clients,
    a profiled leader (21k items in 3 s) had 65 young collections, 6 of generation 1 and a 12 ms full one, an
    unprofiled leader (22k items) 20 young, 2 of generation 1 and no full one; its followers 34-36 young and 3
    older against 20-21 and 2. The simulator drew the profiled rate and the full collection, one stall of all
    clients per simulated 3 s leader that the experiment's real runs never had. So the nodes' collections come from
    this run, which allocates as every other real run does."""
    from seedance.real.clients import Workload
    from seedance.real.run import run_real
    from seedance.real.runtime import GC_PROFILE_ENV

    run_real(protocol="raft", nodes=nodes, clients=clients, duration_s=duration_s, seed=seed, out=run_dir,
             workload=Workload(num_clients=clients, read_fraction=0.0, cas_fraction=0.0), check=False,
             extra_env={GC_PROFILE_ENV: "1"}, trace=False)
    pooled: list[Any] = [[], 0, []]
    for path in sorted(run_dir.glob("node-*/gc-profile-*.json")):
        add_gc(pooled, json.loads(path.read_text()))
    return pooled if pooled[1] > 0 else None


def run_windows(history: Path) -> Any:
    """A real run's latency windows (:func:`seedance.history.spells.latency_windows`), None without a history."""
    from seedance.history.events import read_jsonl
    from seedance.history.spells import history_windows

    return history_windows(read_jsonl(history)) if history.exists() else None


def _probes(work_dir: Path, nodes: int, seed: int) -> SimpleNamespace:
    """Every probe apart from the CPU runs (see the module docstring), in the order they run."""
    p = SimpleNamespace(facts=machine_facts(work_dir))
    p.fsync_samples, p.bandwidth = measure_fsync(work_dir)
    p.loopback_wall, p.loopback_cpu = measure_loopback_with_cpu()
    p.loopback, p.loopback_kept = loopback_beyond_cpu(p.loopback_wall, p.loopback_cpu)
    p.handoff = measure_handoff()
    p.tenants_busy, p.tenant_slices = measure_tenants()
    p.wake_probe = measure_wake()
    p.write_walls, p.write_cpus = measure_write(work_dir)
    p.probe_within, p.probe_grow, p.block = measure_fsync_grow(work_dir)
    p.entry_send_s, p.entry_recv_s = measure_entry_codec()
    p.restarts = restart_samples(work_dir / "restart-probe", nodes=nodes, seed=seed)
    return p


def measure_host(work_dir: Path, *, nodes: int = 3, clients: int = 8, duration_s: float = 3.0,
                 seed: int = 1, runs: int = RUNS) -> tuple[HostProfile, dict[str, Any]]:
    """Measure everything (see the module docstring) and fit the profile, before its calibrations against the
    simulator (:func:`seedance.experiments.host_profile.profile_host`); also the CPU runs' record
    (:func:`measure_cpu`: their median run's ``summary``, their latency ``windows``)."""
    work_dir = Path(work_dir)
    p = _probes(work_dir, nodes, seed)
    cpu = measure_cpu(work_dir, nodes=nodes, clients=clients, duration_s=duration_s, seed=seed, runs=runs,
                      wake_probe_s=float(np.median(p.wake_probe)) if p.wake_probe else None)
    # restarts again, on a copy of the first CPU run's durable state: what recovering a log costs per entry
    first_run = work_dir / ("raft" if runs == 1 else "raft-0")
    p.entries = float(np.mean([log_entries(first_run / f"node-{r}" / "state") for r in range(nodes)]))
    p.recovering = restart_samples(work_dir / "recovery-probe", nodes=nodes, restarts=nodes, seed=seed,
                                   state_from=first_run)
    recovery = fit_recovery(p.restarts, p.recovering, p.entries)
    by_kind = cpu["busy_periods"].get("node_by_kind")
    fsync_grow, p.grow_source = fsync_grow_kind(cpu["fsync_s"], cpu["fsync_grow_s"], p.probe_within, p.probe_grow)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    from seedance.real.messaging import RECONNECT_S

    profile = HostProfile(
        cores=cores,
        cpu={k: LogNormal.fit(v) for k, v in cpu["handler"].items() if k in KINDS},
        io_per_input=LogNormal(cpu["io_per_input_s"]),
        # by kind where the runtime recorded kinds (the wake-up apart from items of different cost), else pooled
        wake=LogNormal(by_kind["wake_s"] if by_kind else cpu["wake_s"]),
        io_per_kind={k: LogNormal(v) for k, v in by_kind["per_kind_s"].items()} if by_kind else None,
        client_wake=LogNormal(cpu["client_wake_s"]),
        handoff=LogNormal.fit(p.handoff),
        # ... whose second half, under the run's load, is the run's own (the lock's handover, the loop's turns)
        handback=Empirical.fit(cpu["handback_s"]) if len(cpu["handback_s"]) >= 50 else None,
        # ... and its first half too: the loop's submit to the thread running the write (the idle probe's half is
        # ~17 us; under the run's load 74-119 us at the median)
        handover=Empirical.fit(cpu["handover_s"]) if len(cpu["handover_s"]) >= 50 else None,
        # the other tenants during the profile run (as sim-vs-real measures them during each of its runs); the probe
        # alone (its own busy cores recorded in measured) gives their bursts' shape
        tenants=TenantProfile(cpu["tenant_cores"] if cpu["tenant_cores"] is not None else p.tenants_busy,
                              LogNormal.fit(p.tenant_slices)),
        **fit_connects(cpu["connects_s"]),
        # the storage thread's CPU per fsync: the part inside the timed write + fsync holds a core during the wait
        # (it is inside the fsync's wall time), the rest precedes it
        **sync_cpus(cpu["sync_cpu_s"], cpu["group_commit"].get("cpu_in_fsync_mean_s")),
        # the fsyncs of the profile run itself (every node's storage thread: write and fsync, three processes on
        # one disk as in every run), as their measured quantiles (the tail sets the run's p99); the probe's, taken
        # alone, only where the run recorded none
        fsync=Empirical.fit(cpu["fsync_s"]) if cpu["fsync_s"] else LogNormal.fit(p.fsync_samples),
        # ... split by whether an append of it reached a new file block (the allocation's metadata commits too)
        fsync_grow=fsync_grow, block_bytes=p.block,
        # ... and the shared device's stalls, which held every node's fsyncs at once (split_stalls)
        disk_stalls=cpu["disk_stalls"],
        # the frame path's CPU per log entry a message carries, around the run's mean entries per message
        entries=entry_costs(p.entry_send_s, p.entry_recv_s, cpu["carried"]),
        # the interpreter's older-generation collections in the nodes and in the client process (their pauses)
        gc=fit_gc(cpu["gc"]["node"]["pauses_s"], cpu["gc"]["node"]["items"], cpu["gc"]["node"]["processes"]),
        client_gc=fit_gc(cpu["gc"]["client"]["pauses_s"], cpu["gc"]["client"]["items"]),
        write_bandwidth_GBps=p.bandwidth,
        # with fsync off (page cache only), probed on the real storage code apart from any run
        write=Empirical.fit(p.write_walls), write_cpu=LogNormal(float(np.median(p.write_cpus))),
        **recovery,
        loopback=LogNormal.fit(p.loopback),
        client_per_op=LogNormal(cpu["client_per_op_s"]),
        reconnect_s=RECONNECT_S,  # the transport's, not measured: when a running peer reaches a restarted node
        measured=_measured(p, cpu, cores, {"protocol": "raft", "nodes": nodes, "clients": clients,
                                           "duration_s": duration_s, "seed": seed, "runs": runs, "fsync": True}),
    )
    return profile, cpu


def _measured(p: SimpleNamespace, cpu: dict[str, Any], cores: int, config: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``measured`` record: where, when and how it was measured, the probes beside the fits."""
    summary = cpu["summary"]
    return {**p.facts, "cores_used": cores, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": config,
            "samples": {"fsync": len(p.fsync_samples), "loopback": len(p.loopback), "handoff": len(p.handoff),
                        "inputs": cpu["inputs"], "write": len(p.write_walls), "restart": len(p.restarts[0])},
            # restarts on a copy of the first CPU run's logs (their CPU until ready, s) and those logs' entries
            "recovery_probe": {"entries": p.entries, "cpu_s": p.recovering[1], "wall_s": p.recovering[0]},
            "busy_periods": cpu["busy_periods"], "group_commit": cpu["group_commit"],
            # the direct probe of a wake-up (an idle loop, one message, a no-op callback): beside the fits
            "wake_probe": {"samples": len(p.wake_probe), **asdict(LogNormal.fit(p.wake_probe))},
            "fsync_probe": asdict(LogNormal.fit(p.fsync_samples)), "tenant_probe_busy_cores": p.tenants_busy,
            # the probe's one-way latency as measured, the CPU in it, and the share kept as `loopback`
            "loopback_probe": {"one_way_median_s": float(np.median(p.loopback_wall)),
                               "cpu_per_one_way_s": p.loopback_cpu, "kept": p.loopback_kept},
            "gc": {who: {"collections": len(v["pauses_s"]), "items": v["items"]} for who, v in cpu["gc"].items()},
            "gc_nodes_from": cpu.get("gc_source"),
            # the cores' speed during the CPU runs (SpeedMeter's median chunk of thread CPU)
            "cpu_chunk_s": cpu["cpu_chunk_s"],
            "disk_stalls": cpu["disk_stall_record"],
            "fsync_grow": {"source": p.grow_source, "run_samples": len(cpu["fsync_grow_s"]),
                           "run_within_samples": len(cpu["fsync_s"]),
                           "probe_within_median_s": float(np.median(p.probe_within)),
                           "probe_grow_median_s": float(np.median(p.probe_grow)),
                           **({"run_within_median_s": float(np.median(cpu["fsync_s"])),
                               "run_grow_median_s": float(np.median(cpu["fsync_grow_s"]))}
                              if cpu["fsync_s"] and cpu["fsync_grow_s"] else {})},
            # the run's fsyncs as a fitted log-normal too (what profiles before the empirical form held)
            **({"fsync_lognormal": asdict(LogNormal.fit(cpu["fsync_s"]))} if cpu["fsync_s"] else {}),
            # the run of median throughput (what the tenants' share is calibrated to), and every run
            "raft_run": {k: summary.get(k) for k in RUN_FIELDS}, "raft_runs": cpu["runs"]}
