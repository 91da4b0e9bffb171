"""Runners: what one run of a sweep point does. A runner is ``fn(params: dict, seed: int) -> dict[str, scalar]``
(flat metrics: int, float, str, bool or None), named in the registry by module path (``"module:function"``), so a
worker process (local or on a Dask cluster) imports it by name: no closures, no pickled code of ours.

Built-in runners, each a thin function over the library (not the CLI through a subprocess):

* ``cost`` — :func:`seedance.models.cost.collective_time`: ``topology`` (preset or file), ``nodes`` (servers),
  ``collective``, ``size`` (bytes or ``"1GiB"``), ``model`` (nccl | alpha-beta), ``algorithm``, ``protocol``.
  Metrics: ``time_s``, ``algbw_GBps``, ``busbw_GBps``, the algorithm / protocol / channels chosen, ``num_devices``.
* ``sim`` — :func:`seedance.sim.simulate`, the run of ``seedance sim run`` (its flags as parameters, underscored;
  protocol options as ``set: {...}``, settings without a flag as ``extra: {section: {...}}``). Metrics: the run
  summary flattened (throughput, client latency p50/p99, ops counts, linearizable, liveness, protocol keys,
  ``stats.*``), the protocol comparison's commit / execution latency, messages and bytes per op, EPaxos's fast-path
  fraction (:func:`seedance.experiments.protocols.latency_breakdown`), and ``command`` (the ``seedance sim run`` that
  reproduces the run).
* ``real`` — :func:`seedance.real.run.run_real` into the run's own directory: same shape on real processes.
* ``train`` — :func:`seedance.experiments.training_run.sim_train` / ``real_train`` (``runtime: sim | real``):
  ``scenario``, ``variant``, ``ranks``, ``steps``, ``commit_every``, ``set`` → the training summary's metrics.
* ``experiment`` — one study of :mod:`seedance.sweep.experiments` (what ``seedance experiment NAME`` runs, called
  as a library function; ``quick: true`` by default, other options as ``options: {...}``) into the run's own
  directory; its headline numbers (the scalars of its JSON summary) and ``out_dir``.

Each is listed by name in :mod:`seedance.sweep.registry` (imported only when a point is validated or run).
Validation: :func:`validate_params` applies the runner's ``validate(params)``, which raises
:class:`~seedance.errors.SpecError` naming the parameter (``params.nodez: unknown parameter; valid: ...``). A spec
may also name ``module:function`` directly as its runner (a plug-in without registration). A runner function may
carry ``imports``, a tuple of module names its worker imports before the first run (kept out of run times).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seedance.errors import SpecError
from seedance.models.topology.checks import check_topology_spec
# the registry (names -> "module:function", loaded lazily) is .registry; these names stay importable from here
from seedance.sweep.registry import (RunnerEntry, check_runner_name, entry, param_field,  # noqa: F401
                                     register_runner, resolve, runner_names, validate_params)

POINT_DIR_ENV = "SEEDANCE_SWEEP_POINT_DIR"


def current_point_dir() -> Path:
    """The directory a runner may write into for the run in progress (``DIR/runs/<key>``; created on demand)."""
    path = Path(os.environ.get(POINT_DIR_ENV) or Path.cwd() / "sweep-run")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -------------------------------------------------------------------------------------------------- helpers
def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and tuples as compact JSON strings; numpy scalars as Python ones."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if hasattr(value, "item") and not isinstance(value, (str, bytes)) and getattr(value, "ndim", 1) == 0:
            value = value.item()
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, separators=(",", ":"), default=str)
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def known(runner: str, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` over ``defaults``; an unknown parameter is a SpecError listing the valid ones."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise SpecError(f"params.{unknown[0]}", f"unknown parameter of runner {runner}",
                        f"valid: {', '.join(defaults)}")
    return {**defaults, **params}


def _names(field: str, value: Any) -> tuple[str, ...]:
    """A list of names or one comma-separated string."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SpecError(field, f"expected a list of names or a comma-separated string, got {value!r}")


def _mapping(field: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field, f"expected a mapping, got {value!r}", "e.g. {heartbeat_s: 0.05}")
    return dict(value)


