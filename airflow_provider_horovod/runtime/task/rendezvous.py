"""
Horovod's rendezvous store as task 0 runs it: start and stop the server, and the "rank done" reports
(:data:`DONE_SCOPE`, :class:`RanksDone`, :func:`_report_done`) that let task 0 outlive every rank; for
``torch.distributed``, the port task 0 holds for rank 0's store (:func:`reserve_port`).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.task.plan import Slot, to_slot_info

DONE_SCOPE = "airflow-provider-horovod-done"
"""The rendezvous store scope where each task of a successful job records that its rank has exited."""
DONE_REPORT_ATTEMPTS = 3
LISTEN_BACKLOG = socket.SOMAXCONN
"""The rendezvous store's listen backlog (the kernel caps it at ``net.core.somaxconn``). Horovod's server keeps
``socketserver``'s 5: with more ranks connecting at once than that, the kernel drops their SYNs and each waits out TCP's
retransmission timeout (1 s, then 3 s, 7 s, 15 s), or is reset: measured here (B12, ``benchmarks/scale_sim.py``),
Gloo's full-mesh requests of 16 ranks took 2.3 s against a store with Horovod's backlog and 0.43 s with this one, of 32
ranks 4.5 s (connections reset) and 1.2 s; horovod#3556 reports ``hvd.init()`` taking 7.1 and 15.8 s at 8 and 16
ranks."""


class RanksDone:
    """
    Which ranks have reported (through the rendezvous store, scope :data:`DONE_SCOPE`) that their process exited
    successfully. Task 0 waits on it instead of a final Spark ``barrier()``: measured here, a ``barrier()``
    call returns about one second after the last task arrives for every task but that last one (the JVM side
    checks its RPC once a second), a fifth of a short job's wall time.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ranks: set[str] = set()
        self._uninitialized: list[str] = []
        self._watchers: list[Callable[[str], None]] = []

    def mark(self, rank: str, initialized: bool = True) -> None:
        """
        Record that ``rank`` exited with status 0.

        :param rank: the rank, as the store's key names it.
        :param initialized: ``False`` when it never called ``hvd.init()`` (the watchers are told).
        """
        with self._cond:
            self._ranks.add(rank)
            if not initialized:
                self._uninitialized.append(rank)
            watchers = list(self._watchers)
            self._cond.notify_all()
        if not initialized:
            for watcher in watchers:
                watcher(rank)

    def on_uninitialized(self, watcher: Callable[[str], None]) -> None:
        """
        Call ``watcher(rank)`` for every rank that reported (or reports later) an exit without ``hvd.init()``.

        :param watcher: called with the rank (a string), from the reporting thread.
        """
        with self._cond:
            self._watchers.append(watcher)
            already = list(self._uninitialized)
        for rank in already:
            watcher(rank)

    def wait_for(self, ranks: Iterable[int], timeout_s: float | None = None) -> bool:
        """
        Block until every rank in ``ranks`` has reported (other keys do not count); ``False`` if ``timeout_s``
        (seconds) ran out first. Without a timeout it waits like Spark's ``barrier()`` does: a failing task aborts
        the stage, and Spark then kills this task.

        :param ranks: the ranks to wait for.
        :param timeout_s: seconds to wait at most; ``None``: no limit.
        """
        expected = {str(r) for r in ranks}
        with self._cond:
            return self._cond.wait_for(lambda: expected <= self._ranks, timeout=timeout_s)


