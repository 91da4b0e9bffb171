"""The protocol comparison: Raft, Multi-Paxos and EPaxos on the same fabric, workloads and seeds (simulator).

What one row is: one ``sim run`` of one protocol with ``replicas`` nodes, each on its own server of a multi-server
preset (``dgx-a100``, one node per server, servers joined by InfiniBand), 16 closed-loop clients (read 0.2, write
0.7, cas 0.1) over 100 keys where a fraction ``conflict_rate`` of the commands go to one hot key (the workloads of
"EPaxos Revisited", Tollman et al., NSDI'21: 0, 2, 25, 100 %), or a Zipf law (θ = 0.9) over the keys; optionally with
training traffic (a 1 GiB allreduce among every GPU every 0.2 s on the same links) or a partition of one node.
Timing is scaled as in the campaigns (heartbeat 2 ms, timeouts 8–16 ms: 15–30 round trips of the fabric).

Columns (the seed's: linearizable writes, write throughput, p99 write latency, partition tolerance, plus the
issue's): ``throughput_ops_s`` (completed operations per simulated second), ``latency_ms_p50/p99`` (client-observed:
invoke to reply), ``commit_latency_ms_p50/p99`` and ``execution_latency_ms_p50/p99`` — for EPaxos the command
leader's propose → commit and commit → executed of its own commands (it answers after executing); Raft and
Multi-Paxos apply an entry in the step that commits it, so their commit latency is the client latency and their
execution latency 0 — ``messages_per_op`` / ``bytes_per_op`` (everything the protocol sent, per completed
operation), ``linearizable`` (the kv checker's verdict), and, for EPaxos, ``fast_path_fraction``. ``batching`` says
how a row batches: Raft always does (up to 256 entries per AppendEntries, one with new entries in flight per
follower: what arrives meanwhile rides in the next one); Multi-Paxos and EPaxos rows run with batching off and,
marked ``+batch``, with ``max_batch=64`` (Multi-Paxos: slots per Accept; EPaxos: commands per instance).

With ``real=True`` (``--real``) a second table puts the three protocols on the real backend — 3 and 5 processes on
loopback, without faults and with the ``crash`` fault (SIGKILL, restart from the fsynced state at the window's end)
— next to the simulator's prediction of the same run on a host profile measured on this machine
(:mod:`seedance.models.host`, as ``experiment sim-vs-real`` uses; the other tenants measured during each real run
are fed to its prediction): same protocol, nodes, 8 closed-loop writers on 8 keys, duration, seed and fault windows
(both sides draw them from the seed). Columns: real and predicted throughput and p99, their ratios real / predicted,
kills, and the real run's linearizability.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOLS = ("raft", "multipaxos", "epaxos")
BATCHABLE = ("multipaxos", "epaxos")  # batching is a knob (max_batch, off by default); Raft always batches
MAX_BATCH = 64
RAFT_BATCHING = "always (256 entries/AppendEntries, 1 in flight)"
TIMING = {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016}
BACKGROUND = "allreduce:1GiB@0.2"
TOPOLOGY = "dgx-a100"
ROW_FIELDS = ("protocol", "batching", "workload", "conflict_rate", "replicas", "topology", "background", "fault",
              "seed",
              "throughput_ops_s", "latency_ms_p50", "latency_ms_p99", "commit_latency_ms_p50",
              "commit_latency_ms_p99", "execution_latency_ms_p50", "execution_latency_ms_p99", "messages_per_op",
              "bytes_per_op", "fast_path_fraction", "linearizable")


@dataclass(frozen=True)
class Case:
    protocol: str
    conflict_rate: float | None  # None: Zipf
    replicas: int
    background: bool = False
    fault: str | None = None  # a nemesis fault name, e.g. "partition-one"
    zipf: bool = False
    batch: bool = False  # Multi-Paxos / EPaxos with max_batch=64 (Raft always batches)

    @property
    def workload(self) -> str:
        return "zipf-0.9" if self.zipf else f"conflict-{self.conflict_rate:g}"


def grid(quick: bool) -> list[Case]:
    conflicts = (0.0, 0.25, 1.0) if quick else (0.0, 0.02, 0.25, 1.0)
    replicas = (3, 5) if quick else (3, 5, 7)
    cases = [Case(p, c, r) for p in PROTOCOLS for r in replicas for c in conflicts]
    cases += [Case(p, c, 3, batch=True) for p in BATCHABLE for c in conflicts]
    cases += [Case(p, 0.02, 3, background=True) for p in PROTOCOLS]
    cases += [Case(p, 0.02, 3, fault="partition-one") for p in PROTOCOLS]
    if 0.02 not in conflicts:
        cases += [Case(p, 0.02, 3) for p in PROTOCOLS]
    if not quick:
        cases += [Case(p, c, 5, background=True) for p in PROTOCOLS for c in (0.0, 1.0)]
        cases += [Case(p, None, r, zipf=True) for p in PROTOCOLS for r in (3, 5)]
    return cases


def batching(case: Case) -> str:
    if case.protocol == "raft":
        return RAFT_BATCHING
    return f"max_batch={MAX_BATCH}" if case.batch else "off"


def latency_breakdown(protocol: str, result: Any) -> dict[str, Any]:
    """A run's commit and execution latency (ms, p50 / p99), messages and bytes per completed operation, and EPaxos's
    fast-path fraction (None for the others), as the module docstring defines them."""
    ok = max(result.ops_ok, 1)
    p50, p99 = result.latency_ms_p50, result.latency_ms_p99
    commit50, commit99, exec50, exec99 = p50, p99, 0.0, 0.0
    fast = None
    if protocol == "epaxos":
        nodes = [h.node for h in result.runtime.hosts if h.node is not None]
        samples = [s for n in nodes for s in n.latencies]
        if samples:
            commit = 1e3 * np.array([s[0] for s in samples])
            execute = 1e3 * np.array([s[1] for s in samples])
            commit50, commit99 = float(np.percentile(commit, 50)), float(np.percentile(commit, 99))
            exec50, exec99 = float(np.percentile(execute, 50)), float(np.percentile(execute, 99))
        fast_n = sum(n.fast_commits for n in nodes)
        slow_n = sum(n.slow_commits for n in nodes)
        fast = fast_n / (fast_n + slow_n) if fast_n + slow_n else None
    return {"commit_latency_ms_p50": commit50, "commit_latency_ms_p99": commit99,
            "execution_latency_ms_p50": exec50, "execution_latency_ms_p99": exec99,
            "messages_per_op": result.stats["messages_sent"] / ok, "bytes_per_op": result.stats["bytes_sent"] / ok,
            "fast_path_fraction": fast}


def run_case(case: Case, *, seed: int, duration_s: float) -> dict[str, Any]:
    from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

    if case.zipf:
        workload = WorkloadConfig(clients=16, keys=100, mix=(0.2, 0.7, 0.1), key_distribution="zipf", zipf_s=0.9,
                                  op_timeout_s=0.05)
    else:
        workload = WorkloadConfig(clients=16, keys=100, mix=(0.2, 0.7, 0.1), key_distribution="conflict",
                                  conflict_rate=float(case.conflict_rate), op_timeout_s=0.05)
    nemesis = NemesisConfig(faults=(case.fault,), faulty_fraction=0.6) if case.fault else NemesisConfig()
    config = SimConfig(protocol=case.protocol, nodes=case.replicas, duration_s=duration_s, seed=seed,
                       topology=TOPOLOGY, topology_hosts=case.replicas, nodes_per_host=1,
                       protocol_config={**TIMING, **({"max_batch": MAX_BATCH} if case.batch else {})},
                       workload=workload, nemesis=nemesis, trace=False, check=True,
                       check_timeout_s=60.0, background=(BACKGROUND,) if case.background else ())
    result = simulate(config)
    breakdown = latency_breakdown(case.protocol, result)
    return {
        "protocol": case.protocol + ("+batch" if case.batch else ""), "batching": batching(case),
        "workload": case.workload, "conflict_rate": case.conflict_rate,
        "replicas": case.replicas, "topology": TOPOLOGY, "background": BACKGROUND if case.background else None,
        "fault": case.fault, "seed": seed,
        "throughput_ops_s": result.throughput_ops_s, "latency_ms_p50": result.latency_ms_p50,
        "latency_ms_p99": result.latency_ms_p99, **breakdown, "linearizable": result.linearizable,
        "reproduce": result.reproduce,
    }


def run(*, quick: bool, seed: int = 0, duration_s: float | None = None,
        progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    cases = grid(quick)
    duration = duration_s if duration_s is not None else (0.3 if quick else 1.0)
    rows = []
    for k, case in enumerate(cases):
        if progress is not None:
            progress(f"[{k + 1}/{len(cases)}] {case.protocol}{'+batch' if case.batch else ''} {case.workload} "
                     f"replicas={case.replicas}"
                     f"{' background' if case.background else ''}{' ' + case.fault if case.fault else ''}")
        rows.append(run_case(case, seed=seed, duration_s=duration))
    return rows


# ------------------------------------------------------------------------------------- real vs the simulator
REAL_FIELDS = ("protocol", "replicas", "fault", "seed", "duration_s", "clients", "real_ops_s", "predicted_ops_s",
               "ratio_ops", "real_p99_ms", "predicted_p99_ms", "ratio_p99", "real_p50_ms", "predicted_p50_ms",
               "kills", "real_linearizable", "tenant_cores")
REAL_CLIENTS = 8
REAL_FAULT = "crash"  # SIGKILL at the window's start, restart from the fsynced state at its end (both backends)
FAULTY_FRACTION = 0.6


@dataclass(frozen=True)
class RealCase:
    protocol: str
    replicas: int
    kills: bool


def real_grid() -> list[RealCase]:
    return [RealCase(p, n, k) for n in (3, 5) for k in (False, True) for p in PROTOCOLS]


def _ratio(real: Any, predicted: Any) -> float | None:
    if real is None or predicted is None or predicted != predicted or not predicted:
        return None
    return float(real) / float(predicted)


def run_real_case(case: RealCase, *, profile: Any, seed: int, duration_s: float, out: Path) -> dict[str, Any]:
    """One real run of ``case`` and the simulator's prediction of it (see the module docstring)."""
    from seedance.experiments.sim_vs_real import with_tenants
    from seedance.real.clients import Workload
    from seedance.real.meters import TenantMeter
    from seedance.real.run import run_real
    from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

    faults = (REAL_FAULT,) if case.kills else ()
    with TenantMeter() as meter:
        real = run_real(protocol=case.protocol, nodes=case.replicas, clients=REAL_CLIENTS, duration_s=duration_s,
                        seed=seed, out=out, nemesis=faults, faulty_fraction=FAULTY_FRACTION, trace=False,
                        workload=Workload(num_clients=REAL_CLIENTS, keys=8, read_fraction=0.0, cas_fraction=0.0),
                        check=True, check_timeout_s=30.0)
    predicted = simulate(SimConfig(
        protocol=case.protocol, nodes=case.replicas, duration_s=duration_s, seed=seed, trace=False, check=False,
        workload=WorkloadConfig(clients=REAL_CLIENTS, keys=8, mix=(0.0, 1.0, 0.0), op_timeout_s=1.0),
        nemesis=NemesisConfig(faults=faults, faulty_fraction=FAULTY_FRACTION) if faults else NemesisConfig(),
        host_profile=with_tenants(profile, meter.busy_cores)), liveness=False)
    return {
        "protocol": case.protocol, "replicas": case.replicas, "fault": REAL_FAULT if case.kills else None,
        "seed": seed, "duration_s": duration_s, "clients": REAL_CLIENTS,
        "real_ops_s": real["throughput_ops_s"], "predicted_ops_s": predicted.throughput_ops_s,
        "ratio_ops": _ratio(real["throughput_ops_s"], predicted.throughput_ops_s),
        "real_p99_ms": real["latency_ms_p99"], "predicted_p99_ms": predicted.latency_ms_p99,
        "ratio_p99": _ratio(real["latency_ms_p99"], predicted.latency_ms_p99),
        "real_p50_ms": real["latency_ms_p50"], "predicted_p50_ms": predicted.latency_ms_p50,
        "kills": real["kills"], "real_linearizable": real["linearizable"], "tenant_cores": meter.busy_cores,
        "reproduce": real["reproduce"], "predicted_reproduce": predicted.reproduce,
    }


