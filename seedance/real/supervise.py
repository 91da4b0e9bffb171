"""One rank of a torchrun world: agree with the other ranks, then run this rank's node and restart it when it dies.

Rules (torchrun's worker contract; the local launcher's, for one rank):

* ``torchrun ... -m seedance.real.node`` starts this supervisor as the worker (``SEEDANCE_PEERS`` unset). It opens
  the world's store (torchrun's agent hosts it), reads the run settings, and agrees on them with every other rank
  (:func:`agree`): ranks that disagree on the protocol, the config or the run key all exit 2 naming the field; a
  rank refused on its own (no key file, a wide bind without a key) says so in the store, and the others exit 2 too.
* It binds the node's listening socket itself (``SEEDANCE_BIND``, 127.0.0.1 unless widened) and publishes
  ``SEEDANCE_ADVERTISE or host``:port in the store; once every rank has published, it starts the node as a child
  (``python -m seedance.real.node`` with ``SEEDANCE_PEERS`` and ``SEEDANCE_LISTEN_FD``: no torch import, no store
  until a collective) that holds that one listening socket and no other.
* A node that dies by a signal (SIGKILL, the OOM killer) is restarted after ``SEEDANCE_RESTART_DELAY_S`` (0.2 s) as
  the next incarnation, on the same address, from its durable state; meanwhile its address refuses connections. A
  node that exits with a status (a failure, bad input) ends the supervisor with that status, so torchrun sees it.
  Killing the supervisor itself is torchrun's business: its agent restarts the whole worker group (``--max-restarts``).
* SIGTERM/SIGINT (torchrun stopping the group) are passed to the node; the supervisor exits with the node.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

from seedance.errors import SeedanceError, SpecError
from seedance.real.node_env import ENV, _required, config_from_env, open_store

log = logging.getLogger("seedance.real.supervise")

AGREE_KEY = "seedance/agree/{}"  # each rank's run settings, in the torchrun world's store
RESTART_DELAY_ENV = "SEEDANCE_RESTART_DELAY_S"


def run_fingerprint(cfg: Any) -> dict[str, str]:
    """What every rank of one world must share: the protocol, the config (canonical JSON) and the run key (an HMAC
    of a fixed label under it: equal keys give equal fingerprints; the key itself never leaves the process)."""
    import hashlib
    import hmac

    config = json.dumps(cfg.config, sort_keys=True, separators=(",", ":"))
    return {ENV["protocol"]: cfg.protocol, ENV["config"]: hashlib.sha256(config.encode()).hexdigest()[:16],
            "SEEDANCE_KEY_FILE": hmac.new(cfg.key, b"seedance run-key fingerprint", "sha256").hexdigest()[:16]}


def agree(store: Any, cfg: Any, timeout_s: float = 120.0) -> None:
    """Publish this rank's :func:`run_fingerprint` and compare it with every other rank's: a world whose ranks
    disagree stops at once, every rank with SpecError (exit 2) naming the field, instead of running nodes that reject
    each other's frames. A restarted group publishes the same values."""
    mine = run_fingerprint(cfg)
    store.set(AGREE_KEY.format(cfg.node_id), json.dumps(mine))
    keys = [AGREE_KEY.format(rank) for rank in range(cfg.num_nodes)]
    try:
        store.wait(keys, timedelta(seconds=timeout_s))
    except Exception:  # torch's DistStoreError on a timeout
        missing = [rank for rank, key in enumerate(keys) if not store.check([key])]
        raise SpecError("WORLD_SIZE", f"ranks {missing} of {cfg.num_nodes} never started within {timeout_s:.0f} s",
                        "a world whose every rank runs seedance.real.node") from None
    for rank, key in enumerate(keys):
        theirs = json.loads(store.get(key))
        refused = [name for name, value in theirs.items() if str(value).startswith("refused")]
        if refused:
            raise SpecError(refused[0], f"rank {rank} of this world was {theirs[refused[0]]}",
                            "the same settings, and a readable key file, on every rank")
        for name, value in mine.items():
            if theirs.get(name) != value:
                what = "" if name == ENV["protocol"] else "a fingerprint "
                raise SpecError(name, f"ranks of this world disagree: rank {cfg.node_id} has {what}{value!r}, rank "
                                f"{rank} has {theirs.get(name)!r}", "the same value on every rank of the world")


def _agreed_config(store: Any) -> Any:
    try:
        cfg = config_from_env()
    except SeedanceError as err:  # refused (no key, bad config): the other ranks stop too, naming the field
        store.set(AGREE_KEY.format(os.environ["RANK"]), json.dumps({err.field: f"refused: {err.problem}"}))
        raise
    agree(store, cfg)
    return cfg


def _peers(store: Any, cfg: Any, timeout_s: float = 120.0) -> str:
    from seedance.real.addresses import ADDR_KEY

    keys = [ADDR_KEY.format(rank) for rank in range(cfg.num_nodes)]
    store.wait(keys, timedelta(seconds=timeout_s))
    return ",".join(store.get(key).decode() for key in keys)


class Supervisor:
    """This rank's node process: started, restarted after a death by signal, stopped on SIGTERM."""

    def __init__(self, cfg: Any, listen: socket.socket, peers: str) -> None:
        self.cfg, self.listen, self.peers = cfg, listen, peers
        self.incarnation = cfg.incarnation
        self.delay_s = float(os.environ.get(RESTART_DELAY_ENV, "0.2"))
        self.child: subprocess.Popen | None = None
        self.stopping = False

    def _spawn(self) -> None:
        self.listen.listen(512)
        env = dict(os.environ, **{ENV["peers"]: self.peers, ENV["listen_fd"]: str(self.listen.fileno()),
                                  ENV["incarnation"]: str(self.incarnation), ENV["parent"]: str(os.getpid())})
        self.child = subprocess.Popen([sys.executable, "-m", "seedance.real.node"], env=env,
                                      pass_fds=(self.listen.fileno(),))

    def stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        self._spawn()
        while True:
            assert self.child is not None
            code = self.child.wait()
            if self.stopping or code >= 0:
                return 0 if self.stopping else code
            log.warning("node %d (incarnation %d) died by signal %d; restarting it in %.1f s", self.cfg.node_id,
                        self.incarnation, -code, self.delay_s)
            try:
                self.listen.shutdown(socket.SHUT_RD)  # its address refuses connections while it is down
            except OSError:
                pass
            time.sleep(self.delay_s)
            if self.stopping:
                return 0
            self.incarnation += 1
            self._spawn()


def supervise() -> int:
    from seedance.real.processes import node_listener as _node_listener

    store = open_store(int(_required("RANK")))
    cfg = _agreed_config(store)
    family = socket.AF_INET6 if ":" in cfg.bind_host else socket.AF_INET
    listen = _node_listener(family, cfg.bind_host)
    port = listen.getsockname()[1]
    host = cfg.advertise_host or (socket.gethostname() if cfg.bind_host in ("0.0.0.0", "::") else cfg.bind_host)
    from seedance.real.addresses import StoreAddressBook

    StoreAddressBook(store).publish(cfg.node_id, host, port)
    peers = _peers(store, cfg)
    log.info("rank %d supervises its node on %s:%d", cfg.node_id, host, port)
    return Supervisor(cfg, listen, peers).run()


if __name__ == "__main__":
    try:
        sys.exit(supervise())
    except SeedanceError as err:
        logging.getLogger("seedance.real.supervise").error("%s", err)
        sys.exit(2)
