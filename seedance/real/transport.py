"""Authenticated frames over TCP between node processes and clients (asyncio streams).

Rules (bind to 127.0.0.1 by default, authenticate every peer, never unpickle; RFC 2104 HMAC; Bellare, Kohno &
Namprempre 2004 on sequence numbers against replay):

* A frame is ``[u32 big-endian length][body]``. A length above ``max_frame_bytes`` is rejected *before* reading the
  body. Never pickle: bodies are msgpack of plain data (:mod:`seedance.models.wire`).
* Handshake: each side first sends ``hello = b"SDH1" + 16 random bytes`` (its *nonce*, fresh per connection, so a
  restarted process has a new one). Every later body is ``HMAC-SHA256(key, peer_nonce || payload) || payload``
  where ``payload = msgpack([seq, kind, src, message])`` and ``seq`` counts 1, 2, 3, ... per direction. The MAC binds a
  frame to the receiver's nonce of *this* connection, so a frame replayed into another connection fails the MAC;
  within one, a frame whose ``seq`` is not the next one (a replay or reorder) is rejected.
* Batches: the messages one side queues in one event-loop turn (``send_soon``) travel as one frame of kind
  ``"batch"`` whose message is a list of ``[kind, src, message]`` items: one MAC and one sequence number for all of
  them. The receiver hands them out one by one as if they had come as frames; a batch inside a batch is rejected.
  A message too large for one frame is dropped and logged (sends are lossy), never raised at the sender.
* Reading is buffered: one read brings in every frame the socket holds; frames already in are handed out without
  awaiting (``next_frame``).
* The key is per run (32 random bytes made by the launcher; passed in a 0600 file or the environment); it is never
  logged or put in a frame.
* Any rejected frame (garbage, wrong HMAC, replay, oversize, undecodable) raises :class:`FrameError`; the server side
  logs it, counts it and drops that connection. The node keeps running.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from seedance.errors import FrameError, SpecError

log = logging.getLogger("seedance.real.transport")


class FrameTooLarge(FrameError):
    """An outgoing message does not fit in one frame (``max_frame_bytes``)."""

HELLO_MAGIC = b"SDH1"
NONCE_BYTES = 16
MAC_BYTES = 32
DEFAULT_MAX_FRAME_BYTES = 16 << 20
_LEN = struct.Struct(">I")
BATCH = "batch"  # a frame whose message is a list of [kind, src, message] items, one MAC for them all

KEY_ENV = "SEEDANCE_KEY"  # hex; SEEDANCE_KEY_FILE (a 0600 file holding the hex key) is preferred
KEY_FILE_ENV = "SEEDANCE_KEY_FILE"


def new_key() -> bytes:
    return secrets.token_bytes(32)


def write_key_file(path: Path, key: bytes) -> Path:
    """Write ``key`` (hex) to ``path`` with mode 0600 from the start (no window where others can read it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex())
    return path


def load_key(environ: dict[str, str] | None = None) -> bytes:
    env = os.environ if environ is None else environ
    if env.get(KEY_FILE_ENV):
        path = Path(env[KEY_FILE_ENV])
        try:
            mode = path.stat().st_mode & 0o777
            text = path.read_text().strip()
        except OSError as err:
            raise SpecError(KEY_FILE_ENV, f"cannot read key file: {err.strerror}", "a readable 0600 file") from None
        if mode & 0o077:
            raise SpecError(KEY_FILE_ENV, f"key file {path} has mode {mode:o}", "chmod 600 it")
    elif env.get(KEY_ENV):
        text = env[KEY_ENV]
    else:
        raise SpecError(KEY_FILE_ENV, "no run key given", f"set {KEY_FILE_ENV} (0600 file) or {KEY_ENV} (hex)")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise SpecError(KEY_FILE_ENV, "the run key is not hex", "64 hex digits") from None
    if len(key) < 16:
        raise SpecError(KEY_FILE_ENV, f"run key of {len(key)} bytes is too short", "at least 16 bytes") from None
    return key


@dataclass(slots=True)
class Frame:
    kind: str  # "peer", "msg", "req", "rep", ...
    src: Any  # node id (int) or client id
    message: Any  # plain data (wire-encoded)