def _mix(p: Mapping[str, Any]) -> tuple[float, float, float]:
    """``mix`` ([read, write, cas] or "r,w,c"), or ``read_fraction`` (+ ``cas_fraction``, default 0.1; the rest
    writes); default 0.5, 0.4, 0.1."""
    from seedance.validation import parse_mix

    if p.get("read_fraction") is not None or p.get("cas_fraction") is not None:
        if p["mix"] is not None:
            raise SpecError("params.read_fraction", "given with mix", "one of mix or read_fraction (+ cas_fraction)")
        read = 0.5 if p.get("read_fraction") is None else p["read_fraction"]
        cas = 0.1 if p.get("cas_fraction") is None else p["cas_fraction"]
        field = "params.read_fraction" if p.get("read_fraction") is not None else "params.cas_fraction"
        for name, value in ((field, read), (field, cas)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(name, f"must be a number, got {value!r}", "a fraction in [0, 1]")
        if not (0 <= read <= 1 and 0 <= cas <= 1 and read + cas <= 1 + 1e-9):
            raise SpecError(field, f"read {read!r} and cas {cas!r} do not fit in 1",
                            "fractions in [0, 1] with read_fraction + cas_fraction <= 1")
        return float(read), max(0.0, 1.0 - float(read) - float(cas)), float(cas)
    mix = p["mix"] if p["mix"] is not None else (0.5, 0.4, 0.1)
    text = mix if isinstance(mix, str) else ",".join(str(x) for x in mix) if isinstance(mix, (list, tuple)) else None
    if text is None:
        raise SpecError("params.mix", f"expected [read, write, cas] or 'r,w,c', got {mix!r}")
    return parse_mix(text, field="params.mix")


def _protocol_options(protocol: str, settings: dict[str, Any], nodes: int) -> None:
    """The check of ``--set`` options (unknown or bad ones), with errors named ``params.set.<option>``."""
    from seedance.models.protocols.registry import check_protocol_config

    try:
        check_protocol_config(protocol, settings, nodes)
    except SpecError as err:
        field = err.field.removeprefix("--set ").removeprefix(f"{protocol}.")
        raise SpecError(f"params.set.{field}", err.problem, err.valid) from None


def _topology(field: str, spec: Any, nodes: int | None) -> Any:
    """The topology a preset name or file describes (a bad one is a SpecError naming ``field``)."""
    from seedance.models.topology import load

    if not isinstance(spec, str):
        raise SpecError(field, f"expected a preset name or a file path, got {spec!r}")
    try:
        return load(spec, nodes=nodes)
    except SpecError as err:
        raise SpecError(field, err.problem, err.valid) from None


# ------------------------------------------------------------------------------------------------------ cost
COST_PARAMS: dict[str, Any] = {"topology": "hgx-h100", "nodes": None, "collective": "allreduce", "size": "1GiB",
                               "model": "nccl", "algorithm": "auto", "protocol": "auto"}


def _cost_setup(params: Mapping[str, Any]) -> dict[str, Any]:
    from seedance import validation as V
    from seedance.models.cost.collectives import check_algorithm, check_collective, check_model, check_protocol
    from seedance.models.units import parse_size

    p = known("cost", params, COST_PARAMS)
    collective = check_collective(p["collective"])
    model = check_model(p["model"])
    size = p["size"]
    size_bytes = int(parse_size(size, field="params.size")) if isinstance(size, str) else \
        V.integer("params.size", size, lo=1, hi=1 << 50)
    if p["nodes"] is not None:
        V.integer("params.nodes", p["nodes"], lo=1, hi=V.MAX_DEVICES, why=V.WHY_DEVICES)
    check_topology_spec("params.topology", p["topology"], p["nodes"], nodes_field="params.nodes")
    protocol = check_protocol(p["protocol"])
    if model != "nccl" and protocol != "auto":  # as `seedance cost` refuses it
        raise SpecError("params.protocol", f"{protocol} applies to the nccl model only", "auto with model alpha-beta")
    return {"collective": collective, "model": model, "size_bytes": size_bytes,
            "algorithm": check_algorithm(collective, p["algorithm"], model), "protocol": protocol,
            "topology": _topology("params.topology", p["topology"], p["nodes"])}


def validate_cost(params: dict[str, Any]) -> None:
    _cost_setup(params)


def run_cost(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One collective's predicted cost (deterministic: the seed is recorded, not used)."""
    from seedance.models.cost import collective_time

    s = _cost_setup(params)
    cost = collective_time(s["collective"], s["size_bytes"], s["topology"], algorithm=s["algorithm"],
                           model=s["model"], protocol=s["protocol"]).as_dict()
    out = {k: v for k, v in flatten(cost).items() if k not in ("collective", "model")}
    out["algorithm_used"] = out.pop("algorithm", None)
    out["protocol_used"] = out.pop("protocol", None)
    return out


# ------------------------------------------------------------------------------------------------------- sim
SIM_PARAMS: dict[str, Any] = {
    "protocol": "raft", "nodes": 5, "topology": None, "hosts": None, "nodes_per_host": None, "clients": 16,
    "duration": 1.0, "workload": "closed", "rate": 1000.0, "mix": None, "read_fraction": None, "cas_fraction": None,
    "keys": 8, "key_distribution": "uniform", "conflict_rate": 0.5, "zipf_s": 1.1, "op_timeout": 0.5,
    "frame_rate": None, "writes_per_frame": None, "nemesis": (), "faulty_fraction": 0.6, "background": (),
    "host_profile": None, "set": None, "extra": None, "check": True, "check_timeout": 30.0, "monitor": True,
    "trace": False,
}


_SIM_WORKLOAD_NAMES = {"mode": "workload", "rate_ops_s": "rate", "op_timeout_s": "op_timeout",
                       "frame_rate_hz": "frame_rate"}


def sim_config(params: Mapping[str, Any], seed: int) -> Any:
    """The :class:`seedance.sim.SimConfig` of a ``sim`` point (every value checked; errors name ``params.X``)."""
    from seedance import faults as fault_table
    from seedance import validation as V
    from seedance.models.protocols import registry
    from seedance.sim import CpuConfig, NemesisConfig, SimConfig, StorageConfig, WorkloadConfig

    p = known("sim", params, SIM_PARAMS)
    if not isinstance(p["protocol"], str):
        raise SpecError("params.protocol", f"expected a name, got {p['protocol']!r}",
                        f"valid: {', '.join(registry.names())}")
    registry.get(p["protocol"])
    V.integer("params.nodes", p["nodes"], lo=1, hi=V.MAX_SIM_NODES, why=V.WHY_SIM_NODES)
    V.integer("params.clients", p["clients"], lo=0, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
    V.number("params.duration", p["duration"], lo=0, hi=V.MAX_SIM_DURATION_S, lo_open=True, why=V.WHY_SIM_DURATION)
    V.integer("params.keys", p["keys"], lo=1, hi=V.MAX_KEYS)
    V.number("params.rate", p["rate"], lo=0, hi=V.MAX_RATE_OPS_S, lo_open=True)
    V.number("params.op_timeout", p["op_timeout"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    V.number("params.check_timeout", p["check_timeout"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    V.number("params.conflict_rate", p["conflict_rate"], lo=0, hi=1)
    V.number("params.faulty_fraction", p["faulty_fraction"], lo=0, hi=1, lo_open=True)
    for flag in ("check", "monitor", "trace"):
        if not isinstance(p[flag], bool):
            raise SpecError(f"params.{flag}", f"expected true or false, got {p[flag]!r}")
    workload = p["workload"]
    frame: dict[str, Any] = {}
    if p["frame_rate"] is not None or p["writes_per_frame"] is not None:
        workload = "frame"
    if workload == "frame":
        frame = {"frame_rate_hz": 60.0 if p["frame_rate"] is None else p["frame_rate"],
                 "writes_per_frame": 1 if p["writes_per_frame"] is None else p["writes_per_frame"]}
    for name, hi in (("hosts", V.MAX_DEVICES), ("nodes_per_host", V.MAX_SIM_NODES)):
        if p[name] is not None:
            V.integer(f"params.{name}", p[name], lo=1, hi=hi)
    more = _mapping("params.extra", p["extra"])
    protocol_config = _mapping("params.set", p["set"])
    try:
        from seedance.sim.config import parse_extra

        more = parse_extra(json.dumps(more)) if more else {}
        faults = fault_table.parse(",".join(_names("params.nemesis", p["nemesis"])), fault_table.SIM)
        config = SimConfig(
            protocol=p["protocol"], nodes=p["nodes"], duration_s=float(p["duration"]), seed=seed,
            topology=p["topology"], topology_hosts=p["hosts"], nodes_per_host=p["nodes_per_host"],
            protocol_config=protocol_config,
            workload=WorkloadConfig(mode=workload, clients=p["clients"], rate_ops_s=float(p["rate"]), mix=_mix(p),
                                    keys=p["keys"], key_distribution=p["key_distribution"],
                                    conflict_rate=float(p["conflict_rate"]), zipf_s=float(p["zipf_s"]),
                                    op_timeout_s=float(p["op_timeout"]), **frame, **more.get("workload", {})),
            nemesis=NemesisConfig(faults=faults, faulty_fraction=float(p["faulty_fraction"]),
                                  **more.get("nemesis", {})),
            cpu=CpuConfig(**more.get("cpu", {})), storage=StorageConfig(**more.get("storage", {})),
            check=p["check"], check_timeout_s=float(p["check_timeout"]), trace=p["trace"],
            background=_names("params.background", p["background"]), monitor=p["monitor"],
            host_profile=p["host_profile"])
        _protocol_options(p["protocol"], dict(config.protocol_config), p["nodes"])
        check_topology_spec("params.topology", p["topology"], p["hosts"], nodes_field="params.hosts")
        if p["topology"] is not None:
            _topology("params.topology", p["topology"], p["hosts"])
    except SpecError as err:
        field = err.field
        section, _, name = field.partition(".")
        if section == "workload":  # a WorkloadConfig field: the sweep parameter that sets it
            field = _SIM_WORKLOAD_NAMES.get(name, name if name in SIM_PARAMS else f"extra.workload.{name}")
        raise SpecError(param_field(field), err.problem, err.valid) from None
    return config


def validate_sim(params: dict[str, Any]) -> None:
    sim_config(params, 0)


def run_sim(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One ``seedance sim run`` (history in memory, nothing written; ``trace: true`` records the trace for its
    ``trace_sha256``); its flattened summary."""
    from seedance.experiments.protocols import latency_breakdown
    from seedance.sim import simulate

    config = sim_config(params, seed)
    result = simulate(config)
    summary = result.summary()
    for key in ("protocol", "seed", "nodes", "duration_s", "history", "reproduce", "faults", "violations",
                *(() if config.trace else ("trace_sha256",))):  # without a trace its hash is the empty trace's
        summary.pop(key, None)
    out = flatten(summary)
    out["sim_wall_s"] = out.pop("wall_s", None)
    out["faults"] = len(result.faults)
    out["violations"] = len(result.violations)
    out.update(latency_breakdown(config.protocol_name, result))
    out["command"] = result.reproduce
    return out


# ------------------------------------------------------------------------------------------------------ real
REAL_PARAMS: dict[str, Any] = {
    "protocol": "raft", "nodes": 3, "clients": 8, "duration": 5.0, "kill_rate": 0.0, "restart_delay": 0.3,
    "nemesis": (), "faulty_fraction": 0.6, "mix": None, "read_fraction": None, "cas_fraction": None, "keys": 8,
    "value_size": 0, "op_timeout": 1.0, "set": None, "warmup": True, "check": True, "check_timeout": 30.0,
    "trace": False,
}


def _real_setup(params: Mapping[str, Any]) -> dict[str, Any]:
    from seedance import faults as fault_table
    from seedance import validation as V
    from seedance.real.clients import Workload
    from seedance.real.node import resolve_protocol

    p = known("real", params, REAL_PARAMS)
    resolve_protocol(p["protocol"])
    V.integer("params.nodes", p["nodes"], lo=1, hi=V.max_real_nodes(), why=V.why_real_nodes())
    V.integer("params.clients", p["clients"], lo=1, hi=V.MAX_CLIENTS, why=V.WHY_CLIENTS)
    V.number("params.duration", p["duration"], lo=0, hi=V.MAX_REAL_DURATION_S, lo_open=True)
    V.number("params.kill_rate", p["kill_rate"], lo=0, hi=1000)
    V.number("params.restart_delay", p["restart_delay"], lo=0, hi=60)
    V.number("params.faulty_fraction", p["faulty_fraction"], lo=0, hi=1, lo_open=True)
    V.integer("params.keys", p["keys"], lo=1, hi=V.MAX_KEYS)
    V.integer("params.value_size", p["value_size"], lo=0, hi=V.MAX_VALUE_BYTES, why=V.WHY_VALUE_BYTES)
    V.number("params.op_timeout", p["op_timeout"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    V.number("params.check_timeout", p["check_timeout"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    for flag in ("warmup", "check", "trace"):
        if not isinstance(p[flag], bool):
            raise SpecError(f"params.{flag}", f"expected true or false, got {p[flag]!r}")
    settings = _mapping("params.set", p["set"])
    _protocol_options(p["protocol"], settings, p["nodes"])
    nemesis = fault_table.parse(",".join(_names("params.nemesis", p["nemesis"])), fault_table.REAL)
    read, _, cas = _mix(p)
    workload = Workload(num_clients=p["clients"], keys=p["keys"], read_fraction=read, cas_fraction=cas,
                        value_size_bytes=p["value_size"], op_timeout_s=float(p["op_timeout"]))
    return {**p, "set": settings, "nemesis": nemesis, "workload": workload}


def validate_real(params: dict[str, Any]) -> None:
    _real_setup(params)


def run_real(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One ``seedance real run`` in the run's own directory; its flattened summary."""
    from seedance.real.run import run_real as real_run

    p = _real_setup(params)
    out = current_point_dir()
    summary = real_run(protocol=p["protocol"], nodes=p["nodes"], clients=p["clients"], duration_s=float(p["duration"]),
                       seed=seed, out=out, kill_rate=float(p["kill_rate"]), restart_delay_s=float(p["restart_delay"]),
                       config=p["set"], workload=p["workload"], check=p["check"],
                       check_timeout_s=float(p["check_timeout"]), warmup=p["warmup"], nemesis=p["nemesis"],
                       faulty_fraction=float(p["faulty_fraction"]), trace=p["trace"])
    for key in ("protocol", "seed", "nodes", "clients", "duration_s", "kill_rate", "nemesis", "provenance", "history",
                "trace", "backend"):
        summary.pop(key, None)
    summary["faults"] = len(summary.get("faults") or [])
    result = flatten(summary)
    result["command"] = result.pop("reproduce", None)
    result["out_dir"] = str(out)
    return result


# ----------------------------------------------------------------------------------------------------- train
TRAIN_PARAMS: dict[str, Any] = {"runtime": "sim", "scenario": "", "variant": "fixed", "ranks": 4, "steps": 60,
                                "commit_every": 10, "set": None, "nemesis": (), "faulty_fraction": 0.6,
                                "topology": None, "max_sim_s": 600.0, "timeout_s": 300.0}
SCENARIOS = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8")


def _train_setup(params: Mapping[str, Any], seed: int) -> dict[str, Any]:
    from seedance import faults as fault_table
    from seedance import validation as V
    from seedance.experiments.training_run import protocol_config

    p = known("train", params, TRAIN_PARAMS)
    if p["runtime"] not in ("sim", "real"):
        raise SpecError("params.runtime", f"unknown runtime {p['runtime']!r}", "valid: sim, real")
    scenario = "" if p["scenario"] in (None, "", "none") else str(p["scenario"]).upper()
    if scenario and scenario not in SCENARIOS:
        raise SpecError("params.scenario", f"unknown scenario {p['scenario']!r}",
                        f"valid: {', '.join(SCENARIOS)}, none")
    if p["variant"] not in ("buggy", "fixed"):
        raise SpecError("params.variant", f"unknown variant {p['variant']!r}", "valid: buggy, fixed")
    V.integer("params.ranks", p["ranks"], lo=1, hi=V.MAX_SIM_NODES if p["runtime"] == "sim" else V.max_real_nodes())
    V.integer("params.steps", p["steps"], lo=1, hi=100_000)
    V.integer("params.commit_every", p["commit_every"], lo=1, hi=100_000)
    V.number("params.max_sim_s", p["max_sim_s"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    V.number("params.timeout_s", p["timeout_s"], lo=0, hi=V.MAX_TIMEOUT_S, lo_open=True)
    settings = _mapping("params.set", p["set"])
    if p["runtime"] == "real" and scenario == "F5":
        raise SpecError("params.scenario", "F5 needs a partition during a collective, which only the simulator "
                        "injects", "runtime: sim for F5; F1-F4, F6-F8 on real processes")
    protocol_config(steps=p["steps"], commit_every=p["commit_every"], scenario=scenario, variant=p["variant"],
                    seed=seed, settings=settings)
    runtime = fault_table.SIM if p["runtime"] == "sim" else fault_table.REAL
    nemesis = fault_table.parse(",".join(_names("params.nemesis", p["nemesis"])), runtime)
    return {**p, "scenario": scenario, "set": settings, "nemesis": nemesis}


def validate_train(params: dict[str, Any]) -> None:
    _train_setup(params, 0)


def run_train(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One validate-and-commit training run (simulated or real); the training summary's scalars."""
    from seedance.experiments.training_run import real_train, sim_train

    p = _train_setup(params, seed)
    common = {"world": p["ranks"], "steps": p["steps"], "commit_every": p["commit_every"], "scenario": p["scenario"],
              "variant": p["variant"], "seed": seed, "settings": p["set"], "nemesis": p["nemesis"]}
    if p["runtime"] == "sim":
        summary = sim_train(**common, topology=p["topology"], max_sim_s=float(p["max_sim_s"]),
                            faulty_fraction=float(p["faulty_fraction"]))
    else:
        summary = real_train(**common, out=current_point_dir(), timeout_s=float(p["timeout_s"]))
    for key in ("runtime", "scenario", "variant", "seed", "commit_every"):
        summary.pop(key, None)
    summary["violations"] = len(summary.get("violations") or [])
    out = flatten(summary)
    out["train_wall_s"] = out.pop("wall_s", None)
    return out


# ------------------------------------------------------------------------------------------------ experiment
EXPERIMENTS_PARAMS: dict[str, Any] = {"name": None, "quick": True, "options": None}


def _experiment_setup(params: Mapping[str, Any]) -> dict[str, Any]:
    from seedance.sweep.experiments import resolve_options

    p = known("experiment", params, EXPERIMENTS_PARAMS)
    if not isinstance(p["quick"], bool):
        raise SpecError("params.quick", f"expected true or false, got {p['quick']!r}")
    return {**p, "options": resolve_options(p["name"], _mapping("params.options", p["options"]))}


def validate_experiment(params: dict[str, Any]) -> None:
    _experiment_setup(params)


def run_experiment(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One study (:mod:`seedance.sweep.experiments`: what ``seedance experiment NAME [--quick] --seed SEED --out
    RUN_DIR --json`` runs, called as a library function) into the run's own directory; its headline numbers (the
    scalars of its JSON object, nested keys dotted, lists left out: e.g. ``headline.*``, ``summary.*``,
    ``artifacts.*`` paths; ``rows``: how many rows its table has), ``out_dir`` and ``command``."""
    from seedance.sweep.experiments import command, experiment

    p = _experiment_setup(params)
    study = experiment(p["name"])
    out = current_point_dir()
    document = study.run(out, quick=p["quick"], seed=seed, **p["options"])
    document = json.loads(json.dumps(document, default=str))  # what --json prints: plain data
    rows = document.pop("rows", None) if isinstance(document, dict) else None
    headline = {k: v for k, v in flatten(document if isinstance(document, dict) else {}).items()
                if not (isinstance(v, str) and v.startswith("["))}
    if isinstance(rows, list):
        headline["rows"] = len(rows)
    headline["out_dir"] = str(out)
    headline["command"] = command(p["name"], p["quick"], seed, p["options"], out)
    return headline


# what a worker imports before its first run of each (so imports are not part of any run's time or timeout)
run_cost.imports = ("seedance.models.cost", "seedance.models.topology")  # type: ignore[attr-defined]
run_sim.imports = ("seedance.sim", "seedance.experiments.protocols",  # type: ignore[attr-defined]
                   "seedance.history.linearizability")
run_real.imports = ("seedance.real.run",)  # type: ignore[attr-defined]
run_train.imports = ("seedance.experiments.training_run", "seedance.sim")  # type: ignore[attr-defined]
run_experiment.imports = ("seedance.sweep.experiments",)  # type: ignore[attr-defined]

