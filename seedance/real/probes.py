"""Probes of this machine for the host model (:mod:`seedance.models.host`): the disk (fsync within a block and
allocating one, writes without fsync), node restarts and log recovery, the frame path's CPU per log entry, and the
machine's facts. ``seedance real profile`` (:mod:`seedance.real.profile`) runs them beside its CPU runs.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from seedance.real.launcher import process_cpu_s


def measure_fsync(directory: Path, samples: int = 300) -> tuple[list[float], float]:
    """fsync latency samples (s) of 128-byte appends, and write bandwidth (GB/s) of 8 MiB fsynced writes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fsync-probe.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    latencies = []
    try:
        record = b"x" * 128
        for _ in range(samples):
            start = time.perf_counter()
            os.write(fd, record)
            os.fsync(fd)
            latencies.append(time.perf_counter() - start)
        block = os.urandom(8 << 20)
        rates = []
        for _ in range(4):
            start = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            rates.append(len(block) / (time.perf_counter() - start) / 1e9)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return latencies, float(np.median(rates))


def measure_fsync_grow(directory: Path, samples: int = 100) -> tuple[list[float], list[float], int]:
    """fsync latency (s) of appends within the file's last block and of appends that reach a new block, and the
    file system's block size: ``samples`` of each, interleaved: from a block boundary a 64-byte append (into a new
    block), another (inside it), then an untimed fsynced filler up to the next boundary. On ext4 the allocating
    fsync also commits the allocation's metadata: a step, flat from 4 to 16 KiB appends, not a bandwidth."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fsync-grow-probe.log"
    try:
        block = max(512, int(os.statvfs(directory).f_bsize))
    except (OSError, AttributeError):
        block = 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    within, grow = [], []
    try:
        os.write(fd, b"x" * block)  # the file's first block, allocated
        os.fsync(fd)
        small, filler = b"x" * 64, b"x" * (block - 128)
        for _ in range(samples):
            for into in (grow, within):  # 64 B into a new block, then 64 B more inside it
                start = time.perf_counter()
                os.write(fd, small)
                os.fsync(fd)
                into.append(time.perf_counter() - start)
            os.write(fd, filler)  # untimed: up to the next block's boundary
            os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return within, grow, block


def measure_write(directory: Path, samples: int = 300, value_bytes: int = 64) -> tuple[list[float], list[float]]:
    """A durable write *without* fsync through the real storage code (:class:`seedance.real.storage.DiskStorage`
    with ``fsync=False``, as a node runs with ``SEEDANCE_FSYNC=0``): ``samples`` log appends of one Raft-shaped entry
    each, staged and synced as the storage thread does; the wall-time and thread-CPU samples (s). A probe apart from
    any run, so a configuration with fsync off stays held out."""
    import shutil

    from seedance.models.protocols.contract import PersistLog
    from seedance.models.wire import Codec
    from seedance.real.storage import DiskStorage

    root = directory / "write-probe"
    shutil.rmtree(root, ignore_errors=True)
    storage = DiskStorage(root, Codec(()), fsync=False)
    walls, cpus = [], []
    try:
        for index in range(samples):
            entry = {"term": 1, "index": index + 1, "op": {"f": "write", "key": index % 8, "value": "v" * value_bytes,
                                                         "client": 0, "seq": index}}
            start, cpu = time.perf_counter(), time.thread_time()
            storage.stage(PersistLog(key="log", start=index, entries=(entry,)))
            storage.sync()
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - start)
    finally:
        storage.close()
        shutil.rmtree(root, ignore_errors=True)
    return walls, cpus


def measure_restart(work_dir: Path, *, nodes: int = 3, restarts: int = 8, seed: int = 1) -> list[float]:
    """A node process's restart, as the crash fault does it (SIGKILL, then a new incarnation forked from the
    launcher's zygote that recovers its durable state and serves again): spawn-to-ready samples (s) of ``restarts``
    restarts, round robin over the nodes of an idle ``nodes``-process Raft cluster."""
    return restart_samples(work_dir / "restart-probe", nodes=nodes, restarts=restarts, seed=seed)[0]


def restart_samples(run_dir: Path, *, nodes: int = 3, restarts: int = 8, seed: int = 1,
                    state_from: Path | None = None) -> tuple[list[float], list[float]]:
    """Spawn-to-ready wall times and the restarted processes' CPU until ready (s) of ``restarts`` SIGKILL +
    restarts round robin over an idle Raft cluster in ``run_dir``; with ``state_from`` (a run directory), the
    cluster starts on a copy of that run's durable state, so each restart recovers its log."""
    import shutil

    from seedance.real.launcher import LocalLauncher

    shutil.rmtree(run_dir, ignore_errors=True)
    if state_from is not None:
        for rank in range(nodes):
            shutil.copytree(state_from / f"node-{rank}" / "state", run_dir / f"node-{rank}" / "state")
    walls, cpus = [], []
    with LocalLauncher(protocol="raft", num_nodes=nodes, run_dir=run_dir, seed=seed, config={}) as launcher:
        launcher.start_all()
        launcher.wait_ready()
        for index in range(restarts):
            rank = index % nodes
            launcher.kill(rank)
            start = time.perf_counter()
            launcher.spawn(rank)
            deadline = start + 30.0
            while not launcher.ready(rank):
                launcher.raise_if_failed()
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"node {rank} not ready 30 s after its restart; see {run_dir}")
                time.sleep(0.0005)
            walls.append(time.perf_counter() - start)
            cpu = process_cpu_s(launcher.nodes[rank].process.pid)
            if cpu is not None:
                cpus.append(cpu)
    return walls, cpus


