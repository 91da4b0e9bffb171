"""How fast the compressors of :mod:`seedance.models.compression` run on CPU, as ratios to a baseline.

For each compressor, the time to compress one d-coordinate float32 gradient (best of several repeats), divided by
the time of the baseline measured in the same process: a plain ``numpy`` copy of the same vector (the cost of
touching every coordinate once). Also prints the wire-bytes ratio against dense fp32 and the measured contraction δ
next to the theoretical one on Gaussian vectors.

Usage: ``python benchmarks/compression.py [--out DIR] [--quick]``; writes ``DIR/compression.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from seedance.models.compression import measured_delta, parse_compressor
from seedance.provenance import run_metadata

from _timing import best_of

COMPRESSORS = ["identity", "fp16", "bf16", "top_k:0.01", "top_k:0.1", "random_k:0.1", "random_k_unbiased:0.1",
               "qsgd:4", "qsgd:16", "scaled_sign"]




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks", help="output directory")
    parser.add_argument("--quick", action="store_true", help="smaller vectors, fewer repeats")
    args = parser.parse_args(argv)
    d = 100_000 if args.quick else 4_000_000
    repeats = 3 if args.quick else 5
    rng = np.random.default_rng(0)
    g = rng.standard_normal(d).astype(np.float32)
    baseline_s = best_of(repeats, lambda: np.copy(g))
    small = rng.standard_normal((64, 1000))
    results = []
    for spec in COMPRESSORS:
        compressor = parse_compressor(spec)
        seconds = best_of(repeats, lambda: compressor(g, rng))
        delta = compressor.delta(1000)
        results.append({
            "compressor": compressor.name, "seconds": seconds, "time_over_copy": seconds / baseline_s,
            "wire_bytes_over_fp32": compressor.wire_bytes(d) / (4 * d),
            "delta_theory_d1000": delta, "omega_theory_d1000": compressor.omega(1000),
            "delta_measured_d1000": measured_delta(compressor, small, rng) if delta is not None else None,
        })
        print(f"{compressor.name:24s} {seconds * 1e3:9.2f} ms  ×{seconds / baseline_s:8.1f} copy  "
              f"wire {compressor.wire_bytes(d) / (4 * d):7.4f} of fp32", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"dimension": d, "baseline": "numpy copy", "baseline_s": baseline_s, "results": results,
              "provenance": run_metadata(seed=0, spec={"d": d, "repeats": repeats, "compressors": COMPRESSORS})}
    (out / "compression.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"baseline_s": baseline_s, "results": len(results), "out": str(out / "compression.json")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
