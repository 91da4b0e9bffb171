"""Helpers for the real-backend tests: launch the test protocol, find processes and listening sockets."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from seedance.models.protocols.contract import Operation
from seedance.real.clients import ClientPool, Workload
from seedance.real.launcher import LocalLauncher

TESTS = Path(__file__).resolve().parent
KV = "_real_kv_protocol:SPEC"


def child_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(TESTS) + (os.pathsep + path if path else "")}


def launcher(run_dir: Path, nodes: int = 3, config: dict | None = None, protocol: str = KV,
             bind_host: str = "127.0.0.1") -> LocalLauncher:
    return LocalLauncher(protocol=protocol, num_nodes=nodes, run_dir=run_dir, seed=1, config=config or {},
                         extra_env=child_env(), bind_host=bind_host)


def processes_of_run(run_dir: Path) -> list[int]:
    """Pids of live processes whose environment names ``run_dir`` (node processes of that run)."""
    needle = f"SEEDANCE_RUN_DIR={run_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def wait_gone(run_dir: Path, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = processes_of_run(run_dir)
        if not left:
            return []
        time.sleep(0.1)
    return processes_of_run(run_dir)


def _decode_address(hex_addr: str) -> str:
    host_hex, _ = hex_addr.split(":")
    raw = bytes.fromhex(host_hex)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    return ":".join(b.hex() for b in words)


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(host, port) of every TCP socket process ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                found.append((_decode_address(parts[1]), int(parts[1].split(":")[1], 16)))
    return found


def client_pool(launch: LocalLauncher, clients: int = 1) -> ClientPool:
    return ClientPool(num_nodes=launch.num_nodes, lookup=launch.addresses.lookup, key=launch.key,
                      workload=Workload(num_clients=clients, op_timeout_s=5.0), seed=1,
                      t0_monotonic=launch.t0_monotonic)


async def do(pool: ClientPool, op: Operation, key: str, value=None, client: int = 0) -> tuple[str, object]:
    return await pool.execute(client, [int(time.monotonic() * 1e6)], op, key, value)


def run_ops(launch: LocalLauncher, ops: list[tuple[Operation, str, object]]) -> list[tuple[str, object]]:
    async def go():
        pool = client_pool(launch)
        try:
            return [await do(pool, op, key, value) for op, key, value in ops]
        finally:
            await pool.close()

    return asyncio.run(go())


def kill_campaign_run(protocol: str, seed: int, out: Path, duration_s: float, kill_rate: float) -> dict:
    """A real run of ``protocol`` (3 nodes, 4 clients) under SIGKILLs: linearizable, no acknowledged write lost
    (every acknowledged key is read back non-null once all nodes are up again), no process left behind."""
    from seedance.history.events import read_jsonl
    from seedance.real.run import FINAL_READ_PROCESS, run_real

    summary = run_real(protocol=protocol, nodes=3, clients=4, duration_s=duration_s, seed=seed, out=out,
                       kill_rate=kill_rate, restart_delay_s=0.2)
    reproduce = summary["reproduce"]
    assert summary["linearizable"] is True, f"non-linearizable history; reproduce: {reproduce}"
    events = read_jsonl(out / "history.jsonl")
    acked: dict[str, set] = {}
    for e in events:
        if e.type.value == "ok" and e.f.value in ("write", "cas"):
            acked.setdefault(e.key, set()).add(e.value if e.f.value == "write" else e.value[1])
    finals = {e.key: e.value for e in events if e.process >= FINAL_READ_PROCESS and e.type.value == "ok"}
    for key in acked:
        assert key in finals, f"no final read of {key}; reproduce: {reproduce}"
        assert finals[key] is not None, f"acknowledged writes of {key} lost; reproduce: {reproduce}"
    assert wait_gone(out) == []
    return summary
