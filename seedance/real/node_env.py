"""A node process's settings from its environment (the torchrun contract and the ``SEEDANCE_*`` variables; see
:mod:`seedance.real.node`), shared by the node and its supervisor under torchrun (:mod:`seedance.real.supervise`)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from seedance.errors import SpecError

ENV = {
    "protocol": "SEEDANCE_PROTOCOL", "seed": "SEEDANCE_SEED", "run_dir": "SEEDANCE_RUN_DIR",
    "config": "SEEDANCE_CONFIG", "incarnation": "SEEDANCE_INCARNATION", "bind": "SEEDANCE_BIND",
    "advertise": "SEEDANCE_ADVERTISE", "t0": "SEEDANCE_T0_MONOTONIC", "hosted": "SEEDANCE_STORE_HOSTED",
    "max_frame": "SEEDANCE_MAX_FRAME_BYTES", "parent": "SEEDANCE_PARENT_PID", "peers": "SEEDANCE_PEERS",
    "listen_fd": "SEEDANCE_LISTEN_FD",
}


def set_parent_death_signal() -> None:
    """Linux: SIGKILL this process when its parent exits (no orphans even if the launcher is SIGKILLed)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        return
    expected = os.environ.get(ENV["parent"])
    if expected and os.getppid() != int(expected):  # the parent died before prctl took effect
        os._exit(1)


def _required(name: str) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        raise SpecError(name, "environment variable not set", "launch through `seedance real run` or torchrun")
    return value


def open_store(rank: int, timeout_s: float = 60.0):
    import torch.distributed as dist

    host, port = _required("MASTER_ADDR"), int(_required("MASTER_PORT"))
    external = (os.environ.get(ENV["hosted"]) == "1"
                or os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true")
    return dist.TCPStore(host, port, is_master=(rank == 0 and not external), wait_for_workers=False,
                         timeout=timedelta(seconds=timeout_s))


def _load_key_for(bind: str) -> bytes:
    """The run key; a node asked to listen beyond loopback without one is refused by name."""
    from seedance.real.transport import KEY_ENV, KEY_FILE_ENV, is_loopback, load_key

    if not os.environ.get(KEY_FILE_ENV) and not os.environ.get(KEY_ENV) and not is_loopback(bind):
        raise SpecError(KEY_FILE_ENV, f"refusing to listen on {bind} (not loopback) without a run key",
                        f"set {KEY_FILE_ENV} to a 0600 file holding 64 hex digits on every rank")
    return load_key()


def config_from_env():
    from seedance.real.runtime import NodeConfig
    from seedance.real.transport import DEFAULT_MAX_FRAME_BYTES

    rank, world = int(_required("RANK")), int(_required("WORLD_SIZE"))
    run_dir = Path(_required(ENV["run_dir"]))
    # under torchrun a restarted worker group is a new incarnation (its agent's restart count)
    incarnation = int(os.environ.get(ENV["incarnation"]) or os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0")
    bind = os.environ.get(ENV["bind"], "127.0.0.1")
    try:
        config = json.loads(os.environ.get(ENV["config"], "{}") or "{}")
    except ValueError as err:
        raise SpecError(ENV["config"], f"not JSON: {err}", "a JSON object") from None
    return NodeConfig(
        protocol=_required(ENV["protocol"]), node_id=rank, num_nodes=world,
        seed=int(os.environ.get(ENV["seed"], "0")), incarnation=incarnation,
        state_dir=run_dir / f"node-{rank}" / "state", key=_load_key_for(bind),
        bind_host=bind, advertise_host=os.environ.get(ENV["advertise"]) or None, config=config,
        trace_path=None if os.environ.get("SEEDANCE_TRACE") == "0" else run_dir / f"node-{rank}.trace.jsonl",
        ready_path=run_dir / f"node-{rank}.ready",
        t0_monotonic=float(os.environ.get(ENV["t0"], "0") or 0.0),
        max_frame_bytes=int(os.environ.get(ENV["max_frame"], str(DEFAULT_MAX_FRAME_BYTES))),
        fsync=os.environ.get("SEEDANCE_FSYNC", "1") != "0",
    )
