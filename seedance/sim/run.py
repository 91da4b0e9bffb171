"""``simulate(config) -> SimResult``: one seeded run, its summary, and the files it leaves behind.

Rules:

* The run is a pure function of the config (and code version). One root ``SeedSequence(seed)`` is spawned, in this
  order, into: node generators (one child per node, one grandchild per incarnation), the network's fault
  generator, the workload generator, the nemesis generator. Nothing reads a wall clock or a global RNG; wall time
  is measured only to report speed and never enters the trace.
* Phases: the faulty phase is ``[0, faulty_fraction · duration)`` when a nemesis is configured (empty otherwise);
  the healed phase is the rest. Liveness (:mod:`seedance.sim.liveness`): ``ops_ok_healed`` counts operations that
  completed ``ok`` in the healed phase; ``progress_after_heal`` says the run recovered to ``recovery_fraction``
  (50 %) of the same seed's fault-free throughput within ``recovery_bound_s`` (1 s) of the heal — a run with faults
  is simulated a second time without them for that baseline (``liveness=False`` skips it).
* Invariant hooks ``hook(view) -> str | None`` run after every handled input (``invariant_every_s=None``) or every
  ``invariant_every_s`` of virtual time; a returned string is a violation, recorded with its time, and (by default)
  stops the run. The view exposes the live node objects, so a protocol's tests can check e.g. Raft's Election
  Safety across nodes.
* The linearizability verdict comes from :func:`seedance.history.linearizability.check` (model ``kv``);
  ``"unknown"`` when the checker runs out of time or is not installed.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import simpy
from simpy.core import StopSimulation

from seedance.history.events import Event, merge_by_time
from seedance.history.jsonl import write_jsonl
from seedance.history.replica_log import ReplicaLog, merge_history
from seedance.history.stream import HistoryLog, summarize_stream
from seedance.history.summary import protocol_summary
from seedance.models.protocols import registry
from seedance.models.protocols.contract import ProtocolSpec
from seedance.sim.background import Background
from seedance.sim.chrome_aside import write_chrome_aside
from seedance.sim.collectives import Collectives
from seedance.sim.collector import bulk, reclaim, valve
from seedance.sim.config import SimConfig, extra_settings
from seedance.sim.kernel import call_at, run_until
from seedance.sim.liveness import Recovery, assess_run, liveness_summary
from seedance.sim.nemesis import FaultWindow, Nemesis, draw_schedule
from seedance.sim.network import Network, placement, resolve_topology
from seedance.sim.runtime import Runtime
from seedance.tracing import Trace
from seedance.sim.workload import Clients


@dataclass(frozen=True)
class SimView:
    """What an invariant hook sees: virtual time, the runtime (hosts, network) and the history so far."""

    now: float
    runtime: Runtime
    clients: Clients

    @property
    def history(self) -> list[Event]:
        return self.clients.history

    @property
    def nodes(self) -> list[Any]:
        """The live node objects (None for a crashed node), by node id."""
        return [host.node if host.up else None for host in self.runtime.hosts]


Invariant = Callable[[SimView], "str | None"]


@dataclass(frozen=True, kw_only=True)
class SimResult:
    config: SimConfig
    clients: Clients = field(repr=False)
    trace: Trace
    trace_sha256: str
    ops_ok: int
    ops_failed: int
    ops_info: int
    throughput_ops_s: float
    latency_ms_p50: float | None
    latency_ms_p99: float | None
    healed_at_s: float
    ops_ok_healed: int
    linearizable: bool | str | None  # None: not checked
    check: dict[str, Any] | None
    violations: list[tuple[float, str]]
    faults: list[FaultWindow]
    stats: dict[str, Any]
    runtime: Runtime = field(repr=False)
    wall_s: float = 0.0
    liveness: Recovery | None = None  # None: not assessed (simulate(..., liveness=False))
    # the nodes' Observe effects: a ReplicaLog (spilled to disk as the run goes), or a list of ReplicaEvents
    replicas: Any = field(default_factory=list, repr=False)
    background: dict[str, Any] = field(default_factory=dict)  # background collectives: count and times per op:size
    extra: dict[str, Any] = field(default_factory=dict)  # the protocol's own summary keys (ProtocolSpec.summarize)

    @property
    def history(self) -> list[Event]:
        """The run's history (invoke / ok / fail / info events, in order)."""
        return self.clients.history

    @property
    def progress_after_heal(self) -> bool:
        """Recovered to the configured share of fault-free throughput in time (any ok op, when not assessed)."""
        return self.liveness.recovered if self.liveness is not None else self.ops_ok_healed > 0

    @property
    def reproduce(self) -> str:
        return reproduce_command(self.config)

    def summary(self, *, history_path: str | None = None) -> dict[str, Any]:
        """The CLI's JSON object (without run metadata)."""
        return {
            "protocol": self.config.protocol_name, "seed": self.config.seed, "nodes": self.config.nodes,
            "duration_s": self.config.duration_s,
            "ops_ok": self.ops_ok, "ops_failed": self.ops_failed, "ops_info": self.ops_info,
            "throughput_ops_s": self.throughput_ops_s,
            "latency_ms_p50": self.latency_ms_p50, "latency_ms_p99": self.latency_ms_p99,
            "linearizable": "unknown" if self.linearizable is None else self.linearizable,
            "trace_sha256": self.trace_sha256, "history": history_path, "reproduce": self.reproduce,
            "healed_at_s": self.healed_at_s, "ops_ok_healed": self.ops_ok_healed,
            "progress_after_heal": self.progress_after_heal,
            **liveness_summary(self.liveness),
            **({"background": self.background} if self.background else {}),
            **({"replica_events": len(self.replicas)} if self.replicas else {}),
            **self.extra,
            "faults": [w.name for w in self.faults], "violations": [list(v) for v in self.violations],
            "check": self.check, "stats": self.stats, "wall_s": self.wall_s,
        }


