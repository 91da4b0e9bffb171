"""Local launcher: N node processes on this machine with torchrun's environment, and no orphans, ever.

Rules (torch.distributed.run environment contract; POSIX process groups):

* Each node process gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
  ``MASTER_PORT`` exactly as torchrun would set them, so the same ``python -m seedance.real.node`` runs under
  ``torchrun`` on a cluster (examples/slurm/seedance-real.sbatch) with no code of ours.
* The launcher binds every node's listening socket itself (``bind_host``, 127.0.0.1 by default) and hands it to each
  incarnation of that node (``SEEDANCE_LISTEN_FD``) with the table of all addresses (``SEEDANCE_PEERS``): a restarted
  node keeps its address, and a node starts without importing torch. The launcher and its zygote hold every node's
  listening socket (for restarts); each node process holds only its own (tests/test_real_security.py reads
  /proc/PID/fd to check). While a killed node is down its address
  refuses connections (the socket stops listening but keeps its port), as a host's kernel refuses a dead server's.
* The rendezvous TCPStore (for collectives) is hosted here, on a socket *we* bind to ``bind_host`` (a TCPStore left
  to itself listens on every interface), so a node crash never takes the store down.
* The per-run HMAC key is 32 random bytes in a 0600 file inside a 0700 temporary directory, passed by path
  (``SEEDANCE_KEY_FILE``), deleted when the launcher exits; it is never logged.
* Node processes are forked by a pre-imported :mod:`.zygote` (a restart costs a fork, not a Python start-up); each
  starts its own session and asks for ``PR_SET_PDEATHSIG``, as does the zygote. :meth:`close` (also run on
  exceptions, SIGINT and SIGTERM through the context manager) sends SIGTERM (and SIGCONT, for paused nodes) to every
  node's process group, waits, SIGKILLs what is left, then stops the zygote. Children of a SIGKILLed launcher die
  with it.
* Signals go to the node's pid *and* its process group: a node forked a moment ago may not have started its own
  session yet (``killpg`` would find no group), and a node's helpers share its group. Every wait has a timeout: a
  kill that does not take within ``kill_timeout_s`` is an error, never a hang; :meth:`LocalLauncher.akill` waits
  without blocking the event loop.
* Fault support (:mod:`seedance.real.nemesis`): :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT of the process
  group; a respawned node is never paused), and ``node_rules`` (each node's current fault rules), handed to every
  new incarnation in ``SEEDANCE_FAULTS``; a second per-run secret, the control key (``SEEDANCE_CTL_KEY_FILE``),
  goes to node processes only and signs the launcher's ``ctl`` frames (:mod:`seedance.real.faults`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from seedance.real.faults import CTL_KEY_FILE_ENV, FAULTS_ENV
from seedance.real.processes import (NODE_MALLOC_TUNABLES, ForkedProcess, NodeFailure, Zygote, killpg, node_listener,
                                     process_cpu_s, raise_interrupt, run_workers, signal_pid, with_node_defaults)
from seedance.real.transport import KEY_FILE_ENV, new_key, write_key_file
from seedance.real.zygote import NODE_FDS_ENV

log = logging.getLogger("seedance.real.launcher")
# the process-level parts moved to seedance.real.processes; imported from here as before
__all__ = ["NODE_MALLOC_TUNABLES", "LocalLauncher", "NodeFailure", "NodeProcess", "process_cpu_s", "run_workers",
           "with_node_defaults"]


@dataclass
class NodeProcess:
    rank: int
    process: ForkedProcess
    incarnation: int
    killed_by_us: bool = False
    log_path: Path | None = None


@dataclass
class LocalLauncher:
    """Spawns and supervises ``num_nodes`` node processes for one run in ``run_dir``."""

    protocol: str
    num_nodes: int
    run_dir: Path
    seed: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)
    bind_host: str = "127.0.0.1"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    term_timeout_s: float = 5.0
    kill_timeout_s: float = 10.0
    nodes: dict[int, NodeProcess] = field(default_factory=dict)
    t0_monotonic: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self._secret_dir: Path | None = None
        self._listen: socket.socket | None = None
        self.store: Any = None
        self.key: bytes = b""
        self.incarnations: dict[int, int] = {}
        self._zygote: Zygote | None = None
        self._store_thread: threading.Thread | None = None
        self.store_up_monotonic: float | None = None  # when start_all saw the store up (and began spawning nodes)
        self._store_lock = threading.Lock()  # the store thread and close() decide who owns the listening socket
        self._closing = False
        self._spawn_lock = threading.Lock()  # one spawn request to the zygote at a time: pids come back in order
        self.paused: set[int] = set()
        self._cpu_gone_s = 0.0  # the CPU of node processes this launcher killed, read just before each kill
        self.node_rules: dict[int, dict[str, Any]] = {}  # fault rules each node runs under (seedance.real.faults)
        self.ctl_key: bytes = b""

    # ----------------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> LocalLauncher:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._secret_dir = Path(tempfile.mkdtemp(prefix="seedance-key-"))  # 0700
        self.key = new_key()
        self.key_file = write_key_file(self._secret_dir / "run.key", self.key)
        self.ctl_key = new_key()
        self.ctl_key_file = write_key_file(self._secret_dir / "ctl.key", self.ctl_key)
        family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        self._listen = socket.socket(family, socket.SOCK_STREAM)
        self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listen.bind((self.bind_host, 0))
        self._listen.listen(512)
        self.store_port = self._listen.getsockname()[1]
        self.store_host = "127.0.0.1" if self.bind_host in ("0.0.0.0", "::") else self.bind_host
        self._node_sockets = [node_listener(family, self.bind_host) for _ in range(self.num_nodes)]
        from seedance.real.addresses import StaticAddressBook

        self.addresses = StaticAddressBook([(self.store_host if self.bind_host in ("0.0.0.0", "::") else
                                             self.bind_host, s.getsockname()[1]) for s in self._node_sockets])
        zygote_env = with_node_defaults(dict(os.environ))
        zygote_env.update(self.extra_env)
        zygote_env.update({"SEEDANCE_PROTOCOL": self.protocol, "SEEDANCE_RUN_DIR": str(self.run_dir),
                           "SEEDANCE_PARENT_PID": str(os.getpid())})
        zygote_env.pop("SEEDANCE_KEY", None)
        zygote_env[NODE_FDS_ENV] = ",".join(str(s.fileno()) for s in self._node_sockets)
        self._zygote = Zygote(zygote_env, tuple(s.fileno() for s in self._node_sockets),
                              self.run_dir / "zygote.log")
        self._old_sigterm = signal.getsignal(signal.SIGTERM)
        try:
            signal.signal(signal.SIGTERM, raise_interrupt)
        except ValueError:  # not the main thread: the caller handles signals
            self._old_sigterm = None
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def env_for(self, rank: int, incarnation: int) -> dict[str, str]:
        env = dict(self.extra_env)
        env.update({
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(self.num_nodes),
            "LOCAL_WORLD_SIZE": str(self.num_nodes), "GROUP_RANK": "0",
            "MASTER_ADDR": self.store_host, "MASTER_PORT": str(self.store_port),
            "SEEDANCE_STORE_HOSTED": "1", "SEEDANCE_PROTOCOL": self.protocol, "SEEDANCE_SEED": str(self.seed),
            "SEEDANCE_RUN_DIR": str(self.run_dir), "SEEDANCE_CONFIG": json.dumps(dict(self.config)),
            "SEEDANCE_INCARNATION": str(incarnation), "SEEDANCE_BIND": self.bind_host,
            "SEEDANCE_T0_MONOTONIC": repr(self.t0_monotonic), "SEEDANCE_PARENT_PID": str(os.getpid()),
            KEY_FILE_ENV: str(self.key_file), "SEEDANCE_PEERS": self.addresses.encode(),
            "SEEDANCE_LISTEN_FD": str(self._node_sockets[rank].fileno()),
            CTL_KEY_FILE_ENV: str(self.ctl_key_file),
        })
        if self.node_rules.get(rank):
            env[FAULTS_ENV] = json.dumps(self.node_rules[rank])
        return env

    def spawn(self, rank: int) -> NodeProcess:
        self._node_sockets[rank].listen(512)  # a killed node's address refused connections: it serves again
        incarnation = self.incarnations.get(rank, -1) + 1
        self.incarnations[rank] = incarnation
        log_path = self.run_dir / f"node-{rank}.log"
        assert self._zygote is not None, "use the launcher as a context manager"
        with self._spawn_lock:
            pid = self._zygote.spawn(rank, self.env_for(rank, incarnation), log_path)
        node = NodeProcess(rank=rank, process=ForkedProcess(self._zygote, pid), incarnation=incarnation,
                           log_path=log_path)
        self.nodes[rank] = node
        self.paused.discard(rank)
        return node

    def start_all(self, timeout_s: float = 120.0) -> None:
        # the rendezvous store is only needed by collectives: it is hosted on a thread, whose import of torch takes
        # seconds in a process's first run. The nodes start once it is up, so their protocols have run as long when
        # the load starts in a first run as in a later one (0.07-0.19 s here, the first election under way); spawned
        # beside the import, a first run's nodes had run 1.2 s, and a round's `reproduce` command (a process's first
        # run) did not start its load where the round had
        self._store_thread = threading.Thread(target=self._host_store, daemon=True, name="rendezvous-store")
        self._store_thread.start()
        self._wait_store(time.monotonic() + timeout_s)
        self.store_up_monotonic = time.monotonic()
        for rank in range(self.num_nodes):
            self.spawn(rank)

    def _wait_store(self, deadline: float) -> None:
        while self._store_thread is not None and self._store_thread.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError("the rendezvous store did not start in time")
            time.sleep(0.02)  # polled, not one long join: a SIGINT lands between sleeps and close() runs at once

    def _host_store(self) -> None:
        import torch.distributed as dist

        with self._store_lock:
            if self._closing or self._listen is None:  # closed while torch was importing: nothing to host
                if self._listen is not None:
                    self._listen.close()
                    self._listen = None
                return
            self.store = dist.TCPStore(self.store_host, self.store_port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=60), master_listen_fd=self._listen.fileno())
            self._listen.detach()  # the store owns (and closes) the listening socket now
            self._listen = None


    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every node's current incarnation has recovered its state and serves (its ready file), and the
        rendezvous store is up (its thread imports torch: seconds of CPU, holding the GIL, which must not overlap
        the measured load)."""
        deadline = time.monotonic() + timeout_s
        while not all(self.ready(r) for r in range(self.num_nodes)):
            self.raise_if_failed()
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not ready after {timeout_s:.0f} s; see {self.run_dir}/node-*.log")
            time.sleep(0.02)
        self._wait_store(deadline)

    def _ready_lines(self, rank: int) -> list[str] | None:
        """The ready file of ``rank``'s current incarnation (its incarnation, then when its protocol started), or
        None while that incarnation is not ready."""
        try:
            lines = (self.run_dir / f"node-{rank}.ready").read_text().split("\n")
        except OSError:
            return None
        return lines if self.alive(rank) and lines[0] == str(self.incarnations.get(rank)) else None

    def ready(self, rank: int) -> bool:
        return self._ready_lines(rank) is not None

    def started_monotonic(self, rank: int) -> float | None:
        """When the ready incarnation of ``rank`` started its protocol (``on_start`` or ``on_recover``), on the
        monotonic clock; None when the node is not ready or its ready file does not say."""
        lines = self._ready_lines(rank)
        try:
            return float(lines[1]) if lines is not None else None
        except (IndexError, ValueError):
            return None

    def pids(self) -> list[int]:
        return [n.process.pid for n in self.nodes.values()]

    def alive(self, rank: int) -> bool:
        node = self.nodes.get(rank)
        return node is not None and node.process.poll() is None

    def send_signal(self, rank: int, sig: int) -> None:
        """Send ``sig`` to node ``rank``'s process and its process group (it may not have its own group yet)."""
        node = self.nodes.get(rank)
        if node is None or node.process.poll() is not None:
            return
        signal_pid(node.process.pid, sig)
        killpg(node.process.pid, sig)

    def kill(self, rank: int, sig: int = signal.SIGKILL) -> None:
        """Kill node ``rank`` (its whole process group) and reap it; it stays down until :meth:`spawn`.

        Blocks up to ``kill_timeout_s`` (RuntimeError beyond): not for the event loop, which uses :meth:`akill`.
        """
        node = self.nodes[rank]
        node.killed_by_us = True
        self._count_cpu_of(node)
        self.send_signal(rank, sig)
        if sig != signal.SIGKILL:
            self.send_signal(rank, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        try:
            node.process.wait(timeout=self.kill_timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"node {rank} (pid {node.process.pid}) still alive {self.kill_timeout_s:.0f} s after "
                               f"signal {sig}") from None
        self.paused.discard(rank)
        self._refuse(rank)

    async def akill(self, rank: int) -> None:
        """SIGKILL node ``rank`` and wait (on the event loop, polling) until the zygote has reaped it."""
        import asyncio

        node = self.nodes[rank]
        node.killed_by_us = True
        deadline = time.monotonic() + self.kill_timeout_s
        resend = time.monotonic() + 1.0
        self._count_cpu_of(node)
        self.send_signal(rank, signal.SIGKILL)
        while node.process.poll() is None:
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"node {rank} (pid {node.process.pid}) still alive {self.kill_timeout_s:.0f} s "
                                   "after SIGKILL")
            if now > resend:  # belt and braces; a SIGKILL is never lost, but costs nothing to repeat
                self.send_signal(rank, signal.SIGKILL)
                resend = now + 1.0
            await asyncio.sleep(0.005)
        self.paused.discard(rank)
        self._refuse(rank)

    def _count_cpu_of(self, node: NodeProcess) -> None:
        if node.process.poll() is None:
            self._cpu_gone_s += process_cpu_s(node.process.pid) or 0.0

    def cpu_s(self) -> float:
        """CPU (s, every thread) the node processes have run: the live ones' so far plus the killed ones' up to
        their kill. Two readings bracket a load window (``seedance real run``'s ``node_cpu_s``); a process that
        exited by itself takes its CPU with it (a failure, reported anyway)."""
        live = [node.process.pid for node in self.nodes.values() if node.process.poll() is None]
        return self._cpu_gone_s + sum(process_cpu_s(pid) or 0.0 for pid in live)

    def _refuse(self, rank: int) -> None:
        """A dead node's address refuses connections, as a host's kernel does for a killed server: its listening
        socket (this launcher's, the zygote's copy) stops listening but keeps its port (:func:`node_listener`), and
        connections queued in its backlog are reset. Held listening, the port had taken the clients' and peers'
        connections into a backlog no process read: a client's handshake waited there until the restart or its
        0.5 s timeout (a crash round's eight clients all stuck behind one dead node), where the simulator, and a
        real cluster, refuse at once. :meth:`spawn` listens again."""
        try:
            self._node_sockets[rank].shutdown(socket.SHUT_RD)  # Linux: a listening socket goes back to bound
        except OSError as err:  # a platform where shutdown does not stop a listener: it stays as it was
            log.debug("node %d's address keeps listening while it is down: %s", rank, err)

    def pause(self, rank: int) -> bool:
        """SIGSTOP node ``rank``'s process group (the pause fault); False if it is not running."""
        if not self.alive(rank):
            return False
        self.send_signal(rank, signal.SIGSTOP)
        self.paused.add(rank)
        return True

    def resume(self, rank: int) -> bool:
        """SIGCONT node ``rank``'s process group; False if it was not paused."""
        if rank not in self.paused:
            return False
        self.paused.discard(rank)
        self.send_signal(rank, signal.SIGCONT)
        return True

    def raise_if_failed(self) -> None:
        """A node that exited without being killed by us is a failed run (a bug, or bad input)."""
        for node in self.nodes.values():
            code = node.process.poll()
            if code is not None and not node.killed_by_us:
                tail = node.log_path.read_text(errors="replace")[-2000:] if node.log_path else ""
                raise NodeFailure(node.rank, code, tail)

    def close(self) -> None:
        procs = [n.process for n in self.nodes.values() if n.process.poll() is None]
        for p in procs:
            signal_pid(p.pid, signal.SIGTERM)
            killpg(p.pid, signal.SIGTERM)
            killpg(p.pid, signal.SIGCONT)  # a paused node handles SIGTERM once continued
        self.paused.clear()
        deadline = time.monotonic() + self.term_timeout_s
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for node in self.nodes.values():  # SIGKILL stragglers (their whole process groups) and reap them
            if node.process.poll() is None:
                signal_pid(node.process.pid, signal.SIGKILL)
                killpg(node.process.pid, signal.SIGKILL)
                try:
                    node.process.wait(timeout=self.kill_timeout_s)
                except subprocess.TimeoutExpired:
                    log.error("node %d (pid %d) survived SIGKILL", node.rank, node.process.pid)
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        # The store thread may still be importing torch (seconds; tens under load): do not wait for it. Under the
        # lock, either it already hosts the store (dropped below) or it will see _closing and close the socket.
        with self._store_lock:
            self._closing = True
            importing = self._store_thread is not None and self._store_thread.is_alive() and self.store is None
            if not importing and self._listen is not None:  # never handed to a store, and no thread to do it
                self._listen.close()
                self._listen = None
        self._store_thread = None
        self.store = None  # the last reference: the store's server and its listening socket go with it
        for sock in getattr(self, "_node_sockets", []):
            sock.close()
        self._node_sockets = []
        if self._secret_dir is not None:
            shutil.rmtree(self._secret_dir, ignore_errors=True)
            self._secret_dir = None
        if getattr(self, "_old_sigterm", None) is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            except ValueError:
                pass
            self._old_sigterm = None

