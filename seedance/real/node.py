"""Entry point of one node process: ``python -m seedance.real.node`` (or ``torchrun ... -m seedance.real.node``).

Rules (torch.distributed.run / torchrun environment contract):

* The node id is ``RANK``, the number of nodes ``WORLD_SIZE``; the rendezvous store is the TCPStore at
  ``MASTER_ADDR:MASTER_PORT``. It is hosted by our launcher (``SEEDANCE_STORE_HOSTED=1``) or by torchrun's agent
  (``TORCHELASTIC_USE_AGENT_STORE=True``); otherwise rank 0 hosts it. ``LOCAL_RANK`` picks the CUDA device.
* Under torchrun (no ``SEEDANCE_PEERS``) this process is the rank's supervisor (:mod:`.supervise`): it agrees on
  the run's settings with the other ranks, then starts the node itself as a child, as below, and restarts it.
* The local launcher (and the supervisor) pass ``SEEDANCE_PEERS`` (every node's ``host:port``) and
  ``SEEDANCE_LISTEN_FD`` (this node's listening socket, kept by the launcher across restarts), so the node needs
  neither the store nor a torch import to start; torch is imported only for collectives.
* Run settings come from ``SEEDANCE_*`` variables (protocol, seed, run directory, config JSON, incarnation, bind
  address); the HMAC key from ``SEEDANCE_KEY_FILE`` (a 0600 file) or ``SEEDANCE_KEY``. The key is never logged.
* On Linux the process asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``), so a launcher
  that is itself killed leaves no orphans. SIGTERM/SIGINT stop it cleanly (exit 0).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from seedance.errors import SeedanceError, SpecError
from seedance.real.node_env import (  # noqa: F401  (importable from here, as before)
    ENV, _load_key_for, _required, config_from_env, open_store, set_parent_death_signal)


def resolve_protocol(name: str):
    """A registered protocol name (``raft``) or ``package.module:ATTR`` naming a :class:`ProtocolSpec`."""
    import importlib

    from seedance.models.protocols import registry
    from seedance.models.protocols.contract import ProtocolSpec

    if ":" not in name:
        return registry.get(name)
    module, _, attr = name.partition(":")
    try:
        spec = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise SpecError("protocol", f"cannot load {name!r}: {err}", "a registered name or module:ATTR") from None
    if not isinstance(spec, ProtocolSpec):
        raise SpecError("protocol", f"{name!r} is not a ProtocolSpec", "module:ATTR naming a ProtocolSpec")
    return spec


async def _amain() -> int:
    import socket

    from seedance.real.addresses import StaticAddressBook
    from seedance.real.runtime import NodeRuntime

    cfg = config_from_env()
    addresses = StaticAddressBook(os.environ[ENV["peers"]])
    listen = socket.socket(fileno=int(os.environ[ENV["listen_fd"]])) if os.environ.get(ENV["listen_fd"]) else None
    spec = resolve_protocol(cfg.protocol)
    runtime = NodeRuntime(cfg, spec, addresses, collective_store_factory=lambda: open_store(cfg.node_id),
                          listen_socket=listen)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runtime.stop)
    from seedance.monitor.memory import start_node_sampler

    sampler = start_node_sampler(runtime)  # SEEDANCE_MEMCHECK_S set: this process's memory, fds, threads, handles
    try:
        await runtime.run()
    finally:
        if sampler is not None:
            sampler.stop()
    return 1 if runtime.failed else 0


def main() -> int:
    import faulthandler

    set_parent_death_signal()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: every thread's stack in the log
    rank = os.environ.get("RANK", "?")
    logging.basicConfig(level=os.environ.get("SEEDANCE_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format=f"%(asctime)s node{rank} %(levelname)s %(name)s: %(message)s")
    try:
        if not os.environ.get(ENV["peers"]):  # started by torchrun: this process supervises the rank's node
            from seedance.real.supervise import supervise

            return supervise()
        profile_dir = os.environ.get("SEEDANCE_PYPROFILE")  # a directory: this process's cProfile, per incarnation
        if not profile_dir:
            return asyncio.run(_amain())
        import cProfile

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(asyncio.run, _amain())
        finally:
            profiler.dump_stats(Path(profile_dir) / f"node-{rank}-{os.getpid()}.prof")
    except SeedanceError as err:
        logging.getLogger("seedance.real.node").error("%s", err)
        return 2


if __name__ == "__main__":
    sys.exit(main())
