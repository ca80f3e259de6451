"""
A small authenticated channel that carries rank output (and the ranks' ``report()`` records and failure reports)
from the executors to the driver.

Executors may run on other machines than the driver, so output cannot be read from a local pipe. The
driver listens on its own address (``spark.driver.host``); each barrier task connects, proves it belongs
to this job with a per-job token (compared in constant time), then sends length-prefixed UTF-8 lines.
The channel is best effort: a task that cannot reach it keeps its full copy in the executor's stderr and
training goes on.

The other way, from the driver to a task, there is one message: :func:`stop_message`, which the driver sends
(:meth:`LogServer.tell`) to the tasks that opened a :class:`ControlListener` (rank 0's task) when the attempt should
end at its next checkpoint and start again: all ``np`` slots are free again for an attempt with fewer ranks, or an
executor of the attempt is being decommissioned. A listener is a connection of its own, so the log connection stays
one-way (:meth:`LogClient.wait_closed` reads its readability as its close).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import selectors
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from airflow_provider_horovod.runtime.bounds import MAX_LINE_CHARS

_LEN = struct.Struct(">I")
_FAILURE_PREFIX = "\x00failure "
_METRICS_PREFIX = "\x00metrics "
_HEARTBEAT_PREFIX = "\x00heartbeat "
_GATHER_PREFIX = "\x00gather "
_CONTROL = "\x00control"
"""The first frame after the token of a :class:`ControlListener`'s connection."""
STOP = "stop"
"""The first word of the driver's message to rank 0's task: stop after the next checkpoint, so that the job starts
again from it (:func:`stop_message`, :func:`stop_reason`)."""


def stop_message(reason: str) -> str:
    """
    The driver's message that stops an attempt at its next checkpoint, with why (``all np=4 task slots are free
    again``, ``executor 3 on 10.0.0.9 is being decommissioned``).

    :param reason: why, in a few words for the task log.
    """
    return f"{STOP} {reason}"


def stop_reason(message: str) -> str | None:
    """
    The reason in a :func:`stop_message`.

    :param message: a message the driver sent.
    :return: the reason (``""`` when it gave none), or ``None`` for any other message.
    """
    if message == STOP or message.startswith(STOP + " "):
        return message[len(STOP) :].strip()
    return None


GATHER_WAIT_S = 15.0
"""Seconds the driver waits, from a gather's first part, for every task's (:meth:`LogClient.gather`) before it tells
them all to gather with Spark's ``allGather`` instead: a barrier stage's tasks are launched at once, and one that
cannot reach the driver's channel has given up on it after its connect timeout (10 s)."""
HEARTBEAT_INTERVAL_S = 2.0
"""How often a barrier task sends its heartbeat while its rank runs, seconds (:class:`Heartbeats`)."""
MAX_FRAME_CHARS = MAX_LINE_CHARS + 1024
"""Longer lines are truncated before they are sent: the launchers cut rank output at
:data:`~airflow_provider_horovod.runtime.bounds.MAX_LINE_CHARS` with a note first (the executor's stderr keeps them
whole); this is the channel's own last bound (a rank prefix and the note fit)."""
_MAX_FRAME = 1 << 20


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, _LEN.size)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > _MAX_FRAME:
        return None
    return _read_exact(sock, size)