def log_entries(state_dir: Path) -> int:
    """Entries in a Raft node's durable logs, read by the real storage (read-only: the state is left as it is)."""
    from seedance.models.protocols.registry import get
    from seedance.models.wire import Codec
    from seedance.real.storage import DiskStorage

    durable = DiskStorage(state_dir, Codec(get("raft").message_types)).load(read_only=True)
    return sum(len(log) for log in durable.logs.values())


def measure_entry_codec(entries: int = 64, repeats: int = 60) -> tuple[float, float]:
    """The frame path's CPU per Raft log entry carried, sending and receiving (s): an AppendEntries of ``entries``
    entries against an empty one through the real code (the protocol codec, then an authenticated
    :class:`~seedance.real.transport.Connection` over a real socket pair: msgpack, HMAC; and back), medians of
    ``repeats``. A catch-up batch of 256 entries costs milliseconds to encode and decode, which a cost per
    message cannot carry."""
    import asyncio

    from seedance.models.protocols.raft.messages import AppendEntries, command_entry
    from seedance.models.protocols.registry import get
    from seedance.models.wire import Codec
    from seedance.real.transport import Connection

    codec = Codec(get("raft").message_types)

    async def pair() -> tuple[Connection, Connection]:
        left, right = socket.socketpair()
        key = os.urandom(32)
        a = Connection(*await asyncio.open_connection(sock=left), key)
        b = Connection(*await asyncio.open_connection(sock=right), key)
        await asyncio.gather(a.handshake(), b.handshake())
        return a, b

    async def timed() -> tuple[float, float]:
        sender, receiver = await pair()
        try:
            costs = {}
            for n in (0, entries):
                batch = tuple(command_entry(3, 1, i, "write", "k1", 12345678 + i) for i in range(n))
                message = AppendEntries(term=3, leader_id=0, prev_log_index=10, prev_log_term=3, entries=batch,
                                        leader_commit=9)
                send, recv = [], []
                for _ in range(repeats):
                    began = time.thread_time_ns()
                    frame = sender.encode("m", 0, codec.encode(message))
                    send.append(time.thread_time_ns() - began)
                    began = time.thread_time_ns()
                    codec.decode(receiver.decode(frame[4:]).message)
                    recv.append(time.thread_time_ns() - began)
                costs[n] = (float(np.median(send)), float(np.median(recv)))
            return tuple(max(0.0, (costs[entries][i] - costs[0][i]) / entries / 1e9) for i in (0, 1))
        finally:
            sender.close()
            receiver.close()

    return asyncio.run(timed())


def machine_facts(directory: str | Path) -> dict[str, Any]:
    """Where a profile was measured: CPU model, cores, kernel, filesystem of ``directory``, load average."""
    import os

    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    filesystem = "?"
    try:
        target = str(Path(directory).resolve())
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if target.startswith(mount) and len(mount) > len(best):
                best, filesystem = mount, fstype
    except OSError:
        pass
    return {"cpu_model": cpu_model, "cores": os.cpu_count(), "kernel": platform.release(),
            "filesystem": filesystem, "directory": str(directory), "loadavg_1min": os.getloadavg()[0],
            "python": platform.python_version()}
