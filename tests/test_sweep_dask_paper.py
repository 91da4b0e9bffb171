"""The paper on a Dask cluster: a real ``dask scheduler`` and two ``dask worker`` processes (no mocks, nothing in
this process) run a quick paper item through ``seedance report --scheduler``, with the same Parquet rows as the
local run; a worker killed mid-sweep loses no finished run and its unfinished run is retried on the other; an
unreachable scheduler exits 2 within 10 s and writes nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from seedance.sweep import load_results, run_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DASK = Path(sys.executable).with_name("dask")
TIMING = ["wall_s", "cpu_s", "finished_at"]


def _env() -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


class Cluster:
    """A scheduler and worker processes on 127.0.0.1, each in its own process group (so a kill takes its nanny,
    worker and sweep worker process together)."""

    def __init__(self, directory: Path, workers: int) -> None:
        self.directory = directory
        self.procs: list[subprocess.Popen] = []
        info = directory / "scheduler.json"
        self.scheduler = self._start([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                      "--scheduler-file", str(info), "--no-dashboard"], "scheduler")
        deadline = time.monotonic() + 120
        while not (info.is_file() and info.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.address = json.loads(info.read_text())["address"]
        self.workers = [self.start_worker(k) for k in range(workers)]
        self.wait_for(workers)

    def _start(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=_env(), cwd=self.directory,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def start_worker(self, k: int) -> subprocess.Popen:
        return self._start([str(DASK), "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                            "--no-dashboard", "--local-directory", str(self.directory)], f"worker-{k}")

    def wait_for(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(n, timeout=120)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(30)

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill(proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield c
    finally:
        c.close()


def seedance(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seedance.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(), cwd=ROOT)


def _rows(out: Path, item: str) -> list[dict]:
    df = load_results(out / item).drop(columns=TIMING).sort_values("point").reset_index(drop=True)
    df["reproduce"] = df["reproduce"].str.replace(str(out), "OUT", regex=False)
    return json.loads(df.to_json(orient="records"))


@pytest.mark.multiprocess
def test_report_on_a_dask_cluster_gives_the_local_rows(tmp_path, cluster):
    local = seedance("report", "--only", "fabrics", "--workers", "2", "--out", str(tmp_path / "local"), "--json")
    assert local.returncode == 0, local.stderr
    remote = seedance("report", "--only", "fabrics", "--scheduler", cluster.address, "--out",
                      str(tmp_path / "dask"), "--json", "--progress")
    assert remote.returncode == 0, remote.stderr
    a, b = _rows(tmp_path / "local", "fabrics"), _rows(tmp_path / "dask", "fabrics")
    assert len(a) == 48 and a == b  # every column but the timing ones, run by run
    assert all(r["status"] == "ok" and r["busbw_GBps"] > 0 for r in b)
    assert "paper: fabrics 48/48 runs" in remote.stderr  # the whole paper's progress, per item
    assert (tmp_path / "dask" / "figures" / "fabrics.pdf").is_file()
    summary = json.loads(remote.stdout)
    assert summary["failed"] == 0


@pytest.mark.multiprocess
def test_a_worker_killed_mid_sweep_loses_no_finished_run_and_its_run_is_retried(tmp_path):
    (tmp_path / "cluster").mkdir()
    c = Cluster(tmp_path / "cluster", workers=2)
    try:
        doc = {"name": "dask-kill", "runner": "test_sweep:echo", "plugins": ["test_sweep"],
               "axes": {"grid": {"x": list(range(8))}}, "fixed": {"sleep_s": 1.5}, "timeout_s": 120}
        seen: list[str] = []

        def listener(task: dict, result: dict) -> None:
            seen.append(task["point"])
            if len(seen) == 2:  # two runs written; both workers busy with the next ones
                Cluster.kill(c.workers[0])

        summary = run_sweep(doc, tmp_path / "out", scheduler=c.address, progress=False, listener=listener)
        df = load_results(summary.results)
        assert (summary.points_run, summary.points_failed) == (8, 0)
        assert df["status"].eq("ok").all() and sorted(df["double"]) == [2 * x for x in range(8)]
        assert c.workers[0].poll() is not None  # it really died
        for key in seen[:2]:  # the runs finished before the kill are on disk as written then
            record = json.loads((tmp_path / "out" / "points" / f"{key}.json").read_text())
            assert record["status"] == "ok"
    finally:
        c.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [
    ["sweep", str(ROOT / "paper" / "specs" / "fabrics.yaml"), "--size", "quick"],
    ["report", "--only", "fabrics"],
])
def test_an_unreachable_scheduler_exits_2_quickly_and_writes_nothing(tmp_path, command):
    out = tmp_path / "out"
    start = time.monotonic()
    done = seedance(*command, "--scheduler", f"tcp://127.0.0.1:{_free_port()}", "--out", str(out), timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 2 and "--scheduler: cannot connect to tcp://127.0.0.1:" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and elapsed < 10
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_the_slurm_script_runs_the_paper_on_its_dask_cluster(tmp_path):
    """examples/sweeps/dask-slurm.sbatch as SLURM would run it on one node: SLURM itself is not here, so `srun`
    runs its command on this machine and `scontrol` names 127.0.0.1; the scheduler, the workers and the paper's
    driver are the script's own (real `dask scheduler`, `dask worker`, `seedance report`)."""
    shims = tmp_path / "bin"
    shims.mkdir()
    scripts = {
        "scontrol": "#!/bin/sh\necho 127.0.0.1\n",
        "srun": '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in -w) shift 2 ;; -*) shift ;; *) break ;; esac; done\n'
                'exec "$@"\n',
        "python": f'#!/bin/sh\nexec {sys.executable} "$@"\n',
        "seedance": f'#!/bin/sh\nexec {sys.executable} -m seedance.cli "$@"\n',
    }
    for name, text in scripts.items():
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    env = {**_env(), "PATH": os.pathsep.join([str(shims), str(DASK.parent), os.environ["PATH"]]),
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "localhost", "SLURM_CPUS_PER_TASK": "2",
           "ONLY": "fabrics", "TMPDIR": str(tmp_path)}
    out = tmp_path / "paper"
    log = tmp_path / "job.out"  # a file, not a pipe: the scheduler and workers left running keep it open
    with open(log, "w") as sink:
        proc = subprocess.Popen(["bash", str(ROOT / "examples" / "sweeps" / "dask-slurm.sbatch"), "paper",
                                 str(out), "quick"], env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        proc.wait(timeout=840)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the scheduler and workers it left running ("end with the job")
        except ProcessLookupError:
            pass
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    rows = load_results(out / "fabrics")
    assert len(rows) == 48 and rows["status"].eq("ok").all()
    assert "paper: fabrics 48/48 runs" in stderr and (out / "figures" / "fabrics.pdf").is_file()
    assert (out / "report.html").is_file()