class LogServer:
    """
    Receives rank output lines and hands them to ``on_line`` (by default: prints them to stdout).

    Use as a context manager; ``address`` and ``token`` are what tasks need to connect. Closing waits for
    every connected task to finish sending, so no line that a finished task sent is lost; a
    :class:`ControlListener`'s connection is closed instead (it only ever receives).

    :param host: the address to listen on (the driver's address, e.g. ``spark.driver.host``).
    :param on_line: called with each received line (thread-safe: calls are serialized).
    :param stream: where the default ``on_line`` prints (default: ``sys.stdout``).
    :param on_metrics: called with each ``report()`` record a task sent (serialized with ``on_line``); without it
        they are dropped.
    :param on_heartbeat: called with each heartbeat a task sent (:class:`Heartbeats`), and with
        ``{"task": ..., "ended": True}`` when the connection of a task that sent one closes; not serialized with the
        others (it must not wait behind a slow ``on_line``).
    """

    def __init__(
        self,
        host: str,
        on_line: Callable[[str], None] | None = None,
        stream: TextIO | None = None,
        on_metrics: Callable[[dict], None] | None = None,
        on_heartbeat: Callable[[dict], None] | None = None,
    ) -> None:
        self.token = secrets.token_hex(16)
        self._host = host
        self._stream = stream
        self._on_line = on_line or self._print
        self._on_metrics = on_metrics
        self._on_heartbeat = on_heartbeat
        self._lock = threading.Lock()
        self._open: dict[socket.socket, bool] = {}  # each connected task's socket -> it sent a failure report
        self._open_changed = threading.Condition()
        self.drain_timeout_s: float | None = None
        """``None`` (default): closing waits for every connected task to close its connection. Seconds: closing
        waits at most that long, and only for tasks that sent no failure report yet; then it closes their
        connections itself. Set once the stage has failed: a bystander task that reported waits out a grace
        before Spark kills it, and the job's error should not wait for that."""
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self.failures: list[dict] = []
        """Failure reports sent by tasks (complete once the server is closed)."""
        self.accepted = 0
        """Connections that presented the job's token so far (a barrier task connects with its first heartbeat, as
        it starts; a :class:`ControlListener` counts too)."""
        self._controls: set[socket.socket] = set()  # the ControlListeners' connections
        self._closing = False
        self._gathering: dict[int, tuple[socket.socket, Any]] = {}  # task -> (its connection, what it sent)
        self._gather_fell_back = False  # the tasks were told to gather with Spark (all of them, late ones too)
        self._gather_timer: threading.Timer | None = None

    def _opened(self, sock: socket.socket, reported: bool | None) -> None:
        """A task's connection opened (``False``), sent its failure report (``True``), or closed (``None``)."""
        with self._open_changed:
            if reported is None:
                self._open.pop(sock, None)
            else:
                self._open[sock] = reported
            self._open_changed.notify_all()

    def _listen(self, sock: socket.socket) -> None:
        """Keep a :class:`ControlListener`'s connection for :meth:`tell` until it closes (not drained on exit)."""
        self._opened(sock, reported=None)
        with self._open_changed:
            if self._closing:
                return
            self._controls.add(sock)
        try:
            while _read_frame(sock) is not None:  # it sends nothing more: this returns when it closes
                pass
        except OSError:
            pass
        finally:
            with self._open_changed:
                self._controls.discard(sock)

    def _gather(self, sock: socket.socket, request: dict) -> None:
        """
        A task's part of :meth:`LogClient.gather`: once all ``of`` tasks sent theirs, each gets them all. When they
        have not all come within :data:`GATHER_WAIT_S` of the first (a task that cannot reach this channel gathers
        with Spark), every task, the late ones too, is told to gather with Spark: all or none gather here.
        """
        with self._open_changed:
            if self._gather_fell_back:
                parts, answer = [(sock, None)], None
            else:
                self._gathering[int(request["task"])] = (sock, request.get("info"))
                if len(self._gathering) < int(request["of"]):
                    if self._gather_timer is None:
                        self._gather_timer = threading.Timer(GATHER_WAIT_S, self._gather_with_spark)
                        self._gather_timer.daemon = True
                        self._gather_timer.start()
                    return
                parts = [self._gathering[task] for task in sorted(self._gathering)]
                answer = [info for _sock, info in parts]
                self._gathering = {}
                if self._gather_timer is not None:
                    self._gather_timer.cancel()
        self._answer([task_sock for task_sock, _info in parts], answer)

    def _gather_with_spark(self) -> None:
        with self._open_changed:
            if not self._gathering:
                return
            self._gather_fell_back = True
            waiting = [task_sock for task_sock, _info in self._gathering.values()]
            self._gathering = {}
        self._answer(waiting, None)

    @staticmethod
    def _answer(socks: list[socket.socket], parts: list[Any] | None) -> None:
        """Send the gather's answer: every task's part, or ``None`` (gather with Spark)."""
        frame = LogClient._frame(_GATHER_PREFIX + json.dumps(parts), limit=_MAX_FRAME)
        for task_sock in socks:
            with contextlib.suppress(OSError):
                task_sock.sendall(frame)

    def tell(self, message: str) -> int:
        """
        Send ``message`` (:func:`stop_message`) to every :class:`ControlListener` connected now.

        :param message: the message.
        :return: how many listeners it reached (0: none connected yet, or all gone).
        """
        with self._open_changed:
            controls = list(self._controls)
        reached = 0
        for sock in controls:
            try:
                sock.sendall(LogClient._frame(message))
                reached += 1
            except OSError:
                pass
        return reached

    def _print(self, line: str) -> None:
        stream = self._stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the server listens on."""
        assert self._server is not None, "LogServer is not started"
        return self._host, self._server.server_address[1]

    def __enter__(self) -> LogServer:
        token = self.token.encode()
        owner = self

        class _Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                try:
                    first = _read_frame(sock)
                    if first is None or not hmac.compare_digest(first, token):
                        return  # not one of this job's tasks
                    with owner._open_changed:
                        owner.accepted += 1
                    self._receive(sock)
                finally:
                    owner._opened(sock, reported=None)
                    if self.task is not None and owner._on_heartbeat is not None:
                        owner._on_heartbeat({"task": self.task, "ended": True})

            task: int | None = None
            """The barrier task this connection's heartbeats named, once one came."""

            def _receive(self, sock: socket.socket) -> None:
                while (frame := _read_frame(sock)) is not None:
                    line = frame.decode("utf-8", "replace")
                    if line == _CONTROL:
                        owner._listen(sock)
                        return
                    if line.startswith(_GATHER_PREFIX):
                        try:
                            owner._gather(sock, json.loads(line[len(_GATHER_PREFIX) :]))
                        except (ValueError, KeyError, TypeError):
                            pass
                        continue
                    if line.startswith(_HEARTBEAT_PREFIX):
                        try:
                            beat = json.loads(line[len(_HEARTBEAT_PREFIX) :])
                        except ValueError:
                            continue
                        self.task = beat.get("task")
                        if owner._on_heartbeat is not None:
                            owner._on_heartbeat(beat)
                        continue
                    with owner._lock:
                        if line.startswith(_FAILURE_PREFIX):
                            owner.failures.append(json.loads(line[len(_FAILURE_PREFIX) :]))
                            owner._opened(sock, reported=True)
                        elif line.startswith(_METRICS_PREFIX):
                            if owner._on_metrics is not None:
                                try:
                                    record = json.loads(line[len(_METRICS_PREFIX) :])
                                except ValueError:
                                    continue  # cut at the frame limit: the next record follows
                                owner._on_metrics(record)
                        else:
                            owner._on_line(line)

        class _Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = False
            block_on_close = True
            # every task connects at about the same time: socketserver's backlog of 5 would make the kernel drop
            # the SYNs of the rest, each then waiting out TCP's retransmission timeout (1 s, 3 s, ...)
            request_queue_size = socket.SOMAXCONN

            def process_request(self, request: socket.socket | tuple[bytes, socket.socket], addr: Any) -> None:
                # Registered here, in the thread that accepted it, before its handler thread starts: closing then
                # knows every connection it must drain, including one whose handler has not read its token yet.
                assert isinstance(request, socket.socket)  # a TCP server's requests are sockets
                owner._opened(request, reported=False)
                super().process_request(request, addr)

        self._server = _Server((self._host, 0), _Handler)
        # shutdown() waits for the serve loop to notice: poll often so closing costs milliseconds, not 0.5 s
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="horovod-log-server", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._gather_timer is not None:
            self._gather_timer.cancel()
        if self._server is not None:
            self._server.shutdown()
            # A task that connected just before the end may still wait in the listen backlog: handle it.
            self._server.socket.setblocking(False)
            while True:
                try:
                    request, client_address = self._server.socket.accept()
                except (BlockingIOError, OSError):
                    break
                request.setblocking(True)
                self._server.process_request(request, client_address)
            if self.drain_timeout_s is not None:
                with self._open_changed:
                    self._open_changed.wait_for(lambda: all(self._open.values()), timeout=self.drain_timeout_s)
                    for sock in self._open:  # reported (its report is its last word) or past the drain: close it
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
            with self._open_changed:  # the listeners' handlers wait for their close: end them
                self._closing = True
                for sock in self._controls:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
            self._server.server_close()  # joins handler threads: every finished task's lines are out
        if self._thread is not None:
            self._thread.join()


