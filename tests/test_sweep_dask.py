"""Sweeps on a Dask cluster (a real ``distributed.LocalCluster``: 2 worker processes on loopback) give the same
rows as the local pool, and a hung point is killed there too."""

from __future__ import annotations

import pytest

from seedance.sweep import load_results, run_sweep

distributed = pytest.importorskip("distributed")

SIM = {"name": "dask-sim", "runner": "sim",
       "fixed": {"nodes": 3, "clients": 4, "duration": 0.1, "keys": 8, "check": True, "trace": True,
                 "set": {"heartbeat_s": 0.002, "election_timeout_s_min": 0.008, "election_timeout_s_max": 0.016}},
       "axes": {"grid": {"protocol": ["raft", "epaxos"]}, "zip": {"conflict_rate": [0.0, 0.5]}},
       "repetitions": 2, "timeout_s": 120}
METRICS = ["throughput_ops_s", "latency_ms_p50", "latency_ms_p99", "ops_ok", "messages_per_op", "bytes_per_op",
           "commit_latency_ms_p99", "linearizable", "trace_sha256", "command"]
# the trace's hash pins down every simulated event: equal hashes, equal runs


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as c:
        yield c


@pytest.mark.multiprocess
def test_dask_rows_equal_local_rows(tmp_path, cluster):
    local = run_sweep(SIM, tmp_path / "local", workers=2, progress=False)
    remote = run_sweep(SIM, tmp_path / "dask", scheduler=cluster.scheduler_address, progress=False)
    assert (local.points_run, remote.points_run, local.points_failed, remote.points_failed) == (8, 8, 0, 0)
    a = load_results(local.results).sort_values("point").reset_index(drop=True)
    b = load_results(remote.results).sort_values("point").reset_index(drop=True)
    assert list(a["point"]) == list(b["point"])
    for column in ["protocol", "conflict_rate", "seed", "spec_hash", *METRICS]:
        assert a[column].equals(b[column]), column
    assert (a["ops_ok"] > 0).all() and set(a["linearizable"]) == {True}
    again = run_sweep(SIM, tmp_path / "dask", scheduler=cluster.scheduler_address, progress=False)
    assert (again.points_run, again.points_skipped) == (0, 8)


@pytest.mark.multiprocess
def test_dask_timeout_kills_the_point(tmp_path, cluster):
    doc = {"name": "dask-hang", "runner": "test_sweep:echo", "plugins": ["test_sweep"],
           "axes": {"zip": {"x": [1, 2], "sleep_s": [60.0, 0.0]}}, "timeout_s": 2}
    summary = run_sweep(doc, tmp_path, scheduler=cluster.scheduler_address, progress=False)
    df = load_results(summary.results).set_index("x")
    assert summary.points_failed == 1 and "timed out after 2 s" in df.loc[1, "error"]
    assert df.loc[2, "status"] == "ok" and df.loc[2, "double"] == 4


@pytest.mark.multiprocess
def test_worker_logs_live_in_the_dask_workers_directories(tmp_path, cluster):
    """A Dask worker's run processes write their stderr into that worker's own local directory (removed with the
    worker), not into the machine's temporary directory."""
    import tempfile
    from pathlib import Path

    from distributed import Client

    before = set(Path(tempfile.gettempdir()).glob("seedance-sweep-worker-*.log"))
    doc = {"name": "dask-logs", "runner": "test_sweep:echo", "plugins": ["test_sweep"],
           "axes": {"zip": {"x": [1, 2, 3], "sleep_s": [0.0, 0.0, 0.0]}}}
    assert run_sweep(doc, tmp_path, scheduler=cluster.scheduler_address, progress=False).points_failed == 0
    assert set(Path(tempfile.gettempdir()).glob("seedance-sweep-worker-*.log")) == before
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        local = client.run(lambda dask_worker: [p.name for p in Path(dask_worker.local_directory).glob(
            "seedance-sweep-worker-*.log")])
    assert sum(len(names) for names in local.values()) >= 1
