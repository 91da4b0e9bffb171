"""Running a sweep: the runs not yet done, on a local pool of worker processes or on a Dask cluster.

Local pool (default): ``workers`` long-lived worker processes (:mod:`seedance.sweep.worker`, each started once and
reused for run after run, so a runner's imports are paid once per worker), fed by one driver thread each. A run past
``timeout_s`` has its worker's process group terminated (SIGTERM, then SIGKILL after a grace period) and is
recorded as failed; a fresh worker takes the next run. A worker that dies (a crash, an ``os._exit``, the OOM killer)
fails its run the same way. ``concurrent.futures.ProcessPoolExecutor`` cannot kill one task, hence this small pool.

Dask (``scheduler="tcp://HOST:PORT"``): every run is submitted to a ``dask.distributed`` Client; on each Dask worker
the task runs the point in the same kind of worker process (one per Dask worker thread, reused), so the timeout
kills a hung point there too. Only plain data crosses the network (the task is a dict of JSON values).

Either way the driver writes each result to its point file as it arrives (:mod:`seedance.sweep.store`), so a
driver killed at any moment loses at most the runs in flight; the next invocation skips every run whose point file
says ``ok`` and runs the rest (failed ones included).
"""

from __future__ import annotations

import datetime
import json
import os
import queue
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from seedance.errors import SpecError

GRACE_S = 3.0
STARTUP_S = 120.0  # a worker's start-up and runner import, on a loaded machine
SCHEDULER_PATTERN = re.compile(r"^(tcp|tls|ucx)://[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}$")


def _failed(error: str, wall_s: float) -> dict[str, Any]:
    return {"status": "failed", "metrics": {}, "error": error, "traceback": None, "wall_s": wall_s}


def _worker_env() -> dict[str, str]:
    """The driver's environment, with its import path (a runner defined in a test or script module imports)."""
    paths = [p or os.getcwd() for p in sys.path]
    from seedance.real.node import ENV

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[ENV["parent"]] = str(os.getpid())  # the worker checks it still has this parent after PR_SET_PDEATHSIG
    return env


class Child:
    """One worker process (see :mod:`seedance.sweep.worker`)."""

    def __init__(self, log_path: Path | None = None) -> None:
        log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "seedance.sweep.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                                         env=_worker_env(), bufsize=0)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        self._buffer = b""
        self.loaded: set[str] = set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, task: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], bool]:
        """The result of ``task`` and whether this worker is still usable. The worker first imports the task's
        runner (once per worker, under its own ``STARTUP_S`` limit), so start-up never counts as the run's time."""
        if task["target"] not in self.loaded:
            reply, usable = self._call({"load": task["target"]}, max(STARTUP_S, timeout_s), "starting the worker")
            if not usable or reply["status"] != "ok":
                return reply, usable
            self.loaded.add(task["target"])
        return self._call(task, timeout_s, "the run")

    def _call(self, message: dict[str, Any], timeout_s: float, what: str) -> tuple[dict[str, Any], bool]:
        start = time.perf_counter()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
        except (BrokenPipeError, OSError):
            return _failed(f"worker process died before {what} (exit status {self.proc.poll()})", 0.0), False
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return _failed(f"timed out after {timeout_s:g} s ({what}); the worker was killed",
                               time.perf_counter() - start), False
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = self.proc.wait()
                    how = f"signal {-code}" if code < 0 else f"exit status {code}"
                    return _failed(f"worker process died during {what} ({how})", time.perf_counter() - start), False
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line), True

    def kill(self) -> None:
        """SIGTERM the worker's process group, then SIGKILL it if the worker is still there after the grace period.

        The group is signalled only while its leader (the worker) has not been reaped, so its id cannot have been
        reused by an unrelated process group."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(GRACE_S)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the leader is alive: the group id is still ours
                except (ProcessLookupError, PermissionError):
                    pass
            self.proc.wait()
        self._close_pipes()

    def close(self) -> None:
        """Let the worker exit (stdin closed), or kill it if it does not soon."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(GRACE_S)
        except (subprocess.TimeoutExpired, OSError):
            self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


OnResult = Callable[[dict[str, Any], dict[str, Any]], None]


