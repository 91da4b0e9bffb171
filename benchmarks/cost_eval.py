"""How fast the cost model evaluates (issue A: ≥ 1e5 evaluations/s at 64 devices; 1,024-device allreduce < 10 ms).

Measures, in one process:

1. vectorised throughput: (collective, size, topology) evaluations per second over four 64-device presets × six
   collectives × a sweep of sizes, algorithm ``auto`` (every algorithm evaluated, the fastest kept), preprocessing
   cached (warm) — and the same for one ``collective_time`` call per evaluation (scalar);
2. a naive baseline: a Python loop computing the ring allreduce by iterating over hops per size (no envelope, no
   numpy), against the vectorised ring allreduce on the same sizes: the speed-up is a ratio measured here;
3. a 1,024-device cluster (dgx-a100, 128 servers): ring and hierarchical allreduce, with preprocessing (fabric,
   ring search, plans) uncached (a fresh Topology object) and cached;
4. ring-order quality of the large-n heuristic on random heterogeneous matrices, against the exact DP (n = 12–14).

Usage: ``python benchmarks/cost_eval.py [--out DIR] [--quick]``; writes ``DIR/cost_eval.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from seedance.models.cost import ALGORITHMS, COLLECTIVES, collective_time, collective_times, fabric_of, ring_order
from seedance.models.cost import ring as ring_module
from seedance.models.topology import load
from seedance.provenance import run_metadata

PRESETS_64 = [("dgx-a100", 8), ("hgx-h100", 8), ("pcie-8gpu", 8), ("mixed", 8)]


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def throughput(quick: bool) -> dict:
    topologies = [load(name, nodes=nodes) for name, nodes in PRESETS_64]
    sizes = np.unique(np.round(np.logspace(0, 33, 512 if quick else 4096, base=2)))
    for topology in topologies:  # warm the per-topology caches (measured separately below)
        for collective in COLLECTIVES:
            collective_times(collective, sizes[:2], topology)

    def vectorised() -> None:
        for topology in topologies:
            for collective in COLLECTIVES:
                collective_times(collective, sizes, topology)

    evaluations = len(topologies) * len(COLLECTIVES) * len(sizes)
    seconds = best_of(3, vectorised)
    scalar_sizes = [int(s) for s in sizes[:: max(1, len(sizes) // (32 if quick else 128))]]

    def scalar() -> None:
        for topology in topologies:
            for collective in COLLECTIVES:
                for size in scalar_sizes:
                    collective_time(collective, size, topology)

    scalar_evaluations = len(topologies) * len(COLLECTIVES) * len(scalar_sizes)
    scalar_seconds = best_of(3, scalar)
    algorithms_per_eval = float(np.mean([len(ALGORITHMS[c]) for c in COLLECTIVES]))
    return {
        "num_devices": [t.num_devices for t in topologies],
        "topologies": [t.name for t in topologies],
        "algorithm": "auto",
        "algorithms_evaluated_per_auto_call_mean": algorithms_per_eval,
        "vectorised_evaluations": evaluations,
        "vectorised_seconds": seconds,
        "vectorised_evaluations_per_s": evaluations / seconds,
        "scalar_evaluations": scalar_evaluations,
        "scalar_seconds": scalar_seconds,
        "scalar_evaluations_per_s": scalar_evaluations / scalar_seconds,
    }


def naive_ring_allreduce(bandwidth_GBps: np.ndarray, latency_us: np.ndarray, order: list[int], size: float) -> float:
    """The baseline: 2(n−1) steps, each the slowest hop, every hop visited in Python for every size."""
    n = len(order)
    chunk = size / n
    step = 0.0
    for k in range(n):
        i, j = order[k], order[(k + 1) % n]
        step = max(step, latency_us[i][j] * 1e-6 + chunk / (bandwidth_GBps[i][j] * 1e9))
    return 2 * (n - 1) * step


def baseline(quick: bool) -> dict:
    topology = load("dgx-a100", nodes=8)
    order = list(ring_order(topology).order)
    bandwidth, latency = topology.bandwidth_GBps.tolist(), topology.latency_us.tolist()
    # the single-ring matrix form, so both compute the same quantity (no link contention, one channel)
    plain = (topology.bandwidth_GBps, topology.latency_us, np.zeros(topology.num_devices, dtype=np.int64))
    sizes = np.unique(np.round(np.logspace(0, 33, 256 if quick else 2048, base=2)))
    collective_times("allreduce", sizes[:2], plain, algorithm="ring")
    naive_seconds = best_of(3, lambda: [naive_ring_allreduce(bandwidth, latency, order, s) for s in sizes])
    vector_seconds = best_of(5, lambda: collective_times("allreduce", sizes, plain, algorithm="ring"))
    naive = np.array([naive_ring_allreduce(bandwidth, latency, order, s) for s in sizes])
    vector = collective_times("allreduce", sizes, plain, algorithm="ring")
    return {
        "what": "ring allreduce, 64 devices, one ring (matrix form)",
        "sizes": len(sizes),
        "naive_python_loop_seconds": naive_seconds,
        "vectorised_seconds": vector_seconds,
        "speedup_vectorised_over_naive": naive_seconds / vector_seconds,
        "max_relative_difference": float(np.max(np.abs(naive - vector) / naive)),
    }


def large(quick: bool) -> dict:
    start = time.perf_counter()
    topology = load("dgx-a100", nodes=128)
    load_seconds = time.perf_counter() - start
    result = {"topology": topology.name, "num_devices": topology.num_devices, "load_seconds": load_seconds}
    for algorithm in ("ring", "hierarchical"):
        fresh = dataclasses.replace(topology)  # a new object: nothing cached for it
        start = time.perf_counter()
        cost = collective_time("allreduce", 2**30, fresh, algorithm=algorithm)
        uncached = time.perf_counter() - start
        cached = best_of(20, lambda: collective_time("allreduce", 2**30, fresh, algorithm=algorithm))
        result[algorithm] = {
            "uncached_seconds": uncached, "cached_seconds": cached, "busbw_GBps": cost.busbw_GBps,
            "time_s": cost.time_s,
        }
    # the same matrices without the link graph (no per-link contention, so no route lookups)
    for algorithm in ("ring", "hierarchical"):
        matrices = (topology.bandwidth_GBps.copy(), topology.latency_us.copy(), topology.host_of.copy())
        start = time.perf_counter()
        fabric = fabric_of(matrices)
        collective_time("allreduce", 2**30, fabric, algorithm=algorithm)
        result[algorithm]["uncached_matrix_form_seconds"] = time.perf_counter() - start
    fresh = dataclasses.replace(topology)
    start = time.perf_counter()
    fabric_of(fresh)
    result["fabric_build_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    ring = ring_order(fresh)
    result["ring_search_seconds"] = time.perf_counter() - start
    result["ring_exact"] = ring.exact
    result["ring_method"] = ring.method
    return result


def ring_quality(quick: bool) -> dict:
    rng = np.random.default_rng(2024)
    rows = []
    for n in (12, 13, 14):
        for symmetric in (True, False):
            hits, ratios = 0, []
            for _ in range(4 if quick else 12):
                b = rng.choice([12.5, 25.0, 50.0, 100.0, 150.0, 300.0], size=(n, n)) * rng.uniform(0.9, 1.0, (n, n))
                if symmetric:
                    b = np.minimum(b, b.T)
                np.fill_diagonal(b, np.inf)
                latency = np.ones((n, n))
                order = ring_module._heuristic(b, latency, np.zeros(n, dtype=np.int64), ring_module.upper_bound(b))
                exact = ring_module._dynamic_programme(b)
                found = b[order, np.roll(order, -1)].min()
                optimum = b[exact, np.roll(exact, -1)].min()
                hits += bool(found == optimum)
                ratios.append(found / optimum)
            rows.append({
                "n": n, "symmetric": symmetric, "trials": len(ratios), "optimal": hits,
                "mean_bottleneck_ratio": float(np.mean(ratios)), "min_bottleneck_ratio": float(np.min(ratios)),
            })
    return {"what": "large-n heuristic vs exact DP on random matrices", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and trials")
    args = parser.parse_args(argv)
    results = {
        "throughput_64_devices": throughput(args.quick),
        "baseline": baseline(args.quick),
        "large_1024_devices": large(args.quick),
        "ring_quality": ring_quality(args.quick),
        "quick": args.quick,
        "metadata": run_metadata(seed=2024, spec={"benchmark": "cost_eval", "quick": args.quick},
                                 argv=sys.argv[1:]),
    }
    results["metadata"]["reproduce"] = "python benchmarks/cost_eval.py " + " ".join(sys.argv[1:] if argv is None
                                                                                   else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cost_eval.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    t, b, big = results["throughput_64_devices"], results["baseline"], results["large_1024_devices"]
    print(f"64 devices, auto: {t['vectorised_evaluations_per_s']:.3g} evaluations/s vectorised, "
          f"{t['scalar_evaluations_per_s']:.3g}/s scalar (target >= 1e5/s)")
    print(f"ring allreduce vs naive Python loop: {b['speedup_vectorised_over_naive']:.0f}x faster "
          f"(max relative difference {b['max_relative_difference']:.1e})")
    for algorithm in ("ring", "hierarchical"):
        r = big[algorithm]
        print(f"{big['num_devices']} devices, {algorithm} allreduce: {r['cached_seconds'] * 1e3:.3f} ms cached, "
              f"{r['uncached_seconds'] * 1e3:.1f} ms uncached with link contention, "
              f"{r['uncached_matrix_form_seconds'] * 1e3:.1f} ms uncached matrix form (target < 10 ms)")
    for row in results["ring_quality"]["rows"]:
        print(f"ring heuristic n={row['n']} {'sym' if row['symmetric'] else 'asym'}: optimal "
              f"{row['optimal']}/{row['trials']}, mean bottleneck ratio {row['mean_bottleneck_ratio']:.3f}")
    print(f"-> {out / 'cost_eval.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
