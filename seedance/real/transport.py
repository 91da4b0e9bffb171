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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from seedance.errors import FrameError, SpecError

log = logging.getLogger("seedance.real.transport")

HELLO_MAGIC = b"SDH1"
NONCE_BYTES = 16
MAC_BYTES = 32
DEFAULT_MAX_FRAME_BYTES = 16 << 20
_LEN = struct.Struct(">I")

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


@dataclass
class Frame:
    kind: str  # "peer", "msg", "req", "rep", ...
    src: Any  # node id (int) or client id
    message: Any  # plain data (wire-encoded)


class Connection:
    """One authenticated, sequenced TCP connection (either side)."""

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
        self._out: list[bytes] = []  # frames of this event-loop turn (send_soon), written together at its end
        self._flush_scheduled = False
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

    async def _read_body(self, limit: int) -> bytes:
        header = await self.reader.readexactly(_LEN.size)
        (length,) = _LEN.unpack(header)
        if length > limit:
            raise FrameError("frame", f"oversized frame of {length} bytes from {self.peer}", f"at most {limit} bytes")
        return await self.reader.readexactly(length)

    def encode(self, kind: str, src: Any, message: Any) -> bytes:
        assert self.peer_nonce is not None, "handshake first"
        self._send_seq += 1
        payload = self._packer.pack([self._send_seq, kind, src, message])
        mac = hmac.digest(self._key, self.peer_nonce + payload, "sha256")  # one-shot: no HMAC object per frame
        body = mac + payload
        if len(body) > self.max_frame_bytes:
            raise FrameError("frame", f"outgoing frame of {len(body)} bytes", f"at most {self.max_frame_bytes}")
        return _LEN.pack(len(body)) + body

    async def send(self, kind: str, src: Any, message: Any) -> None:
        self.writer.write(self.encode(kind, src, message))
        await self.writer.drain()

    def send_nowait(self, kind: str, src: Any, message: Any) -> None:
        self.writer.write(self.encode(kind, src, message))

    def send_soon(self, kind: str, src: Any, message: Any) -> None:
        """Queue a frame; every frame queued in this event-loop turn goes out in one write (one syscall) at its
        end, in order. Many clients' requests (or a node's replies) of one turn share that write."""
        self._out.append(self.encode(kind, src, message))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        data, self._out = b"".join(self._out), []
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def decode(self, body: bytes) -> Frame:
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
        return Frame(kind=str(kind), src=src, message=message)

    async def recv(self) -> Frame:
        """The next authenticated frame; :class:`FrameError` on a bad one, ``IncompleteReadError`` on EOF."""
        return self.decode(await self._read_body(self.max_frame_bytes))

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the socket may already be gone
            pass


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")
