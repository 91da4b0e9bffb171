"""Configuration of a simulated run: frozen, keyword-only, validated on construction (errors are SpecError).

A run is a pure function of (:class:`SimConfig`, code version): the seed in it draws every random choice (node
RNGs, workload, nemesis schedule, per-message faults) from one root ``numpy.random.SeedSequence``, spawned in a
fixed order (no global RNG anywhere: see docs/contract.md, "Layers").

Default costs, each a documented assumption, overridable:

* CPU per input: 2 µs per message, 1 µs per timer, 2 µs per client request, 1 µs per collective completion (a
  Python/Go consensus handler is single-digit µs of work; etcd/raft benchmarks are of that order).
* fsync: 100 µs latency plus size / 2 GB/s (a datacenter NVMe with power-loss protection; consumer SSDs are
  1–10 ms). Consecutive Persist/PersistLog effects of one handler share one fsync (group commit).
* Client ops time out after 0.5 s of simulated time (then ``info`` and a fresh process id, as Jepsen does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seedance.errors import SpecError

WORKLOAD_MODES = ("closed", "open", "frame")
KEY_DISTRIBUTIONS = ("uniform", "zipf", "conflict")


def _positive(field_name: str, value: float, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field_name, f"must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value != value or value == float("inf"):
        raise SpecError(field_name, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class CpuConfig:
    """Seconds of CPU a node spends handling each kind of input (a busy node queues the next input)."""

    message_s: float = 2e-6
    timer_s: float = 1e-6
    client_request_s: float = 2e-6
    collective_s: float = 1e-6
    recover_s: float = 1e-4

    def __post_init__(self) -> None:
        for name in ("message_s", "timer_s", "client_request_s", "collective_s", "recover_s"):
            _positive(f"cpu.{name}", getattr(self, name), allow_zero=True)


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """fsync latency and write bandwidth of each node's durable storage."""

    fsync_s: float = 1e-4
    write_bandwidth_GBps: float = 2.0
    fsync: bool = True  # False: writes reach the page cache only (no fsync wait; a host profile's ``write`` time)

    def __post_init__(self) -> None:
        if not isinstance(self.fsync, bool):
            raise SpecError("storage.fsync", f"must be true or false, got {self.fsync!r}")
        _positive("storage.fsync_s", self.fsync_s, allow_zero=True)
        _positive("storage.write_bandwidth_GBps", self.write_bandwidth_GBps)


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """Clients and the operations they issue.

    ``mode`` "closed": ``clients`` clients, each with one operation outstanding, issuing the next after
    ``think_s``. "open": Poisson arrivals at ``rate_ops_s`` (each arrival takes an idle process or a new one).
    "frame": ``clients`` clients, each issuing every ``1 / frame_rate_hz`` seconds a burst of ``writes_per_frame``
    writes then one read, one after the other (a frame not finished by the next one is cut short: the next burst
    replaces it); ``mix`` is not used. ``mix`` is the (read, write, cas) probability triple. ``key_distribution``: "uniform" over ``keys`` keys,
    "zipf" with exponent ``zipf_s``, or "conflict": a fraction ``conflict_rate`` of ops on the hot key ``k0``, the
    rest uniform over the others.
    """

    mode: str = "closed"
    clients: int = 4
    rate_ops_s: float = 1000.0
    mix: tuple[float, float, float] = (0.5, 0.4, 0.1)
    keys: int = 8
    key_distribution: str = "uniform"
    zipf_s: float = 1.1
    conflict_rate: float = 0.5
    op_timeout_s: float = 0.5
    think_s: float = 0.0
    not_leader_backoff_s: float = 0.005
    request_bytes: int = 64
    reply_bytes: int = 64
    value_bytes: int = 0  # 0: integer values; > 0: written values are strings of this many characters (as real runs)
    frame_rate_hz: float = 60.0  # mode "frame": bursts per second per client
    writes_per_frame: int = 1  # mode "frame": writes per burst (then one read)
    roam: bool = False  # mode "frame": each burst goes to a node drawn uniformly (clients bound to no replica)
    # a crashed node's client connections reset (its kernel closes them): a client with a request out to it learns
    # it one hop later and completes it as info, as real clients do; false: it waits for op_timeout_s
    crash_resets: bool = True
    # the load starts this long after the nodes boot (their first election under way): a real run's launcher starts
    # it once every node serves (its summary's ``node_lead_s``); the duration and the fault schedule count from it
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in WORKLOAD_MODES:
            raise SpecError("workload.mode", f"unknown mode {self.mode!r}", f"valid: {', '.join(WORKLOAD_MODES)}")
        if self.key_distribution not in KEY_DISTRIBUTIONS:
            raise SpecError("workload.key_distribution", f"unknown distribution {self.key_distribution!r}",
                            f"valid: {', '.join(KEY_DISTRIBUTIONS)}")
        if not isinstance(self.clients, int) or self.clients < 0:
            raise SpecError("workload.clients", f"must be an integer >= 0, got {self.clients!r}")
        if not isinstance(self.keys, int) or self.keys < 1:
            raise SpecError("workload.keys", f"must be an integer >= 1, got {self.keys!r}")
        mix = tuple(float(x) for x in self.mix)
        if len(mix) != 3 or any(x < 0 for x in mix) or abs(sum(mix) - 1.0) > 1e-9:
            raise SpecError("workload.mix", f"must be three non-negative fractions summing to 1, got {self.mix!r}",
                            "e.g. 0.5,0.4,0.1 for read,write,cas")
        object.__setattr__(self, "mix", mix)
        _positive("workload.rate_ops_s", self.rate_ops_s)
        _positive("workload.frame_rate_hz", self.frame_rate_hz)
        if not isinstance(self.roam, bool):
            raise SpecError("workload.roam", f"must be true or false, got {self.roam!r}")
        if not isinstance(self.crash_resets, bool):
            raise SpecError("workload.crash_resets", f"must be true or false, got {self.crash_resets!r}")
        if isinstance(self.writes_per_frame, bool) or not isinstance(self.writes_per_frame, int) \
                or not 1 <= self.writes_per_frame <= 10_000:
            raise SpecError("workload.writes_per_frame", f"must be an integer in 1..10000, got {self.writes_per_frame!r}")
        from seedance import validation

        validation.integer("workload.value_bytes", self.value_bytes, lo=0, hi=validation.MAX_VALUE_BYTES,
                           why=validation.WHY_VALUE_BYTES)
        _positive("workload.zipf_s", self.zipf_s)
        _positive("workload.op_timeout_s", self.op_timeout_s)
        _positive("workload.think_s", self.think_s, allow_zero=True)
        validation.number("workload.start_s", self.start_s, lo=0, hi=3600)
        _positive("workload.not_leader_backoff_s", self.not_leader_backoff_s, allow_zero=True)
        if not 0.0 <= self.conflict_rate <= 1.0:
            raise SpecError("workload.conflict_rate", f"must be in [0, 1], got {self.conflict_rate!r}")
        if self.key_distribution == "conflict" and self.keys < 2 and self.conflict_rate < 1.0:
            raise SpecError("workload.keys", "conflict distribution needs >= 2 keys (one hot, others cold)")


