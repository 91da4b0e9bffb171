"""Running ``make test-consensus`` and ``seedance real soak``: their inputs, the real run, the report on disk.

The checks of a finished run (what the report judges) are :mod:`seedance.analysis.consensus_check`; this module
parses the variables, runs real data-parallel training under the commit protocol
(:func:`seedance.experiments.training_run.real_train`), and writes ``report.json``, the figure and the trace.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seedance.analysis.consensus_check import (LEVELS, REAL_FAULTS, SCENARIO_NAMES, _check, check_run,
                                               commit_trace_records, figure, read_events)
from seedance.errors import SpecError
from seedance.files import atomic_write
from seedance.jsonable import jsonable

MAX_DURATION_S = 72 * 3600.0  # the seed's 72-hour soak
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


# ------------------------------------------------------------------------------------------------ inputs
def parse_duration(name: str, text: Any, *, lo: float = 1.0, hi: float = MAX_DURATION_S) -> float:
    """``300s``, ``5m``, ``1.5h``, ``250ms`` or a bare number of seconds → seconds, within [lo, hi]."""
    valid = f"a duration like 300s, 5m or 1h (units ms, s, m, h; bare numbers are seconds), {lo:g} s .. {hi / 3600:g} h"
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|min|m|h)?\s*", str(text))
    if match is None:
        raise SpecError(name, f"{text!r} is not a duration", valid)
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or not lo <= seconds <= hi:
        raise SpecError(name, f"{text!r} is out of range", valid)
    return seconds


def parse_bool(name: str, text: Any) -> bool:
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SpecError(name, f"{text!r} is not a boolean", "true or false (also 1/0, yes/no, on/off)")


def parse_int(name: str, text: Any, lo: int, hi: int, why: str = "") -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SpecError(name, f"{text!r} is not an integer", f"an integer {lo}..{hi}{why}") from None
    if not lo <= value <= hi:
        raise SpecError(name, f"{value} is out of range", f"an integer {lo}..{hi}{why}")
    return value


def parse_choice(name: str, text: Any, choices: Sequence[str], *, none_ok: bool = False) -> str:
    value = str(text).strip()
    if none_ok and value.lower() in ("", "none"):
        return ""
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise SpecError(name, f"{text!r} is not allowed", "one of " + ", ".join(choices) + (" or none" if none_ok else ""))


def parse_faults(name: str, text: Any) -> tuple[str, ...]:
    value = str(text).strip().lower()
    if value in ("", "none"):
        return ()
    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    bad = [n for n in names if n not in REAL_FAULTS]
    if bad or not names:
        raise SpecError(name, f"{text!r} names {', '.join(bad) or 'no fault'}",
                        f"a comma-separated subset of {', '.join(REAL_FAULTS)}, or none")
    return names


def max_ranks() -> tuple[int, str]:
    """How many ranks this machine runs, and why (one per GPU with CUDA; 4 per CPU core otherwise)."""
    from seedance import validation as V
    from seedance.real.devices import default_backend

    if default_backend() == "nccl":  # pragma: no cover - needs a GPU
        import torch

        count = torch.cuda.device_count()
        return count, f" (one rank per GPU: {count} visible)"
    return V.max_real_nodes(), f" (CPU processes on gloo: {V.why_real_nodes()})"


@dataclass
class Options:
    """What ``test-consensus`` runs; :data:`VARIABLES` maps each field to its make variable and default."""

    ranks: int = 4
    duration_s: float = 300.0
    level: str = "full"
    memcheck: bool = True
    scenario: str = ""
    variant: str = "fixed"
    seed: int = 0
    nemesis: tuple[str, ...] = REAL_FAULTS
    commit_every: int = 10
    metrics_port: int = 0
    drift_threshold_pct: float = 1.0
    out: str = "out/test-consensus"
    given: dict[str, str] = field(default_factory=dict)  # the variables as set (for the report / reproduction)


# make variable -> (field, default as text, parser, what it means) — the defaults are documented here and in README
VARIABLES: dict[str, tuple[str, str, Callable[[str, str], Any], str]] = {
    "GPU_COUNT": ("ranks", "4", lambda n, v: parse_int(n, v, 1, max_ranks()[0], max_ranks()[1]),
                  "ranks: one per GPU with CUDA, CPU processes on gloo otherwise"),
    "TEST_DURATION": ("duration_s", "300s", lambda n, v: parse_duration(n, v, lo=5.0), "wall-clock training time"),
    "CONSISTENCY_CHECK_LEVEL": ("level", "full", lambda n, v: parse_choice(n, v, LEVELS), "basic or full"),
    "MEMCHECK_ENABLE": ("memcheck", "true", parse_bool, "sample every rank's memory each second; leak verdicts"),
    "SCENARIO": ("scenario", "none", lambda n, v: parse_choice(n, v, SCENARIO_NAMES, none_ok=True),
                 "one of the seed's scenarios, injected throughout"),
    "VARIANT": ("variant", "fixed", lambda n, v: parse_choice(n, v, ("buggy", "fixed")), "buggy or fixed"),
    "SEED": ("seed", "0", lambda n, v: parse_int(n, v, 0, 2**63 - 1), "seeds data, faults and injections"),
    "NEMESIS": ("nemesis", "crash,pause,partition", parse_faults, "real faults over the first 60 % of the run"),
    "COMMIT_EVERY": ("commit_every", "10", lambda n, v: parse_int(n, v, 1, 10_000), "steps between commits"),
    "METRICS_PORT": ("metrics_port", "0", lambda n, v: parse_int(n, v, 0, 65535),
                     "Prometheus endpoint on 127.0.0.1 (0: off)"),
    "MEMCHECK_DRIFT_PCT": ("drift_threshold_pct", "1.0",
                           lambda n, v: _parse_pct(n, v), "memory drift over the run that counts as a leak, %"),
    "OUT": ("out", "out/test-consensus", lambda n, v: str(v), "directory for the report"),
}


def _parse_pct(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(name, f"{text!r} is not a number", "a percentage > 0 and <= 100") from None
    if not math.isfinite(value) or not 0 < value <= 100:
        raise SpecError(name, f"{text!r} is out of range", "a percentage > 0 and <= 100")
    return value


def options_from(values: Mapping[str, str | None], names: Mapping[str, str] | None = None) -> Options:
    """Parse variables (unset or empty: the default); the first bad one raises a SpecError naming it (by its
    variable name, or by ``names[variable]``, e.g. the CLI option that set it)."""
    from seedance import validation as V

    names = dict(names or {})
    unknown = sorted(set(values) - set(VARIABLES))
    if unknown:
        raise SpecError(unknown[0], "is not a test-consensus variable", "valid: " + ", ".join(VARIABLES))
    opts = Options()
    for name, (attr, default, parse, _) in VARIABLES.items():
        raw = values.get(name)
        text = default if raw is None or str(raw).strip() == "" else str(raw)
        setattr(opts, attr, parse(names.get(name, name), text))
        if raw not in (None, ""):
            opts.given[name] = str(raw)
    V.check_writable_dir(names.get("OUT", "OUT"), opts.out)
    return opts


def variables_help() -> str:
    return "\n".join(f"  {name:<24} default {default:<22} {what}" for name, (_, default, _, what) in VARIABLES.items())


# ------------------------------------------------------------------------------------------------- running
@dataclass
class Live:
    """The tail, the metrics endpoint and the progress bar of one run, driven by ``real_train``'s ``on_poll``."""

    world: int
    duration_s: float
    metrics_port: int = 0
    progress: Any = None
    tail: Any = None
    server: Any = None
    scrapes: list[str] = field(default_factory=list)
    _last: float = 0.0

    def start(self, run_dir: Path, port_name: str = "METRICS_PORT") -> None:
        """Bind the endpoint now (before any process starts): a port in use is an input error."""
        from seedance.monitor.metrics import MetricsServer, RunTail

        self.tail = RunTail(run_dir, self.world)
        if self.metrics_port and self.server is None:
            try:
                self.server = MetricsServer(self.metrics_port)
            except OSError as err:
                raise SpecError(port_name, f"cannot listen on 127.0.0.1:{self.metrics_port} ({err.strerror})",
                                "a free port, or 0 for no endpoint") from None

    def poll(self, run_dir: Path, elapsed_s: float) -> None:
        if self.tail is None:
            self.start(run_dir)
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        state = self.tail.poll(elapsed_s)
        if self.server is not None:
            self.server.export(state)
        if self.progress is not None:
            self.progress(state, elapsed_s)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _device_text(world: int) -> str:
    from seedance.real.devices import default_backend

    if default_backend() == "nccl":  # pragma: no cover - needs a GPU
        return f"{world} GPU ranks (cuda:LOCAL_RANK, NCCL)"
    return f"{world} CPU ranks (gloo; no CUDA here)"


