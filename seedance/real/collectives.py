"""Collectives for :class:`~seedance.models.protocols.contract.StartCollective`, through torch.distributed.

What is this backend's own (validation, agreement and the shape of every result are the shared rules of
:mod:`seedance.engine.collectives`; the conformance suite holds both runtimes to them):

* Backend: NCCL when ``torch.cuda.is_available()``, gloo otherwise, the same code path; tensors live on the node's
  device (:func:`seedance.real.devices.node_device`: ``cuda:LOCAL_RANK`` with NCCL).
* Process groups are reused per membership: one group per sorted member tuple and *generation*, built once from a
  ``PrefixStore`` on the run's rendezvous store (``seedance/pg/<members>/<generation>/``). The generation is the
  membership's epoch (``seedance/pg-epoch/<members>``, advanced by compare-and-set by the first member that sees a
  collective of it fail) and every member's incarnation (each process publishes its own before its first
  collective). So a group that lost a member, or whose operations fell out of step after a timeout, is never used
  again, and a restarted process never meets its predecessor's group. Each collective reads the generation first
  (a few store round trips) and rebuilds its group when it moved; a member that read a stale generation just as a
  peer restarted fails that one collective (timeout) and meets the others at the next.
* Before the data, the members allgather a fixed-length metadata row (op, root, dtype, shape, a hash of the group):
  members that disagree all fail with the same ``"misuse: ..."`` text the simulator gives, instead of hanging or
  corrupting memory.
* One worker thread per node runs the node's collectives in the order started (a CUDA stream's order). A deadline
  (``timeout_s``, default :data:`~seedance.engine.collectives.DEFAULT_TIMEOUT_S`) is enforced twice: the process
  group's own timeout and a timer on the event loop; whichever fires first delivers ``error="timeout"``; an
  exception gives ``error="peer-failed: ..."``. Exactly one ``CollectiveDone`` per ``StartCollective``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import numpy as np

from seedance.engine import collectives as rules
from seedance.models.protocols.contract import CollectiveDone, StartCollective
from seedance.real.devices import default_backend, node_device

log = logging.getLogger("seedance.real.collectives")

OPS = rules.OPS
DEFAULT_TIMEOUT_S = rules.DEFAULT_TIMEOUT_S
EPOCH_KEY = "seedance/pg-epoch/{}"
INCARNATION_KEY = "seedance/pg-incarnation/{}"


def backend_name() -> str:
    return default_backend()


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
    """Run ``op`` on ``pg`` (ranks are positions in the sorted member tuple); the numpy result for this member,
    shaped by the shared rules (allgather stacks in *rank* order; the caller reorders to group order)."""
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
    if op == "reduce":
        opts = dist.ReduceOptions()
        opts.rootRank = root_rank
        pg.reduce([tensor], opts).wait()
        return tensor.cpu().numpy() if member_rank == root_rank else None
    if op == "allgather":
        outputs = [torch.empty_like(tensor) for _ in range(size)]
        pg.allgather([outputs], [tensor]).wait()
        return torch.stack(outputs).cpu().numpy()
    if op == "reducescatter":  # sum, then this member's chunk along axis 0 (gloo's reduce_scatter is partial)
        pg.allreduce([tensor]).wait()
        return np.array_split(tensor.cpu().numpy(), size, axis=0)[member_rank]
    raise ValueError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")


class _Once:
    """Whether a collective's outcome was delivered (by its timeout or by the worker, whichever came first)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


