"""seedance's real Raft vs PySyncObj (a Python Raft library): 3 nodes on loopback, the same client load.

Both sides: 3 node processes on 127.0.0.1, ``--clients`` closed-loop clients each issuing one write of
``--value-size`` bytes at a time and waiting for its commit, for ``--duration`` seconds after both clusters have a
leader. Throughput is committed writes per second; p99 is the 99th percentile of write latency.

What differs, by design of each system (not of the benchmark): seedance's Raft fsyncs term/vote and every log append
before it answers (Raft §5.1; contract.py ``PersistLog``), and its clients talk to the nodes over HMAC-authenticated
TCP from a separate process (all clients in one process, their requests pipelined on one connection per node, the
requests of one event-loop turn in one HMAC'd batch frame, the replies likewise);
PySyncObj keeps its log in memory (no journal file configured, as in its default
configuration) and its clients are threads inside the node processes calling ``@replicated`` methods with
``sync=True``. seedance also runs once with ``SEEDANCE_FSYNC=0`` (no fsync, like PySyncObj's in-memory log) to
show what durability costs; the headline numbers are with fsync. PySyncObj runs twice, with its default timing (appendEntriesPeriod 0.1 s) and tuned
(:data:`TUNED_TICK_S`); the ratio is against the faster of the two. Prints and writes ``DIR/raft_vs_pysyncobj.json`` with
{"seedance_ops_s", "pysyncobj_ops_s", "ratio", "seedance_p99_ms", "pysyncobj_p99_ms", "seedance_client_cpu_us_per_op",
"seedance_nodes_cpu_us_per_op", "pysyncobj_cpu_us_per_op"}: CPU per operation over the load window (seedance: the
client process, and the three node processes together, every thread; PySyncObj: its three node processes, whose
client threads are inside them).

Needs ``pip install pysyncobj`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


TUNED_TICK_S = 0.005  # PySyncObj's appendEntriesPeriod (default 0.1 s) for the tuned baseline; autoTick at half


# ------------------------------------------------------------------------------------------ PySyncObj side
def _pysyncobj_node(args: argparse.Namespace) -> int:
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class KV(SyncObj):
        def __init__(self, me: str, others: list[str]) -> None:
            tuning = {} if args.tick_s is None else {"appendEntriesPeriod": args.tick_s,
                                                      "autoTickPeriod": args.tick_s / 2}
            super().__init__(me, others, SyncObjConf(dynamicMembershipChange=False, commandsWaitLeader=True,
                                                     **tuning))
            self._data: dict[str, str] = {}

        @replicated
        def set(self, key: str, value: str) -> None:
            self._data[key] = value

    addresses = args.addresses.split(",")
    me = addresses[args.pysyncobj_node]
    kv = KV(me, [a for a in addresses if a != me])
    sync_dir = Path(args.sync_dir)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # a leader and one committed write, then report ready
        try:
            kv.set("warmup", "x", sync=True, timeout=2.0)
            break
        except Exception:  # no leader yet
            time.sleep(0.05)
    (sync_dir / f"ready-{args.pysyncobj_node}").write_text("1")
    while not (sync_dir / "go").exists():
        time.sleep(0.005)
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + args.duration
    value = "v" * args.value_size

    def client(cid: int) -> None:
        n = 0
        mine: list[float] = []
        while time.monotonic() < stop_at:
            n += 1
            t0 = time.monotonic()
            try:
                kv.set(f"k{(cid * 7 + n) % 8}", value, sync=True, timeout=2.0)
                mine.append(time.monotonic() - t0)
            except Exception:
                with lock:
                    failures[0] += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients_here)]
    cpu0 = time.process_time()  # this node process: its Raft and its client threads, during the load
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu_s = time.process_time() - cpu0
    Path(args.result).write_text(json.dumps({"latencies_s": latencies, "failures": failures[0], "cpu_s": cpu_s}))
    (sync_dir / f"done-{args.pysyncobj_node}").write_text("1")
    while not (sync_dir / "stop").exists():  # keep serving until every node has finished its clients
        time.sleep(0.01)
    kv.destroy()
    return 0


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_pysyncobj(clients: int, duration_s: float, value_size: int, tick_s: float | None = None) -> dict[str, float]:
    addresses = ",".join(f"127.0.0.1:{p}" for p in _free_ports(3))
    with tempfile.TemporaryDirectory(prefix="pysyncobj-") as tmp:
        sync_dir = Path(tmp)
        procs = []
        try:
            for node in range(3):
                here = clients // 3 + (1 if node < clients % 3 else 0)
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--pysyncobj-node", str(node), "--addresses", addresses,
                     "--clients-here", str(here), "--duration", str(duration_s), "--value-size", str(value_size),
                     "--sync-dir", str(sync_dir), "--result", str(sync_dir / f"result-{node}.json"),
                     *([] if tick_s is None else ["--tick-s", str(tick_s)])],
                    start_new_session=True))
            _wait_files(sync_dir, "ready", 3, procs, 180)
            (sync_dir / "go").write_text("1")
            _wait_files(sync_dir, "done", 3, procs, duration_s + 120)
            (sync_dir / "stop").write_text("1")
            for p in procs:
                p.wait(timeout=30)
            latencies: list[float] = []
            failures, cpu_s = 0, 0.0
            for node in range(3):
                result = json.loads((sync_dir / f"result-{node}.json").read_text())
                latencies += result["latencies_s"]
                failures += result["failures"]
                cpu_s += result["cpu_s"]
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    lat = np.asarray(latencies) if latencies else np.asarray([np.nan])
    return {"ops_s": len(latencies) / duration_s, "p50_ms": float(np.percentile(lat, 50) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3), "failures": failures,
            "cpu_us_per_op": cpu_s / len(latencies) * 1e6 if latencies else None}


def _wait_files(directory: Path, prefix: str, count: int, procs: list, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(directory.glob(f"{prefix}-*"))) < count:
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError("a PySyncObj node failed")
        if time.monotonic() > deadline:
            raise TimeoutError(f"PySyncObj nodes not {prefix} after {timeout_s:.0f} s")
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------- seedance side
def run_seedance(clients: int, duration_s: float, value_size: int, seed: int, out: Path,
                 fsync: bool = True) -> dict[str, float]:
    from seedance.real.clients import Workload
    from seedance.real.run import run_real

    workload = Workload(num_clients=clients, keys=8, read_fraction=0.0, cas_fraction=0.0,
                        value_size_bytes=value_size, op_timeout_s=2.0)
    summary = run_real(protocol="raft", nodes=3, clients=clients, duration_s=duration_s, seed=seed,
                       out=out / ("seedance-run" if fsync else "seedance-run-nofsync"), workload=workload,
                       check=True, warmup=True, extra_env={} if fsync else {"SEEDANCE_FSYNC": "0"})
    ops = summary["ops_ok"] + summary["ops_info"] + summary["ops_failed"]
    return {"ops_s": summary["throughput_ops_s"], "p50_ms": summary["latency_ms_p50"],
            "p99_ms": summary["latency_ms_p99"], "linearizable": summary["linearizable"],
            "info": summary["ops_info"], "failed": summary["ops_failed"],
            "client_cpu_us_per_op": summary["client_cpu_s"] / ops * 1e6 if ops else None,
            "nodes_cpu_us_per_op": summary["node_cpu_s"] / ops * 1e6 if ops else None}


def _compare(clients: int, duration: float, value_size: int, seed: int, out: Path) -> dict:
    ours = run_seedance(clients, duration, value_size, seed, out)
    no_fsync = run_seedance(clients, duration, value_size, seed, out, fsync=False)
    default = run_pysyncobj(clients, duration, value_size)
    tuned = run_pysyncobj(clients, duration, value_size, tick_s=TUNED_TICK_S)
    theirs = max(default, tuned, key=lambda r: r["ops_s"])  # the stronger baseline
    return {"seedance_ops_s": ours["ops_s"], "pysyncobj_ops_s": theirs["ops_s"],
            "ratio": ours["ops_s"] / theirs["ops_s"] if theirs["ops_s"] else None,
            "seedance_p99_ms": ours["p99_ms"], "pysyncobj_p99_ms": theirs["p99_ms"],
            "seedance_p50_ms": ours["p50_ms"], "pysyncobj_p50_ms": theirs["p50_ms"],
            "seedance_linearizable": ours["linearizable"], "pysyncobj_failures": theirs["failures"],
            "seedance_client_cpu_us_per_op": ours["client_cpu_us_per_op"],
            "seedance_nodes_cpu_us_per_op": ours["nodes_cpu_us_per_op"],
            "pysyncobj_cpu_us_per_op": theirs["cpu_us_per_op"],
            "seedance_no_fsync": no_fsync,
            "pysyncobj_default": default, "pysyncobj_tuned": {**tuned, "appendEntriesPeriod_s": TUNED_TICK_S}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--clients", default="8,64",
                        help="comma-separated client counts (requests in flight), each measured on both sides")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3-second runs")
    # internal: one PySyncObj node process
    parser.add_argument("--pysyncobj-node", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--addresses", help=argparse.SUPPRESS)
    parser.add_argument("--clients-here", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sync-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--tick-s", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pysyncobj_node is not None:
        return _pysyncobj_node(args)
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        print("raft_vs_pysyncobj: pip install pysyncobj (the 'bench' extra)", file=sys.stderr)
        return 2
    duration = 3.0 if args.quick else args.duration
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = [int(c) for c in str(args.clients).split(",") if c]
    if not counts or any(c < 1 for c in counts):
        print("raft_vs_pysyncobj: --clients must be positive integers, e.g. 8,64", file=sys.stderr)
        return 2
    per_count = {}
    for clients in counts:
        per_count[str(clients)] = _compare(clients, duration, args.value_size, args.seed, out)
        row = per_count[str(clients)]
        nf = row["seedance_no_fsync"]
        print(f"{clients} clients: seedance {row['seedance_ops_s']:.0f} ops/s (p99 {row['seedance_p99_ms']:.1f} ms; "
              f"client CPU {row['seedance_client_cpu_us_per_op']:.0f} us/op, nodes together "
              f"{row['seedance_nodes_cpu_us_per_op']:.0f} us/op; fsync and HMAC on, clients in their own process "
              f"over TCP) vs PySyncObj {row['pysyncobj_ops_s']:.0f} ops/s (p99 {row['pysyncobj_p99_ms']:.1f} ms; "
              f"{row['pysyncobj_cpu_us_per_op']:.0f} us/op in its nodes, clients included; in-memory log, clients "
              f"as threads in the node processes, its faster of default and tuned timing): ratio {row['ratio']:.2f}; "
              f"seedance without fsync {nf['ops_s']:.0f} ops/s", flush=True)
    result = {**per_count[str(counts[0])], "by_clients": per_count, "clients": counts,
              "value_size_bytes": args.value_size, "duration_s": duration, "nodes": 3,
              "cpu_count": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}
    (out / "raft_vs_pysyncobj.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
