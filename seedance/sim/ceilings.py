"""How large a simulated run may be: per-protocol ceilings on nodes and simulated time, and a memory estimate.

Ceilings (each error message states the ceiling and its reason, exit 2 at the CLI):

* Raft, Multi-Paxos, EPaxos: at most 128 nodes — one replica per eight-GPU server of a 1,024-GPU cluster.
  Every replica applies every command and the leader (or each command leader) exchanges a message with every
  replica per batch, so a simulated second costs O(N) per operation.
* causal, echo: at most 1,024 nodes — one replica per GPU of a 1,024-GPU cluster (the largest topology,
  :data:`seedance.validation.MAX_DEVICES`).
* commit (validate-and-commit): at most 1,024 nodes — it runs on every training rank, one per GPU of a 1,024-GPU
  cluster (``sim train --world-size``, :data:`seedance.experiments.training_run.MAX_TRAIN_RANKS`).
* Simulated time: at most 72 h (the seed's longest stress run) for every protocol. Whether such a run fits is
  decided by the memory estimate below, since history and trace grow with simulated time.

Memory estimate (:func:`estimate_memory`): a run is refused before it starts when the estimate exceeds the
memory this machine has available (``MemAvailable`` of ``/proc/meminfo``; the environment variable
``SEEDANCE_MEM_AVAILABLE`` — bytes, or a size such as ``2GiB`` — overrides it, for tests and for batch jobs
whose limit is not the machine's). The estimate is a linear model of what a run holds at its peak:

    bytes = base + nodes × per_node + min(ops, window) × per_op + min(ops, check window) × per_checked_op (--check)
            + held entries × nodes × per_entry + min(messages, trace window) × per_message (trace on)
            + devices² × per_route (a preset topology)

``ops`` and ``writes`` are the counts the workload offers over the run (closed loop: each client completes at most
one operation per ``think_s + 0.5 ms × max(1, N / 32)`` (Multi-Paxos: ``1 ms × max(1, N / 16)``), an upper bound —
Raft at 8 nodes completes one per 0.8 ms, at 128 nodes one per 1.8 ms; open loop: ``rate``; frame: ``clients × frame
rate × (writes + 1)``). ``messages`` come from the protocol's messages per operation (causal: a delta and an ack per
peer per write; the consensus protocols: ``k × N`` per operation, k the most measured per protocol).

What a run records no longer stays in memory: the clients' history and the replicas' events spill to disk in
chunks of 100,000 rows, the trace every 100,000 records, and ``trace.json`` holds at most its first 1,000,000
events; so the history term counts at most 100,000 operations and the trace term at most 1,000,000 messages. The
linearizability check reads the spilled history twice and holds a window of operations: 20,000 shared among the
keys, at least 100 a key (:func:`seedance.history.linearizability.check_streamed`), so its term counts at most
``max(20,000, 100 × keys)`` operations (it also keeps each key's indeterminate operations, a few per thousand in
these runs, not counted). What still grows with the run: the protocols' own state — every replica keeps every write
(``per_entry``), except Raft, Multi-Paxos and EPaxos, whose log (per-slot records, instances) a snapshot compacts
every ``snapshot_entries`` (``snapshot_slots``, ``snapshot_instances``) applied entries (executed slots, executed
instances), so each holds at most about twice that many; EPaxos keeps a set of dependencies per instance (a
(replica, instance) pair for each replica that proposed on the command's keys: at most min(N, clients) while each
client keeps to its replica, up to N when clients move: open-loop or roaming clients, or a nemesis; 16 bytes per pair
per replica per instance, the durable record sharing the instance's tuple) besides the instance itself
(``EPAXOS_INSTANCE_BYTES`` per replica per operation, reads included: 757 MB had been estimated for a run that
peaked at 776 MB, 5 nodes x 6 s, before it was counted on 2026-12-07; its instances are compacted since the same
day, an instance forgotten once every replica's snapshot reflects it). Until the sparse form (2026-12-07) the
dependencies were a vector of N slots, 16 N bytes.

Calibration: the coefficients were solved from the peak RSS (``ru_maxrss``) of five runs in fresh processes — Raft
at 8, 32 and 128 nodes (64 clients, 0.5 simulated s, trace on: 157, 239 and 308 MB) and the causal protocol at 128
and 256 replicas (64×64 grid, 16 frame clients, 0.2 s: 154 and 225 MB), against an 81 MB process that has imported
everything and run nothing — giving about 1,000 B per operation, 100 B per replicated entry, 330 B per traced
message and 330 kB per causal replica (its grid twice: the state and its delta-group 0); the constants below are
those rounded up. ``benchmarks/sim_scale.py`` prints the estimate beside the measured peak RSS of every point it
runs, to keep the calibration honest; its first full run found two terms missing, added since: EPaxos's and
Multi-Paxos's messages per operation (4.9 N and 2.3 N, not Raft's 0.25 N: 767 MB measured at 128 EPaxos nodes
against 162 MB estimated) and the causal replicas' per-peer state (N² in all: 1,017 MB measured at 1,024 replicas
against 963 MB). The bounded windows and the per-key check term came with the spilling (2026-12-06): Raft at 5
nodes, 16 clients, check on, 5 and 20 simulated s measured 204 and 260 MB; a key's check holds about 600 B per
operation (``per_checked_op`` is twice that). The check's windows came after (2026-12-07): the same runs measured
145 and 177 MB (against 194 and 255 MB), the check itself peaking at about 10 MB of Python allocations at 20 s.
Multi-Paxos at 5 nodes, 16 clients, 5 and 20 s measured 339 and 363 MB with snapshots (``snapshot_slots`` 65,536),
602 and 2,426 MB without (about 600 B per slot per replica, and every operation, reads included, takes a slot:
``MULTIPAXOS_SLOT_BYTES`` counts 700 B for each operation; its leader bound had put 16,000 operations a second where
the runs did 31,000, and is 0.5 ms since) (2026-12-07).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from seedance.errors import SpecError

MAX_DURATION_S = 72 * 3600.0
WHY_DURATION = ("72 simulated hours is the seed's longest stress run; the protocols' state and the "
                "linearizability check grow with simulated time, so a long run must also pass the memory estimate")


@dataclass(frozen=True)
class Ceiling:
    nodes: int
    why_nodes: str
    duration_s: float = MAX_DURATION_S
    why_duration: str = WHY_DURATION


_CONSENSUS = Ceiling(
    nodes=128,
    why_nodes=("one replica per eight-GPU server of a 1,024-GPU cluster; every replica applies every command and "
               "the leader exchanges a message with each replica per batch, so cost per operation grows with N "
               "(128 Raft nodes: about 17-20 wall s per simulated second at 64 clients on a 2-core machine)"))
_PER_GPU = Ceiling(
    nodes=1024,
    why_nodes=("one replica per GPU of a 1,024-GPU cluster (128 eight-GPU servers), the largest topology the cost "
               "model and routing are sized for"))

_PER_RANK = Ceiling(
    nodes=1024,
    why_nodes=("validate-and-commit runs on every training rank, one per GPU of a 1,024-GPU cluster (128 eight-GPU "
               "servers); above 32 ranks each rank heartbeats only its ring successors"))

CEILINGS: dict[str, Ceiling] = {
    "raft": _CONSENSUS, "multipaxos": _CONSENSUS, "epaxos": _CONSENSUS, "commit": _PER_RANK,
    "causal": _PER_GPU, "echo": _PER_GPU,
}


def ceiling(protocol: str) -> Ceiling:
    """The ceiling of a registered protocol; a protocol not listed (a test mutant) gets the consensus one."""
    return CEILINGS.get(protocol, _CONSENSUS)


def check(protocol: str, nodes: int, duration_s: float, *, nodes_field: str = "nodes",
          duration_field: str = "duration_s") -> None:
    """SpecError naming the ceiling and its reason when ``nodes`` or ``duration_s`` exceed ``protocol``'s."""
    top = ceiling(protocol)
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > top.nodes:
        raise SpecError(nodes_field, f"{nodes} nodes exceed the {protocol} ceiling of {top.nodes}",
                        f"at most {top.nodes} ({top.why_nodes})")
    if isinstance(duration_s, (int, float)) and not isinstance(duration_s, bool) and duration_s > top.duration_s:
        raise SpecError(duration_field, f"{duration_s:g} simulated s exceed the ceiling of {top.duration_s:g} s",
                        f"at most {top.duration_s:g} s = 72 h ({top.why_duration})")


