"""
A job's fork server on one host: ``python -m airflow_provider_horovod.runtime.rank.fork_server``.

A process that has imported what the job's ranks import first (torch, Horovod: the launcher's
:meth:`~airflow_provider_horovod.runtime.launchers.Launcher.preimports`) and forks a rank from that state when a
barrier task asks (:func:`~airflow_provider_horovod.runtime.task.fork_client.fork_rank`). A restarted attempt's rank
then starts in milliseconds instead of importing its framework again (about a second, on every restart, and on the
replacement executor after a lost one: on the path from the fault to the next trained step). This is the *zygote* or
*fork server* of Android and of Python's ``multiprocessing`` ``forkserver``, held across a job's attempts.

One per host and job, for a job that may restart (``max_restarts > 0``, not ``use_gpu``): a barrier task whose rank
has joined the others binds the job's abstract Unix socket (:func:`socket_name`; the first task on the host gets it)
and starts this module with that socket (:data:`ENV_LISTEN_FD`) and the job's fork key on its standard input.
It detaches at once (its own session; the task does not wait for it), so it outlives the executor that started it:
when that executor's JVM dies and the host's Spark worker starts a replacement, the restarted rank is forked here.
A lost machine takes its fork server with it (the next attempt imports as before), and so does a container manager
that kills an executor's whole process tree or control group (YARN, Kubernetes pods: separate network namespaces do
not share an abstract socket either).

Only processes of the same user presenting the job's fork key are served. A forked rank is the worker's
:func:`~airflow_provider_horovod.runtime.rank.worker.main` in a fresh session with the environment, working
directory and pipes the task sends; its exit status goes back to that task. The server ends when a task says the job
succeeded (:data:`END`, once its forked ranks have ended), or when for :data:`IDLE_EXIT_S` no task has held a
connection to it and no rank it forked has run.
"""

from __future__ import annotations

import contextlib
import gc
import hmac
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

FORK = "fork"
"""A request: fork a rank (``env``, ``cwd``, ``fd_vars``; the descriptors travel with it). Replies ``{"pid": n}``
(or ``{"error": ...}``), later ``{"status": code}`` (``subprocess``'s ``returncode``: negative for a signal)."""
HOLD = "hold"
"""A request: a task of the job runs on this host; the connection is held until the task ends (no reply)."""
END = "end"
"""A request: the job succeeded; fork nothing more and exit once every forked rank has ended (no reply)."""

ENV_LISTEN_FD = "HOROVOD_AIRFLOW_FORK_SERVER_FD"
"""The listening socket's descriptor, inherited from the task that bound it."""
IDLE_EXIT_S = 60.0
"""Seconds without a task holding a connection and without a running forked rank after which the server exits: a
restart's tasks connect within seconds of the fault (after the back-off); a failed job's server goes after this."""
MAX_REQUEST_BYTES = 4 * 1024 * 1024
_HEADER = struct.Struct("!I")
_MAX_FDS = 8


def socket_name(key: str) -> str:
    """
    The abstract Unix socket (Linux) of the job whose fork key is ``key``: no file, gone with its last holder.

    :param key: the job's fork key (:attr:`~airflow_provider_horovod.runtime.wire.jobspec.JobSpec.fork_key`).
    """
    import hashlib

    return "\0airflow-provider-horovod-fork-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def send_request(sock: socket.socket, request: dict[str, Any], fds: list[int] | None = None) -> None:
    """
    Send one request (a length-prefixed JSON object) with ``fds`` attached to its first byte.

    :param sock: a connection to the server.
    :param request: the request (``op`` and ``key`` included).
    :param fds: file descriptors passed along (``SCM_RIGHTS``).
    """
    data = json.dumps(request).encode()
    frame = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [frame], fds or [])
    if sent < len(frame):
        sock.sendall(frame[sent:])


