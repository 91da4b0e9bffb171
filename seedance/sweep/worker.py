"""The worker process that runs a sweep's points, one at a time (``python -m seedance.sweep.worker``).

Protocol: one JSON object per line on stdin — ``{"load": "module:function"}`` (import a runner: start-up and imports
are not part of any run's time or timeout) or a run ``{"target": "module:function", "params": {...}, "seed": N,
"point_dir": PATH}`` — and one JSON object per line back on the original stdout (``{"status": "ok" | "failed",
"metrics", "error", "traceback", "wall_s"}``). JSON only, both ways: nothing is unpickled. Whatever a runner prints
goes to stderr (the driver points it at a log file), so it cannot corrupt the replies.

The process leads its own session (the driver kills the whole group on a timeout: SIGTERM, which raises
SystemExit here so the runner's ``finally`` blocks and context managers clean up, then SIGKILL after a grace
period). On Linux it also asks to be SIGKILLed when its parent dies, and it exits when stdin closes, so a killed
driver leaves no worker behind.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any


def _die_with_parent() -> None:
    """The real backend's PR_SET_PDEATHSIG (it exits at once if the driver died before the call took effect)."""
    from seedance.real.node import ENV, set_parent_death_signal

    set_parent_death_signal()
    os.environ.pop(ENV["parent"], None)  # not inherited by what a runner starts


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run_one(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task in this process; never raises (a runner's exception is a failed result)."""
    from seedance.sweep.runners import POINT_DIR_ENV, flatten, resolve

    start, cpu = time.perf_counter(), time.process_time()
    if task.get("point_dir"):
        os.environ[POINT_DIR_ENV] = task["point_dir"]
    try:
        fn = resolve(task["target"])
        metrics = fn(dict(task["params"]), int(task["seed"]))
        if not isinstance(metrics, dict):
            raise TypeError(f"runner {task['target']} returned {type(metrics).__name__}, expected a dict of metrics")
        return {"status": "ok", "metrics": flatten(metrics), "error": None, "traceback": None,
                "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    except Exception as err:  # noqa: BLE001 - a failing point is data, recorded with its traceback
        text = f"{type(err).__name__}: {err}".replace("\n", " ")
        return {"status": "failed", "metrics": {}, "error": text, "traceback": traceback.format_exc(),
                "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    finally:
        # a finished simulation is cyclic garbage whose arrays the collector's thresholds do not count: collected
        # after each run (outside its timed span), so a worker running hundreds of points keeps one run's memory
        gc.collect()


def load(target: str) -> dict[str, Any]:
    """Import a runner before its first run (so start-up and imports do not count against the run's timeout)."""
    from seedance.sweep.runners import resolve

    start = time.perf_counter()
    try:
        for module in getattr(resolve(target), "imports", ()):
            importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - reported as every run's failure
        return {"status": "failed", "metrics": {}, "error": f"cannot import runner {target}: "
                f"{type(err).__name__}: {err}".replace("\n", " "), "traceback": traceback.format_exc(),
                "wall_s": time.perf_counter() - start}
    return {"status": "ok", "wall_s": time.perf_counter() - start}


def main() -> int:
    _die_with_parent()
    signal.signal(signal.SIGTERM, _terminated)
    reply = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # runners' prints go to the log, not into the replies
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        result = load(message["load"]) if "load" in message else run_one(message)
        reply.write(json.dumps(result, default=str) + "\n")
        reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
