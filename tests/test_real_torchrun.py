"""The node entry point under torchrun itself: a launch "with no code of ours" (issue D item 1).

torchrun sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and hosts the rendezvous store in its agent; the nodes publish
their addresses there and a client finds them through the same store.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from _real_helpers import wait_gone
from seedance.models.protocols.contract import Operation
from seedance.real.clients import ClientPool, Workload
from seedance.real.addresses import StoreAddressBook
from seedance.real.transport import new_key, write_key_file

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_raft_nodes_under_torchrun_serve_a_client(tmp_path):
    import torch.distributed as dist

    key = new_key()
    write_key_file(tmp_path / "run.key", key)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SEEDANCE_KEY_FILE": str(tmp_path / "run.key"), "SEEDANCE_RUN_DIR": str(tmp_path),
           "SEEDANCE_PROTOCOL": "raft", "SEEDANCE_SEED": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "3",
                "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "seedance.real.node"]
    proc = subprocess.Popen(torchrun, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "torchrun.log", "wb"))
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=timedelta(seconds=120))
        book = StoreAddressBook(store)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(book.lookup(i) for i in range(3)):
            time.sleep(0.2)

        async def go():
            pool = ClientPool(num_nodes=3, lookup=book.lookup, key=key, seed=1, t0_monotonic=time.monotonic(),
                              workload=Workload(num_clients=1, op_timeout_s=5.0))
            try:
                for _ in range(40):
                    outcome = await pool.execute(0, [int(time.monotonic() * 1e6)], Operation.WRITE, "k", 42)
                    if outcome[0] == "ok":
                        break
                    await asyncio.sleep(0.25)
                return outcome, await pool.execute(0, [int(time.monotonic() * 1e6)], Operation.READ, "k", None)
            finally:
                await pool.close()

        assert asyncio.run(go()) == (("ok", None), ("ok", 42))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert wait_gone(Path(tmp_path)) == []