def _read_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request and its descriptors (closed here when the request is malformed)."""
    data, fds, _flags, _addr = socket.recv_fds(sock, 65536, _MAX_FDS)
    try:
        while len(data) < _HEADER.size:
            more = sock.recv(65536)
            if not more:
                raise ValueError("closed")
            data += more
        (size,) = _HEADER.unpack_from(data)
        if size > MAX_REQUEST_BYTES:
            raise ValueError("too large")
        while len(data) < _HEADER.size + size:
            more = sock.recv(65536)
            if not more:
                raise ValueError("closed")
            data += more
        request = json.loads(data[_HEADER.size : _HEADER.size + size])
        if not isinstance(request, dict):
            raise ValueError("not an object")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def _reply(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(json.dumps(message).encode() + b"\n")


def same_user(sock: socket.socket) -> bool:
    """
    Whether the process at the other end of the Unix socket ``sock`` runs as this process's user (``SO_PEERCRED``).

    :param sock: a connected Unix socket.
    """
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


class _Server:
    """The serve loop: one thread, a selector over the listening socket, the connections and the ranks' pidfds."""

    def __init__(self, listener: socket.socket, key: str) -> None:
        self._listener = listener
        self._key = key.encode()
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, ("accept", None))
        self._holds: set[socket.socket] = set()
        self._children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the asking task's connection)
        self._ending = False
        self._idle_since: float | None = time.monotonic()

    def serve(self) -> None:
        while True:
            busy = self._holds or self._children
            if self._ending and not self._children:
                return
            if busy:
                self._idle_since = None
            elif self._idle_since is None:
                self._idle_since = time.monotonic()
            timeout = None if busy else max(0.0, self._idle_since + IDLE_EXIT_S - time.monotonic())  # type: ignore[operator]
            events = self._selector.select(timeout)
            if not events and not (self._holds or self._children):
                return  # idle for IDLE_EXIT_S
            for selected, _mask in events:
                kind, value = selected.data
                if kind == "accept":
                    self._accept()
                elif kind == "request":
                    self._request(selected.fileobj)  # type: ignore[arg-type]
                elif kind == "hold":
                    self._held_until_closed(selected.fileobj)  # type: ignore[arg-type]
                elif kind == "child":
                    self._child_ended(value)

    def _accept(self) -> None:
        try:
            conn, _addr = self._listener.accept()
        except OSError:
            return
        if not same_user(conn):
            conn.close()
            return
        conn.settimeout(5.0)  # a request arrives whole at once; a client that stalls is dropped
        self._selector.register(conn, selectors.EVENT_READ, ("request", None))

    def _request(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        try:
            request, fds = _read_request(conn)
        except (OSError, ValueError):
            conn.close()
            return
        if not hmac.compare_digest(str(request.get("key", "")).encode(), self._key):
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        op = request.get("op")
        if op == HOLD:
            self._holds.add(conn)
            self._selector.register(conn, selectors.EVENT_READ, ("hold", None))
        elif op == END:
            self._ending = True
            conn.close()
        elif op == FORK and not self._ending:
            self._fork(conn, request, fds)
        else:
            for fd in fds:
                os.close(fd)
            _reply(conn, {"error": f"not served: {op!r}"})
            conn.close()

    def _held_until_closed(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            if conn.recv(4096):
                return  # nothing is expected on a held connection; its end is what counts
        self._selector.unregister(conn)
        self._holds.discard(conn)
        conn.close()

    def _fork(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        session_read, session_write = os.pipe()
        try:
            pid = os.fork()
        except OSError as err:
            for fd in (*fds, session_read, session_write):
                os.close(fd)
            _reply(conn, {"error": f"fork failed: {err}"})
            conn.close()
            return
        if pid == 0:  # the rank
            code = 1
            try:
                self._close_in_child(set(fds))
                conn.close()
                os.close(session_read)
                os.setsid()
                os.close(session_write)  # its session (and process group) exists: the task may kill the group now
                code = _become_rank(request, fds)
            except SystemExit as exit_:  # the worker's own end (it exits through exit_rank, so only from setup)
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:  # noqa: BLE001 - the rank's own errors are reported by the worker; this is setup
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        os.close(session_write)
        with contextlib.suppress(OSError):
            os.read(session_read, 1)  # end of file once the rank has its own session (or has died)
        os.close(session_read)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as err:  # it could not be watched (its status would be lost): the task starts its rank itself
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _reply(conn, {"error": f"cannot watch the forked rank: {err}"})
            conn.close()
            return
        self._children[pidfd] = (pid, conn)
        self._selector.register(pidfd, selectors.EVENT_READ, ("child", pidfd))
        conn.settimeout(None)
        _reply(conn, {"pid": pid})

    def _child_ended(self, pidfd: int) -> None:
        self._selector.unregister(pidfd)
        pid, conn = self._children.pop(pidfd)
        os.close(pidfd)
        try:
            _pid, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere: its status is lost
            code = 1
        _reply(conn, {"status": code})
        conn.close()

    def _close_in_child(self, keep: set[int]) -> None:
        """In a forked rank: close the server's sockets and pidfds (all but ``keep``, the rank's own descriptors)."""
        for key in list(self._selector.get_map().values()):
            if key.fd in keep:
                continue
            with contextlib.suppress(OSError):
                if isinstance(key.fileobj, socket.socket):
                    key.fileobj.close()  # the object too: a later finalizer must not close a reused number
                else:
                    os.close(key.fd)
        for _pid, waiting in self._children.values():  # the other ranks' tasks, waiting for their status
            waiting.close()
        with contextlib.suppress(OSError):
            self._selector.close()


def _become_rank(request: dict[str, Any], fds: list[int]) -> int:
    """
    In the forked child, in its own session: take the rank's standard streams, descriptors, directory, environment
    and import path, then run the worker as a freshly started rank would.

    :param request: the task's :data:`FORK` request: ``env`` (the rank's whole environment), ``cwd``, ``fd_vars``
        (for each passed descriptor the variable naming it; ``""`` for the output pipe, its stdout and stderr).
    :param fds: the passed descriptors, in ``fd_vars``' order.
    :return: the worker's exit status.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the server ignores it; a rank is interruptible
    env: dict[str, str] = dict(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for name, fd in zip(request["fd_vars"], fds, strict=True):
        if name == "":
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        else:
            os.set_inheritable(fd, True)  # as subprocess's pass_fds leaves them
            env[name] = str(fd)
    os.chdir(request["cwd"])
    before = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(env)
    _take_import_path(before, env.get("PYTHONPATH", ""), request["cwd"])
    _as_if_fresh(env)
    from airflow_provider_horovod.runtime.rank import worker

    worker.exit_rank(worker.main())
    return 0  # not reached: exit_rank ends the process


def _take_import_path(before: str, after: str, cwd: str) -> None:
    """
    Make ``sys.path`` a started rank's: its working directory first (``python -m`` puts it there), then its
    ``PYTHONPATH`` (its executor's own files) in place of this server's, then the rest (the standard library,
    site-packages).
    """
    import importlib

    old = {p for p in before.split(os.pathsep) if p}
    new = [p for p in after.split(os.pathsep) if p]
    rest = [p for p in sys.path[1:] if p not in old and p not in new]
    sys.path[:] = [cwd, *new, *rest]
    importlib.invalidate_caches()


def _as_if_fresh(env: dict[str, str]) -> None:
    """
    What a freshly started rank would have that a forked one inherits otherwise: its own random state (the ``random``
    module reseeds itself after a fork; NumPy's global generator does not) and the thread count its
    ``OMP_NUM_THREADS`` asks for (read by OpenMP when torch loaded, in the server).
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0 and torch.get_num_threads() != int(threads):
        torch.set_num_threads(int(threads))


def _preload() -> None:
    """Import what a rank of this job imports first, with the worker's guards in place before the imports bind."""
    from airflow_provider_horovod.runtime.launchers import HOROVOD
    from airflow_provider_horovod.runtime.rank.backends import rank_backend_for
    from airflow_provider_horovod.runtime.wire.protocol import ENV_LAUNCHER, ENV_PREIMPORT

    rank_backend_for(os.environ.get(ENV_LAUNCHER, HOROVOD)).preload()
    # the rank's own entry point and what it loads the function with: from this server's copy of the package, which
    # a forked rank keeps using (its executor's copy comes first on its sys.path for anything else)
    import airflow_provider_horovod.runtime.wire.payload  # noqa: F401
    from airflow_provider_horovod.runtime.rank.worker import import_ahead

    import_ahead(os.environ.get(ENV_PREIMPORT, ""))


def main() -> int:
    """Serve the job's ranks on this host (see the module's description); return the exit status."""
    key = sys.stdin.readline().strip()
    listener = socket.socket(fileno=int(os.environ.pop(ENV_LISTEN_FD)))
    if not key:
        return 2
    if os.fork():  # detach: the task that started this does not wait for it; init (or a subreaper) reaps it
        os._exit(0)
    os.chdir("/")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its ranks' statuses are waited for (SIG_IGN would drop them)
    try:
        os.close(os.pidfd_open(os.getpid()))  # a rank it forks is watched through a pidfd (Linux 5.3)
    except (OSError, AttributeError):
        return 0  # no server here: ranks start as processes, as without one
    _preload()
    # what is loaded now is shared by every rank forked from here: keep the collector off it, whose passes over these
    # objects in a rank would write to (and so copy) their pages
    gc.freeze()
    _Server(listener, key).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
