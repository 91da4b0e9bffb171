"""How fast the linearizability checker judges histories (issue B: a 20,000-operation, 16-client kv history in seconds).

Measures, in one process:

1. kv histories (16 clients, 10 keys, 20 % cas, 2 % indeterminate, 1 % failed; a correct atomic store simulated by
   :func:`seedance.analysis.histgen.atomic_history`) of growing size: operations checked per second;
2. the same for one register (all operations on one key, the hardest case for the search): unique written values,
   and values drawn from 5 (as Jepsen's register tests do);
3. a planted stale read in the largest kv history: time to the "not linearizable" verdict;
4. the naive baseline: the brute-force oracle (every real-time-consistent order, no memo, no partitioning) against
   the checker on the same small histories (8 to 14 operations, 8 clients, half of them with a read's value
   changed): the speed-up is a ratio measured here, with the verdicts compared;
5. the real-world corpus (Jepsen etcd histories, tests/data/histories/converted) when present.

Usage: ``python benchmarks/linearizability.py [--out DIR] [--quick]``; writes ``DIR/linearizability.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from seedance.analysis.histgen import GeneratorConfig, atomic_history, plant_stale_read
from seedance.history.events import read_jsonl
from seedance.history.linearizability import check
from seedance.history.linearizability.oracle import brute_force_linearizable
from seedance.provenance import run_metadata

SEED = 20261129
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "histories" / "converted"


def _config(ops: int, keys: int, value_range: int | None = None, clients: int = 16) -> GeneratorConfig:
    return GeneratorConfig(ops=ops, clients=clients, keys=keys, cas_fraction=0.2, info_fraction=0.02,
                           fail_fraction=0.01, value_range=value_range)


def _timed_check(events, model: str, timeout_s: float) -> dict:
    result = check(events, model, timeout_s=timeout_s)
    steps = sum(stats["steps"] for stats in result.per_key.values())
    return {"ops": result.ops, "valid": result.valid, "elapsed_s": result.elapsed_s,
            "ops_per_s": result.ops / result.elapsed_s if result.elapsed_s > 0 else None, "search_steps": steps}


def scaling(sizes: list[int], keys: int, value_range: int | None, timeout_s: float) -> list[dict]:
    rows = []
    for ops in sizes:
        events = atomic_history(_config(ops, keys, value_range), np.random.default_rng(SEED + ops))
        row = {"keys": keys, "value_range": value_range, **_timed_check(events, "kv", timeout_s)}
        rows.append(row)
        print(f"  {ops:>6} ops, {keys:>2} key(s), values {value_range or 'unique':>6}: {row['valid']!s:>7} "
              f"in {row['elapsed_s']:7.3f} s = {row['ops_per_s'] or 0:>9.0f} ops/s ({row['search_steps']} steps)",
              file=sys.stderr)
    return rows


def planted(ops: int, timeout_s: float) -> dict:
    events = atomic_history(_config(ops, 10), np.random.default_rng(SEED + ops))
    mutated, where = plant_stale_read(events, np.random.default_rng(SEED))
    row = {**_timed_check(mutated, "kv", timeout_s), "planted": where}
    print(f"  planted stale read in {ops} ops: {row['valid']} in {row['elapsed_s']:.3f} s", file=sys.stderr)
    return row


def against_brute_force(sizes: list[int], histories: int) -> list[dict]:
    """Same histories (8 clients; half with one read's value changed, often not linearizable) through both."""
    rng = np.random.default_rng(SEED)
    rows = []
    for ops in sizes:
        cases = []
        for index in range(histories):
            events = atomic_history(GeneratorConfig(ops=ops, clients=8, cas_fraction=0.3, info_fraction=0.1,
                                                    value_range=3), rng)
            reads = [i for i, e in enumerate(events) if e.f.value == "read" and e.type.value == "ok"]
            if index % 2 and reads:
                i = reads[int(rng.integers(len(reads)))]
                e = events[i]
                events[i] = type(e)(process=e.process, type=e.type, f=e.f, key=e.key,
                                    value=int(rng.integers(3)), time=e.time)
            cases.append(events)
        start = time.perf_counter()
        oracle = [brute_force_linearizable(events) for events in cases]
        oracle_s = time.perf_counter() - start
        start = time.perf_counter()
        fast = [check(events, "kv").valid for events in cases]
        checker_s = time.perf_counter() - start
        agree = sum(a is b for a, b in zip(oracle, fast))
        row = {"ops_each": ops, "histories": histories, "not_linearizable": oracle.count(False), "agree": agree,
               "brute_force_s": oracle_s, "checker_s": checker_s, "speedup": oracle_s / checker_s}
        rows.append(row)
        print(f"  {histories} histories of {ops} ops: checker {row['speedup']:.1f}x faster than brute force, "
              f"{agree}/{histories} verdicts agree", file=sys.stderr)
    return rows


def corpus(timeout_s: float) -> list[dict]:
    rows = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        rows.append({"file": path.name, **_timed_check(read_jsonl(path), "cas-register", timeout_s)})
    if rows:
        total = sum(r["elapsed_s"] for r in rows)
        print(f"  real-world corpus: {len(rows)} histories in {total:.3f} s", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory (default: out/benchmarks)")
    parser.add_argument("--quick", action="store_true", help="smaller histories (a minute or less)")
    parser.add_argument("--timeout", type=float, default=300.0, help="budget per history, seconds")
    args = parser.parse_args(argv)
    sizes = [1000, 2000, 5000] if args.quick else [1000, 2000, 5000, 10_000, 20_000]
    print("kv (16 clients, 10 keys):", file=sys.stderr)
    kv = scaling(sizes, 10, None, args.timeout)
    print("one register (16 clients):", file=sys.stderr)
    register = scaling(sizes, 1, None, args.timeout) + scaling(sizes, 1, 5, args.timeout)
    results = {
        "benchmark": "linearizability",
        "kv": kv,
        "register": register,
        "planted_violation": planted(sizes[-1], args.timeout),
        "brute_force_baseline": against_brute_force([8, 10] if args.quick else [8, 10, 12, 14],
                                                    10 if args.quick else 20),
        "corpus": corpus(args.timeout),
        "provenance": run_metadata(seed=SEED, spec={"sizes": sizes, "quick": args.quick},
                                   argv=sys.argv[1:] if argv is None else argv),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "linearizability.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    largest = kv[-1]
    print(f"linearizability: {largest['ops']}-op kv history in {largest['elapsed_s']:.2f} s "
          f"({largest['ops_per_s']:.0f} ops/s); brute force "
          f"{results['brute_force_baseline'][-1]['speedup']:.0f}x slower on "
          f"{results['brute_force_baseline'][-1]['ops_each']}-op histories; wrote {out / 'linearizability.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
