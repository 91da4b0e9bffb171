"""How fast the CLI answers (issue H: ``seedance --help`` and ``seedance topology list`` in under 0.5 s).

Each command runs in a fresh interpreter (as a user's shell runs it), ``repeats`` times; the fastest run is kept (the
least disturbed on a shared machine). The baseline is ``python -c pass`` measured the same way in the same session,
so the ratio says how much the CLI adds to a bare interpreter. Also recorded: which heavy packages ``import
seedance.cli`` loads (none should: they are imported inside the commands that need them).

Usage: ``python benchmarks/cli_startup.py [--out DIR] [--repeats N]``; writes ``DIR/cli_startup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("numpy", "scipy", "pandas", "matplotlib", "seaborn", "torch", "simpy", "networkx", "pydantic", "pyarrow",
         "dask")
TARGET_S = 0.5
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "seedance --help": [sys.executable, "-m", "seedance", "--help"],
    "seedance topology list": [sys.executable, "-m", "seedance", "topology", "list"],
    "seedance cost --help": [sys.executable, "-m", "seedance", "cost", "--help"],
}


def fastest(argv: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    return best


def heavy_modules_loaded() -> list[str]:
    probe = f"import sys, seedance.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.strip()
    return [m for m in out.split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    times = {name: fastest(argv, args.repeats) for name, argv in COMMANDS.items()}
    baseline = times["python -c pass"]
    rows = {name: {"seconds": round(t, 4), "ratio_to_python": round(t / baseline, 2), "under_target": t < TARGET_S}
            for name, t in times.items()}
    heavy = heavy_modules_loaded()
    for name, row in rows.items():
        print(f"{name:<24} {row['seconds'] * 1000:7.1f} ms  ({row['ratio_to_python']:.1f}x python -c pass)")
    print(f"heavy packages loaded by `import seedance.cli`: {', '.join(heavy) or 'none'}")
    from seedance.provenance import run_metadata

    result = {"target_s": TARGET_S, "repeats": args.repeats, "load_average": list(os.getloadavg()), "commands": rows,
              "heavy_modules_on_import": heavy, "metadata": run_metadata(seed=None, spec=vars(args))}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cli_startup.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"-> {out / 'cli_startup.json'}")


if __name__ == "__main__":
    main()