def reproduce_command(config: SimConfig) -> str:
    """The one-line ``seedance sim run`` command that reruns ``config`` (settings without a flag go in --extra).

    A run given a Topology object rather than a preset name or file, or a ProtocolSpec that is not registered, is
    reproduced from Python (its command names what it can).
    """
    w = config.workload
    args = ["sim", "run", "--protocol", config.protocol_name, "--nodes", str(config.nodes),
            "--duration", repr(config.duration_s), "--seed", str(config.seed)]
    if isinstance(config.topology, str):
        args += ["--topology", config.topology]
        if config.topology_hosts is not None:
            args += ["--hosts", str(config.topology_hosts)]
    if config.nodes_per_host is not None:
        args += ["--nodes-per-host", str(config.nodes_per_host)]
    if config.nemesis.faults:
        args += ["--nemesis", ",".join(config.nemesis.faults)]
        if config.nemesis.faulty_fraction != 0.6:
            args += ["--faulty-fraction", repr(config.nemesis.faulty_fraction)]
    args += ["--workload", w.mode]
    args += ["--clients", str(w.clients)] if w.mode != "open" else ["--rate", repr(w.rate_ops_s)]
    if w.mode == "frame":
        args += ["--frame-rate", repr(w.frame_rate_hz), "--writes-per-frame", str(w.writes_per_frame)]
    args += ["--mix", ",".join(repr(x) for x in w.mix), "--keys", str(w.keys)]
    dist = {"uniform": "uniform", "zipf": f"zipf:{w.zipf_s!r}", "conflict": f"conflict:{w.conflict_rate!r}"}
    args += ["--key-dist", dist[w.key_distribution], "--op-timeout", repr(w.op_timeout_s)]
    for key, value in sorted(config.protocol_config.items()):
        args += ["--set", f"{key}={json.dumps(value)}"]
    if not config.trace:
        args.append("--no-trace")
    for spec in config.background:
        args += ["--background", spec.text]
    if not config.monitor:
        args.append("--no-monitor")
    if isinstance(config.host_profile, str):
        args += ["--host-profile", config.host_profile]
    extra = extra_settings(config)
    if extra:
        args += ["--extra", json.dumps(extra, sort_keys=True, separators=(",", ":"))]
    return "seedance " + shlex.join(args)


