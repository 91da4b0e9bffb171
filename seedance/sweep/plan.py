"""A dry run: the runs a sweep would make, without making them (``seedance sweep SPEC --dry-run [--json]``).

For each run: its key (the name of its point file), seed and parameters, and whether ``--out DIR`` already holds its
finished result. The estimated cost is known where runs of this sweep are already done in ``DIR`` (their mean
wall time, from the point files): the remaining runs times that mean, over the workers. Runs of other parameters
(e.g. the quick size's under a full-size dry run: a memory soak of 12 s against 300 s) are not used for the
estimate, only mentioned; estimates keep 3 significant digits, so a sweep of short runs is never estimated at 0.
Nothing runs, nothing is written, and only the spec's schema is checked unless ``check_points`` (then every point's
parameters go through the runner's own validation too, which imports the runner's library: seconds for the
simulator). Without it a dry run of a paper spec answers in well under a second.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any


def done_walls(out: Path, runner: str) -> dict[str, float | None]:
    """Key -> wall time of every finished run of ``runner`` in ``out``'s point files."""
    folder = out / "points"
    walls: dict[str, float | None] = {}
    if not folder.is_dir():
        return walls
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("status") == "ok" and record.get("runner") == runner:
            wall = record.get("wall_s")
            walls[path.stem] = float(wall) if isinstance(wall, (int, float)) else None
    return walls


def varying(spec: Any) -> list[str]:
    """The parameters the axes vary (what tells one run from another in a listing)."""
    names = [*spec.axes.grid, *spec.axes.zip]
    if spec.axes.random is not None:
        names += list(spec.axes.random.params)
    return names


def dry_run(source: Any, *, size: str = "full", out: str | os.PathLike[str] | None = None, workers: int = 1,
            check_points: bool = False) -> dict[str, Any]:
    """The plan of a sweep (a SweepSpec, a dict or a YAML/JSON path) as plain data: name, runner, size, counts,
    the axes, the estimate and every run (``key``, ``seed``, ``params``, ``done``)."""
    from seedance.sweep.expand import count, runs
    from seedance.sweep.load import load_spec

    spec = load_spec(source, size=size, check_points=check_points)
    planned = runs(spec)
    walls = done_walls(Path(out), spec.runner) if out is not None else {}
    done = [r for r in planned if r.key in walls]
    pending = len(planned) - len(done)
    known = [walls[r.key] for r in done if walls[r.key] is not None]  # this sweep's own runs only
    others = [w for k, w in walls.items() if w is not None and k not in {r.key for r in planned}]
    parallel = max(1, min(workers, spec.max_workers or workers))
    estimate: dict[str, Any] = {"per_run_s": None, "remaining_s": None, "basis": "unknown: no finished run of "
                                f"runner {spec.runner} in {out}" if out is not None else "unknown: give --out DIR "
                                "with finished runs to estimate from them"}
    if known:
        per_run = statistics.fmean(known)
        estimate = {"per_run_s": significant(per_run), "remaining_s": significant(per_run * pending / parallel),
                    "basis": f"mean wall time of {len(known)} finished run(s) of this sweep in {out}, "
                             f"{parallel} worker(s)"}
    elif others:  # e.g. the quick size's runs under a full-size dry run: other parameters, often far shorter
        estimate["basis"] = (f"unknown: none of this sweep's runs is done in {out}; its {len(others)} other "
                             f"finished {spec.runner} run(s) (other parameters or size) took "
                             f"{seconds_text(statistics.fmean(others))} each, not an estimate of these")
    return {"name": spec.name, "runner": spec.runner, "size": size, "runs": len(planned), "points": count(spec),
            "seeds": spec.seed_list, "done": len(done), "pending": pending, "timeout_s": spec.timeout_s,
            "max_workers": spec.max_workers, "axes": {name: _axis(spec, name) for name in varying(spec)},
            "points_checked": check_points, "estimate": estimate,
            "run_list": [{"key": r.key, "seed": r.seed, "params": r.params, "done": r.key in walls}
                         for r in planned]}


def significant(seconds: float, digits: int = 3) -> float:
    """``seconds`` to ``digits`` significant digits: a short run's estimate is never rounded to 0."""
    return float(f"{seconds:.{digits}g}")


def seconds_text(seconds: float) -> str:
    """``0 s`` only for nothing; ``0.0042 s``, ``3.2 s``, ``412 s``."""
    return "0 s" if seconds <= 0 else f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def _axis(spec: Any, name: str) -> Any:
    if name in spec.axes.grid:
        return spec.axes.grid[name]
    if name in spec.axes.zip:
        return spec.axes.zip[name]
    return spec.axes.random.params[name].model_dump()


def describe(plan: dict[str, Any]) -> list[str]:
    """The plan as lines for a person: a header, the axes, the estimate, then one line per run."""
    est = plan["estimate"]
    cost = (f"estimated {seconds_text(est['remaining_s'])} for the {plan['pending']} pending "
            f"({seconds_text(est['per_run_s'])} per run: {est['basis']})" if est["remaining_s"] is not None
            else f"estimated cost {est['basis']}")
    lines = [f"{plan['name']} ({plan['size']}): {plan['runs']} runs = {plan['points']} points x "
             f"{len(plan['seeds'])} seeds, runner {plan['runner']}; {plan['done']} already done, "
             f"{plan['pending']} to run",
             *(f"  axis {name}: {json.dumps(values)}" for name, values in plan["axes"].items()), f"  {cost}"]
    if not plan["points_checked"]:
        lines.append("  (the runner's own parameter check is not run here: add --check, or a real run does it first)")
    names = list(plan["axes"])
    for run in plan["run_list"]:
        shown = " ".join(f"{n}={json.dumps(run['params'].get(n))}" for n in names)
        lines.append(f"{run['key'][:16]}  seed={run['seed']}  {shown}{'  (done)' if run['done'] else ''}")
    return lines
