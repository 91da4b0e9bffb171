"""The real backend's faults: the simulator's names and schedule, applied to real processes, sockets and disks.

Each fault is checked by its effect on the real system (frames dropped / duplicated / delayed as counted by the
receiving node, a process stopped in /proc, SIGKILLed and restarted processes, slower fsyncs), then the healed
phase: every run must stay linearizable, make progress after the heal, read every key at the end, and leave no
process or socket behind. Control frames must carry the control key: the run key alone cannot set fault rules.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _real_helpers import KV, child_env, launcher, processes_of_run, wait_gone
from seedance.real.trace import read_records
from seedance import faults
from seedance.cli import main
from seedance.models.wire import Codec
from seedance.real.faults import ctl_mac, pack_state
from seedance.real.nemesis import Control
from seedance.real.run import nemesis_rng, run_real
from seedance.real.storage import DiskStorage
from seedance.real.transport import Connection

pytestmark = pytest.mark.multiprocess


def _socket_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def _run(tmp_path: Path, nemesis: tuple[str, ...], *, protocol: str = KV, duration_s: float = 2.0, seed: int = 1,
         **kwargs) -> dict:
    out = tmp_path / "run"
    summary = run_real(protocol=protocol, nodes=3, clients=3, duration_s=duration_s, seed=seed, out=out,
                       nemesis=nemesis, extra_env=child_env(), **kwargs)
    assert summary["linearizable"] is True, summary["reproduce"]
    assert summary["progress_after_heal"] and summary["ops_ok_healed"] > 0, summary
    assert summary["final_reads"] == {"keys": 8, "read": 8}
    assert wait_gone(out) == []
    return summary


def _trace_records(out: Path) -> list[list]:
    return [list(r) for r in read_records(out / "launcher.trace.jsonl")]


def test_message_faults_are_applied_by_the_receiving_nodes_and_healed(tmp_path):
    """partition-one, duplicate and delay on the primary-backup store: every effect counted, then a clean heal."""
    sockets = _socket_fds()
    summary = _run(tmp_path, ("partition-one", "duplicate", "delay"), window_s=(0.3, 0.5), gap_s=0.05)
    messages = summary["messages"]
    assert messages["dropped"] > 0 and messages["duplicated"] > 0 and messages["delayed"] > 0, messages
    assert summary["faults_applied"] == len(summary["faults"]) >= 3
    # the windows themselves, on the load's clock: what an analysis of the run lines its history up with
    assert [w["name"] for w in summary["fault_windows"]] == summary["faults"]
    assert all(0 <= w["start_s"] < w["end_s"] <= 1.2 for w in summary["fault_windows"])  # 60 % of the 2 s load
    records = _trace_records(tmp_path / "run")
    starts = [r for r in records if r[1] == "fault-start"]
    assert {r[4] for r in starts} == {"partition-one", "duplicate", "delay"}
    assert [r for r in records if r[1] == "heal"], "no heal record"
    heal_t = next(r[0] for r in records if r[1] == "heal")
    assert all(r[0] <= heal_t for r in records if r[1] in ("fault-start", "fault-end"))
    assert _socket_fds() == sockets  # the run closed every socket it opened


@pytest.mark.parametrize("fault", ["pause", "crash"])
def test_pause_stops_and_continues_nodes_and_crash_kills_and_restarts_them(fault, tmp_path):
    summary = _run(tmp_path, (fault,), duration_s=1.5, window_s=(0.2, 0.3), gap_s=0.05)
    kinds = [r[1] for r in _trace_records(tmp_path / "run")]
    if fault == "pause":
        assert kinds.count("pause") > 0 and kinds.count("resume") == kinds.count("pause")
    else:
        assert summary["kills"] == kinds.count("crash") > 0 and summary["restarts"] == summary["kills"]


def test_paused_node_is_stopped_in_proc_and_continues(tmp_path):
    with launcher(tmp_path, nodes=2) as launch:
        launch.start_all()
        launch.wait_ready()
        pid = launch.nodes[1].process.pid

        def state() -> str:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

        assert launch.pause(1) and 1 in launch.paused
        deadline = time.monotonic() + 5
        while state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state() == "T"
        assert launch.resume(1) and not launch.paused
        deadline = time.monotonic() + 5
        while state() == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state() in "RS"
        assert launch.pause(1)  # close() must still stop a paused node
    assert wait_gone(tmp_path) == []


def test_a_kill_sent_right_after_the_fork_lands_within_its_timeout(tmp_path):
    """The zygote's child may not have its own process group yet: the pid itself is signalled too."""
    with launcher(tmp_path, nodes=1) as launch:
        launch.kill_timeout_s = 5.0
        launch.start_all()
        for _ in range(5):
            launch.kill(0)  # raises RuntimeError instead of waiting for ever
            assert not launch.alive(0)
            launch.spawn(0)
        start = time.monotonic()
        asyncio.run(launch.akill(0))
        assert not launch.alive(0) and time.monotonic() - start < 5.0
    assert wait_gone(tmp_path) == []


def test_slow_disk_delays_each_sync_on_a_real_file(tmp_path):
    from seedance.models.protocols.contract import PersistLog

    storage = DiskStorage(tmp_path / "state", Codec(()))
    try:
        def timed_sync() -> float:
            storage.stage(PersistLog(key="log", start=len(storage._log_offsets.get("log", [0])) - 1, entries=(1,)))
            start = time.perf_counter()
            storage.sync()
            return time.perf_counter() - start

        timed_sync()
        fast = min(timed_sync() for _ in range(3))
        storage.sync_delay_s = 0.05
        slow = min(timed_sync() for _ in range(3))
        assert slow >= 0.0495 and slow > fast  # the delay is slept before each sync's writes, every time
    finally:
        storage.close()


