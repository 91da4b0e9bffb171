"""One-GPU smoke test of the real backend's NCCL path: world-size-1 collectives and CUDA-event timing.

Runs the same functions the real backend uses (``seedance.real.collectives.make_process_group`` /
``run_collective`` and the calibration microbenchmark's timer), on NCCL when CUDA is available and on gloo
otherwise, and prints one JSON object (also written to ``--out``). Usage::

    python examples/gpu/nccl_smoke.py --out out/nccl_smoke.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from seedance.real import microbench
from seedance.real.collectives import backend_name, make_process_group, run_collective


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/nccl_smoke.json")
    args = parser.parse_args()
    backend = backend_name()
    device = "cuda" if backend == "nccl" else "cpu"
    report: dict = {"backend": backend, "torch": torch.__version__, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        report["gpu"] = torch.cuda.get_device_name(0)
        report["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        torch.cuda.set_device(0)
    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True)
    pg = make_process_group(store, 0, 1, 30.0, backend, None)
    payload = np.arange(8, dtype=np.float32)
    report["collectives"] = {
        op: np.asarray(run_collective(pg, op, payload, 0, 1, 0, device)).tolist() for op in
        ("allreduce", "broadcast", "allgather", "reducescatter")
    }
    # The calibration microbenchmark's timing path (CUDA events on a GPU) through the default process group.
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    torch_mod, dist_mod, _, _, world, bench_device = microbench._setup()
    timer = microbench._Timer(torch_mod, bench_device)
    src = torch.ones(16 << 20, device=bench_device)
    dst = torch.empty(16 << 20, device=bench_device)
    timings = {}
    for size in (4 << 10, 1 << 20, 64 << 20):
        fn = microbench._collective(torch_mod, dist_mod, "allreduce", size, world, src, dst)
        fn()
        samples = [timer.time(fn) for _ in range(20)]
        timings[str(size)] = {"median_s": statistics.median(samples), "min_s": min(samples)}
    report["allreduce_timing_world1"] = timings
    report["timer"] = "cuda-events" if bench_device == "cuda" else "perf_counter"
    dist_mod.destroy_process_group()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
