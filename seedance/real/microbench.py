"""Point-to-point and collective microbenchmarks on torch.distributed: one worker per rank.

Run under our launcher (:func:`run_bench`) or torchrun (``torchrun --nproc-per-node N -m seedance.real.microbench
PLAN.json``); the environment contract is torchrun's (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).

Rules (nccl-tests' methodology, NVIDIA/nccl-tests doc/PERFORMANCE.md; Hoefler & Belli, SC'15, "Scientific
benchmarking of parallel computing systems" rules 5-6):

* Backend NCCL when CUDA is available (tensors on ``cuda:LOCAL_RANK``, timed with CUDA events), gloo otherwise
  (host timers, ``time.perf_counter``); gloo is pinned to the loopback interface when the store is on loopback.
* Every measurement is preceded by ``warmups`` untimed runs. Each timed repetition starts after a barrier; a
  collective's time is the slowest rank's (max over ranks, as a collective ends when its last rank does).
  Point-to-point time is half a ping-pong round trip between ranks ``i`` and ``j`` (others idle), so no clock needs
  to be shared.
* Sizes follow nccl-tests: allreduce and broadcast move ``S`` bytes per rank, allgather gathers ``S`` bytes in
  total (``S / n`` from each rank). Tensors are float32 (uint8 for point-to-point).
* Results go through the store as JSON (never pickle); rank 0 writes them to ``plan["out"]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

COLLECTIVES = ("allreduce", "allgather", "broadcast")


def reps_for(size_bytes: int, base: int) -> int:
    """Fewer repetitions for big messages (each already averages over many packets)."""
    if size_bytes <= 256 << 10:
        return base
    if size_bytes <= 4 << 20:
        return max(5, base // 2)
    return max(5, base // 4)


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


def _collective(torch, dist, name: str, size_bytes: int, world: int, device: str):
    count = max(1, size_bytes // 4)
    if name == "allreduce":
        x = torch.ones(count, dtype=torch.float32, device=device)
        return lambda: dist.all_reduce(x)
    if name == "broadcast":
        x = torch.ones(count, dtype=torch.float32, device=device)
        return lambda: dist.broadcast(x, src=0)
    if name == "allgather":
        per_rank = max(1, count // world)
        x = torch.ones(per_rank, dtype=torch.float32, device=device)
        out = torch.empty(per_rank * world, dtype=torch.float32, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, x)
    raise ValueError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVES)}")


def worker(plan: dict[str, Any]) -> None:
    torch, dist, store, rank, world, device = _setup()
    timer = _Timer(torch, device)
    warmups, base_reps = int(plan.get("warmups", 2)), int(plan.get("reps", 20))
    results: dict[str, Any] = {"backend": dist.get_backend(), "world_size": world, "p2p": [], "collectives": []}
    if plan.get("p2p", False):
        for i in range(world):
            for j in range(world):
                if i == j:
                    continue
                for size in plan["sizes"]:
                    x = torch.ones(size, dtype=torch.uint8, device=device)
                    samples = []
                    for rep in range(warmups + reps_for(size, base_reps)):
                        dist.barrier()
                        if rank == i:
                            t = timer.time(lambda: (dist.send(x, j), dist.recv(x, j))) / 2
                            if rep >= warmups:
                                samples.append(t)
                        elif rank == j:
                            dist.recv(x, i)
                            dist.send(x, i)
                    if rank == i:
                        results["p2p"].append({"src": i, "dst": j, "size_bytes": size, "samples_s": samples})
    for name in plan.get("collectives", COLLECTIVES):
        for size in plan["sizes"]:
            op = _collective(torch, dist, name, size, world, device)
            reps = reps_for(size, base_reps)
            mine = []
            for rep in range(warmups + reps):
                dist.barrier()
                t = timer.time(op)
                if rep >= warmups:
                    mine.append(t)
            slowest = torch.tensor(mine, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            results["collectives"].append({"collective": name, "size_bytes": size,
                                           "samples_s": slowest.tolist()})
    store.set(f"seedance/bench/{rank}", json.dumps(results["p2p"]))
    dist.barrier()
    if rank == 0:
        for r in range(1, world):
            results["p2p"].extend(json.loads(store.get(f"seedance/bench/{r}")))
        out = Path(plan["out"])
        out.write_text(json.dumps(results))
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