# ------------------------------------------------------------------------------------------------ memory estimate
BASE_BYTES = 128 << 20  # interpreter, numpy/simpy/scipy imports, the runtime (measured: 81-86 MB at 5-8 nodes)
PER_NODE_BYTES = 64 << 10  # a node, its storage, timers, network rows
PER_OP_BYTES = 1_200  # history events (invoke + completion) and client records (fit: about 1,000)
PER_ENTRY_BYTES = 130  # one replica's copy of a write: log slot, simulated-disk entry, kv (fit: about 100)
PER_MESSAGE_BYTES = 400  # trace records of one delivered message, trace on (fit: about 330)
PER_ROUTE_BYTES = 360  # a preset topology's routing tables and the network's route cache, per device pair
CLOSED_LOOP_FLOOR_S = 0.5e-3  # a closed-loop client completes at most one operation per 0.5 ms here
# the option after how many applied entries (slots) a snapshot compacts a replica's log, and its default
SNAPSHOT_OPTION = {"raft": ("snapshot_entries", 65536), "multipaxos": ("snapshot_slots", 65536),
                   "epaxos": ("snapshot_instances", 65536)}
# delivered messages per operation per node, the most measured by benchmarks/sim_scale.py at 8-128 nodes: Raft
# batches (0.14 .. 0.25), Multi-Paxos sends Accept/Accepted per slot run (1.9 .. 2.3), EPaxos PreAccept, Accept and
# Commit to every replica (4.5 .. 4.97)
MESSAGES_PER_OP_PER_NODE = {"raft": 0.25, "multipaxos": 2.5, "epaxos": 5.0}
# a leader's CPU bounds the closed loop: (least seconds per operation per client, nodes above which it grows with N);
# measured per client at 32 clients: Raft 0.8 ms (8 nodes) .. 1.8 ms (128), Multi-Paxos 1.45 .. 15 ms
# (Multi-Paxos at 5 nodes, 16 clients: 0.46 ms p50, 31,000 ops/s; its 1 ms here had put 16,000)
LEADER_BOUND = {"raft": (CLOSED_LOOP_FLOOR_S, 32), "commit": (CLOSED_LOOP_FLOOR_S, 32),
                "multipaxos": (CLOSED_LOOP_FLOOR_S, 16)}