def run_test_consensus(opts: Options, *, progress: Callable[[Any, float], None] | None = None,
                       argv: Sequence[str] | None = None, port_name: str = "METRICS_PORT") -> dict[str, Any]:
    """Run, check and report (see the module docstring); ``report["passed"]`` and ``report["causes"]``."""
    from seedance.experiments.training_run import real_train
    from seedance.monitor import memory
    from seedance.provenance import run_metadata

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    live = Live(opts.ranks, opts.duration_s, opts.metrics_port, progress)
    live.start(out / "run", port_name)
    settings: dict[str, Any] = {"observe_params": opts.level == "full"}
    try:
        summary = real_train(world=opts.ranks, steps=10, commit_every=opts.commit_every, scenario=opts.scenario,
                             variant=opts.variant, seed=opts.seed, settings=settings, out=out,
                             nemesis=opts.nemesis, faulty_s=0.6 * opts.duration_s, duration_s=opts.duration_s,
                             memcheck_s=1.0 if opts.memcheck else None, on_poll=live.poll)
    finally:
        live.close()
    run_dir = Path(summary["run_dir"])
    events = read_events(run_dir, opts.ranks)
    checks = check_run(events, summary, level=opts.level, scenario=opts.scenario, variant=opts.variant,
                       world=opts.ranks, nemesis=opts.nemesis)
    mem = None
    if opts.memcheck:
        samples = memory.load_run(run_dir, opts.ranks)
        # with faults: the verdicts from the healed phase on, once every rank commits again (a rank restarted at the
        # heal is a new process; its warm-up follows, see memory.steady)
        since = 0.0
        if summary.get("healed_at_s") is not None:
            healed = float(summary["healed_at_s"])
            firsts = [min((e["time"] for e in events if e["node"] == r and e["key"] == "commit"
                           and e["time"] >= healed), default=healed) for r in range(opts.ranks)]
            since = max([healed, *firsts])
        mem = memory.analyze_run(samples, drift_threshold_pct=opts.drift_threshold_pct, since_s=since)
        checks.append(_check("memory", mem["causes"], f"largest fluctuation ±{mem['max_fluctuation_pct']:.3f} %, "
                             f"largest drift {mem['max_drift_pct']:.3f} % (threshold {opts.drift_threshold_pct:g} %)"
                             + (f", from {since:.0f} s (every rank committing again after the faults healed)"
                                if since else "") + _not_judged_text(mem)))
    causes = [f"{c['name']}: {v}" for c in checks for v in c["violations"][:3]]
    spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items() if k != "given"}
    report = {
        "command": "test-consensus", "passed": not causes, "causes": causes, "device": _device_text(opts.ranks),
        "options": spec, "variables": opts.given, "checks": checks,
        "client_histories": "none: the commit protocol has no client operations (nothing to check for "
                            "linearizability or causal consistency)",
        "training": {k: v for k, v in summary.items() if k not in ("config",)},
        "memory": mem, "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "reproduce": reproduce(opts),
        "provenance": run_metadata(seed=opts.seed, spec=spec, argv=list(argv) if argv is not None else None),
    }
    report["artifacts"] = write_artifacts(report, events, run_dir, out, opts.ranks)
    return report