def reserve_port(bind: str) -> socket.socket:
    """
    Hold a free TCP port on ``bind`` for ``torch.distributed``'s store, which rank 0's ``init_process_group()``
    starts on it (``MASTER_PORT``): a socket bound with ``SO_REUSEADDR`` and never listening, which keeps every
    other socket from being given the port while the store (also ``SO_REUSEADDR``) can still bind and listen on it.
    ``torchrun`` instead closes its socket just before it starts the workers, leaving a window for another process.

    :param bind: the address rank 0's store listens on (``MASTER_ADDR``).
    :return: the socket; close it when the job has ended. Its port: ``getsockname()[1]``.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, 0))
    except OSError:
        sock.close()
        raise
    return sock


def _start_rendezvous(plan: list[Slot], peers: Iterable[str] = (), bind: str = "127.0.0.1"):
    """
    Start Horovod's ``RendezvousServer`` for ``plan`` on ``bind`` (the address the ranks are given), answering only
    the job's own hosts; return ``(server, port)``.

    Horovod's own ``start()`` listens on every interface; this one binds the chosen address only (loopback for
    ranks on the driver, task 0's host address in a barrier stage), on a free port found by Horovod's ``find_port``,
    with a listen backlog of :data:`LISTEN_BACKLOG` instead of Horovod's 5.

    Horovod's store has no authentication (Gloo's C++ client cannot send credentials), so the handler refuses
    (HTTP 403) any request whose source address is not loopback or one of ``peers``, the hosts Spark placed
    this job's tasks on. PUTs to :data:`DONE_SCOPE` are also recorded in the server's ``ranks_done``
    (:class:`RanksDone`).
    """
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer, RendezvousServer
    from horovod.runner.util.network import find_port
    from horovod.runner.util.threads import in_thread

    allowed = frozenset({"127.0.0.1", "::1", *peers})
    done = RanksDone()

    class _JobOnlyHandler(RendezvousHandler):
        def _refused(self) -> bool:
            if self.client_address[0] in allowed:
                return False
            sys.stderr.write(
                f"airflow-provider-horovod: refused a rendezvous request from {self.client_address[0]}, "
                f"which is not one of this job's hosts {sorted(allowed)}\n"
            )
            self.send_status_code(403)
            return True

        def do_GET(self) -> None:
            if not self._refused():
                super().do_GET()

        def do_PUT(self) -> None:
            if not self._refused():
                super().do_PUT()

        def _put_value(self, scope: str, key: str, value: bytes) -> None:
            super()._put_value(scope, key, value)
            if scope == DONE_SCOPE:  # recorded before the reply, so a 200 means counted
                done.mark(key, initialized=value != b"0")

        def do_DELETE(self) -> None:
            if self._refused():
                return
            parts = self.path.split("/")
            if len(parts) != 3 or parts[1] not in self.server.scope_size:
                super().do_DELETE()  # ad-hoc scopes (process sets): Horovod deletes the one key
                return
            # A planned scope (global, local_<host>, cross_<n>) is cleared once all its ranks finished their
            # rendezvous, as in Horovod. Horovod 0.28 then also forgets every *other* scope's finished ranks, so a
            # scope whose ranks were half counted is never cleared, and the next hvd.init() after hvd.shutdown()
            # can read a stale address (``connect ... Connection refused``; 1 in 6 runs under horovodrun here).
            # Count and clear per scope instead.
            scope, key = parts[1], parts[2]
            with self.server.finished_list_lock:
                finished = self.server.finished_list[scope]
                if key not in finished:
                    finished.append(key)
                if len(finished) >= self.server.scope_size[scope]:
                    with self.server.cache_lock:
                        self.server.cache.pop(scope, None)
                    del self.server.finished_list[scope]
            self.send_status_code(200)

    class _Store(RendezvousHTTPServer):
        request_queue_size = LISTEN_BACKLOG

    server = RendezvousServer()
    server._httpd, port = find_port(lambda addr: _Store((bind, addr[1]), _JobOnlyHandler, False))
    server._listen_thread = in_thread(target=server._httpd.serve_forever)
    server.init([to_slot_info(s) for s in plan])
    server.ranks_done = done
    return server, port


def _report_done(addr: str, port: int, rank: int, timeout_s: float = 30.0, initialized: bool = True) -> None:
    """
    Tell task 0's rendezvous store that ``rank``'s process exited successfully (HTTP PUT to :data:`DONE_SCOPE`).

    :raises LaunchError: the store did not accept it after :data:`DONE_REPORT_ATTEMPTS` attempts (the stage then
        fails instead of leaving task 0 waiting).

    Not Horovod's ``http_client.put_data_into_kvstore``: it sets no timeout, so a stuck connection would hang
    this task, and task 0 with it.
    """
    import http.client

    last: Exception | None = None
    for attempt in range(DONE_REPORT_ATTEMPTS):
        conn = http.client.HTTPConnection(addr, port, timeout=timeout_s)
        try:
            conn.request(
                "PUT", f"/{DONE_SCOPE}/{rank}", body=b"1" if initialized else b"0", headers={"Content-Length": "1"}
            )
            status = conn.getresponse().status
            if status == 200:
                return
            last = RuntimeError(f"HTTP {status}")
        except OSError as err:
            last = err
        finally:
            conn.close()
        if attempt + 1 < DONE_REPORT_ATTEMPTS:
            time.sleep(0.2 * (attempt + 1))  # back-off before the next attempt
    raise LaunchError(
        f"rank {rank} finished but could not tell the rendezvous store at {addr}:{port} "
        f"({DONE_REPORT_ATTEMPTS} attempts, last: {last}); failing the stage so task 0 does not wait"
    )


def _stop_rendezvous(server) -> None:
    """Stop the server and close its listening socket (Horovod's ``stop()`` leaves the port bound)."""
    server.stop()
    httpd = getattr(server, "_httpd", None)
    if httpd is not None:
        httpd.server_close()


def _stop_rendezvous_soon(server) -> threading.Thread:
    """
    :func:`_stop_rendezvous` in a daemon thread: Horovod's ``stop()`` waits for the serving loop's next
    0.5 s poll, which need not delay the task's end once every rank has exited. Returns the thread.
    """
    thread = threading.Thread(target=_stop_rendezvous, args=(server,), name="horovod-rendezvous-stop", daemon=True)
    thread.start()
    return thread