class CollectiveEngine:
    """Starts collectives for one node; delivers exactly one ``CollectiveDone`` each through ``deliver``."""

    def __init__(self, *, rank: int, store_factory: Callable[[], Any], deliver: Callable[[CollectiveDone], None],
                 call_later: Callable[[float, Callable[[], None]], Any], bind_host: str | None = None,
                 backend: str | None = None, incarnation: int = 0) -> None:
        self.rank = rank
        self._store_factory = store_factory
        self._store: Any = None
        self._deliver = deliver
        self._call_later = call_later
        self.bind_host = bind_host
        self._backend = backend
        # Two parties may finish a collective: its timeout and the worker. Each collective carries its own `_Once`
        # flag, which the two closures share, so nothing engine-wide remembers collectives. (A set of every finished
        # id grew two entries per training step; a set of ids awaiting their second party stayed bounded but
        # churned: ~1,000 live ids at 100 steps/s with a 5 s timeout, its table reallocated every ~30 s, and the
        # freed 128 KiB blocks fragmented the worker thread's malloc arena, ~4 KiB/s of RSS. Both seen by
        # `seedance real soak`.)
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"node{rank}-collectives")
        self._groups: dict[tuple[int, ...], tuple[tuple[int, ...], Any]] = {}  # members -> (generation, group)
        self.incarnation = incarnation
        self._published = False
        self.groups_built = 0
        self.completed = 0

    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = backend_name()
        return self._backend

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
        self._groups.clear()

    def _finish(self, once: _Once, done: CollectiveDone) -> None:
        with self._lock:
            if once.done:  # the second party: delivered already
                return
            once.done = True
        self._deliver(done)

    def start(self, effect: StartCollective, meta: rules.Meta, payload: Any) -> None:
        cid = effect.collective_id
        timeout_s = rules.resolve_timeout(effect.timeout_s)
        once = _Once()
        self._call_later(timeout_s, lambda: self._finish(
            once, CollectiveDone(collective_id=cid, ok=False, error="timeout")))
        self._worker.submit(self._work, cid, once, meta, payload, timeout_s)

    # ------------------------------------------------------------------------------------------ process groups
    def _store_ready(self) -> Any:
        if self._store is None:
            self._store = self._store_factory()
        return self._store

    def _generation(self, members: tuple[int, ...]) -> tuple[int, ...]:
        """(epoch, incarnation of each member): the identity of the process group to use now."""
        store = self._store_ready()
        if not self._published:
            store.set(INCARNATION_KEY.format(self.rank), str(self.incarnation))
            self._published = True
        epoch = int(store.add(EPOCH_KEY.format(",".join(map(str, members))), 0))
        incarnations = tuple(int(store.get(INCARNATION_KEY.format(m))) for m in members)
        return (epoch, *incarnations)

    def _advance(self, members: tuple[int, ...], seen: int) -> None:
        """Move the membership's epoch past ``seen`` (once, whoever of its members gets there first)."""
        store = self._store_ready()
        store.compare_set(EPOCH_KEY.format(",".join(map(str, members))), str(seen), str(seen + 1))
        self._groups.pop(members, None)

    def _group(self, members: tuple[int, ...], timeout_s: float) -> tuple[tuple[int, ...], Any]:
        import torch.distributed as dist

        generation = self._generation(members)
        cached = self._groups.get(members)
        if cached is not None and cached[0] == generation:
            return cached
        prefix = f"seedance/pg/{','.join(map(str, members))}/{'.'.join(map(str, generation))}/"
        store = dist.PrefixStore(prefix, self._store_ready())
        pg = make_process_group(store, members.index(self.rank), len(members), max(timeout_s, 1.0), self.backend,
                                self.bind_host)
        self._groups[members] = (generation, pg)
        self.groups_built += 1
        log.info("process group built for members %s, generation %s (%d built so far)", members, generation,
                 self.groups_built)
        return generation, pg

    # ---------------------------------------------------------------------------------------------------- work
    def _work(self, cid: Any, once: _Once, meta: rules.Meta, payload: Any, timeout_s: float) -> None:
        with self._lock:
            if once.done:  # timed out while waiting for the worker
                return
        members = tuple(sorted(meta.group))
        epoch = -1
        try:
            generation, pg = self._group(members, timeout_s)
            epoch = generation[0]
            done = self._run(cid, pg, meta, payload, members)
        except Exception as err:  # peer crashed, connection reset, gloo timeout
            text = str(err).lower()
            kind = "timeout" if "timeout" in text or "timed out" in text else "peer-failed"
            log.warning("collective %r failed: %s", cid, err)
            done = CollectiveDone(collective_id=cid, ok=False, error=kind if kind == "timeout" else f"{kind}: {err}")
            try:
                if epoch >= 0:
                    self._advance(members, epoch)
            except Exception as store_err:  # the store itself is gone: nothing more to do here
                log.warning("could not advance the process-group epoch: %s", store_err)
        if done.ok:
            self.completed += 1
        self._finish(once, done)

    def _run(self, cid: Any, pg: Any, meta: rules.Meta, payload: Any, members: tuple[int, ...]) -> CollectiveDone:
        import torch

        device = node_device(self.backend)
        rank = members.index(self.rank)
        row = torch.tensor(meta.encode(), dtype=torch.int64, device=device)
        rows = [torch.empty_like(row) for _ in members]
        pg.allgather([rows], [row]).wait()
        metas = {}
        for m, r in zip(members, rows):
            op, root, dtype, shape, group_hash = rules.Meta.decode(r.cpu().tolist(), meta.group)
            if group_hash != meta.encode()[4]:
                return CollectiveDone(collective_id=cid, ok=False,
                                      error=f"misuse: members disagree on group: node {self.rank} has {meta.group}, "
                                            f"node {m} another")
            metas[m] = rules.Meta(op, meta.group, root, dtype, shape)
        problem = rules.check_agreement(metas)
        if problem is not None:
            return CollectiveDone(collective_id=cid, ok=False, error=problem)
        if meta.op == "reducescatter":  # the chunk of the member's position in the group (as the rules say)
            result = run_collective(pg, meta.op, payload, meta.group.index(self.rank), len(members), 0, device)
        else:
            result = run_collective(pg, meta.op, payload, rank, len(members), members.index(meta.root), device)
        if meta.op == "allgather" and result is not None:  # rank order (sorted members) -> group order
            result = np.stack([result[members.index(m)] for m in meta.group])
        return CollectiveDone(collective_id=cid, ok=True, result=result)