@dataclass(frozen=True, kw_only=True)
class NemesisConfig:
    """Which faults the seeded schedule may inject, and its timing.

    The faulty phase is the first ``faulty_fraction`` of the run; after it every fault is removed and crashed
    nodes restart (the healed phase, where liveness is measured). For each enabled fault, windows of length
    uniform in ``window_s`` (default: 5–25 % of the faulty phase) follow gaps exponential with mean ``gap_s``
    (default: 10 % of the faulty phase); different faults may overlap.

    Liveness (:mod:`seedance.sim.liveness`): the run must recover to ``recovery_fraction`` of the same seed's
    fault-free throughput within ``recovery_bound_s`` of the heal.
    """

    faults: tuple[str, ...] = ()
    faulty_fraction: float = 0.6
    window_s: tuple[float, float] | None = None
    gap_s: float | None = None
    recovery_fraction: float = 0.5
    recovery_bound_s: float = 1.0

    def __post_init__(self) -> None:
        from seedance.sim.nemesis import FAULTS  # the names live beside their implementations

        faults = tuple(self.faults)
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise SpecError("nemesis", f"unknown fault(s) {', '.join(map(repr, unknown))}",
                            f"valid: {', '.join(FAULTS)}")
        object.__setattr__(self, "faults", tuple(dict.fromkeys(faults)))
        if not 0.0 < self.faulty_fraction <= 1.0:
            raise SpecError("nemesis.faulty_fraction", f"must be in (0, 1], got {self.faulty_fraction!r}")
        if self.window_s is not None:
            lo, hi = self.window_s
            object.__setattr__(self, "window_s", (float(lo), float(hi)))
            if not 0 < lo <= hi:
                raise SpecError("nemesis.window_s", f"must be 0 < lo <= hi, got {self.window_s!r}")
        if self.gap_s is not None:
            _positive("nemesis.gap_s", self.gap_s)
        _positive("nemesis.recovery_bound_s", self.recovery_bound_s, allow_zero=True)
        if isinstance(self.recovery_fraction, bool) or not isinstance(self.recovery_fraction, (int, float)) \
                or not 0.0 <= self.recovery_fraction <= 1.0:
            raise SpecError("nemesis.recovery_fraction", f"must be a number in [0, 1], got {self.recovery_fraction!r}")


