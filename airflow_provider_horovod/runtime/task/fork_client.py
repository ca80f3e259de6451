"""
A barrier task's side of its job's fork server on the host
(:mod:`~airflow_provider_horovod.runtime.rank.fork_server`): :func:`fork_rank` starts a rank from it when there is
one, :class:`ForkServerLink` starts one once the task's rank has joined the others, holds it while the task runs,
and tells it when the job succeeded.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO

from airflow_provider_horovod.runtime.rank.fork_server import (
    END,
    ENV_LISTEN_FD,
    FORK,
    HOLD,
    same_user,
    send_request,
    socket_name,
)
from airflow_provider_horovod.runtime.task.plan import child_environ
from airflow_provider_horovod.runtime.wire.protocol import ENV_LAUNCHER, ENV_PREIMPORT

FORK_SERVER_MODULE = "airflow_provider_horovod.runtime.rank.fork_server"
REPLY_TIMEOUT_S = 5.0
"""Seconds a task waits for the fork server's reply to a fork request before it starts the rank itself."""


class ForkedProcess:
    """
    A rank forked by the fork server, with what :class:`~.rank_process.RankProcess` uses of ``subprocess.Popen``:
    ``pid``, ``stdout`` (the read end of the rank's output pipe), ``wait()`` and ``returncode``. The rank is the
    server's child, not this process's: its exit status comes over the request's connection.

    :param pid: the rank's process id (its process group too: it runs in its own session).
    :param conn: the request's connection, on which the status comes.
    :param stdout: the read end of the rank's stdout and stderr.
    """

    def __init__(self, pid: int, conn: socket.socket, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._conn = conn
        self._done = threading.Event()
        threading.Thread(target=self._status, name=f"forked-rank-{pid}", daemon=True).start()

    def _status(self) -> None:
        code = None
        try:
            with self._conn:
                line = _read_line(self._conn)
            code = int(json.loads(line)["status"]) if line else None
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if code is None:  # the server went first: wait for the rank's own end, whose status is then unknown
            try:
                pidfd = os.pidfd_open(self.pid)
            except OSError:
                pidfd = None  # gone already (or no pidfds here: the server would not have forked it)
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    select.select([pidfd], [], [])
                os.close(pidfd)
            code = 1  # not known: reported as a failure, with whatever error file the rank wrote
        self.returncode = code
        self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        """
        Wait for the rank's exit; return its status (``subprocess``'s convention: negative for a signal).

        :param timeout: seconds; ``None``: no limit.
        :raises subprocess.TimeoutExpired: not ended within ``timeout``.
        """
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


def _read_line(conn: socket.socket) -> bytes:
    """One reply line, read without a buffer (what follows it is another reader's); ``b""`` at end of file."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            return b""
        line += byte
    return bytes(line)


class Unanswered(Exception):  # noqa: N818 - an outcome, not a failure of the caller's
    """The fork request went out but no rank came back in time: a late fork may still take the descriptors sent."""


def _connect(key: str) -> socket.socket | None:
    """A connection to the job's fork server on this host, run by this user; ``None`` when there is none."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        conn.connect(socket_name(key))
        if same_user(conn):
            return conn
    except OSError:
        pass
    conn.close()  # none, or another user's process holds the job's socket name: send it nothing
    return None


def fork_rank(key: str, env: Mapping[str, str], cwd: str, fds: Mapping[str, int]) -> ForkedProcess | None:
    """
    Ask the job's fork server on this host to fork a rank; ``None`` when there is none, or it refused (nothing was
    forked): the caller starts the rank itself.

    :param key: the job's fork key.
    :param env: the rank's whole environment (as it would be started with).
    :param cwd: its working directory.
    :param fds: the descriptors it inherits, by the variable that names each one (they stay open here; the rank gets
        copies).
    :return: the forked rank, whose stdout and stderr go to a new pipe (:attr:`ForkedProcess.stdout`).
    :raises Unanswered: the request went out but no answer came within :data:`REPLY_TIMEOUT_S`: start the rank on
        new descriptors.
    """
    conn = _connect(key)
    if conn is None:
        return None
    read_end, write_end = os.pipe()
    try:
        names = ["", *fds]
        send_request(
            conn,
            {"op": FORK, "key": key, "env": dict(env), "cwd": cwd, "fd_vars": names},
            [write_end, *fds.values()],
        )
        line = _read_line(conn)
    except OSError as err:
        os.close(read_end)
        conn.close()
        raise Unanswered(str(err)) from err
    finally:
        os.close(write_end)
    try:
        pid = int(json.loads(line)["pid"])
    except (ValueError, KeyError, TypeError):  # refused ({"error": ...}), nothing forked; or closed without a word
        os.close(read_end)
        conn.close()
        if not line:
            raise Unanswered("the fork server closed the connection") from None
        return None
    conn.settimeout(None)
    return ForkedProcess(pid, conn, os.fdopen(read_end, "rb"))


def server_environ(rank_env: Mapping[str, str]) -> dict[str, str]:
    """
    The fork server's environment: a rank's, without its identity (rank, world, rendezvous, pipes, files), with its
    launcher and the modules it imports first. What torch and Horovod read when they load (``OMP_NUM_THREADS``, the
    job's ``env``) is as the rank had it.

    :param rank_env: the environment the task's own rank started with (a deferred one's: it names the imports).
    """
    keep = {name: rank_env.get(name, "") for name in (ENV_LAUNCHER, ENV_PREIMPORT)}
    return child_environ(rank_env, keep, [])


class ForkServerLink:
    """
    While a barrier task runs: once ``joined()`` says its rank has joined the others, start the job's fork server on
    this host unless there is one, and hold a connection to it until the task ends (it keeps the server up);
    :meth:`job_succeeded` tells it to go. Best effort: without a server, ranks start as processes of their own.

    :param key: the job's fork key.
    :param environ: the server's environment (:func:`server_environ`).
    :param joined: blocks until the rank has joined (``True``) or ended without (``False``).
    """

    def __init__(self, key: str, environ: Mapping[str, str], joined: Callable[[], bool]) -> None:
        self._key = key
        self._environ = dict(environ)
        self._joined = joined
        self._lock = threading.Lock()
        self._hold: socket.socket | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="horovod-fork-server", daemon=True)

    def __enter__(self) -> ForkServerLink:
        self._thread.start()
        return self

    def _run(self) -> None:
        if not self._joined():
            return
        try:
            self._start_unless_running()
            conn = _connect(self._key)
            if conn is None:
                return
            send_request(conn, {"op": HOLD, "key": self._key})
        except OSError:
            return
        with self._lock:
            if self._closed:
                conn.close()
            else:
                self._hold = conn

    def _start_unless_running(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(socket_name(self._key))  # the first task on this host to bind it starts the server
        except OSError:
            listener.close()
            return  # there is one
        with listener:
            listener.listen(64)
            env = {**self._environ, ENV_LISTEN_FD: str(listener.fileno())}
            server = subprocess.Popen(
                [sys.executable, "-m", FORK_SERVER_MODULE],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),),
                start_new_session=True,
                cwd="/",
            )
            assert server.stdin is not None
            with server.stdin:
                server.stdin.write(self._key.encode() + b"\n")  # not on its command line or in its environment
            server.wait()  # it detaches at once: this reaps the process that started the server

    def job_succeeded(self) -> None:
        """Tell the server the job succeeded: it forks nothing more and exits once its ranks have ended."""
        conn = _connect(self._key)
        if conn is None:
            return  # none on this host
        with conn, contextlib.suppress(OSError):
            send_request(conn, {"op": END, "key": self._key})

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._closed = True
            hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()
