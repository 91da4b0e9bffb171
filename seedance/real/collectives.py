"""Collectives for :class:`~seedance.models.protocols.contract.StartCollective`, through torch.distributed.

Rules (contract.py; PyTorch c10d docs; NCCL user guide "Communicators"):

* Backend: NCCL when ``torch.cuda.is_available()``, gloo otherwise (:func:`backend_name`), the same code path.
* Each collective gets its own process group over exactly its members, built from a ``PrefixStore`` keyed by the
  member tuple and the ``collective_id`` on the run's rendezvous store. Only the members take part, so a collective
  over a subgroup needs nothing from the other nodes, and a process restarted after a crash joins the next
  collective like any other member (a process group that lost a member can never be reused).
* The operation runs on a worker thread; the event loop learns the result through a callback. A deadline
  (``timeout_s``) is enforced twice: the process group's own timeout and a timer on the event loop. Whichever fires
  first delivers ``CollectiveDone(ok=False, error="timeout")``; an exception gives ``error="peer-failed: ..."``.
  Exactly one ``CollectiveDone`` per ``StartCollective``.
* ``payload`` is a real numpy array; ``result`` is a numpy array (allreduce: sum; allgather: stacked along axis 0;
  broadcast: the root's; reducescatter: this member's chunk of the sum; barrier: None).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from seedance.models.protocols.contract import CollectiveDone, StartCollective

log = logging.getLogger("seedance.real.collectives")

OPS = ("allreduce", "allgather", "broadcast", "reducescatter", "barrier")
DEFAULT_TIMEOUT_S = 30.0


def backend_name() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def make_process_group(store: Any, rank: int, size: int, timeout_s: float, backend: str, bind_host: str | None):
    """A process group of ``size`` members on ``store`` (no global ``init_process_group`` state)."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":  # pragma: no cover - needs a GPU
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    device = (dist.ProcessGroupGloo.create_device(hostname=bind_host) if bind_host
              else dist.ProcessGroupGloo.create_default_device())
    opts._devices = [device]
    return dist.ProcessGroupGloo(store, rank, size, opts)


def run_collective(pg: Any, op: str, payload: Any, member_rank: int, size: int, root_rank: int,
                   device: str) -> Any:
    """Run ``op`` on ``pg``; returns the numpy result."""
    import torch
    import torch.distributed as dist

    if op == "barrier":
        pg.barrier().wait()
        return None
    tensor = torch.from_numpy(np.array(payload, copy=True)).to(device)
    if op == "allreduce":
        pg.allreduce([tensor]).wait()
        return tensor.cpu().numpy()
    if op == "broadcast":
        opts = dist.BroadcastOptions()
        opts.rootRank = root_rank
        pg.broadcast([tensor], opts).wait()
        return tensor.cpu().numpy()
    if op == "allgather":
        outputs = [torch.empty_like(tensor) for _ in range(size)]
        pg.allgather([outputs], [tensor]).wait()
        return torch.stack(outputs).cpu().numpy()
    if op == "reducescatter":  # sum, then this member's chunk along axis 0 (gloo's reduce_scatter is partial)
        pg.allreduce([tensor]).wait()
        return np.array_split(tensor.cpu().numpy(), size)[member_rank]
    raise ValueError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")


class CollectiveEngine:
    """Starts collectives for one node; delivers exactly one ``CollectiveDone`` each through ``deliver``."""

    def __init__(self, *, rank: int, store_factory: Callable[[], Any], deliver: Callable[[CollectiveDone], None],
                 call_later: Callable[[float, Callable[[], None]], Any], bind_host: str | None = None,
                 backend: str | None = None) -> None:
        self.rank = rank
        self._store_factory = store_factory
        self._store: Any = None
        self._store_lock = threading.Lock()
        self._deliver = deliver
        self._call_later = call_later
        self.bind_host = bind_host
        self._backend = backend
        self._done: set[Any] = set()
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = backend_name()
        return self._backend

    def _finish(self, collective_id: Any, done: CollectiveDone) -> None:
        with self._lock:
            if collective_id in self._done:
                return
            self._done.add(collective_id)
        self._deliver(done)

    def start(self, effect: StartCollective) -> None:
        cid = effect.collective_id
        members = tuple(sorted(set(effect.group)))
        if self.rank not in members or effect.op not in OPS:
            problem = "not-a-member" if self.rank not in members else f"unknown-op {effect.op}"
            self._call_later(0.0, lambda: self._finish(cid, CollectiveDone(collective_id=cid, ok=False, error=problem)))
            return
        timeout_s = effect.timeout_s if effect.timeout_s is not None else DEFAULT_TIMEOUT_S
        self._call_later(timeout_s, lambda: self._finish(
            cid, CollectiveDone(collective_id=cid, ok=False, error="timeout")))
        thread = threading.Thread(target=self._work, args=(effect, members, timeout_s), daemon=True,
                                  name=f"collective-{cid!r}")
        thread.start()

    def _work(self, effect: StartCollective, members: tuple[int, ...], timeout_s: float) -> None:
        import torch.distributed as dist

        cid = effect.collective_id
        try:
            with self._store_lock:
                if self._store is None:
                    self._store = self._store_factory()
            store = dist.PrefixStore(f"seedance/collective/{members}/{cid!r}/", self._store)
            member_rank = members.index(self.rank)
            pg = make_process_group(store, member_rank, len(members), timeout_s, self.backend, self.bind_host)
            root = effect.root if effect.root is not None else members[0]
            device = "cuda" if self.backend == "nccl" else "cpu"
            result = run_collective(pg, effect.op, effect.payload, member_rank, len(members),
                                    members.index(root) if root in members else 0, device)
            done = CollectiveDone(collective_id=cid, ok=True, result=result)
        except Exception as err:  # peer crashed, connection reset, gloo timeout
            text = str(err).lower()
            kind = "timeout" if "timeout" in text or "timed out" in text else "peer-failed"
            log.warning("collective %r failed: %s", cid, err)
            done = CollectiveDone(collective_id=cid, ok=False, error=kind if kind == "timeout" else f"{kind}: {err}")
        self._finish(cid, done)
