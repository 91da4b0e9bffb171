"""Clients for nodes started by torchrun on a cluster: ``python -m seedance.real.drive`` (one process, any host).

Rules (torch.distributed.elastic's c10d rendezvous; Jepsen's single control node):

* The user gives the rendezvous they gave torchrun (``--rdzv-endpoint HOST:PORT --rdzv-id ID``). The rank-0 agent
  hosts the workers' store and publishes its address in the rendezvous store (``MASTER_ADDR``/``MASTER_PORT`` under
  ``torch.rendezvous.<id>.<round>``); the nodes publish their own addresses there (:class:`StoreAddressBook`), again
  after every restart, and a client looks a node up each time it connects.
* All clients run in this one process, so every invoke and completion is on one clock (``CLOCK_MONOTONIC`` of this
  host, as Jepsen's control node): a history gathered from clients on several hosts would need synchronised clocks
  to be checked.
* After the load, a final read of every key (process 1,000,000 and up) makes a lost acknowledged write visible.
  ``--gather DIR`` (repeatable: each host's ``SEEDANCE_RUN_DIR``, copied back or on a shared filesystem) adds the
  nodes' observations (``node-*/state/observations.jsonl``) to the history. The history is judged by the protocol's
  checker (linearizability for a key-value protocol; the protocol's own invariants from its summary) and written
  with ``summary.json`` to ``--out``. Exit 0 when the checks hold, 1 when they do not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from seedance.errors import SeedanceError, SpecError

log = logging.getLogger("seedance.real.drive")


def worker_store(endpoint: str, run_id: str, timeout_s: float = 60.0, rounds: int = 64) -> Any:
    """The workers' TCPStore of the torchrun job at rendezvous ``endpoint`` with id ``run_id``."""
    import torch.distributed as dist

    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--rdzv-endpoint", f"{endpoint!r} is not HOST:PORT", "the --rdzv-endpoint given to torchrun")
    rdzv = dist.TCPStore(host, int(port), is_master=False, wait_for_workers=False, timeout=timedelta(seconds=10))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in range(rounds):
            prefixed = dist.PrefixStore(f"torch.rendezvous.{run_id}.{r}", rdzv)
            if prefixed.check(["MASTER_PORT"]):
                addr = prefixed.get("MASTER_ADDR").decode()
                return dist.TCPStore(addr, int(prefixed.get("MASTER_PORT").decode()), is_master=False,
                                     wait_for_workers=False, timeout=timedelta(seconds=30))
        time.sleep(0.2)
    raise SpecError("--rdzv-id", f"no torchrun job {run_id!r} published its store at {endpoint} within "
                    f"{timeout_s:.0f} s", "the --rdzv-id and --rdzv-endpoint of a running torchrun job")


async def _drive(pool: Any, duration_s: float, within_s: float) -> dict[str, Any]:
    await pool.warm_up()
    start = time.monotonic()
    await pool.run(duration_s)
    end = time.monotonic()
    finals = await pool.final_reads(within_s=within_s)
    return {"load_start_s": start, "load_end_s": end, "final_reads": finals}


def drive(*, store: Any, protocol: str, nodes: int, clients: int, duration_s: float, seed: int, key: bytes,
          out: Path, gather: list[Path], check_timeout_s: float = 30.0) -> dict[str, Any]:
    """Run the load against the world's nodes, gather, judge, write ``history.jsonl`` and ``summary.json``."""
    from seedance.history.events import merge_by_time, summarize
    from seedance.history.jsonl import write_jsonl
    from seedance.history.summary import protocol_summary
    from seedance.real.clients import ClientPool, Workload
    from seedance.real.node import resolve_protocol
    from seedance.real.run import FINAL_READ_PROCESS, judge, read_observations
    from seedance.real.addresses import StoreAddressBook
    from seedance.files import atomic_write

    spec = resolve_protocol(protocol)
    book = StoreAddressBook(store)
    deadline = time.monotonic() + 120
    while not all(book.lookup(i) for i in range(nodes)):
        if time.monotonic() > deadline:
            raise SpecError("--nodes", f"not all of {nodes} nodes published an address in 120 s",
                            "the world size of the torchrun job")
        time.sleep(0.1)
    workload = Workload(num_clients=clients)
    pool = ClientPool(num_nodes=nodes, lookup=book.lookup, key=key, workload=workload, seed=seed,
                      t0_monotonic=0.0, routing=spec.routing)  # times on this host's CLOCK_MONOTONIC, as the nodes'

    async def go() -> dict[str, Any]:
        try:
            return await _drive(pool, duration_s, max(10.0, 10 * workload.op_timeout_s))
        finally:
            await pool.close()

    counts = asyncio.run(go())
    events = pool.events
    replicas = [r for d in gather for r in read_observations(Path(d))]
    replicas.sort(key=lambda r: r.time)
    out.mkdir(parents=True, exist_ok=True)
    history = write_jsonl(merge_by_time(events, replicas) if replicas else events, out / "history.jsonl")
    summary: dict[str, Any] = {"protocol": protocol, "seed": seed, "backend": "real", "launch": "torchrun",
                               "nodes": nodes, "clients": clients, "duration_s": duration_s,
                               "hosts_gathered": [str(d) for d in gather], "replica_events": len(replicas)}
    summary.update(summarize(events, duration_s, exclude=lambda process: process >= FINAL_READ_PROCESS))
    summary["linearizable"] = judge(events, check_timeout_s, spec.checker) if spec.checker else "unknown"
    summary.update(protocol_summary(spec, events, replicas, nodes))
    summary.update(counts, history=str(history))
    atomic_write(out / "summary.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seedance.real.drive", description=__doc__.split("\n")[0])
    parser.add_argument("--rdzv-endpoint", required=True, help="HOST:PORT, as given to torchrun")
    parser.add_argument("--rdzv-id", required=True, help="the job id, as given to torchrun")
    parser.add_argument("--protocol", default="raft")
    parser.add_argument("--nodes", type=int, required=True, help="the torchrun world size")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gather", type=Path, action="append", default=[],
                        help="a host's SEEDANCE_RUN_DIR (repeat per host)")
    args = parser.parse_args(argv)
    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s drive %(levelname)s %(message)s")
    try:
        from seedance.real.transport import load_key

        for name, value in (("--nodes", args.nodes), ("--clients", args.clients), ("--duration", args.duration)):
            if not value > 0:
                raise SpecError(name, f"{value!r} is not positive", "a positive number")
        key = load_key()
        store = worker_store(args.rdzv_endpoint, args.rdzv_id)
        summary = drive(store=store, protocol=args.protocol, nodes=args.nodes, clients=args.clients,
                        duration_s=args.duration, seed=args.seed, key=key, out=args.out, gather=args.gather)
    except SeedanceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    ok = summary["linearizable"] is not False and summary.get("invariants_ok", True) is not False
    print(json.dumps({k: summary.get(k) for k in ("linearizable", "ops_ok", "final_reads", "replica_events")}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
