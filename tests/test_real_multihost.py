"""A multi-host run started as a cluster user starts one (examples/slurm/seedance-real.sbatch): two torchrun agents
(``--nnodes 2``, c10d rendezvous) each start nodes, ``python -m seedance.real.drive`` drives the clients, every host's
run directory is gathered, and the history is judged; a node is SIGKILLed in the middle of the load (torchrun
restarts the worker group, the nodes recover from their durable state). Here both "hosts" are this machine, each
with its own run directory. Plus the world's bad inputs: ranks that disagree, a rank without its key, a wide bind
without a key.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from _real_helpers import listening_addresses, processes_of_run, wait_gone
from seedance.errors import SpecError
from seedance.real.transport import new_key, write_key_file

pytestmark = [pytest.mark.multiprocess]

SBATCH = Path(__file__).resolve().parents[1] / "examples" / "slurm" / "seedance-real.sbatch"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent(run_dir: Path, port: int, nproc: int, env: dict[str, str], log: Path, max_restarts: int = 0):
    """One host's torchrun agent, as the sbatch example starts it (its rendezvous arguments)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "seedance-test",
           "--local-addr", "127.0.0.1", "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
           "-m", "seedance.real.node"]
    full = {**os.environ, "SEEDANCE_RUN_DIR": str(run_dir), "SEEDANCE_PROTOCOL": "raft", "SEEDANCE_SEED": "1",
            "SEEDANCE_LOG_LEVEL": "INFO", "LOGLEVEL": "INFO", **env}
    return subprocess.Popen(cmd, env=full, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"))


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _node_pid(run_dir: Path, rank: int) -> int | None:
    for pid in processes_of_run(run_dir):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        node = any(v.startswith(b"SEEDANCE_LISTEN_FD=") for v in environ)  # not its rank's supervisor
        if f"RANK={rank}".encode() in environ and b"seedance.real.node" in cmdline and node:
            return pid
    return None


def test_sbatch_runs_what_this_test_runs():
    text = SBATCH.read_text()
    for needle in ("--rdzv-backend=c10d", "-m seedance.real.node", "--max-restarts", "-m seedance.real.drive",
                   "--rdzv-endpoint", "--gather", "SEEDANCE_KEY_FILE"):
        assert needle in text, needle


@pytest.mark.slow  # 27-50 s on this shared 2-core machine: four torch imports at start-up
@pytest.mark.timeout(90)
def test_two_torchrun_agents_raft_linearizable_through_a_kill(tmp_path):
    started = time.monotonic()
    key_file = write_key_file(tmp_path / "run.key", new_key())
    port = _free_port()
    hosts = [tmp_path / "host-a", tmp_path / "host-b"]
    env = {"SEEDANCE_KEY_FILE": str(key_file)}
    agents = [_agent(h, port, 2, env, tmp_path / f"agent-{i}.log", max_restarts=2) for i, h in enumerate(hosts)]
    drive_log = open(tmp_path / "drive.log", "wb")
    driver = subprocess.Popen(
        [sys.executable, "-m", "seedance.real.drive", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
         "seedance-test", "--nodes", "4", "--clients", "4", "--duration", "6", "--out", str(tmp_path / "drive"),
         "--gather", str(hosts[0]), "--gather", str(hosts[1])],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=drive_log, start_new_session=True)
    try:
        deadline = time.monotonic() + 40
        ready = lambda: sum(1 for h in hosts for _ in h.glob("node-*.ready"))  # noqa: E731
        while ready() < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready() == 4, (tmp_path / "agent-0.log").read_text()[-2000:]
        time.sleep(2.0)  # the load is under way
        for rank in range(4):  # each node process holds its own listening socket and no other
            pid = next(p for p in (_node_pid(h, rank) for h in hosts) if p is not None)
            assert len(listening_addresses(pid)) == 1, (rank, listening_addresses(pid))
        victim_host = next(h for h in hosts if (h / "node-3.ready").exists())
        victim = _node_pid(victim_host, 3)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        out, _ = driver.communicate(timeout=60)
        assert driver.returncode == 0, (tmp_path / "drive.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        _stop(agents)
    summary = json.loads((tmp_path / "drive" / "summary.json").read_text())
    assert summary["linearizable"] is True
    assert summary["final_reads"]["read"] == summary["final_reads"]["keys"]
    assert summary["hosts_gathered"] == [str(h) for h in hosts]
    # the killed node came back as a new incarnation (torchrun restarted the group) and the load went on past it
    assert (victim_host / "node-3.ready").read_text().split("\n")[0] != "0"
    assert summary["load_end_s"] > killed_at and summary["ops_ok"] > 0
    history = [json.loads(line) for line in (tmp_path / "drive" / "history.jsonl").read_text().splitlines()]
    assert any(e["type"] == "ok" and e["time"] > killed_at + 1 and e["process"] < 1_000_000 for e in history)
    for h in hosts:
        assert wait_gone(h) == []
    assert time.monotonic() - started <= 60


def _world(tmp_path: Path, envs: list[dict[str, str]]) -> list[str]:
    """Two one-rank agents with their own settings; each agent's log (with its rank's error and exit code)."""
    port = _free_port()
    logs = [tmp_path / f"agent-{i}.log" for i in range(2)]
    agents = [_agent(tmp_path / f"host-{i}", port, 1, env, logs[i]) for i, env in enumerate(envs)]
    try:
        for a in agents:
            a.wait(timeout=60)
    finally:
        _stop(agents)
    return [log.read_text(errors="replace") for log in logs]


@pytest.mark.slow
def test_ranks_that_disagree_on_the_protocol_all_exit_2(tmp_path):
    key_file = str(write_key_file(tmp_path / "run.key", new_key()))
    logs = _world(tmp_path, [{"SEEDANCE_KEY_FILE": key_file},
                             {"SEEDANCE_KEY_FILE": key_file, "SEEDANCE_PROTOCOL": "multipaxos"}])
    for log in logs:
        assert "SEEDANCE_PROTOCOL: ranks of this world disagree" in log, log[-2000:]
        assert "exitcode  : 2" in log, log[-2000:]


def _agree_all(cfgs: list) -> list[BaseException | None]:
    """:func:`seedance.real.node.agree` on a real TCPStore, one thread per rank."""
    import torch.distributed as dist

    from seedance.real.supervise import agree

    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    results: list[BaseException | None] = [None] * len(cfgs)

    def rank(i: int) -> None:
        store = dist.TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=10))
        try:
            agree(store, cfgs[i], timeout_s=10)
        except BaseException as err:  # noqa: BLE001 - the result under test
            results[i] = err

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(cfgs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.mark.parametrize("field, change", [("SEEDANCE_CONFIG", {"config": {"heartbeat_s": 0.2}}),
                                           ("SEEDANCE_KEY_FILE", {"key": b"\x01" * 32}),
                                           ("SEEDANCE_PROTOCOL", {"protocol": "multipaxos"}), (None, {})])
def test_every_rank_names_the_field_the_world_disagrees_on(tmp_path, field, change):
    import dataclasses

    from seedance.real.runtime import NodeConfig

    base = NodeConfig(protocol="raft", node_id=0, num_nodes=3, seed=1, incarnation=0, state_dir=tmp_path,
                      key=b"\x00" * 32, bind_host="127.0.0.1", config={"heartbeat_s": 0.1})
    cfgs = [dataclasses.replace(base, node_id=i, **(change if i == 2 else {})) for i in range(3)]
    results = _agree_all(cfgs)
    if field is None:
        assert results == [None, None, None]
    else:
        for err in results:
            assert isinstance(err, SpecError) and err.field == field, err
        assert b"\x00".hex() * 32 not in str(results)  # the key itself is never shown


def _node_alone(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SEEDANCE_KEY")}
    full.update({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
                 "SEEDANCE_STORE_HOSTED": "1", "SEEDANCE_RUN_DIR": str(tmp_path), "SEEDANCE_PROTOCOL": "raft",
                 "SEEDANCE_PEERS": "127.0.0.1:1,127.0.0.1:2", **env})
    return subprocess.run([sys.executable, "-m", "seedance.real.node"], env=full, capture_output=True, text=True,
                          timeout=60)


def test_a_rank_without_its_key_file_is_refused(tmp_path):
    done = _node_alone(tmp_path, {"SEEDANCE_KEY_FILE": str(tmp_path / "absent.key")})
    assert done.returncode == 2
    assert "SEEDANCE_KEY_FILE: cannot read key file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_wide_bind_without_a_key_is_refused(tmp_path):
    done = _node_alone(tmp_path, {"SEEDANCE_BIND": "0.0.0.0"})
    assert done.returncode == 2
    assert "SEEDANCE_KEY_FILE: refusing to listen on 0.0.0.0 (not loopback) without a run key" in done.stderr
    assert "Traceback" not in done.stderr
