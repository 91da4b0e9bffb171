"""Frames over real sockets (seedance/real/transport.py): buffered reading, batch frames, messages too large for a
frame, and bad batches rejected with a clear error."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import struct

import pytest

from seedance.errors import FrameError
from seedance.real.transport import BATCH, Connection


async def _pair(max_frame_bytes: int = 1 << 20) -> tuple[Connection, Connection]:
    left, right = socket.socketpair()
    key = os.urandom(32)
    a = Connection(*await asyncio.open_connection(sock=left), key, max_frame_bytes)
    b = Connection(*await asyncio.open_connection(sock=right), key, max_frame_bytes)
    await asyncio.gather(a.handshake(), b.handshake())
    return a, b


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_frames_already_read_are_handed_out_without_awaiting():
    async def go():
        a, b = await _pair()
        a.writer.write(b"".join(a.encode("msg", 0, {"n": i}) for i in range(50)))  # 50 frames, one write
        await a.writer.drain()
        await asyncio.sleep(0.05)  # all of them are in the socket now
        first = await b.recv()  # one read brings every frame in
        rest = []
        while (frame := b.next_frame()) is not None:
            rest.append(frame)
        a.close(), b.close()
        return first, rest

    first, rest = _run(go())
    assert first.message == {"n": 0} and [f.message["n"] for f in rest] == list(range(1, 50))


def test_a_frame_arriving_byte_by_byte_still_decodes():
    async def go():
        a, b = await _pair()
        data = a.encode("msg", 3, ["x" * 100, 1])
        reader = asyncio.ensure_future(b.recv())
        for i in range(len(data)):
            a.writer.write(data[i:i + 1])
            await a.writer.drain()
            await asyncio.sleep(0)
        frame = await reader
        a.close(), b.close()
        return frame

    frame = _run(go())
    assert (frame.kind, frame.src, frame.message) == ("msg", 3, ["x" * 100, 1])


def test_messages_of_one_turn_travel_as_one_batch_frame_in_order():
    async def go():
        a, b = await _pair()
        for i in range(10):
            a.send_soon("req", i, [i, "v"])
        a.send_soon("rep", -1, None)
        await asyncio.sleep(0.05)
        frames = [await b.recv() for _ in range(11)]
        a.close(), b.close()
        return frames, b._recv_seq

    frames, frames_on_the_wire = _run(go())
    assert [(f.kind, f.src, f.message) for f in frames] == [("req", i, [i, "v"]) for i in range(10)] + [
        ("rep", -1, None)]
    assert frames_on_the_wire == 1  # one MAC, one sequence number for the whole turn


def test_a_message_too_large_for_a_frame_is_dropped_and_logged_the_rest_arrive(caplog):
    async def go():
        a, b = await _pair(max_frame_bytes=2048)
        a.send_soon("msg", 0, "small-1")
        a.send_soon("msg", 0, "x" * 4096)  # can never fit
        a.send_soon("msg", 0, "small-2")
        for i in range(20):  # together more than one frame holds: split into several batch frames
            a.send_soon("msg", 0, f"{i:04d}" + "y" * 300)
        await asyncio.sleep(0.05)
        frames = [await b.recv() for _ in range(22)]
        a.send_soon("msg", 0, "z" * 5000)  # alone in its turn
        await asyncio.sleep(0.05)
        a.send_soon("msg", 0, "after")
        last = await b.recv()
        a.close(), b.close()
        return frames, last, a.dropped_too_large, b._recv_seq

    with caplog.at_level(logging.WARNING, logger="seedance.real.transport"):
        frames, last, dropped, seq = _run(go())
    assert [f.message for f in frames[:2]] == ["small-1", "small-2"]
    assert [f.message[:4] for f in frames[2:]] == [f"{i:04d}" for i in range(20)]
    assert last.message == "after"
    assert dropped == 2
    assert seq > 2  # the 22 messages needed more than one 2 KiB frame
    assert caplog.text.count("dropping a 'msg' message") == 2


def test_send_of_a_too_large_frame_raises_and_uses_no_sequence_number():
    async def go():
        a, b = await _pair(max_frame_bytes=1024)
        with pytest.raises(FrameError, match="at most 1024"):
            a.encode("msg", 0, "x" * 2000)
        a.send_nowait("msg", 0, "fits")
        frame = await b.recv()  # seq 1: the refused frame used none
        a.close(), b.close()
        return frame

    assert _run(go()).message == "fits"


@pytest.mark.parametrize("items, match", [
    ([["msg", 0, 1], [BATCH, None, []]], "bad batch item"),
    ([["msg", 0]], "bad batch item"),
    ([[7, 0, 1]], "bad batch item"),
    ([], "without items"),
    ("nope", "without items"),
])
def test_bad_batch_frames_are_rejected_with_a_clear_error(items, match):
    async def go():
        a, b = await _pair()
        a.send_nowait(BATCH, None, items)  # authenticated, so only the batch's shape is wrong
        try:
            with pytest.raises(FrameError, match=match):
                await b.recv()
        finally:
            a.close(), b.close()

    _run(go())


def test_an_oversized_length_is_refused_before_its_body_and_eof_mid_frame_is_incomplete():
    async def go():
        a, b = await _pair(max_frame_bytes=1024)
        a.writer.write(struct.pack(">I", 1 << 30))  # no body follows
        await a.writer.drain()
        with pytest.raises(FrameError, match="oversized frame"):
            await b.recv()
        c, d = await _pair()
        c.writer.write(c.encode("msg", 0, "abc")[:-2])
        c.writer.write_eof()
        with pytest.raises(asyncio.IncompleteReadError):
            await d.recv()
        for conn in (a, b, c, d):
            conn.close()

    _run(go())


@pytest.mark.multiprocess
def test_a_raft_leader_drops_an_append_too_large_for_a_frame_logs_it_and_keeps_serving(tmp_path):
    from _real_helpers import child_env, client_pool, do
    from seedance.models.protocols.contract import Operation
    from seedance.real.launcher import LocalLauncher

    env = {**child_env(), "SEEDANCE_MAX_FRAME_BYTES": "4096"}
    with LocalLauncher(protocol="raft", num_nodes=3, run_dir=tmp_path, seed=1, config={}, extra_env=env) as launch:
        launch.start_all()
        launch.wait_ready()

        async def go():
            pool = client_pool(launch, clients=2)
            pool.workload = dataclasses.replace(pool.workload, op_timeout_s=1.5)
            pool.max_frame_bytes = 4096  # the nodes' limit: the two requests leave as two frames
            try:
                small = None
                for _ in range(40):  # until there is a leader
                    small = await do(pool, Operation.WRITE, "k", 1)
                    if small[0] == "ok":
                        break
                # two requests of one turn: one AppendEntries of two 3,000-byte entries, larger than a frame
                big = await asyncio.gather(do(pool, Operation.WRITE, "a", "x" * 3000, client=0),
                                           do(pool, Operation.WRITE, "b", "y" * 3000, client=1))
                return small, big
            finally:
                await pool.close()

        small, big = asyncio.run(go())
        assert small == ("ok", None)
        assert all(outcome in ("info", "ok") for outcome, _ in big)  # never an error, never a crash
        logs = "".join((tmp_path / f"node-{rank}.log").read_text() for rank in range(3))
        assert "dropping a 'msg' message" in logs and "at most 4096" in logs
        assert all(launch.alive(rank) for rank in range(3))
        assert " ERROR " not in logs  # no node failed