@dataclass(frozen=True, kw_only=True)
class BackgroundSpec:
    """``op:size@period``: one collective ``op`` of ``size`` bytes among every device, every ``period`` seconds."""

    op: str
    size_bytes: int
    period_s: float

    OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall")

    @property
    def text(self) -> str:
        return f"{self.op}:{self.size_bytes}@{self.period_s!r}"

    @classmethod
    def parse(cls, text: Any) -> BackgroundSpec:
        from seedance.models.units import parse_size

        valid = "op:size@period, e.g. allreduce:1GiB@0.2 (op one of " + ", ".join(cls.OPS) + ")"
        if not isinstance(text, str) or ":" not in text or "@" not in text:
            raise SpecError("--background", f"expected op:size@period, got {text!r}", valid)
        op, _, rest = text.partition(":")
        size_text, _, period_text = rest.partition("@")
        if op not in cls.OPS:
            raise SpecError("--background", f"unknown collective {op!r}", valid)
        try:
            size = int(parse_size(size_text, field="--background", allow_zero=True))
        except ValueError as err:
            raise SpecError("--background", f"bad size {size_text!r} ({err})", valid) from None
        try:
            period = float(period_text)
        except ValueError:
            raise SpecError("--background", f"bad period {period_text!r}", valid) from None
        if size < 0 or size > (1 << 40):
            raise SpecError("--background", f"size {size} out of range", "0 .. 1 TiB")
        if not (math.isfinite(period) and period >= 1e-4):
            raise SpecError("--background", f"period {period_text!r} must be a finite number >= 0.0001 s", valid)
        return cls(op=op, size_bytes=size, period_s=period)


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulated run. ``protocol`` is a registered name or a :class:`ProtocolSpec` (e.g. a test mutant).

    ``topology`` is a preset name / file path for :func:`seedance.models.topology.load`, a ``Topology``, or None
    for the uniform default fabric (see :mod:`seedance.sim.network`); ``topology_hosts`` sets a preset's server
    count (default: the fewest that hold ``nodes``); ``nodes_per_host`` places that many nodes on each server
    (default: node i on device i). ``duration_s`` is simulated time.
    ``check`` runs the linearizability checker (model "kv") on the history with a ``check_timeout_s`` budget.
    """

    protocol: Any = "echo"
    nodes: int = 3
    duration_s: float = 1.0
    seed: int = 0
    topology: Any = None
    topology_hosts: int | None = None
    nodes_per_host: int | None = None
    protocol_config: Mapping[str, Any] = field(default_factory=dict)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    nemesis: NemesisConfig = field(default_factory=NemesisConfig)
    cpu: CpuConfig = field(default_factory=CpuConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    trace: bool = True
    check: bool = False
    check_timeout_s: float = 10.0
    monitor: bool = True  # run the protocol's invariant monitor (ProtocolSpec.monitor) after every input
    host_profile: Any = None  # a measured host (`seedance real profile` file, or a HostProfile): models.host
    background: tuple[Any, ...] = ()  # BackgroundSpec or "op:size@period" strings: training traffic on the links

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise SpecError("nodes", f"must be an integer >= 1, got {self.nodes!r}")
        _positive("duration_s", self.duration_s)
        from seedance.sim import ceilings

        ceilings.check(self.protocol_name, self.nodes, self.duration_s)  # per-protocol nodes and time, with reasons
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecError("seed", f"must be an integer >= 0, got {self.seed!r}")
        _positive("check_timeout_s", self.check_timeout_s)
        object.__setattr__(self, "background", tuple(b if isinstance(b, BackgroundSpec) else
                                                     BackgroundSpec.parse(b) for b in self.background))
        if self.host_profile is not None:
            from seedance.models.host import HostProfile, load_profile

            profile = self.host_profile
            if not isinstance(profile, HostProfile):
                if not isinstance(profile, str):
                    raise SpecError("host_profile", f"expected a file path or HostProfile, got {profile!r}")
                profile = load_profile(profile)  # a bad file is refused here, before any work
            if not self.storage.fsync and profile.write is None:
                raise SpecError("storage.fsync", "is false, but the host profile has no write time without fsync",
                                "a profile from a current `seedance real profile` (it probes writes without fsync), "
                                "or storage.fsync true")

    def host(self) -> Any:
        """The HostProfile to simulate on, or None (the textbook constants of cpu / storage)."""
        if self.host_profile is None:
            return None
        from seedance.models.host import HostProfile, load_profile

        return self.host_profile if isinstance(self.host_profile, HostProfile) else load_profile(self.host_profile)

    @property
    def protocol_name(self) -> str:
        return self.protocol if isinstance(self.protocol, str) else self.protocol.name

    def describe(self) -> dict[str, Any]:
        """Plain-data description (for spec hashes and summaries)."""
        from dataclasses import asdict

        topology = self.topology
        if topology is not None and not isinstance(topology, str):
            topology = getattr(topology, "name", repr(topology))
        return {
            "protocol": self.protocol_name, "nodes": self.nodes, "duration_s": self.duration_s, "seed": self.seed,
            "topology": topology, "topology_hosts": self.topology_hosts,
            "nodes_per_host": self.nodes_per_host, "protocol_config": dict(self.protocol_config),
            "workload": asdict(self.workload), "nemesis": asdict(self.nemesis), "cpu": asdict(self.cpu),
            "storage": asdict(self.storage), "trace": self.trace,
            **({"background": [b.text for b in self.background]} if self.background else {}),
            **({"host_profile": (self.host_profile if isinstance(self.host_profile, str)
                                 else self.host_profile.to_dict())} if self.host_profile is not None else {}),
        }


# Fields the ``seedance sim run`` flags cannot express travel in ``--extra JSON`` (so every config reproduces).
_FLAGGED = {
    "workload": {"mode", "clients", "rate_ops_s", "mix", "keys", "key_distribution", "zipf_s", "conflict_rate",
                 "op_timeout_s", "frame_rate_hz", "writes_per_frame"},
    "nemesis": {"faults", "faulty_fraction"},
    "cpu": set(),
    "storage": set(),
}
_SECTIONS = {"workload": WorkloadConfig, "nemesis": NemesisConfig, "cpu": CpuConfig, "storage": StorageConfig}


def extra_settings(config: SimConfig) -> dict[str, dict[str, Any]]:
    """The non-default settings of ``config`` that no CLI flag carries, by section (for ``--extra``)."""
    from dataclasses import fields

    extra: dict[str, dict[str, Any]] = {}
    for section, flagged in _FLAGGED.items():
        value = getattr(config, section)
        default = type(value)()
        diffs = {f.name: getattr(value, f.name) for f in fields(value)
                 if f.name not in flagged and getattr(value, f.name) != getattr(default, f.name)}
        if diffs:
            extra[section] = {k: list(v) if isinstance(v, tuple) else v for k, v in diffs.items()}
    return extra


def parse_extra(text: str | None) -> dict[str, dict[str, Any]]:
    """Validate an ``--extra`` JSON object: sections workload / nemesis / cpu / storage of unflagged fields."""
    import json
    from dataclasses import fields

    if not text:
        return {}
    from seedance.validation import loads_json  # strict: no duplicate keys, NaN or overflowing numbers

    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError("--extra", f"not valid JSON ({err.msg})", 'e.g. {"cpu": {"message_s": 5e-6}}') from None
    extra = loads_json(text, "--extra")
    if not isinstance(extra, dict):
        raise SpecError("--extra", "must be a JSON object", f"sections: {', '.join(_SECTIONS)}")
    for section, settings in extra.items():
        if section not in _SECTIONS:
            raise SpecError("--extra", f"unknown section {section!r}", f"valid: {', '.join(_SECTIONS)}")
        names = {f.name for f in fields(_SECTIONS[section])} - _FLAGGED[section]
        if not isinstance(settings, dict) or not set(settings) <= names:
            bad = sorted(set(settings) - names) if isinstance(settings, dict) else settings
            raise SpecError(f"--extra.{section}", f"unknown or flag-only field(s) {bad}",
                            f"valid: {', '.join(sorted(names))} (the others have their own flags)")
    return extra