class Connection:
    """One authenticated, sequenced TCP connection (either side).

    Reading is buffered: one ``recv`` syscall brings in as many frames as the socket holds, and :meth:`next_frame`
    hands them out without awaiting. Writing: :meth:`send_soon` queues messages; at the end of the event-loop turn
    they leave as one frame (a ``batch`` frame of ``[kind, src, message]`` items when there are several: one MAC,
    one sequence number, one write). A message too large for one frame is dropped and logged, never raised at the
    caller (sends are lossy; :attr:`dropped_too_large` counts them)."""

    READ_CHUNK = 1 << 18

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: bytes,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.reader, self.writer = reader, writer
        self._key = key
        self.max_frame_bytes = max_frame_bytes
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.peer_nonce: bytes | None = None
        self._send_seq = 0
        self._recv_seq = 0
        self._packer = msgpack.Packer(use_bin_type=True)
        self._soon: list[tuple[str, Any, Any]] = []  # messages of this event-loop turn (send_soon), sent at its end
        self._flush_scheduled = False
        self._buf = bytearray()  # bytes read but not yet framed
        self._pos = 0  # where the next frame starts in _buf
        self._ready: deque[Frame] = deque()  # decoded frames not yet handed out (the rest of a batch)
        self.dropped_too_large = 0
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    @classmethod
    async def open(cls, host: str, port: int, key: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                   timeout_s: float = 2.0) -> Connection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=max_frame_bytes + 64), timeout_s)
        conn = cls(reader, writer, key, max_frame_bytes)
        try:
            await asyncio.wait_for(conn.handshake(), timeout_s)
        except BaseException:
            conn.close()
            raise
        return conn

    async def handshake(self) -> None:
        self.writer.write(_LEN.pack(len(HELLO_MAGIC) + NONCE_BYTES) + HELLO_MAGIC + self.nonce)
        await self.writer.drain()
        raw = await self._read_body(limit=len(HELLO_MAGIC) + NONCE_BYTES)
        if len(raw) != len(HELLO_MAGIC) + NONCE_BYTES or not raw.startswith(HELLO_MAGIC):
            raise FrameError("frame", f"bad hello from {self.peer}", "b'SDH1' + 16-byte nonce")
        self.peer_nonce = raw[len(HELLO_MAGIC):]

    # ------------------------------------------------------------------------------------------------ reading
    def _buffered_body(self, limit: int) -> bytes | None:
        """The next whole body in the read buffer (None if it is not all there yet); an oversized length is
        rejected as soon as its header is in, before its body is read."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < _LEN.size:
            return None
        (length,) = _LEN.unpack_from(buf, pos)
        if length > limit:
            raise FrameError("frame", f"oversized frame of {length} bytes from {self.peer}", f"at most {limit} bytes")
        end = pos + _LEN.size + length
        if len(buf) < end:
            return None
        body = bytes(buf[pos + _LEN.size:end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 1 << 16 and end > len(buf) // 2:  # drop what was consumed, now and then (not per frame)
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return body

    async def _fill(self) -> None:
        data = await self.reader.read(self.READ_CHUNK)
        if not data:
            raise asyncio.IncompleteReadError(bytes(self._buf[self._pos:]), None)
        self._buf += data

    async def _read_body(self, limit: int) -> bytes:
        while True:
            body = self._buffered_body(limit)
            if body is not None:
                return body
            await self._fill()

    def next_frame(self) -> Frame | None:
        """The next frame already received (a batch's next item, or a whole frame in the read buffer), without
        awaiting; None when the socket must be read first. Raises :class:`FrameError` on a bad frame."""
        if self._ready:
            return self._ready.popleft()
        body = self._buffered_body(self.max_frame_bytes)
        if body is None:
            return None
        frame = self.decode(body)
        if frame.kind != BATCH:
            return frame
        self._ready.extend(frame.message)
        return self._ready.popleft()

    async def recv(self) -> Frame:
        """The next authenticated frame; :class:`FrameError` on a bad one, ``IncompleteReadError`` on EOF."""
        while True:
            frame = self.next_frame()
            if frame is not None:
                return frame
            await self._fill()

    # ------------------------------------------------------------------------------------------------ writing
    def _seal(self, kind: str, src: Any, message: Any) -> bytes:
        """One frame for ``message``; :class:`FrameTooLarge` (and no sequence number used) if it does not fit."""
        assert self.peer_nonce is not None, "handshake first"
        payload = self._packer.pack([self._send_seq + 1, kind, src, message])
        if len(payload) + MAC_BYTES > self.max_frame_bytes:
            raise FrameTooLarge("frame", f"outgoing frame of {len(payload) + MAC_BYTES} bytes",
                                f"at most {self.max_frame_bytes}")
        self._send_seq += 1
        mac = hmac.digest(self._key, self.peer_nonce + payload, "sha256")  # one-shot: no HMAC object per frame
        return _LEN.pack(len(payload) + MAC_BYTES) + mac + payload

    def encode(self, kind: str, src: Any, message: Any) -> bytes:
        return self._seal(kind, src, message)

    async def send(self, kind: str, src: Any, message: Any) -> None:
        self.writer.write(self.encode(kind, src, message))
        await self.writer.drain()

    def send_nowait(self, kind: str, src: Any, message: Any) -> None:
        self.writer.write(self.encode(kind, src, message))

    def encode_many(self, items: list[tuple[str, Any, Any]]) -> list[bytes]:
        """``items`` (kind, src, message) as few frames as fit: one frame for one item, else ``batch`` frames,
        halved until each fits; an item too large on its own is dropped and logged."""
        if len(items) == 1:
            try:
                return [self._seal(*items[0])]
            except FrameTooLarge as err:
                self.dropped_too_large += 1
                log.warning("dropping a %r message to %s: %s", items[0][0], self.peer, err)
                return []
        try:
            return [self._seal(BATCH, None, items)]
        except FrameTooLarge:
            half = len(items) // 2
            return self.encode_many(items[:half]) + self.encode_many(items[half:])

    def write_many(self, items: list[tuple[str, Any, Any]]) -> int:
        """Write ``items`` now in one write (see :meth:`encode_many`); returns the bytes written."""
        frames = self.encode_many(items)
        if not frames:
            return 0
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self.writer.write(data)
        return len(data)

    def send_soon(self, kind: str, src: Any, message: Any) -> None:
        """Queue a message; every message queued in this event-loop turn goes out at its end in one frame (one
        MAC) and one write (one syscall), in order. Many clients' requests (or a node's replies) of one turn
        share it."""
        self._soon.append((kind, src, message))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        items, self._soon = self._soon, []
        if items and not self.writer.is_closing():
            self.write_many(items)

    def decode(self, body: bytes) -> Frame:
        """One frame's body; a ``batch`` frame comes back with its items as a list of :class:`Frame`."""
        if len(body) <= MAC_BYTES:
            raise FrameError("frame", f"short frame of {len(body)} bytes from {self.peer}", "a MAC and a payload")
        mac, payload = body[:MAC_BYTES], body[MAC_BYTES:]
        expected = hmac.digest(self._key, self.nonce + payload, "sha256")
        if not hmac.compare_digest(mac, expected):
            raise FrameError("frame", f"wrong HMAC from {self.peer}", "frames signed with this run's key")
        try:
            seq, kind, src, message = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as err:  # authenticated but undecodable: a bug or key leak; still just a bad frame
            raise FrameError("frame", f"undecodable payload from {self.peer}: {err}", "msgpack [seq, kind, src, msg]")
        if not isinstance(seq, int) or seq != self._recv_seq + 1:
            raise FrameError("frame", f"replayed or reordered frame from {self.peer}: seq {seq}, "
                             f"expected {self._recv_seq + 1}", "strictly increasing sequence numbers")
        self._recv_seq = seq
        if kind == BATCH:
            return Frame(kind=BATCH, src=None, message=self._batch_items(message))
        return Frame(kind=str(kind), src=src, message=message)

    def _batch_items(self, items: Any) -> list[Frame]:
        if not isinstance(items, list) or not items:
            raise FrameError("frame", f"batch frame from {self.peer} without items", "a list of [kind, src, message]")
        frames = []
        for item in items:
            if not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str) or item[0] == BATCH:
                raise FrameError("frame", f"bad batch item from {self.peer}: {str(item)[:60]}",
                                 "[kind, src, message] with kind a string other than 'batch'")
            frames.append(Frame(item[0], item[1], item[2]))
        return frames

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the socket may already be gone
            pass


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")