def run_local(tasks: list[dict[str, Any]], *, workers: int, timeout_s: float, on_result: OnResult,
              log_dir: Path | None = None) -> None:
    """Run ``tasks`` on ``workers`` worker processes; ``on_result(task, result)`` in the calling thread."""
    todo: queue.Queue[dict[str, Any]] = queue.Queue()
    for task in tasks:
        todo.put(task)
    results: queue.Queue[tuple[dict[str, Any], dict[str, Any]] | None] = queue.Queue()
    stop = threading.Event()
    children: dict[int, Child] = {}

    def slot(k: int) -> None:
        child: Child | None = None
        try:
            while not stop.is_set():
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                if child is None or not child.alive():
                    child = Child(log_dir / f"worker-{k}.log" if log_dir is not None else None)
                    children[k] = child
                result, usable = child.run(task, timeout_s)
                if not usable:
                    child.kill()
                    child = None
                results.put((task, result))
        except Exception as err:  # noqa: BLE001 - a driver-side failure (cannot start a process): fail the rest
            results.put(({}, _failed(f"sweep driver: {type(err).__name__}: {err}", 0.0)))
            stop.set()
        finally:
            if child is not None:
                child.close()
            results.put(None)

    n = max(1, min(workers, len(tasks)))
    threads = [threading.Thread(target=slot, args=(k,), name=f"sweep-slot-{k}", daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    try:
        running = n
        while running:
            item = results.get()
            if item is None:
                running -= 1
            elif item[0]:
                on_result(*item)
            else:
                raise RuntimeError(item[1]["error"])
    except BaseException:
        stop.set()
        for child in list(children.values()):
            child.kill()
        raise
    for t in threads:
        t.join()


# ------------------------------------------------------------------------------------------------------ Dask
_LOCAL = threading.local()


def dask_task(task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one task on a Dask worker, in a worker process of this thread (started on first use, then reused)."""
    child: Child | None = getattr(_LOCAL, "child", None)
    if child is None or not child.alive():
        log = _dask_scratch() / f"seedance-sweep-worker-{os.getpid()}-{threading.get_ident()}.log"
        child = Child(log)
        _LOCAL.child = child
    result, usable = child.run(task, timeout_s)
    if not usable:
        child.kill()
        _LOCAL.child = None
    return result


def _dask_scratch() -> Path:
    """Where a worker process's stderr goes on a Dask worker: the Dask worker's own local directory (removed with
    the worker), else the temporary directory."""
    try:
        from distributed import get_worker

        return Path(get_worker().local_directory)
    except (ImportError, ValueError, AttributeError):  # not on a Dask worker (e.g. a test calling dask_task)
        return Path(tempfile.gettempdir())


def check_scheduler(address: str) -> str:
    if not isinstance(address, str) or not SCHEDULER_PATTERN.match(address):
        raise SpecError("--scheduler", f"not a scheduler address: {address!r}", "tcp://HOST:PORT, e.g. "
                        "tcp://127.0.0.1:8786 (the address `dask scheduler` prints)")
    return address


def probe_scheduler(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connection to the scheduler's host and port, before anything is written: an unreachable scheduler is a
    SpecError (exit 2) within ``timeout_s``, not a long wait inside Dask's client."""
    import socket

    host, _, port = check_scheduler(address).split("://", 1)[1].rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise SpecError("--scheduler", f"cannot connect to {address} ({err.strerror or err})",
                        "the address of a running `dask scheduler` (with workers), e.g. tcp://HEAD:8786") from None


def run_dask(tasks: list[dict[str, Any]], *, scheduler: str, timeout_s: float, on_result: OnResult,
             connect_timeout_s: float = 8.0, max_in_flight: int | None = None) -> None:
    """Run ``tasks`` on the Dask cluster at ``scheduler``; ``on_result(task, result)`` as each finishes.

    At most ``max_in_flight`` tasks are submitted at once (a spec's ``max_workers``). A Dask worker lost mid-run
    (killed, its machine gone) has its unfinished tasks rescheduled by the scheduler on the others; a task that
    kills worker after worker (Dask's ``allowed-failures``) comes back as a failed run, run again by the next
    invocation. Finished runs were written as they arrived, so none is lost."""
    from distributed import Client, as_completed

    probe_scheduler(scheduler, min(connect_timeout_s, 5.0))
    try:
        client = Client(scheduler, timeout=connect_timeout_s, set_as_default=False)
    except OSError as err:
        raise SpecError("--scheduler", f"cannot connect to {scheduler} ({err})",
                        "the address of a running `dask scheduler` with workers") from None
    try:
        queue_ = list(reversed(tasks))
        futures: dict[Any, dict[str, Any]] = {}

        def submit() -> Any:
            task = queue_.pop()
            future = client.submit(dask_task, task, timeout_s, pure=False)
            futures[future] = task
            return future

        window = len(tasks) if max_in_flight is None else max(1, max_in_flight)
        pending = as_completed([submit() for _ in range(min(window, len(tasks)))], loop=client.loop)
        for future in pending:
            task = futures.pop(future)
            try:
                result = future.result()
            except Exception as err:  # noqa: BLE001 - e.g. KilledWorker: the run failed (retried next time)
                result = _failed(f"dask: {type(err).__name__}: {err}", 0.0)
            future.release()
            on_result(task, result)
            if queue_:
                pending.add(submit())
    finally:
        client.close()


# ------------------------------------------------------------------------------------------------ the sweep
@dataclass(frozen=True)
class SweepSummary:
    """What ``seedance sweep --json`` prints. Counts are runs (point × seed)."""

    points_total: int
    points_run: int
    points_skipped: int
    points_failed: int
    results: Path

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["results"] = str(self.results)
        return out


def reproduce(out: Path, key: str) -> str:
    return f"seedance sweep {shlex.quote(str(out / 'spec.json'))} --out {shlex.quote(str(out))} --only {key[:16]}"


def run_sweep(spec: Any, out: str | Path, *, workers: int = 1, scheduler: str | None = None,
              progress: bool | None = True, only: tuple[str, ...] | list[str] = (), size: str = "full",
              listener: OnResult | None = None) -> SweepSummary:
    """Run every run of ``spec`` (a SweepSpec, a dict or a YAML/JSON path, in ``size``) whose result is not yet in
    ``out``, on ``workers`` local processes (at most the spec's ``max_workers``) or the Dask cluster at
    ``scheduler``.

    ``only``: run just the runs whose key starts with one of these prefixes (what a failed run's reproduce
    command uses). ``listener(task, result)`` is called after each run's point file is written (the paper suite's
    progress). Returns the counts and the path of the Parquet dataset, rebuilt from the point files. An
    unreachable scheduler is a SpecError before anything is written.
    """
    from seedance.sweep import expand, store
    from seedance.sweep.load import load_spec

    spec = load_spec(spec, size=size)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError("--workers", f"must be an integer >= 1, got {workers!r}", "e.g. --workers 2")
    if spec.max_workers is not None:
        workers = min(workers, spec.max_workers)
    if scheduler is not None:
        probe_scheduler(scheduler)
    out = Path(out)
    all_runs = expand.runs(spec)
    selected = all_runs
    if only:
        prefixes = tuple(str(p) for p in only)
        selected = [r for r in all_runs if r.key.startswith(prefixes)]
        if not selected:
            raise SpecError("--only", f"no run of {spec.name} has a key starting with {', '.join(prefixes)}",
                            "a key prefix from a point file name or a failed run's reproduce command")
    (out / store.POINTS).mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    with store.DirectoryLock(out):
        return _run_locked(spec, out, all_runs, selected, workers=workers, scheduler=scheduler, progress=progress,
                           listener=listener)


def _run_locked(spec: Any, out: Path, all_runs: list[Any], selected: list[Any], *, workers: int,
                scheduler: str | None, progress: bool | None, listener: OnResult | None) -> SweepSummary:
    from seedance.provenance import git_commit, spec_hash, versions
    from seedance.files import atomic_write
    from seedance.sweep import store
    from seedance.sweep.registry import BUILTIN, entry

    target = entry(spec.runner).target
    plugin = target.partition(":")[0]
    if spec.runner != target and spec.runner not in BUILTIN and plugin not in spec.plugins:
        # a runner registered in this process: spec.json names its module so `--only` reruns find it
        spec = spec.model_copy(update={"plugins": [*spec.plugins, plugin]})
    document = spec.to_dict()
    atomic_write(out / store.SPEC, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
    done = store.finished(out, [r.key for r in selected])
    pending = [r for r in selected if r.key not in done]
    base = {"sweep": spec.name, "runner": spec.runner, "spec_hash": spec_hash(document), "git_commit": git_commit(),
            "versions": versions()}
    tasks = [{"target": target, "params": r.params, "seed": r.seed, "point": r.key,
              "point_dir": str((out / "runs" / r.key).resolve())} for r in pending]
    failed = 0

    from seedance.progress import Progress

    steps = Progress(progress, "sweep")
    bar = steps.bar(len(tasks), unit="run", desc=f"{spec.name} ({len(done)} of {len(selected)} done before)") \
        if tasks else None

    def on_result(task: dict[str, Any], result: dict[str, Any]) -> None:
        nonlocal failed
        record = {**base, "point": task["point"], "params": task["params"], "seed": task["seed"],
                  "status": result["status"], "metrics": result.get("metrics") or {}, "error": result.get("error"),
                  "traceback": result.get("traceback"), "wall_s": result.get("wall_s"),
                  "cpu_s": result.get("cpu_s"),
                  "reproduce": reproduce(out, task["point"]),
                  "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")}
        store.write_point(out, record)
        if result["status"] != "ok":
            failed += 1
        if bar is not None:
            bar.set_postfix(failed=failed, refresh=False)
            bar.update(1)
        if listener is not None:
            listener(task, result)

    try:
        if tasks and scheduler is not None:
            run_dask(tasks, scheduler=scheduler, timeout_s=spec.timeout_s, on_result=on_result,
                     max_in_flight=spec.max_workers)
        elif tasks:
            run_local(tasks, workers=workers, timeout_s=spec.timeout_s, on_result=on_result, log_dir=out / "logs")
    finally:
        if bar is not None:
            bar.close()
    steps.phase(f"writing {out / store.RESULTS} ({len(all_runs)} runs)")
    results = store.build_dataset(out, [r.key for r in all_runs])
    steps.done()
    return SweepSummary(points_total=len(selected), points_run=len(pending), points_skipped=len(done),
                        points_failed=failed, results=results)
