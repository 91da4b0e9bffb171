"""Node processes of the real backend: the zygote that forks them (its pre-imported interpreter), a forked process's
handle, process-group signals and CPU time, the nodes' environment defaults, and ``run_workers`` (torchrun-style
worker groups). :class:`seedance.real.launcher.LocalLauncher` runs a cluster with them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any


log = logging.getLogger("seedance.real.processes")


def node_listener(family: int, host: str, attempts: int = 50) -> socket.socket:
    """A node's listening socket, bound to a port *named* in its bind: only then does Linux keep the port through a
    ``shutdown`` of the listener (the port lock of an explicit bind), so :meth:`LocalLauncher._refuse` can stop it
    listening while its node is down and listen again at the restart on the same address. The port is found by a
    bind to port 0 first, and taken again explicitly (another process may take it in between: the next one)."""
    for _ in range(attempts):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        sock.listen(512)
        return sock
    raise OSError(f"no free port on {host} for a node after {attempts} tries")


class Zygote:
    """The launcher's side of :mod:`.zygote`: spawn requests, pids, and exit statuses (read on a thread)."""

    def __init__(self, env: dict[str, str], pass_fds: tuple[int, ...], log_path: Path) -> None:
        with open(log_path, "ab") as log_fh:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "seedance.real.zygote"], env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log_fh, pass_fds=pass_fds, start_new_session=True)
        self._cond = threading.Condition()
        self._pids: list[int] = []
        self.exits: dict[int, int] = {}
        self.ready = False
        self._reader = threading.Thread(target=self._read, daemon=True, name="zygote-reader")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            with self._cond:
                if "pid" in message:
                    self._pids.append(message["pid"])
                elif "exit" in message:
                    self.exits[message["exit"]] = message["code"]
                elif "ready" in message:
                    self.ready = True
                self._cond.notify_all()
        with self._cond:
            self.ready = False
            self._cond.notify_all()

    def spawn(self, rank: int, env: Mapping[str, str], log_path: Path, timeout_s: float = 120.0) -> int:
        assert self.process.stdin is not None
        with self._cond:
            self.process.stdin.write((json.dumps({"spawn": rank, "env": dict(env), "log": str(log_path)}) + "\n")
                                     .encode())
            self.process.stdin.flush()
            if not self._cond.wait_for(lambda: self._pids or self.process.poll() is not None, timeout_s):
                raise RuntimeError(f"the zygote did not fork node {rank} within {timeout_s:.0f} s")
            if not self._pids:
                raise RuntimeError(f"the zygote exited with status {self.process.poll()}; see its log")
            return self._pids.pop(0)

    def wait_exit(self, pid: int, timeout_s: float) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self.exits or self.process.poll() is not None, timeout_s)
            return self.exits.get(pid)

    def close(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            killpg(self.process.pid, signal.SIGKILL)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("the zygote (pid %d) survived SIGKILL for 5 s", self.process.pid)
        self._reader.join(timeout=5)


class ForkedProcess:
    """A node process forked by the zygote, with the part of :class:`subprocess.Popen`'s interface we use."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid = zygote, pid

    def poll(self) -> int | None:
        code = self.zygote.exits.get(self.pid)
        if code is None and self.zygote.process.poll() is not None:
            return -signal.SIGKILL  # the zygote is gone, so are its children (PR_SET_PDEATHSIG)
        return code

    def wait(self, timeout: float = 30.0) -> int:
        code = self.zygote.wait_exit(self.pid, timeout)
        if code is None:
            code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"node pid {self.pid}", timeout or 0.0)
        return code


class NodeFailure(RuntimeError):
    def __init__(self, rank: int, code: int, log_tail: str) -> None:
        self.rank, self.code, self.log_tail = rank, code, log_tail
        super().__init__(f"node {rank} exited with status {code} on its own:\n{log_tail}")


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def process_cpu_s(pid: int) -> float | None:
    """CPU a live process has run (all its threads; ``/proc/<pid>/task/*/schedstat``, ns), or None."""
    try:
        return sum(int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
                   for t in os.listdir(f"/proc/{pid}/task")) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# glibc's malloc keeps freed chunks of up to 160 bytes in "fast bins" and coalesces them only when a large request
# comes. In a node process the collective worker thread allocates ~850-byte gloo work objects per collective, which
# rarely trigger that coalescing: its arena extended its top instead, and RSS crept ~1.4 KiB/s over a 9-minute
# `seedance real soak` while the bytes in use stayed flat (5-13 B/s). With fast bins off the creep fell to
# 0.2-0.5 KiB/s in a 200 s soak (from 2.1-2.7), at no loss of commit rate. A user's own GLIBC_TUNABLES is kept as is.
NODE_MALLOC_TUNABLES = "glibc.malloc.mxfast=0"


def with_node_defaults(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a node process: the allocator setting above unless the user set ``GLIBC_TUNABLES``."""
    env.setdefault("GLIBC_TUNABLES", NODE_MALLOC_TUNABLES)
    return env


def run_workers(module: str, args: list[str], world_size: int, run_dir: Path, *, timeout_s: float = 1800.0,
                bind_host: str = "127.0.0.1", extra_env: Mapping[str, str] | None = None) -> None:
    """Run ``python -m module *args`` as ``world_size`` ranks with torchrun's environment; raise if any fails.

    The rendezvous TCPStore is hosted here on ``bind_host``; every worker gets its own session and
    ``PR_SET_PDEATHSIG``; on any failure, timeout or interrupt all workers' process groups are killed and reaped.
    """
    import torch.distributed as dist

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    listen = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET, socket.SOCK_STREAM)
    listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listen.bind((bind_host, 0))
    listen.listen(512)
    port = listen.getsockname()[1]
    store = dist.TCPStore(bind_host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300),
                          master_listen_fd=listen.fileno())
    listen.detach()
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            env = with_node_defaults(dict(os.environ))
            env.update(extra_env or {})
            env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                        "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "MASTER_ADDR": bind_host,
                        "MASTER_PORT": str(port), "SEEDANCE_STORE_HOSTED": "1",
                        "SEEDANCE_PARENT_PID": str(os.getpid()), "SEEDANCE_RUN_DIR": str(run_dir)})
            with open(run_dir / f"worker-{rank}.log", "ab") as log_fh:
                procs.append(subprocess.Popen([sys.executable, "-m", module, *args], env=env,
                                              stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed:
                tail = (run_dir / f"worker-{failed[0]}.log").read_text(errors="replace")[-2000:]
                raise NodeFailure(failed[0], procs[failed[0]].returncode, tail)
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers still running after {timeout_s:.0f} s; see {run_dir}/worker-*.log")
            time.sleep(0.05)
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = (run_dir / f"worker-{failed[0]}.log").read_text(errors="replace")[-2000:]
            raise NodeFailure(failed[0], procs[failed[0]].returncode, tail)
    finally:
        for p in procs:
            if p.poll() is None:
                killpg(p.pid, signal.SIGKILL)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    log.error("worker pid %d survived SIGKILL for 30 s", p.pid)
        del store