def _spec(protocol: Any) -> ProtocolSpec:
    if isinstance(protocol, ProtocolSpec):
        return protocol
    if isinstance(protocol, str):
        return registry.get(protocol)
    from seedance.errors import SpecError

    raise SpecError("protocol", f"expected a protocol name or ProtocolSpec, got {type(protocol).__name__}",
                    f"valid names: {', '.join(registry.names())}")



def simulate(config: SimConfig, *, invariants: Sequence[Invariant] = (), invariant_every_s: float | None = None,
             stop_on_violation: bool = True, progress: Callable[[float], None] | None = None,
             actions: Sequence[tuple[float, Callable[[Runtime], None]]] = (), liveness: bool = True,
             phase: Callable[[str], None] | None = None) -> SimResult:
    """Run ``config`` to completion and return its result (history, trace, counts, verdicts).

    ``actions`` are scripted interventions ``(time_s, fn(runtime))`` for scenario tests (crash node 2 at 10 ms,
    cut a link...), run at their virtual time in the order given (the nodes boot at 0; the load starts at
    ``workload.start_s``).
    """
    reclaim()  # an earlier run's garbage in this process, before this one's start is frozen (collector.py)
    wall_start = time.perf_counter()
    spec = _spec(config.protocol)
    topology = resolve_topology(config.topology, config.nodes, hosts=config.topology_hosts,
                                nodes_per_host=config.nodes_per_host)
    root = np.random.SeedSequence(config.seed)
    _node_seq, network_seq, workload_seq, nemesis_seq = root.spawn(4)  # nodes: seedance.engine.rng
    env = simpy.Environment()
    trace = Trace(enabled=config.trace, num_nodes=config.nodes)
    trace.attach(lambda at, fn: call_at(env, at, fn), lambda: env.now)  # spills records to a temporary file as they accumulate (memory stays bounded)
    network = Network(topology, config.nodes, np.random.default_rng(network_seq),
                      devices=placement(topology, config.nodes, config.nodes_per_host))
    protocol_config = {**spec.default_config, **config.protocol_config}
    runtime = Runtime(env=env, spec=spec, protocol_config=protocol_config, num_nodes=config.nodes, network=network,
                      cpu=config.cpu, storage=config.storage, trace=trace, seed=config.seed, host=config.host())
    runtime.collectives = Collectives(runtime)
    start = config.workload.start_s  # the load (and the fault schedule's clock) starts here; the nodes boot at 0
    end = start + config.duration_s
    clients = Clients(env=env, runtime=runtime, config=config.workload, rng=np.random.default_rng(workload_seq),
                      num_nodes=config.nodes, end_s=end, start_s=start)
    faults = config.nemesis.faults
    schedule, healed_at = _fault_schedule(config, np.random.default_rng(nemesis_seq), start)
    nemesis = Nemesis(runtime=runtime, schedule=schedule, faulty_end_s=healed_at)
    _check_operations(spec, config)
    replicas = ReplicaLog()  # spilled to a temporary file in chunks: memory stays bounded
    runtime.observe_sink = lambda node_id, effect, at: replicas.add(node_id, effect.what, effect.key,
                                                                    _plain(effect.value), at)
    background = Background(runtime, config.background, end)

    violations: list[tuple[float, str]] = []
    monitor = _install_monitor(spec, runtime, violations, stop_on_violation) if config.monitor else None
    if invariants:
        _install_invariants(env, runtime, clients, invariants, invariant_every_s, violations, stop_on_violation)
    cpu_at_start: list[float] = []  # the modelled cores' work when the load starts (a host profile's cores)
    try:
        with bulk():  # the collector off for the boot (N² per-peer entries) and the loop (collector.py)
            runtime.boot()
            for at_s, action in actions:
                call_at(env, at_s, lambda _event, action=action: action(runtime))
            nemesis.install()
            background.install()
            clients.start()
            if runtime.cores is not None:
                call_at(env, start, lambda _event: cpu_at_start.append(runtime.cores.work_s))
            for k in range(1, 101):  # in 100 chunks: progress reports and the collector's valve
                stopped = run_until(env, start + config.duration_s * k / 100)
                valve()
                if stopped or (violations and stop_on_violation):
                    break
                if progress is not None:
                    progress(env.now - start)
    except Exception as err:  # a protocol bug: say how to get it back
        err.add_note(f"reproduce: {reproduce_command(config)}")
        raise
    end = env.now
    with bulk():  # the checks build millions of short-lived objects over a heap of millions of long-lived ones
        if monitor is not None and not (violations and stop_on_violation):  # the full check over the final state
            _finish_monitor(monitor, runtime, violations)
        clients.finish(end)
        if phase is not None and config.check:  # the phases after the simulation, for progress reports
            phase(f"checking linearizability of {len(clients.log)} events")
        result = _result(config, runtime, clients, trace, schedule, healed_at, violations,
                         time.perf_counter() - wall_start, nemesis.applied, spec, replicas, background.summary())
    if cpu_at_start:  # the CPU taken over the load window, the real run's node_cpu_s + client_cpu_s
        result.stats["cpu_s"] = runtime.cores.work_s - cpu_at_start[0]
    if not liveness or (violations and stop_on_violation):  # a run stopped by a safety violation: no baseline
        return result
    if phase is not None and faults:
        phase("simulating the same seed without faults (liveness baseline)")
    return assess_run(result, simulate, faulty=bool(faults))


