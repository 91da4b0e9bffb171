"""Transport security of the real backend: bad frames are rejected and logged, the node keeps running, and
nothing listens beyond 127.0.0.1 unless asked (README, "The real backend": Security).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from _real_helpers import launcher, listening_addresses, run_ops
from seedance.models.protocols.contract import ClientRequest, Operation
from seedance.models.wire import Codec
from seedance.real.transport import Connection, load_key, write_key_file
from seedance.errors import SpecError

pytestmark = pytest.mark.multiprocess


def _raw_session(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    hello = b""
    while len(hello) < 24:
        hello += sock.recv(24 - len(hello))
    assert hello[4:8] == b"SDH1"
    sock.sendall(struct.pack(">I", 20) + b"SDH1" + bytes(16))  # a well-formed hello of our own
    return sock


def _closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    finally:
        sock.close()


def _log_count(path, text: str) -> int:
    return path.read_text(errors="replace").count(text)


def _wait_log(path, text: str, count: int, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _log_count(path, text) < count:
        time.sleep(0.05)
    return _log_count(path, text)


def test_bad_frames_are_rejected_logged_and_survived(tmp_path):
    with launcher(tmp_path, nodes=1) as launch:
        launch.start_all()
        launch.wait_ready()
        address = launch.addresses.lookup(0)
        log = tmp_path / "node-0.log"

        # garbage bytes after the hello: a length, then noise that is no MAC'd payload
        sock = _raw_session(address)
        sock.sendall(struct.pack(">I", 40) + bytes(range(40)))
        assert _closed_by_peer(sock)
        assert _wait_log(log, "wrong HMAC", 1) == 1

        # an oversized frame is refused from its length alone
        sock = _raw_session(address)
        sock.sendall(struct.pack(">I", 1 << 31))
        assert _closed_by_peer(sock)
        assert _wait_log(log, "oversized frame", 1) >= 1

        # garbage instead of a hello
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _closed_by_peer(sock)
        assert _wait_log(log, "rejected frame", 3) >= 3

        async def attacks() -> None:
            codec = Codec(())
            request = codec.encode(ClientRequest(client_id=9, request_id=1, op=Operation.WRITE, key="k", value=1))
            # wrong key
            bad = await Connection.open(*address, key=b"\x01" * 32)
            bad.send_nowait("client", 9, None)
            await bad.writer.drain()
            with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
                await asyncio.wait_for(bad.recv(), 5)
            bad.close()
            # replay within a connection: the same bytes twice (sequence number not increasing)
            conn = await Connection.open(*address, key=launch.key)
            conn.send_nowait("client", 9, None)
            frame = conn.encode("req", 9, request)
            conn.writer.write(frame)
            await conn.writer.drain()
            reply = await asyncio.wait_for(conn.recv(), 5)
            assert codec.decode(reply.message).outcome.value == "ok"
            conn.writer.write(frame)
            await conn.writer.drain()
            with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
                await asyncio.wait_for(conn.recv(), 5)
            conn.close()
            # replay into a new connection (another nonce): the MAC no longer matches
            other = await Connection.open(*address, key=launch.key)
            other.writer.write(frame)
            await other.writer.drain()
            with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
                await asyncio.wait_for(other.recv(), 5)
            other.close()

        asyncio.run(attacks())
        assert _wait_log(log, "replayed or reordered", 1) == 1
        assert _wait_log(log, "wrong HMAC", 3) >= 3
        # the node is alive and still serves well-formed, authenticated requests
        assert launch.alive(0)
        assert run_ops(launch, [(Operation.WRITE, "k", 7), (Operation.READ, "k", None)]) == [("ok", None), ("ok", 7)]
        assert launch.key.hex() not in log.read_text()  # the run key is never logged


def test_nothing_listens_beyond_loopback_by_default(tmp_path):
    with launcher(tmp_path, nodes=2) as launch:
        launch.start_all()
        launch.wait_ready()
        for pid in launch.pids():
            addresses = listening_addresses(pid)
            assert addresses and all(host == "127.0.0.1" for host, _ in addresses), addresses
        import os

        mine = [a for a in listening_addresses(os.getpid()) if a[1] in {launch.store_port,
                                                                        *(p for _, p in launch.addresses.table)}]
        assert len(mine) == 3 and all(host == "127.0.0.1" for host, _ in mine), mine


def test_each_node_process_holds_only_its_own_listening_socket(tmp_path):
    """Sockets read from /proc/PID/fd, matched by inode against the LISTEN entries of /proc/net/tcp: a node process
    holds its own address and no peer's, also after a restart; the launcher holds every node's (for restarts)."""
    import os

    with launcher(tmp_path, nodes=3) as launch:
        launch.start_all()
        launch.wait_ready()
        table = launch.addresses.table
        for rank, node in launch.nodes.items():
            assert listening_addresses(node.process.pid) == [tuple(table[rank])], (rank, table)
        launch.kill(1)
        launch.spawn(1)
        launch.wait_ready()
        assert listening_addresses(launch.nodes[1].process.pid) == [tuple(table[1])]
        held = {port for _, port in listening_addresses(os.getpid())}
        assert {port for _, port in table} <= held


def test_widening_is_explicit(tmp_path):
    import os

    with launcher(tmp_path, nodes=1, bind_host="0.0.0.0") as launch:
        ports = {p for _, p in launch.addresses.table}
        mine = [a for a in listening_addresses(os.getpid()) if a[1] in ports]
        assert mine == [("0.0.0.0", next(iter(ports)))]


def test_key_file_must_be_private(tmp_path):
    path = write_key_file(tmp_path / "k", b"\x02" * 32)
    assert load_key({"SEEDANCE_KEY_FILE": str(path)}) == b"\x02" * 32
    path.chmod(0o644)
    with pytest.raises(SpecError, match="chmod 600"):
        load_key({"SEEDANCE_KEY_FILE": str(path)})
    with pytest.raises(SpecError):
        load_key({})
