"""A real node's messages and client connections: one sender task and connection per peer (lossy: a full queue, a
broken connection or a peer not reachable drops what was queued, as the contract allows), the listener's
connections from peers, clients and the launcher's fault control, and replies on the requesting client's
connection. Methods of :class:`~seedance.real.runtime.NodeRuntime`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from seedance.engine.effects import CLIENT, MESSAGE
from seedance.errors import FrameError
from seedance.models.protocols.contract import ClientRequest, Reply, Send
from seedance.real.transport import Connection

log = logging.getLogger("seedance.real.runtime")

PEER_QUEUE_LIMIT = 10_000
PEER_BATCH_LIMIT = 1_024  # queued messages to one peer sent as one batch frame (one MAC, one write)
# A peer that refuses (its process is down; its host answers at once) is retried at this fixed interval, well under
# any election timeout, so a restarted node is reachable within it; other failures (timeouts, bad frames) back off
# from RECONNECT_S doubling to RECONNECT_MAX_S. See _peer_sender.
RECONNECT_S = 0.02
RECONNECT_MAX_S = 0.5


def _drain(queue: asyncio.Queue) -> int:
    """Empty ``queue`` without waiting; returns how many items it held."""
    n = 0
    while not queue.empty():
        queue.get_nowait()
        n += 1
    return n


class Messaging:
    """Peers' and clients' frames in and out (a mixin of the runtime: it uses its codec, faults, trace and tasks)."""

    __slots__ = ()

    def _send(self, effect: Send) -> None:
        if effect.dst == self.cfg.node_id:
            message = effect.message
            assert self._loop is not None
            self._loop.call_soon(self._deliver_message, self.cfg.node_id, message)
            return
        queue = self._peer_queues.get(effect.dst)
        if queue is None:
            queue = self._peer_queues[effect.dst] = asyncio.Queue(PEER_QUEUE_LIMIT)
            self._spawn(self._peer_sender(effect.dst, queue))
        try:
            queue.put_nowait(self.codec.encode(effect.message))
            if self._busy is not None:
                self._busy.frames_out += 1
        except asyncio.QueueFull:
            log.debug("dropping message to %d: queue full", effect.dst)

    def _deliver_message(self, src: int, message: Any) -> None:
        if self.faults.active and self.faults.intercept(src, message, self._deliver_message):
            return  # dropped or deferred by a launcher-set fault rule (seedance.real.faults)
        self.trace.record("deliver", self.cfg.node_id, type(message).__name__, src)
        self._input(MESSAGE, (src, message))

    async def _peer_sender(self, dst: int, queue: asyncio.Queue) -> None:
        """Keep one connection to ``dst`` and send its queue over it.

        While ``dst`` cannot be reached, what was queued for it is dropped at each failed attempt: those messages
        went to a peer that was not there, and are lost as on a network (the contract's sends are lossy; the
        simulator drops a message to a crashed node too). Kept, they reached a restarted peer all at once as a
        burst of stale messages (a candidate's vote requests of every term it tried while alone). A refused
        connection is retried every ``RECONNECT_S``: an exponential back-off capped at 0.5 s had a leader reach a
        restarted follower up to 0.5 s after it came back, longer than an election timeout."""
        backoff = RECONNECT_S
        while True:
            conn = None
            try:
                address = self.addresses.lookup(dst)
                if address is None:
                    raise ConnectionError("peer not published yet")
                conn = await Connection.open(*address, self.cfg.key, self.cfg.max_frame_bytes)
                conn.send_nowait("peer", self.cfg.node_id, None)
                backoff = RECONNECT_S
                me = self.cfg.node_id
                transport = conn.writer.transport
                high = transport.get_write_buffer_limits()[1]
                while True:
                    items = [("msg", me, await queue.get())]
                    while not queue.empty() and len(items) < PEER_BATCH_LIMIT:  # what was queued: one batch frame
                        items.append(("msg", me, queue.get_nowait()))
                    if transport.is_closing():  # the peer went away: reconnect (what was queued is dropped)
                        raise ConnectionResetError(f"connection to {dst} closed")
                    conn.write_many(items)  # a message too large for a frame is dropped and logged there
                    if transport.get_write_buffer_size() > high:  # only a backed-up socket is waited for
                        await asyncio.wait_for(conn.writer.drain(), 5.0)  # a stopped peer: reconnect, never hang
            except asyncio.CancelledError:
                if conn is not None:
                    conn.close()
                raise
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, FrameError, ConnectionError) as err:
                dropped = _drain(queue)
                log.debug("connection to %d lost: %s (%d queued messages dropped)", dst, err, dropped)
                if conn is not None:
                    conn.close()
                refused = isinstance(err, ConnectionRefusedError)
                await asyncio.sleep(RECONNECT_S if refused else backoff)
                backoff = RECONNECT_S if refused else min(backoff * 2, RECONNECT_MAX_S)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.cfg.key, self.cfg.max_frame_bytes)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        client_ids: set[Any] = set()
        try:
            await asyncio.wait_for(conn.handshake(), 5.0)
            first = await asyncio.wait_for(conn.recv(), 5.0)
            if first.kind == "peer" and isinstance(first.src, int) and 0 <= first.src < self.cfg.num_nodes:
                src = first.src
                while True:
                    frame = conn.next_frame() or await conn.recv()  # frames already read: no await per frame
                    if frame.kind != "msg" or frame.src != src:
                        raise FrameError("frame", f"unexpected {frame.kind!r} from peer {src}", "msg frames")
                    message = self.codec.decode(frame.message)
                    self._deliver_message(src, message)
            elif first.kind == "ctl":  # the launcher's fault rules (seedance.real.faults), control-key signed
                await self.faults.serve(conn)
            elif first.kind == "client":
                while True:
                    frame = conn.next_frame() or await conn.recv()
                    request = self.codec.decode(frame.message)
                    if frame.kind != "req" or not isinstance(request, ClientRequest):
                        raise FrameError("frame", f"unexpected {frame.kind!r} from a client", "req frames")
                    self._clients[request.client_id] = conn
                    client_ids.add(request.client_id)
                    self._input(CLIENT, request)
            else:
                raise FrameError("frame", f"unexpected first frame {first.kind!r}", "'peer' or 'client'")
        except FrameError as err:
            self.frames_rejected += 1
            log.warning("rejected frame, dropping connection: %s", err)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            for cid in client_ids:
                if self._clients.get(cid) is conn:
                    del self._clients[cid]
            conn.close()
            if task is not None:
                self._tasks.discard(task)

    def _reply(self, effect: Reply) -> None:
        conn = self._clients.get(effect.client_id)
        if conn is None:
            return  # the client is gone; it records the operation as indeterminate
        try:
            conn.send_soon("rep", self.cfg.node_id, self.codec.encode(effect))
            if self._busy is not None:
                self._busy.frames_out += 1
        except (OSError, RuntimeError) as err:
            log.debug("reply to client %s lost: %s", effect.client_id, err)