def _fault_schedule(config: SimConfig, rng: np.random.Generator, start: float) -> tuple[list, float]:
    """The nemesis' fault windows (drawn over the faulty part of the run, shifted to the load's start) and the time
    the faults end (the healed phase begins)."""
    faults = config.nemesis.faults
    faulty_end = config.duration_s * config.nemesis.faulty_fraction if faults else 0.0
    schedule = draw_schedule(faults, num_nodes=config.nodes, faulty_end_s=faulty_end, rng=rng,
                             window_s=config.nemesis.window_s, gap_s=config.nemesis.gap_s) if faults else []
    if start:
        schedule = [replace(w, start_s=start + w.start_s, end_s=start + w.end_s) for w in schedule]
    return schedule, start + faulty_end


def _install_invariants(env: simpy.Environment, runtime: Runtime, clients: Clients, invariants: Sequence[Invariant],
                        every_s: float | None, violations: list[tuple[float, str]], stop_on_violation: bool) -> None:
    """Check ``invariants`` on a :class:`SimView` after every input (``every_s`` None) or every ``every_s``."""
    def check_invariants(_host: Any = None) -> None:
        view = SimView(now=env.now, runtime=runtime, clients=clients)
        for hook in invariants:
            problem = hook(view)
            if problem:
                violations.append((env.now, str(problem)))
                if stop_on_violation:
                    raise StopSimulation(None)

    if every_s is None:
        runtime.after_input.append(check_invariants)
    else:
        def periodic(_event: Any) -> None:
            check_invariants()
            call_at(env, env.now + every_s, periodic)

        call_at(env, every_s, periodic)


