"""Commit overhead of validate-and-commit: training time with a commit every 10 steps against the same training
without the protocol's periodic commits (one vote at the start and one at the end, as every run has), in one
invocation, in the simulator (the default modelled model: 1.5 GFLOP per step on the node's device) and on real
processes (gloo, this machine's CPU; a 16,384-parameter model with 64-sample batches).

Prints the figures and writes ``commit_overhead.json`` to ``--out``. Overhead = (T_k − T_none) / T_none, where T is
the ranks' mean time from start to their final parameters; real runs alternate and keep each configuration's fastest
of ``--repeats`` (the least disturbed on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from seedance.experiments.training_run import real_train, sim_train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-real", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"steps": args.steps, "commit_every": args.commit_every}

    sim = {}
    for label, every in (("with", args.commit_every), ("without", args.steps)):
        s = sim_train(world=4, steps=args.steps, commit_every=every, seed=0)
        sim[label] = {"train_time_s": s["train_time_s"], "commits": s["commits"],
                      "node_commit_overhead_pct": s["commit_overhead_pct"]}
    sim["overhead_pct"] = 100.0 * (sim["with"]["train_time_s"] / sim["without"]["train_time_s"] - 1.0)
    results["sim"] = sim
    print(f"sim  (4 ranks, default model): {sim['with']['train_time_s']:.4f} s vs {sim['without']['train_time_s']:.4f}"
          f" s simulated -> commit overhead {sim['overhead_pct']:.3f} % at commit-every {args.commit_every}")

    if not args.no_real:
        settings = {"dim": 16384, "batch": 64, "observe_params": False}  # votes report digests only
        best = {"with": None, "without": None}
        runs = {"with": [], "without": []}
        in_run: list[float] = []
        with tempfile.TemporaryDirectory(prefix="seedance-bench-") as tmp:
            for r in range(args.repeats):
                for label, every in (("with", args.commit_every), ("without", args.steps)):
                    s = real_train(world=2, steps=args.steps, commit_every=every, seed=0, settings=settings,
                                   out=Path(tmp) / f"{label}-{r}", timeout_s=600)
                    if not s["finished"]:
                        print(f"real run {label} {r} did not finish", file=sys.stderr)
                        return 1
                    runs[label].append(s["train_time_s"])
                    if label == "with":
                        in_run.append(s["commit_overhead_pct"])
                    best[label] = s["train_time_s"] if best[label] is None else min(best[label], s["train_time_s"])
        real = {"settings": settings, "world": 2, "train_time_s": runs, "best": best,
                "overhead_pct": 100.0 * (best["with"] / best["without"] - 1.0),
                # the ranks' own share of time spent from vote to durable commit, in the run with commits
                "in_run_commit_share_pct": in_run}
        results["real"] = real
        print(f"real (2 ranks, gloo, dim 16384): {best['with']:.3f} s vs {best['without']:.3f} s -> commit overhead "
              f"{real['overhead_pct']:.2f} % at commit-every {args.commit_every} (best of {args.repeats}); in-run share "
              f"of time in validate-and-commit: {', '.join(f'{x:.2f} %' for x in in_run)}")
    (out / "commit_overhead.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
