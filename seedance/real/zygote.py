"""A pre-imported parent that forks node processes on request, so a (re)start costs a fork, not a Python start-up.

Rules (the Android "zygote" / multiprocessing "forkserver" idea):

* Started by the local launcher with the listening sockets of every node (``pass_fds``, their numbers in
  ``SEEDANCE_NODE_FDS``). It imports the runtime and
  the protocol once, then reads JSON commands on stdin, one per line: ``{"spawn": rank, "env": {...}, "log": path}``.
  For each it forks; the child starts a new session, asks for SIGKILL when the zygote dies (``PR_SET_PDEATHSIG``),
  points stdout/stderr at ``log``, updates ``os.environ`` with ``env`` (torchrun's variables) and runs the node's
  ``main``; it leaves with ``os._exit``. The zygote answers ``{"pid": pid}``. A child closes every node's listening
  socket but its own (``SEEDANCE_LISTEN_FD``) before it runs: a node process holds one listening socket, so a node
  that leaks or is compromised cannot accept on a peer's address; the zygote keeps them all for restarts.
* The zygote is single-threaded and never starts an event loop or imports torch, so forking it is safe. It reaps its
  children and reports ``{"exit": pid, "code": status}`` (a negative status is the killing signal), so the
  launcher can tell a SIGKILL it sent from a node that failed on its own.
* The zygote itself asks for SIGKILL when the launcher dies: no orphans at any level.
* It reaps as soon as a child dies: SIGCHLD wakes its ``select`` through a self-pipe (``signal.set_wakeup_fd``), so
  the launcher learns of a SIGKILLed node within milliseconds, not at the next poll.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys

NODE_FDS_ENV = "SEEDANCE_NODE_FDS"  # the listening sockets the zygote holds, comma-separated fd numbers

def _child(env: dict[str, str], log_path: str, wakeup: tuple[int, int]) -> None:
    from seedance.real import node

    os.setsid()
    signal.set_wakeup_fd(-1)
    for fd in wakeup:
        os.close(fd)
    os.environ.update(env)
    _close_other_listeners(env.get("SEEDANCE_LISTEN_FD"))
    node.set_parent_death_signal()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 1
    try:
        code = node.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a bug in the node: keep its traceback in the node's log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _close_other_listeners(own: str | None) -> None:
    """Close the listening sockets of the other nodes (inherited through the fork); keep ``own``."""
    for fd in os.environ.get(NODE_FDS_ENV, "").split(","):
        if fd and fd != own:
            try:
                os.close(int(fd))
            except OSError:
                pass


def _reap(out) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        out.write(json.dumps({"exit": pid, "code": code}) + "\n")
        out.flush()


def main() -> int:
    from seedance.real import node

    node.set_parent_death_signal()
    # warm the imports every child needs (the protocol too), so a fork starts serving at once
    import seedance.real.runtime  # noqa: F401

    protocol = os.environ.get("SEEDANCE_PROTOCOL")
    if protocol:
        node.resolve_protocol(protocol)
    # the imported modules live as long as every child: frozen, no child's collections scan them again (and the
    # pages they sit on stay shared after the fork instead of being copied when a collection touches them)
    gc.collect()
    gc.freeze()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints go to stderr, never into the command channel
    stdin = sys.stdin.buffer
    buffer = b""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the wakeup fd is written
    signal.set_wakeup_fd(wake_w)
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    while True:
        readable, _, _ = select.select([stdin, wake_r], [], [], 0.05)
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        _reap(out)
        if stdin not in readable:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:  # the launcher closed the channel; any child left gets SIGKILL from PR_SET_PDEATHSIG
            _reap(out)
            out.flush()
            os._exit(0)  # nothing to clean up: skip the interpreter's slow teardown
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            command = json.loads(line)
            env = dict(command["env"], SEEDANCE_PARENT_PID=str(os.getpid()))
            pid = os.fork()
            if pid == 0:
                out.close()
                _child(env, command["log"], (wake_r, wake_w))
            out.write(json.dumps({"pid": pid, "rank": command["spawn"]}) + "\n")
            out.flush()


if __name__ == "__main__":
    sys.exit(main())