def _install_monitor(spec: ProtocolSpec, runtime: Runtime, violations: list[tuple[float, str]],
                     stop_on_violation: bool) -> Any:
    """The protocol's invariant monitor, told after every input about the node that handled it (None: none).

    A node's state changes only while it handles an input, so a monitor with ``observe_node`` examines that node
    alone (its cost per input does not grow with the number of nodes); a node started or restarted is examined at
    the next input anywhere, as every node was before. A monitor with ``observe`` only sees every live node each time.
    """
    if spec.monitor is None:
        return None
    monitor = spec.monitor()
    env, hosts = runtime.env, runtime.hosts
    if not hasattr(monitor, "observe_node"):
        def check_all(_host: Any) -> None:
            _breach(monitor.observe([host.node for host in hosts if host.up]), env.now, violations, stop_on_violation)

        runtime.after_input.append(check_all)
        return monitor
    observe_node = monitor.observe_node
    pending = set(range(len(hosts)))  # nodes not examined since they started: all of them at boot

    def check_node(host: Any) -> None:
        node = host.node
        found = observe_node(node) if node is not None else []
        if pending:
            for node_id in sorted(pending):
                other = hosts[node_id]
                if other.up and other is not host:
                    found = found + observe_node(other.node)
            pending.clear()
        if found:
            _breach(found, env.now, violations, stop_on_violation)

    forget = getattr(monitor, "forget", lambda node_id: None)

    def crashed(node_id: int, _at: float) -> None:
        forget(node_id)
        pending.add(node_id)  # examined again once restarted

    runtime.after_input.append(check_node)
    runtime.crash_sinks.append(crashed)
    return monitor


def _breach(found: list[str], now: float, violations: list[tuple[float, str]], stop_on_violation: bool) -> None:
    if found:
        violations.append((now, "; ".join(found)))
        if stop_on_violation:
            raise StopSimulation(None)


def _finish_monitor(monitor: Any, runtime: Runtime, violations: list[tuple[float, str]]) -> None:
    """The protocol's full check over the final state of the live nodes (``finish``), at the end of every run."""
    finish = getattr(monitor, "finish", None)
    if finish is None:
        return
    found = finish([host.node for host in runtime.hosts if host.up])
    if found:
        violations.append((runtime.env.now, "end-of-run check: " + "; ".join(found)))


def _result(config: SimConfig, runtime: Runtime, clients: Clients, trace: Trace, schedule: list[FaultWindow],
            healed_at: float, violations: list[tuple[float, str]], wall_s: float, faults_applied: int,
            spec: ProtocolSpec | None = None, replicas: ReplicaLog | None = None,
            background: dict[str, Any] | None = None) -> SimResult:
    summary = summarize_stream(clients.log, config.duration_s)  # read back from disk, not held whole
    check = None
    linearizable: bool | str | None = None
    model = spec.checker if spec is not None else "kv"
    if config.check and model is not None:
        check = check_history(clients.log, timeout_s=config.check_timeout_s, model=model)
        linearizable = check["valid"]
    stats = {
        "messages_sent": runtime.messages_sent, "messages_delivered": runtime.messages_delivered,
        "messages_dropped": runtime.messages_dropped, "bytes_sent": runtime.network.bytes_sent,
        "inputs_handled": sum(host.handled for host in runtime.hosts),
        "fsyncs": sum(host.storage.fsyncs for host in runtime.hosts),
        "writes_lost": sum(host.storage.lost_writes for host in runtime.hosts),
        "collectives_completed": runtime.collectives.completed, "collectives_failed": runtime.collectives.failed,
        "faults_applied": faults_applied, "trace_records": len(trace), "processes": clients._next_process,
    }
    return SimResult(
        config=config, clients=clients, trace=trace, trace_sha256=trace.sha256(), **summary,
        healed_at_s=healed_at,
        ops_ok_healed=len(clients.ok_times) - clients.ok_times.count_below(healed_at),
        linearizable=linearizable, check=check, violations=violations, faults=schedule, stats=stats,
        runtime=runtime, wall_s=wall_s, replicas=replicas if replicas is not None else ReplicaLog(),
        background=dict(background or {}),
        extra=protocol_summary(spec, clients.log, replicas if replicas is not None else [], config.nodes),
    )