def test_control_frames_need_the_control_key(tmp_path):
    """A client holding the run key cannot set fault rules; the launcher's signed frame is acknowledged."""
    with launcher(tmp_path, nodes=2) as launch:
        launch.start_all()
        launch.wait_ready()

        async def go() -> tuple[bool, dict]:
            address = launch.addresses.lookup(1)
            forged = await Connection.open(*address, launch.key)
            forged.send_nowait("ctl", -1, None)
            state = pack_state({"version": 9, "blocked_from": [0]})
            forged.send_nowait("ctl", -1, {"state": state, "mac": ctl_mac(launch.key, forged.peer_nonce, state)})
            try:
                await asyncio.wait_for(forged.recv(), 5.0)
                rejected = False
            except (asyncio.IncompleteReadError, ConnectionError):
                rejected = True
            finally:
                forged.close()
            control = Control(launch)
            control.publish({r: {"blocked_from": [0] if r == 1 else []} for r in range(2)})
            ok = await control.push(1)
            await control.close()
            return rejected and ok, control._acked

        accepted, acked = asyncio.run(go())
        assert accepted and acked[1] == (0, 1)
    log = (tmp_path / "node-1.log").read_text()
    assert "wrong control MAC" in log and "fault rules v1: blocked_from=[0]" in log
    assert "fault rules v9" not in log


def test_real_schedule_is_the_simulators_for_the_same_seed(tmp_path):
    from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

    names = ("partition", "pause", "loss", "slow-disk")
    sim = simulate(SimConfig(protocol="echo", nodes=3, duration_s=1.0, seed=5, check=False,
                             workload=WorkloadConfig(clients=1), nemesis=NemesisConfig(faults=names)))
    real = faults.draw_schedule(names, num_nodes=3, faulty_end_s=0.6, rng=nemesis_rng(5))
    assert real == sim.faults and real


def test_cli_rejects_bad_nemesis_input_with_one_line(tmp_path, capsys):
    for args, needle in ((["--nemesis", "skew"], "for the real runtime"), (["--nemesis", "crash,,crash"], "empty"),
                         (["--faulty-fraction", "0"], "--faulty-fraction"), (["--restart-delay", "-1"],
                                                                               "--restart-delay")):
        assert main(["real", "run", "--out", str(tmp_path / "x"), *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err


def test_kill_rate_100_returns_within_30_s_linearizable_and_leaves_nothing(tmp_path):
    """Issue R: `real run --duration 2 --kill-rate 100 --seed 3 --json`, as a user runs it."""
    out = tmp_path / "run"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "seedance", "real", "run", "--duration", "2", "--kill-rate", "100",
                           "--seed", "3", "--json", "--out", str(out)], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert elapsed < 30, elapsed
    assert summary["linearizable"] is True and summary["kills"] > 0 and summary["restarts"] == summary["kills"]
    assert summary["final_reads"] == {"keys": 8, "read": 8}
    for key in ("healed_at_s", "ops_ok_healed", "progress_after_heal"):
        assert key in summary
    assert summary["progress_after_heal"] is True
    assert wait_gone(out) == [] and processes_of_run(out) == []


def test_no_trace_writes_no_trace(tmp_path):
    out = tmp_path / "run"
    before = time.monotonic()
    summary = run_real(protocol=KV, nodes=2, clients=2, duration_s=0.5, seed=2, out=out, extra_env=child_env(),
                       trace=False)
    # the load's window on the system-wide monotonic clock (for meters outside the run): after the start-up
    start, end = summary["load_window_monotonic_s"]
    assert before < start < end <= time.monotonic() and end - start == pytest.approx(0.5, abs=0.3)
    assert summary["trace"] is None and not (out / "trace.json").exists()
    assert not list(out.glob("*.trace.jsonl"))
    assert summary["ops_ok"] > 0 and summary["progress_after_heal"]


def test_the_load_runs_with_the_callers_heap_frozen(tmp_path, monkeypatch):
    """The clients run in the caller's process: during the load what the caller held is frozen (its collections
    would otherwise stall every client for ~0.1 s each), and afterwards it is as it was."""
    from seedance.real.clients import ClientPool

    frozen = []
    run = ClientPool.run

    async def counting(self, duration_s):
        frozen.append(gc.get_freeze_count())
        return await run(self, duration_s)

    monkeypatch.setattr(ClientPool, "run", counting)
    held = [{"i": i} for i in range(20_000)]  # the caller's objects
    assert gc.get_freeze_count() == 0
    summary = run_real(protocol=KV, nodes=2, clients=2, duration_s=0.5, seed=2, out=tmp_path / "run",
                       extra_env=child_env(), trace=False)
    assert summary["ops_ok"] > 0 and frozen and frozen[0] >= len(held)
    assert gc.get_freeze_count() == 0


@pytest.mark.slow
@pytest.mark.parametrize("fault", faults.names(faults.REAL))
def test_each_real_fault_alone_on_raft(fault, tmp_path):
    """Raft under each fault the real backend applies: linearizable, live after the heal, nothing left behind."""
    summary = _run(tmp_path, (fault,), protocol="raft", duration_s=3.0, seed=sum(map(ord, fault)) % 97)
    assert summary["faults_applied"] > 0
