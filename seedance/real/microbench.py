"""Point-to-point and collective microbenchmarks on torch.distributed: one worker per rank.

Run under our launcher (:func:`run_bench`) or torchrun (``torchrun --nproc-per-node N -m seedance.real.microbench
PLAN.json``); the environment contract is torchrun's (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).

Rules (nccl-tests' methodology, NVIDIA/nccl-tests doc/PERFORMANCE.md; Hoefler & Belli, SC'15, "Scientific
benchmarking of parallel computing systems" rules 5-6):

* Backend NCCL when CUDA is available (tensors on ``cuda:LOCAL_RANK``, timed with CUDA events), gloo otherwise
  (host timers, ``time.perf_counter``); gloo is pinned to the loopback interface when the store is on loopback.
* Every (pair or collective, size) is an *item*; all items are built first, on views of one preallocated buffer
  per rank (no allocation or first-touch page fault inside a timed region), and ``warmups`` untimed passes over
  all of them come first (gloo's connections and lazy buffers). Each rank runs one torch thread
  (``torch.set_num_threads(1)``): on a small shared machine the ranks would otherwise fight over the cores.
* Two *phases*, always in this order and with the same items in ``calibrate`` and ``validate`` (identical
  schedules): every point-to-point item first, then every collective item, so ping-pongs never interleave with
  collectives and both commands put the machine through the same sequence on the same buffers.
* A sample times a loop of back-to-back operations, as nccl-tests does: after the warm-up, each item's loop length
  is set so that one sample lasts at least ``min_sample_s`` (default 0.1 s; :func:`iters_for_duration` from a
  short probe), agreed across ranks (the maximum), so a scheduler wake-up or barrier skew is spread over
  thousands of small operations. ``min_sample_s = 0`` falls back to :func:`iters_for` (about 1 MiB of traffic).
* ``reps`` timed *rounds* follow per phase; each round visits every item of the phase once in its own seeded random
  order, the same on every rank (:func:`schedule`), so a slow phase of a shared machine (other users' jobs)
  spreads over all sizes and collectives instead of biasing whichever was measured then (Hoefler & Belli rule 9).
* A sample starts after a barrier and divides the loop's time by its length. A collective's sample is the slowest
  rank's (max over ranks, as a collective ends when its last rank does). Point-to-point time is half a ping-pong
  round trip between ranks ``i`` and ``j``, timed on ``i`` (others idle), so no clock needs to be shared.
* Sizes follow nccl-tests: allreduce and broadcast move ``S`` bytes per rank, allgather gathers ``S`` bytes in
  total (``S / n`` from each rank). Tensors are float32 (uint8 for point-to-point).
* Samples are combined with one ``all_reduce(MAX)`` of a float64 tensor (never pickle); rank 0 writes JSON to
  ``plan["out"]``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

COLLECTIVES = ("allreduce", "allgather", "broadcast")


def iters_for(size_bytes: int, max_iters: int = 32) -> int:
    """Back-to-back operations per timed sample: enough that a small message's sample spans ~1 MiB of traffic
    (nccl-tests times a loop of iterations, so one scheduler wake-up or barrier skew is spread over many)."""
    return int(max(1, min(max_iters, (1 << 20) // max(1, size_bytes))))


MAX_ITERS = 1 << 17


def iters_for_duration(seconds_per_op: float, min_sample_s: float, max_iters: int = MAX_ITERS) -> int:
    """Back-to-back operations so that one sample lasts at least ``min_sample_s`` (nccl-tests' timed loop)."""
    if not seconds_per_op > 0:
        return max_iters
    return int(max(1, min(max_iters, math.ceil(min_sample_s / seconds_per_op * (1 - 1e-12)))))


def _probe(torch, dist, timer, op, target_s: float = 0.01) -> float:
    """Seconds per operation: double the loop until it lasts ``target_s`` on the slowest rank. Every rank runs the
    same loop lengths (the decision to double is agreed by an all-reduce), so paired operations never deadlock."""
    iters = 1
    elapsed = torch.zeros(1, dtype=torch.float64)
    while True:
        def loop(iters=iters) -> None:
            for _ in range(iters):
                op()

        dist.barrier()
        elapsed[0] = timer.time(loop)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if float(elapsed[0]) >= target_s or iters >= MAX_ITERS:
            return float(elapsed[0]) / iters
        iters *= 2


def _setup():
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    external = (os.environ.get("SEEDANCE_STORE_HOSTED") == "1"
                or os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true")
    store = dist.TCPStore(host, port, is_master=(rank == 0 and not external), wait_for_workers=False,
                          timeout=timedelta(seconds=300))
    cuda = torch.cuda.is_available()
    if cuda:  # pragma: no cover - needs a GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    elif host.startswith("127.") or host == "localhost":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    return torch, dist, store, rank, world, ("cuda" if cuda else "cpu")


class _Timer:
    """Host timer for CPU, CUDA events for GPU work."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.device = torch, device

    def time(self, fn) -> float:
        if self.device == "cuda":  # pragma: no cover - needs a GPU
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _collective(torch, dist, name: str, size_bytes: int, world: int, src, dst):
    """The operation for one (collective, size) on views of the preallocated buffers ``src`` and ``dst``."""
    count = max(1, size_bytes // 4)
    if name == "allreduce":
        x = src[:count]
        return lambda: dist.all_reduce(x)
    if name == "broadcast":
        x = src[:count]
        return lambda: dist.broadcast(x, src=0)
    if name == "allgather":
        per_rank = max(1, count // world)
        x, out = src[:per_rank], dst[:per_rank * world]
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, x)
    if name == "reducescatter":  # nccl-tests' size: the whole input; each rank keeps 1/world of the sum
        per_rank = max(1, count // world)
        x, out = src[:per_rank * world], dst[:per_rank]
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, x)
    valid = ", ".join((*COLLECTIVES, "reducescatter"))
    raise ValueError(f"unknown collective {name!r}; valid: {valid}")


def _ping_pong(dist, rank: int, i: int, j: int, x):
    """Rank ``i`` sends to ``j`` and waits for the echo; ``j`` echoes; others do nothing."""
    if rank == i:
        return lambda: (dist.send(x, j), dist.recv(x, j))
    if rank == j:
        return lambda: (dist.recv(x, i), dist.send(x, i))
    return lambda: None


def schedule(items: int, rounds: int, seed: int) -> list[list[int]]:
    """One seeded random permutation of the items per round: identical on every rank, different per round, so a
    slow phase of a shared machine is spread over all sizes and collectives instead of biasing one of them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [[int(k) for k in rng.permutation(items)] for _ in range(rounds)]


def worker(plan: dict[str, Any]) -> None:
    torch, dist, store, rank, world, device = _setup()
    torch.set_num_threads(1)  # ranks share the cores; intra-op threads would only fight each other
    timer = _Timer(torch, device)
    warmups, rounds = int(plan.get("warmups", 2)), int(plan.get("reps", 20))
    sizes = [int(s) for s in plan["sizes"]]
    biggest = max(sizes + [int(x) for x in plan.get("p2p_sizes", [])])
    src = torch.ones(max(1, biggest // 4), dtype=torch.float32, device=device)
    dst = torch.zeros(max(1, biggest // 4), dtype=torch.float32, device=device)
    raw = torch.ones(biggest, dtype=torch.uint8, device=device)
    items: list[tuple[dict[str, Any], Any, int]] = []  # (description, op, back-to-back iterations per sample)
    p2p_sizes = [int(x) for x in plan.get("p2p_sizes", sizes)]
    if plan.get("p2p", False):
        for i in range(world):
            for j in range(world):
                if i != j:
                    for size in p2p_sizes:
                        items.append(({"src": i, "dst": j, "size_bytes": size},
                                      _ping_pong(dist, rank, i, j, raw[:size]), iters_for(size)))
    for name in plan.get("collectives", COLLECTIVES):
        for size in sizes:
            items.append(({"collective": name, "size_bytes": size},
                          _collective(torch, dist, name, size, world, src, dst), iters_for(size)))
    for _ in range(warmups):  # untimed: connections, first-touch page faults, gloo's lazy buffers
        for _, op, iters in items:
            for _ in range(iters):
                op()
    min_sample_s = float(plan.get("min_sample_s", 0.1))
    if min_sample_s > 0:  # loop lengths for >= min_sample_s per sample, the same on every rank
        lengths = torch.zeros(len(items), dtype=torch.int64)
        for k, (_, op, _) in enumerate(items):
            lengths[k] = iters_for_duration(_probe(torch, dist, timer, op), min_sample_s)
        dist.all_reduce(lengths, op=dist.ReduceOp.MAX)
        items = [(desc, op, int(n)) for (desc, op, _), n in zip(items, lengths.tolist())]
    samples = torch.zeros((len(items), rounds), dtype=torch.float64)
    phases = [[k for k, item in enumerate(items) if "collective" not in item[0]],
              [k for k, item in enumerate(items) if "collective" in item[0]]]
    seed = int(plan.get("seed", 0))
    for phase, members in enumerate(phases):  # point-to-point first, then collectives: never interleaved
        for r, order in enumerate(schedule(len(members), rounds, seed + 7919 * phase)):
            for position in order:
                k = members[position]
                _, op, iters = items[k]

                def loop(op=op, iters=iters) -> None:
                    for _ in range(iters):
                        op()

                dist.barrier()
                t = timer.time(loop) / iters
                desc = items[k][0]
                samples[k, r] = t if "collective" in desc or desc["src"] == rank else 0.0
    dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
    results: dict[str, Any] = {"backend": dist.get_backend(), "world_size": world, "p2p": [], "collectives": []}
    for (desc, _, iters), row in zip(items, samples.tolist()):
        if "collective" in desc:
            results["collectives"].append({**desc, "iters": iters, "samples_s": row})
        else:  # only the source's time is a round trip (the other ranks recorded 0)
            results["p2p"].append({**desc, "iters": iters, "samples_s": [t / 2 for t in row]})
    if rank == 0:
        Path(plan["out"]).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    from seedance.real.node import set_parent_death_signal

    set_parent_death_signal()
    args = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(args[0]).read_text())
    worker(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