def check_history(history: list[Event] | HistoryLog, *, timeout_s: float,
                  model: str = "kv") -> dict[str, Any]:
    """Judge a history with the linearizability checker (the protocol's model, ``kv`` by default); ``valid`` is
    True, False or "unknown". A :class:`HistoryLog` is read back twice, every key's operations in windows (the check
    is per key; memory holds a window of operations, not a key's history)."""
    try:
        from seedance.history import linearizability
    except ImportError:
        return {"valid": "unknown", "reason": "seedance.history.linearizability is not installed"}
    if isinstance(history, HistoryLog):
        verdict = linearizability.check_streamed(history.events, model=model, timeout_s=timeout_s)
    else:
        verdict = linearizability.check(history, model=model, timeout_s=timeout_s)
    if isinstance(verdict, dict):
        out = dict(verdict)
    elif hasattr(verdict, "to_dict"):
        out = verdict.to_dict()
    else:
        out = {name: getattr(verdict, name) for name in ("valid", "ops", "elapsed_s", "first_violation")
               if hasattr(verdict, name)}
    valid = out.get("valid", "unknown")
    out["valid"] = valid if valid in (True, False) else "unknown"
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_operations(spec: ProtocolSpec, config: SimConfig) -> None:
    """The workload may only issue operations the protocol declares."""
    from seedance.errors import SpecError

    if config.workload.clients <= 0:
        return
    mix = (0.5, 0.5, 0.0) if config.workload.mode == "frame" else config.workload.mix  # frames: writes, a read
    for name, share in zip(("read", "write", "cas"), mix):
        if share > 0 and name not in spec.operations:
            raise SpecError("mix", f"protocol {spec.name!r} does not serve {name!r} operations",
                            f"operations it declares: {', '.join(spec.operations) or '(none)'}; give {name} a 0 share")


CHROME_EVENTS = 1_000_000  # trace.json's events at most by default (about 130 MB; viewers load it in seconds)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return repr(obj)


def write_outputs(result: SimResult, out_dir: str | Path, *, metadata: dict[str, Any] | None = None,
                  chrome_events: int | None = CHROME_EVENTS) -> dict[str, Any]:
    """Write ``history.jsonl``, ``trace.msgpack`` (every trace record; its sha256 is ``trace_sha256``),
    ``trace.json`` (the Chrome trace of the first ``chrome_events`` events, None: all of them) and ``summary.json``
    to ``out_dir``; the summary (``trace_json`` says how much of the trace trace.json shows)."""
    with bulk():  # a long run's outputs: millions of objects made and dropped over a heap of millions kept
        return _write_outputs(result, Path(out_dir), metadata, chrome_events)


def _write_outputs(result: SimResult, out: Path, metadata: dict[str, Any] | None,
                   chrome_events: int | None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    history = result.clients.log  # streamed from the run's log (not held whole) unless merged with replica events
    replicas = result.replicas
    if isinstance(replicas, ReplicaLog) and replicas:  # read back from disk in time order, merged as written
        history = merge_history(history, replicas)
    elif replicas:
        history = merge_by_time(history, replicas)
    shown = None
    if result.config.trace:  # --no-trace: no trace files (trace_sha256 is then the empty trace's)
        # trace.json is rendered by a forked child meanwhile (seedance.sim.chrome_aside): the same file
        chrome = write_chrome_aside(result.trace, out / "trace.json", limit=chrome_events,
                                    rest=f"every record is in trace.msgpack (seedance trace export {out} --from S "
                                         f"--to S --out FILE renders any window)")
        try:
            history_path = write_jsonl(history, out / "history.jsonl")
            result.trace.write_records(out / "trace.msgpack")
        finally:
            shown = chrome()
    else:
        history_path = write_jsonl(history, out / "history.jsonl")
    summary = result.summary(history_path=str(history_path))
    if shown is not None:
        summary["trace_json"] = {"events": shown["events"], "truncated": shown["truncated"],
                                 "until_s": shown["until_s"], "records": len(result.trace)}
    document = {**summary, "metadata": metadata or {}}
    text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False, default=_json_default)
    (out / "summary.json").write_text(text + "\n", encoding="utf-8")
    return summary