class LogClient:
    """
    Sends lines to a :class:`LogServer`; never raises into training. Thread-safe: a rank's output, its ``report()``
    records and its milestones come from different threads, and each frame goes out whole.

    :param address: ``(host, port)`` of the server.
    :param token: the server's token.
    :param connect_timeout_s: seconds to wait for the connection before giving up on the channel.
    """

    def __init__(self, address: tuple[str, int], token: str, connect_timeout_s: float = 10.0) -> None:
        self._address = address
        self._token = token
        self._timeout = connect_timeout_s
        self._sock: socket.socket | None = None
        self._broken = False
        self._lock = threading.Lock()  # one frame at a time: sendall() from two threads could interleave

    def _connect(self) -> None:
        try:
            sock = socket.create_connection(self._address, timeout=self._timeout)
            sock.settimeout(None)
            sock.sendall(self._frame(self._token))
            self._sock = sock
        except OSError as err:
            self._broken = True
            sys.stderr.write(
                f"airflow-provider-horovod: cannot reach the driver's log channel at "
                f"{self._address[0]}:{self._address[1]} ({err}); output stays in this executor's stderr\n"
            )

    @staticmethod
    def _frame(text: str, limit: int = MAX_FRAME_CHARS) -> bytes:
        data = text[:limit].encode("utf-8", "replace")
        return _LEN.pack(len(data)) + data

    def report_failure(self, failure: dict) -> bool:
        """
        Send a rank's failure (a ``RankFailedError.to_dict()``) so the driver can pick the root cause.

        :return: whether it was sent (the channel is connected and took it).
        """
        report = dict(failure)
        report["output_tail"] = [line[:1000] for line in report.get("output_tail") or []]
        text = _FAILURE_PREFIX + json.dumps(report)
        if len(text) > _MAX_FRAME // 4:
            report["output_tail"] = report["output_tail"][-10:]
            text = _FAILURE_PREFIX + json.dumps(report)
        return self._send(self._frame(text, limit=_MAX_FRAME // 4))

    def gather(self, task: int, of: int, info: Any) -> list[Any] | None:
        """
        Spark's ``BarrierTaskContext.allGather`` over this channel: send ``info`` and wait until every one of the
        ``of`` tasks of the stage sent its own; return them all, in task order. The driver answers as soon as the last
        one arrives. Spark's ``allGather`` answers only at the next full second after the call: its executor side
        looks whether the driver's answer came once a second (``BarrierTaskContext.runBarrier``), which cost every
        job's start and every restart a second.

        :param task: this task's partition.
        :param of: how many tasks the stage has.
        :param info: this task's part (JSON-serializable).
        :return: every task's part; ``None``: gather with Spark. The driver says so to every task when they have not
            all sent their part within :data:`GATHER_WAIT_S` (one that cannot reach the channel gathers with Spark,
            so all do); ``None`` also when this channel is not connected, or closed or silent past that wait.
        """
        if not self._send(self._frame(_GATHER_PREFIX + json.dumps({"task": task, "of": of, "info": info}))):
            return None
        sock = self._sock
        if sock is None:
            return None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_READ)
                if not selector.select(GATHER_WAIT_S + 30.0):
                    return None
            frame = _read_frame(sock)
        except (OSError, ValueError):
            return None
        text = frame.decode("utf-8", "replace") if frame is not None else ""
        if not text.startswith(_GATHER_PREFIX):
            return None
        parts = json.loads(text[len(_GATHER_PREFIX) :])
        return parts if isinstance(parts, list) and len(parts) == of else None

    def heartbeat(self, beat: dict) -> None:
        """Send one heartbeat (:class:`Heartbeats`); dropped once the channel is broken."""
        self._send(self._frame(_HEARTBEAT_PREFIX + json.dumps(beat, separators=(",", ":"))))

    def send_metrics(self, record: dict) -> None:
        """Send one ``report()`` record (dropped, like lines, once the channel is broken)."""
        self._send(self._frame(_METRICS_PREFIX + json.dumps(record, separators=(",", ":")), limit=_MAX_FRAME // 4))

    def send(self, line: str) -> None:
        """Send one line (without its newline); silently drop it once the channel is broken."""
        self._send(self._frame(line))

    def _send(self, frame: bytes) -> bool:
        with self._lock:
            if self._broken:
                return False
            if self._sock is None:
                self._connect()
                if self._sock is None:
                    return False
            try:
                self._sock.sendall(frame)
            except OSError:
                self._broken = True
                return False
            return True

    def wait_closed(self, timeout_s: float) -> bool:
        """
        Wait until the driver closes this connection, at most ``timeout_s`` seconds. Once the stage has failed, its
        :class:`LogServer` closes the connections of tasks that reported (a report is a task's last word) as soon as
        every connected task has reported, or after its drain timeout. The server writes to a task only the answer of
        :meth:`gather`, which the task has read before, so the connection becoming readable means it was closed (or
        reset).

        A bystander task uses it to end as soon as the driver knows the stage failed, instead of waiting for Spark to
        kill it: Spark's executor notices a killed Python task by polling every 2 s and then waits
        ``spark.python.task.killTimeout`` (2 s) before destroying the worker, while the slot it holds is what a
        restart of the job waits for.

        :param timeout_s: seconds to wait at most.
        :return: ``True`` when the driver closed (or reset) the connection; ``False`` when ``timeout_s`` passed
            first, and at once when there is no open connection to watch.
        """
        sock = self._sock
        if sock is None or self._broken:
            return False
        try:
            with selectors.DefaultSelector() as selector:  # epoll/kqueue: no limit on the descriptor's number
                selector.register(sock, selectors.EVENT_READ)
                return bool(selector.select(timeout_s))
        except (OSError, ValueError):  # closed meanwhile by this client
            return False

    def close(self) -> None:
        """Flush and close the connection."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None


class ControlListener:
    """
    A barrier task's connection for the driver's messages (:func:`stop_message`), read by a thread while the context is
    open; best effort like the log channel: without a connection no message comes.

    :param address: ``(host, port)`` of the driver's :class:`LogServer`.
    :param token: its token.
    :param on_message: called (in the reader thread) with each message.
    :param connect_timeout_s: seconds to wait for the connection.
    """

    def __init__(
        self,
        address: tuple[str, int],
        token: str,
        on_message: Callable[[str], None],
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._address = address
        self._token = token
        self._on_message = on_message
        self._timeout = connect_timeout_s
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="horovod-control", daemon=True)

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        try:
            while (frame := _read_frame(sock)) is not None:
                self._on_message(frame.decode("utf-8", "replace"))
        except OSError:
            pass

    def __enter__(self) -> ControlListener:
        try:
            sock = socket.create_connection(self._address, timeout=self._timeout)
            sock.settimeout(None)
            sock.sendall(LogClient._frame(self._token) + LogClient._frame(_CONTROL))
        except OSError as err:
            sys.stderr.write(
                f"airflow-provider-horovod: cannot open the driver's control channel at "
                f"{self._address[0]}:{self._address[1]} ({err}): the driver cannot ask this attempt to stop at a "
                "checkpoint\n"
            )
            return self
        self._sock = sock
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the reader's recv returns: it ends before the descriptor is reused
        self._thread.join()
        sock.close()


class Heartbeats:
    """
    Sends a barrier task's heartbeat to the driver every :data:`HEARTBEAT_INTERVAL_S` seconds from a thread, while
    the context is open (the driver's :mod:`~airflow_provider_horovod.runtime.driver.heartbeats` watches them).

    :param client: the task's log channel.
    :param beat: what each heartbeat says: ``{"task": partition, "rank": ..., "host": ..., "stage": ..., "pid": ...}``.
    :param interval_s: seconds between heartbeats.
    """

    def __init__(self, client: LogClient, beat: dict, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self._client = client
        self._beat = dict(beat)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horovod-heartbeat", daemon=True)

    def _run(self) -> None:
        self._client.heartbeat(self._beat)
        while not self._stop.wait(self._interval_s):
            self._client.heartbeat(self._beat)

    def __enter__(self) -> Heartbeats:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