# one replica's slot of Multi-Paxos (accepted and decided values, the simulated disk's record, kv): every operation
# takes one, reads included (measured about 600 B at 5 nodes with snapshots off)
MULTIPAXOS_SLOT_BYTES = 700
CAUSAL_PER_PEER_BYTES = 300  # a replica's per-peer state (acks, sent, progress, queues, heap entry): N² in all
HISTORY_WINDOW_OPS = 100_000  # operations whose rows are held before a chunk spills (100,000 rows, with margin)
TRACE_WINDOW_MESSAGES = 1_000_000  # messages whose records trace.json may hold (its default event cap)
PER_CHECKED_OP_BYTES = 1_200  # an operation in the linearizability check's windows (about 600)
CHECK_WINDOW_OPS = 20_000  # operations the check's windows hold in all (check_streamed's default window_ops)
CHECK_KEY_WINDOW_OPS = 100  # a key's window at least (its MIN_KEY_WINDOW_OPS)
EPAXOS_PAIR_BYTES = 16  # a dependency pair (replica, instance): two 8 B slots of a tuple the durable record shares
# one replica's instance of EPaxos, for every operation (reads are instances too): the instance, its durable record,
# the commit and execution logs, the key's instance set and the monitor's record; up to twice snapshot_instances
# of them (SNAPSHOT_OPTION). Measured at 5 nodes, 16 clients, no check, before compaction: 329 MB at 2 s, 776 MB at
# 6 s, 16,700 ops/s: about 1,340 B per replica per operation
EPAXOS_INSTANCE_BYTES = 1_500
# a replica's latency samples of its own commands (epaxos/latency.py): 16 B each, the latest EPAXOS_LATENCY_SAMPLES
# kept (epaxos/node.py's LATENCY_SAMPLES; a test holds the two equal): up to 2 MiB per replica with clients
EPAXOS_LATENCY_BYTES = 16
EPAXOS_LATENCY_SAMPLES = 1 << 17


_ENTRY_BYTES = {"multipaxos": MULTIPAXOS_SLOT_BYTES, "epaxos": EPAXOS_INSTANCE_BYTES}  # else PER_ENTRY_BYTES