def _not_judged_text(mem: Mapping[str, Any]) -> str:
    """What the memory check could not judge: a window after the warm-up too short for a leak verdict."""
    from seedance.monitor import memory

    if not mem.get("not_judged"):
        return ""
    return (f"; not judged ({', '.join(mem['not_judged'])}): less than {mem['min_window_s']:g} s left after the "
            f"warm-up (a verdict needs about {memory.WARMUP_MIN_S + mem['min_window_s']:g} s of steady run)")


def reproduce(opts: Options) -> str:
    args = [f"GPU_COUNT={opts.ranks}", f"TEST_DURATION={opts.duration_s:g}s",
            f"CONSISTENCY_CHECK_LEVEL={opts.level}", f"MEMCHECK_ENABLE={'true' if opts.memcheck else 'false'}",
            f"SCENARIO={opts.scenario or 'none'}", f"VARIANT={opts.variant}", f"SEED={opts.seed}",
            f"NEMESIS={','.join(opts.nemesis) or 'none'}", f"COMMIT_EVERY={opts.commit_every}"]
    return "make test-consensus " + " ".join(args)


def run_soak(*, ranks: int, duration_s: float, scenario: str = "", variant: str = "fixed", seed: int = 0,
             commit_every: int = 1, interval_s: float = 1.0, drift_threshold_pct: float = 1.0, metrics_port: int = 0,
             out: str | Path, progress: Callable[[Any, float], None] | None = None,
             argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The memory monitor on its own over a long fault-free commit-protocol run (see ``seedance real soak``)."""
    from seedance.experiments.training_run import real_train
    from seedance.monitor import memory
    from seedance.provenance import run_metadata

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    live = Live(ranks, duration_s, metrics_port, progress)
    live.start(out / "run", "--metrics-port")
    try:
        summary = real_train(world=ranks, steps=10, commit_every=commit_every, scenario=scenario, variant=variant,
                             seed=seed, settings={"observe_params": False}, out=out, duration_s=duration_s,
                             memcheck_s=interval_s, on_poll=live.poll)
    finally:
        live.close()
    run_dir = Path(summary["run_dir"])
    samples = memory.load_run(run_dir, ranks)
    mem = memory.analyze_run(samples, drift_threshold_pct=drift_threshold_pct)
    counts = {}
    for rank, result in mem["ranks"].items():
        counts[rank] = {k: {"start": result[k]["first"], "end": result[k]["last"], "floor_start": result[k]["start"],
                            "floor_end": result[k]["end"], "leaked": max(0, result[k]["growth"])}
                        for k in memory.COUNTS if k in result}
    events = read_events(run_dir, ranks)
    detected = {}  # leak -> when the samples so far first gave the verdict, and after how many commits
    for leak in mem["leaks"]:
        rank, key = int(leak.split()[1].rstrip(":")), leak.split()[-1]
        longest = max(samples[rank], key=lambda s: s[-1]["t"] - s[0]["t"])
        at = memory.detection_time(longest, key, drift_threshold_pct=drift_threshold_pct)
        if at is not None:
            commits = sum(1 for e in events if e["node"] == rank and e["key"] == "commit" and e["time"] <= at)
            detected[leak] = {"at_s": at, "after_commits": commits}
    spec = {"ranks": ranks, "duration_s": duration_s, "scenario": scenario, "variant": variant,
            "commit_every": commit_every, "interval_s": interval_s, "drift_threshold_pct": drift_threshold_pct}
    report = {
        "command": "soak", "passed": not mem["causes"], "causes": mem["causes"], "device": _device_text(ranks),
        "options": spec, "commits": summary["commits"], "steps": summary["steps"],
        "commits_per_rank": summary["commits"], "leaked_handles_protocol": summary["leaked_handles"],
        "memory": mem, "counts": counts, "max_fluctuation_pct": mem["max_fluctuation_pct"], "detected": detected,
        "slope_significant": any(r.get("rss", {}).get("fit", {}).get("significant") and
                                 r["rss"]["fit"]["slope"] > 0 for r in mem["ranks"].values()),
        # the same over each rank's last third (settling vs growth that lasts; see memory._last_third)
        "slope_significant_last_third": any(
            (r.get("rss", {}).get("fit", {}).get("last_third") or {}).get("significant") and
            r["rss"]["fit"]["last_third"]["slope"] > 0 for r in mem["ranks"].values()),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "training": {k: v for k, v in summary.items() if k not in ("config",)},
        "provenance": run_metadata(seed=seed, spec=spec, argv=list(argv) if argv is not None else None),
    }
    report["artifacts"] = write_artifacts(report, events, run_dir, out, ranks)
    return report


def write_artifacts(report: dict[str, Any], events: Sequence[Mapping[str, Any]], run_dir: Path, out: Path,
                    world: int) -> list[str]:
    from seedance.monitor import memory
    from seedance.tracing import Trace

    paths = []
    trace = Trace(num_nodes=world)
    trace.records.extend(commit_trace_records(events))
    paths.append(str(trace.write_chrome(out / "commits.trace.json", metadata={"command": report["command"]})))
    paths += [str(p) for p in figure(events, memory.load_run(run_dir, world), report.get("memory"), out / "figure",
                                     world)]
    target = out / "report.json"
    paths.append(str(target))
    report["artifacts"] = paths
    atomic_write(target, (json.dumps(jsonable(report), indent=1, default=str) + "\n").encode())
    return paths