def run_real(*, profile: Any, out: Path, seed: int = 0, duration_s: float = 3.0,
             progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    cases = real_grid()
    rows = []
    for k, case in enumerate(cases):
        name = f"{case.protocol}-n{case.replicas}{'-kills' if case.kills else ''}"
        if progress is not None:
            progress(f"[real {k + 1}/{len(cases)}] {name}")
        rows.append(run_real_case(case, profile=profile, seed=seed, duration_s=duration_s, out=out / "real" / name))
    return rows


def real_latex_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [r"\begin{tabular}{lrlrrrrrrrl}", r"\toprule",
             r"protocol & processes & fault & real (ops/s) & predicted (ops/s) & real/predicted & real p99 (ms) & "
             r"predicted p99 (ms) & real/predicted & kills & linearizable \\", r"\midrule"]
    for r in rows:
        lines.append(" & ".join([r["protocol"], str(r["replicas"]), "SIGKILL" if r["fault"] else "none",
                                 _fmt(r["real_ops_s"], 0), _fmt(r["predicted_ops_s"], 0), _fmt(r["ratio_ops"], 2),
                                 _fmt(r["real_p99_ms"], 1), _fmt(r["predicted_p99_ms"], 1), _fmt(r["ratio_p99"], 2),
                                 str(r["kills"]), _fmt(r["real_linearizable"])]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def save_real(rows: Sequence[dict[str, Any]], out: Path) -> dict[str, str]:
    from seedance.files import atomic_write

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "protocols_real.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*REAL_FIELDS, "reproduce", "predicted_reproduce"])
        writer.writeheader()
        writer.writerows(rows)
    atomic_write(out / "protocols_real.tex", real_latex_table(rows).encode())
    return {"real_csv": str(out / "protocols_real.csv"), "real_latex": str(out / "protocols_real.tex")}


# -------------------------------------------------------------------------------------------------- outputs
def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "--"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def latex_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [r"\begin{tabular}{lllrlrrrrl}", r"\toprule",
             r"protocol & batching & workload & replicas & background & throughput (ops/s) & p99 (ms) & "
             r"commit p99 (ms) & execution p99 (ms) & linearizable \\", r"\midrule"]
    for r in rows:
        if r["fault"]:
            continue
        lines.append(" & ".join([r["protocol"], r.get("batching", "--"), r["workload"], str(r["replicas"]),
                                 "yes" if r["background"] else "no",
                                 _fmt(r["throughput_ops_s"], 0), _fmt(r["latency_ms_p99"], 2),
                                 _fmt(r["commit_latency_ms_p99"], 2), _fmt(r["execution_latency_ms_p99"], 2),
                                 _fmt(r["linearizable"])]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def figure(rows: Sequence[dict[str, Any]]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seedance.analysis import style

    style.apply()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    plain = [r for r in rows if not r["background"] and not r["fault"] and r["workload"].startswith("conflict")]
    for protocol in (*PROTOCOLS, *(f"{p}+batch" for p in BATCHABLE)):
        by_conflict = sorted((r["conflict_rate"], r) for r in plain if r["protocol"] == protocol and r["replicas"] == 3)
        xs = [100 * c for c, _ in by_conflict]
        look = {"marker": "o", "label": protocol, "color": style.color(protocol),
                "linestyle": style.line_style(protocol)}  # one colour per protocol; +batch dashed
        axes[0][0].plot(xs, [r["throughput_ops_s"] for _, r in by_conflict], **look)
        axes[0][1].plot(xs, [_num(r["latency_ms_p99"]) for _, r in by_conflict], **look)
        hot = min((c for c, _ in by_conflict), default=0.0, key=lambda c: abs(c - 0.25))
        by_n = sorted((r["replicas"], r) for r in plain if r["protocol"] == protocol and r["conflict_rate"] == hot)
        axes[1][0].plot([n for n, _ in by_n], [r["throughput_ops_s"] for _, r in by_n], **look)
    axes[0][0].set(xlabel="conflict rate (%)", ylabel="throughput (ops/s)", title="3 replicas")
    axes[0][1].set(xlabel="conflict rate (%)", ylabel="p99 latency (ms)", title="3 replicas")
    axes[1][0].set(xlabel="replicas", ylabel="throughput (ops/s)", title="25 % conflicts")
    labels, with_bg, without_bg = [], [], []
    for protocol in PROTOCOLS:
        base = [r for r in rows if r["protocol"] == protocol and r["replicas"] == 3 and r["conflict_rate"] == 0.02
                and not r["fault"]]
        on = [r["latency_ms_p99"] for r in base if r["background"]]
        off = [r["latency_ms_p99"] for r in base if not r["background"]]
        labels.append(protocol)
        with_bg.append(on[0] if on and on[0] is not None else float("nan"))
        without_bg.append(off[0] if off and off[0] is not None else float("nan"))
    x = np.arange(len(labels))
    axes[1][1].bar(x - 0.2, without_bg, 0.4, label="no training traffic")
    axes[1][1].bar(x + 0.2, with_bg, 0.4, label=f"with {BACKGROUND}")
    axes[1][1].set_yscale("log")
    for k, value in enumerate(with_bg):
        if value != value:  # nan: no operation completed
            axes[1][1].text(x[k] + 0.2, 1.0, "no op\ncompleted", ha="center", fontsize=8)
    axes[1][1].set_xticks(x, labels)
    axes[1][1].set(ylabel="p99 latency (ms)", title="2 % conflicts, 3 replicas")
    for ax in axes.flat:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save(rows: Sequence[dict[str, Any]], out: Path, *, provenance: dict[str, Any],
         real_rows: Sequence[dict[str, Any]] | None = None) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    artifacts: dict[str, str] = {} if real_rows is None else save_real(real_rows, out)
    with open(out / "protocols.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*ROW_FIELDS, "reproduce"])
        writer.writeheader()
        writer.writerows(rows)
    artifacts["csv"] = str(out / "protocols.csv")
    (out / "protocols.tex").write_text(latex_table(rows))
    artifacts["latex"] = str(out / "protocols.tex")
    fig = figure(rows)
    for ext in ("pdf", "png"):
        fig.savefig(out / f"protocols.{ext}", dpi=150)
        artifacts[ext] = str(out / f"protocols.{ext}")
    summary = {"rows": list(rows), "provenance": provenance}
    if real_rows is not None:
        summary["real_rows"] = list(real_rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    artifacts["summary"] = str(out / "summary.json")
    return artifacts