def _ops_per_s(config: Any) -> tuple[float, float]:
    """(operations per simulated second, of which writes) the workload offers."""
    w = config.workload
    if w.mode == "open":
        ops = float(w.rate_ops_s)
        return ops, ops * (w.mix[1] + w.mix[2])
    if w.mode == "frame":
        frames = w.clients * w.frame_rate_hz
        return frames * (w.writes_per_frame + 1), frames * w.writes_per_frame
    # above 32 nodes the leader's CPU bounds a consensus protocol (Raft, 64 clients: 83k ops/s at 32 nodes, 35k at 128)
    least, above = LEADER_BOUND.get(config.protocol_name, (CLOSED_LOOP_FLOOR_S, None))
    floor = least * (max(1.0, config.nodes / above) if above else 1.0)
    ops = w.clients / (w.think_s + floor)
    return ops, ops * (w.mix[1] + w.mix[2])


def _check_window(workload: Any) -> float:
    """Operations the linearizability check's windows hold at most: the window, or 100 per key if more."""
    keys = max(1, int(getattr(workload, "keys", 1)))
    return float(max(CHECK_WINDOW_OPS, CHECK_KEY_WINDOW_OPS * keys))


def _epaxos_pairs(config: Any) -> int:
    """Dependency pairs an EPaxos instance carries at most: one per replica that proposes on its keys, i.e. one per
    replica a closed-loop client keeps to (client c at node c % N), or every replica when clients move."""
    w = config.workload
    moving = w.mode == "open" or getattr(w, "roam", False) or bool(config.nemesis.faults)
    return config.nodes if moving else max(1, min(config.nodes, int(w.clients)))


def estimate_memory(config: Any) -> dict[str, float]:
    """Expected peak memory of ``config``'s run, with its parts (bytes) and the counts they come from."""
    protocol = config.protocol_name
    nodes = config.nodes
    ops_s, writes_s = _ops_per_s(config)
    ops = ops_s * config.duration_s
    if protocol == "causal":
        width = int(config.protocol_config.get("width", 64))
        height = int(config.protocol_config.get("height", 64))
        per_node = PER_NODE_BYTES + width * height * 40 * 2 + CAUSAL_PER_PEER_BYTES * nodes
        messages = writes_s * config.duration_s * 2 * (nodes - 1)  # a fresh cluster boots without messages
        entries = 0.0  # a replica keeps a pixel per key, not a log
    else:
        per_node = PER_NODE_BYTES
        messages = ops * MESSAGES_PER_OP_PER_NODE.get(protocol, 5.0) * nodes
        writes = (ops if protocol in ("multipaxos", "epaxos") else writes_s * config.duration_s)  # reads too
        if protocol in SNAPSHOT_OPTION:  # a snapshot compacts the log (slots) every so many applied entries
            option, default = SNAPSHOT_OPTION[protocol]
            every = int(config.protocol_config.get(option, default))
            writes = min(writes, 2 * every) if every > 0 else writes
        entries = writes * nodes
    devices = nodes if config.topology is not None else 0  # the default fabric's routes are computed on lookup
    checked = min(ops, _check_window(config.workload)) if getattr(config, "check", False) and protocol != "causal" \
        else 0.0
    parts = {
        "base": float(BASE_BYTES),
        "nodes": float(nodes * per_node),
        "topology": float(devices * devices * PER_ROUTE_BYTES),
        "history": min(ops, HISTORY_WINDOW_OPS) * PER_OP_BYTES + checked * PER_CHECKED_OP_BYTES,
        "logs": entries * _ENTRY_BYTES.get(protocol, PER_ENTRY_BYTES)
        + (writes * nodes * _epaxos_pairs(config) * EPAXOS_PAIR_BYTES if protocol == "epaxos" else 0.0)
        + (min(ops, EPAXOS_LATENCY_SAMPLES * _epaxos_pairs(config)) * EPAXOS_LATENCY_BYTES if protocol == "epaxos" else 0.0),
        "trace": min(messages, TRACE_WINDOW_MESSAGES) * (PER_MESSAGE_BYTES if config.trace else 0),
    }
    return {**parts, "total": sum(parts.values()), "ops": ops, "messages": messages}


def available_memory() -> int | None:
    """Bytes this run may use: ``SEEDANCE_MEM_AVAILABLE`` if set, else ``MemAvailable`` (None when unknown)."""
    text = os.environ.get("SEEDANCE_MEM_AVAILABLE")
    if text:
        from seedance.models.units import parse_size

        return int(parse_size(text, field="SEEDANCE_MEM_AVAILABLE"))  # a bad size: SpecError naming the variable
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# disk: what a run writes (its outputs and, meanwhile, the temporary files its records spill to), per item, from the
# files of `sim run --protocol raft --nodes 5 --clients 16 --duration 20` (trace.msgpack 172 MB for 876,138 delivered
# messages, 196 B each; history.jsonl 141 MB for 727,268 operations, 194 B each) and of causal at 1,024 replicas x 1 s
# (223 MB for 2,060,825 messages; 93 MB of history, most of it the replicas' apply events); rounded up
DISK_PER_MESSAGE_BYTES = 250  # trace records of one delivered message (trace.msgpack)
DISK_PER_OP_BYTES = 250  # an operation's history lines (history.jsonl), and its replica events per write and node
DISK_PER_APPLY_BYTES = 100  # a replica event (apply) in history.jsonl (causal 1,024 x 1 s: about 90 B)
CHROME_MAX_BYTES = 200 << 20  # trace.json, capped at --trace-events (1,000,000 events: about 137 MB)


def estimate_disk(config: Any) -> dict[str, float]:
    """Bytes a run writes: its output files, and the temporary files its records spill to while it runs (about as
    large again, until the outputs are written)."""
    memory = estimate_memory(config)
    ops, messages = memory["ops"], memory["messages"]
    _, writes_s = _ops_per_s(config)
    applies = writes_s * config.duration_s * config.nodes if config.protocol_name == "causal" else 0.0
    history = ops * DISK_PER_OP_BYTES + applies * DISK_PER_APPLY_BYTES
    trace = messages * DISK_PER_MESSAGE_BYTES + CHROME_MAX_BYTES if config.trace else 0.0
    return {"history": history, "trace": trace, "total": 2.0 * (history + trace)}


def available_disk(path: str) -> int | None:
    """Bytes free where the run writes: ``SEEDANCE_DISK_AVAILABLE`` if set, else the free space of the file system
    of ``path`` (its nearest existing parent) or of the temporary directory, whichever is less."""
    import shutil
    import tempfile

    text = os.environ.get("SEEDANCE_DISK_AVAILABLE")
    if text:
        from seedance.models.units import parse_size

        return int(parse_size(text, field="SEEDANCE_DISK_AVAILABLE"))
    free = []
    for where in (path, tempfile.gettempdir()):
        where = os.path.abspath(where)
        while not os.path.exists(where) and os.path.dirname(where) != where:
            where = os.path.dirname(where)
        try:
            free.append(shutil.disk_usage(where).free)
        except OSError:
            continue
    return min(free) if free else None


def check_disk(config: Any, path: str, available: int | None = None) -> dict[str, float]:
    """The disk estimate of ``config``; SpecError (field ``disk``) when it exceeds the free space (default:
    :func:`available_disk` of ``path``), naming the estimate and what would shrink it."""
    estimate = estimate_disk(config)
    limit = available if available is not None else available_disk(path)
    if limit is not None and estimate["total"] > limit:
        part = "trace" if estimate["trace"] >= estimate["history"] else "history"
        advice = "--no-trace, " if part == "trace" else ""
        raise SpecError("disk", f"the run would write an estimated {_gib(estimate['total'])} (most of it its "
                        f"{part}: {_gib(estimate[part])}, and as much again in temporary files while it runs) but "
                        f"{_gib(limit)} is free", f"{advice}a shorter --duration or fewer clients")
    return estimate


def _gib(x: float) -> str:
    return f"{x / (1 << 30):.2f} GiB"


def check_memory(config: Any, available: int | None = None) -> dict[str, float]:
    """The estimate of ``config``; SpecError (field ``memory``) when it exceeds ``available`` bytes (default:
    :func:`available_memory`), naming the estimate, its largest part and what would shrink it."""
    estimate = estimate_memory(config)
    limit = available if available is not None else available_memory()
    if limit is not None and estimate["total"] > limit:
        part = max(("nodes", "topology", "history", "logs", "trace"), key=lambda k: estimate[k])
        advice = {"trace": "--no-trace, a shorter --duration or fewer clients",
                  "history": "--no-check (its windows hold a few operations of every key), fewer --keys, a "
                             "shorter --duration or fewer clients",
                  "logs": "a shorter --duration, fewer clients or fewer nodes",
                  "nodes": "fewer nodes (or a smaller grid)", "topology": "fewer nodes"}[part]
        raise SpecError("memory", f"the run needs an estimated {_gib(estimate['total'])} (most of it {part}: "
                        f"{_gib(estimate[part])} for {estimate['ops']:.3g} ops and {estimate['messages']:.3g} "
                        f"messages) but {_gib(limit)} is available", advice)
    return estimate
