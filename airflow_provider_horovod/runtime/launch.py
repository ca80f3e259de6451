"""
Starting and watching Horovod ranks: inside Spark barrier tasks (``np > 0``) or on the driver (``np < 0``).

Both paths share :class:`RankProcess`: one fresh ``python -m airflow_provider_horovod.runtime.worker``
process per rank, in its own process group, tied to its launcher by a lifeline pipe, with its output
prefixed by rank, kept as a tail for error messages, and routed to the driver by a sink.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from airflow_provider_horovod.runtime import protocol
from airflow_provider_horovod.runtime.artifacts import ARTIFACT_DIR_ENV
from airflow_provider_horovod.runtime.errors import (
    PEER_LEFT,
    START_TIMEOUT,
    TRAINING_TIMEOUT,
    WAITING_FOR_PEERS,
    LaunchError,
    RankFailedError,
    root_cause,
)
from airflow_provider_horovod.runtime.gpus import (
    CUDA_VISIBLE_DEVICES,
    DEFAULT_GPU_VISIBILITY,
    GPU_RESOURCE,
    device_env,
    driver_owned_gpus,
    owned_gpus,
)
from airflow_provider_horovod.runtime.logs import LogClient
from airflow_provider_horovod.runtime.plan import (
    DEFAULT_GLOO_TIMEOUT_S,
    IFACE_ENV,
    Slot,
    build_plan,
    child_environ,
    choose_interface,
    gloo_env,
    gloo_host_address,
    horovod_honours_gloo_iface,
    local_plan,
    to_slot_info,
)

DEFAULT_START_TIMEOUT_S = 600.0
"""Default ``start_timeout_s`` (Horovod's own ``start_timeout`` default)."""
FAILURE_GRACE_S = 10.0
"""After a rank fails, how long to wait for the others' own failure reports before stopping them."""
OUTPUT_TAIL_LINES = 100
"""How many of a rank's last output lines an error carries."""

Sink = Callable[[Slot, str], None]


@dataclass(frozen=True)
class JobSpec:
    """
    Everything a rank's launcher needs; plain values only, because it travels to executors in the task closure.

    :param payload: the payload bytes (see :mod:`~airflow_provider_horovod.runtime.payload`).
    :param np: number of ranks.
    :param artifact_dir: path/URI exported to ranks as ``HOROVOD_AIRFLOW_ARTIFACT_DIR``, or ``None``.
    :param log_address: ``(host, port)`` of the driver's log channel, or ``None`` to keep output on executors.
    :param log_token: the channel's token.
    :param forward_all: forward every rank's output (``driver_log_verbosity="all"``), else rank 0's only.
    :param gloo_timeout_s: ``HOROVOD_GLOO_TIMEOUT_SECONDS`` for every rank.
    :param env: extra environment variables for every rank.
    :param start_timeout_s: seconds a rank may take from process start to a finished ``hvd.init()``
        (loading the function, imports, rendezvous); ``None`` for no limit.
    :param training_timeout_s: seconds a rank may run in all; ``None`` for no limit.
    :param executors_share_driver_stderr: executors run inside the driver process (``local[N]``), so their
        stderr is the driver's: forwarded lines are not echoed there a second time.
    :param use_gpu: give ranks the GPUs Spark scheduled for their tasks; ``False`` hides GPUs from ranks
        (``CUDA_VISIBLE_DEVICES=""``). See :mod:`~airflow_provider_horovod.runtime.gpus`.
    :param gpu_visibility: ``"host"`` (device ``hvd.local_rank()`` is the rank's own) or ``"rank"`` (only the
        rank's own GPUs, device 0).
    """

    payload: bytes
    np: int
    artifact_dir: str | None = None
    log_address: tuple[str, int] | None = None
    log_token: str | None = None
    forward_all: bool = False
    gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)
    executors_share_driver_stderr: bool = False
    start_timeout_s: float | None = DEFAULT_START_TIMEOUT_S
    training_timeout_s: float | None = None
    use_gpu: bool = False
    gpu_visibility: str = DEFAULT_GPU_VISIBILITY

    def forwards(self, slot: Slot) -> bool:
        """Whether ``slot``'s output goes to the driver."""
        return self.forward_all or slot.rank == 0


class RankProcess:
    """
    One Horovod rank running the payload in a child process.

    :param slot: the rank's place in the plan.
    :param spec: the job.
    :param gloo: the rank's Horovod/Gloo variables (from :func:`~.plan.gloo_env`).
    :param workdir: a private directory for the payload copy, the result and the error file.
    :param sink: called with every output line of the rank (without the newline).
    :param devices: the rank's device variables (from :func:`~.gpus.device_env`); ``spec.env`` overrides them.
    """

    def __init__(self, slot: Slot, spec: JobSpec, gloo: dict[str, str], workdir: str, sink: Sink,
                 devices: dict[str, str] | None = None) -> None:
        self.slot = slot
        self._devices = dict(devices or {})
        self.tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self._spec = spec
        self._gloo = gloo
        self._sink = sink
        self._dir = os.path.join(workdir, f"rank-{slot.rank}")
        self._proc: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        self._reader: threading.Thread | None = None
        self._progress_reader: threading.Thread | None = None
        self._started_at = 0.0
        self._changed = threading.Condition()
        self._init_entered_at: float | None = None
        self._exited = False
        self._peer_left: str | None = None
        self.phase = "starting"
        """``starting`` -> ``running`` (function loaded and called) -> ``init`` (inside ``hvd.init()``) ->
        ``ready`` (``hvd.init()`` returned); ``init``/``ready`` repeat for every ``hvd.init()``."""
        self.ever_initialized = False
        self.exited_at: float | None = None

    @property
    def result_path(self) -> str:
        return os.path.join(self._dir, "result.pkl")

    @property
    def error_path(self) -> str:
        return os.path.join(self._dir, "error.json")

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def start(self) -> None:
        """Start the rank's process (returns at once)."""
        os.makedirs(self._dir, mode=0o700)
        payload_path = os.path.join(self._dir, "payload.bin")
        fd = os.open(payload_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._spec.payload)
        read_end, self._lifeline = os.pipe()
        progress_read, progress_write = os.pipe()
        extra = {
            **self._devices,
            **self._spec.env,
            **self._gloo,
            protocol.ENV_PAYLOAD: payload_path,
            protocol.ENV_RESULT: self.result_path,
            protocol.ENV_ERROR: self.error_path,
            protocol.ENV_LIFELINE: str(read_end),
            protocol.ENV_PROGRESS: str(progress_write),
            protocol.ENV_CHECK_SIZE: str(self._spec.np),
        }
        if self._spec.artifact_dir:
            extra[ARTIFACT_DIR_ENV] = self._spec.artifact_dir
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", protocol.WORKER_MODULE],
                env=child_environ(os.environ, extra, sys.path),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(read_end, progress_write), cwd=self._dir,
            )
        except BaseException:
            os.close(progress_read)
            raise
        finally:
            os.close(read_end)
            os.close(progress_write)
        self._started_at = time.monotonic()
        self._reader = threading.Thread(target=self._pump, name=f"rank-{self.slot.rank}-output", daemon=True)
        self._reader.start()
        self._progress_reader = threading.Thread(target=self._follow_progress, args=(progress_read,),
                                                 name=f"rank-{self.slot.rank}-progress", daemon=True)
        self._progress_reader.start()
        threading.Thread(target=self._watch_exit, name=f"rank-{self.slot.rank}-exit", daemon=True).start()

    def _follow_progress(self, fd: int) -> None:
        phases = {protocol.PROGRESS_LOADED: "running", protocol.PROGRESS_INIT: "init", protocol.PROGRESS_READY: "ready"}
        try:
            while milestone := os.read(fd, 1):
                with self._changed:
                    self.phase = phases.get(milestone, self.phase)
                    if milestone == protocol.PROGRESS_INIT:
                        self._init_entered_at = time.monotonic()
                    elif milestone == protocol.PROGRESS_READY:
                        self.ever_initialized = True
                    self._changed.notify_all()
        except OSError:
            pass
        finally:
            os.close(fd)

    def _watch_exit(self) -> None:
        assert self._proc is not None
        self._proc.wait()
        with self._changed:
            self._exited = True
            self._changed.notify_all()

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.tail.append(line)
            self._sink(self.slot, line)

    def wait(self) -> int:
        """Wait for the process to exit and its output to drain; return its exit status."""
        assert self._proc is not None and self._reader is not None
        code = self._proc.wait()
        self.exited_at = time.time()  # the failure time of a rank that died without reporting (signal, os._exit)
        self._reader.join()
        if self._progress_reader is not None:
            # milestones written before the exit are in the pipe; a process the function forked may hold the pipe
            # open past this one's exit, so do not wait for its end of file
            self._progress_reader.join(timeout=2.0)
        return code

    def peer_left(self, reason: str) -> None:
        """
        Another rank ended without ever calling ``hvd.init()``: if this rank is (or gets) inside ``hvd.init()``, it
        waits there in vain, so :meth:`run_to_end` stops it at once with ``reason`` instead of at ``start_timeout_s``.
        """
        with self._changed:
            self._peer_left = reason
            self._changed.notify_all()

    def _deadline(self) -> tuple[float, str] | None:
        """The next limit this rank can run into, as ``(monotonic time, which)``; call with ``_changed`` held."""
        spec = self._spec
        limits: list[tuple[float, str]] = []
        if spec.start_timeout_s is not None:
            if self.phase == "starting":
                limits.append((self._started_at + spec.start_timeout_s, "start"))
            elif self.phase == "init" and self._init_entered_at is not None:
                # Waiting in hvd.init() means another rank is late: give that rank FAILURE_GRACE_S to be reported
                # first, as the one that never joined.
                limits.append((self._init_entered_at + spec.start_timeout_s + FAILURE_GRACE_S, "init"))
        if spec.training_timeout_s is not None:
            limits.append((self._started_at + spec.training_timeout_s, "training"))
        return min(limits) if limits else None

    def run_to_end(self, host: str | None = None) -> RankFailedError | None:
        """
        Wait for the rank within the job's timeouts; return its failure, or ``None`` on success.

        ``start_timeout_s`` bounds loading the function (process start until it is called) and every
        ``hvd.init()`` (the rendezvous with the other ranks); the function's own work before ``hvd.init()`` is
        not counted. ``training_timeout_s`` bounds the whole run. A rank that misses one is killed (with its
        process group) and reported as failed with what it was doing.
        """
        assert self._proc is not None
        with self._changed:
            while not self._exited:
                if self._peer_left is not None and self.phase == "init":
                    deadline, phase = (time.monotonic(), "peer"), self.phase
                    break
                deadline = self._deadline()
                if deadline is None:
                    self._changed.wait()
                    continue
                remaining = deadline[0] - time.monotonic()
                if remaining <= 0:
                    phase = self.phase
                    break
                self._changed.wait(remaining)
            else:
                deadline = None
        if deadline is not None:
            return self._timed_out(deadline[1], phase, host)
        return None if self.wait() == 0 else self.failure(host=host)

    def _timed_out(self, which: str, phase: str, host: str | None) -> RankFailedError:
        self.kill()
        self.wait()
        rank, spec = self.slot.rank, self._spec
        if which == "training":
            kind, message = TRAINING_TIMEOUT, (f"rank {rank} was still running when training_timeout_s="
                                               f"{spec.training_timeout_s} ran out")
        elif which == "peer":
            kind, message = PEER_LEFT, f"{self._peer_left}, so rank {rank} waited for it in hvd.init() in vain"
        elif which == "start":
            kind, message = START_TIMEOUT, (f"rank {rank} never reached hvd.init() within start_timeout_s="
                                            f"{spec.start_timeout_s}: it was still loading the training function "
                                            "(unpickling, imports)")
        else:
            kind, message = WAITING_FOR_PEERS, (f"rank {rank} was waiting in hvd.init() for the other ranks when "
                                                f"start_timeout_s={spec.start_timeout_s} ran out")
        return RankFailedError(rank=rank, exit_code=self.returncode, host=host, exc_type=kind, exc_message=message,
                               output_tail=list(self.tail), failed_at=time.time())

    def failure(self, host: str | None = None) -> RankFailedError:
        """The error describing this rank's non-zero exit (reads the error file the worker wrote, if any)."""
        details: dict[str, str] = {}
        try:
            with open(self.error_path, encoding="utf-8") as f:
                details = json.load(f)
        except (OSError, ValueError):
            pass
        return RankFailedError(rank=self.slot.rank, exit_code=self.returncode, host=host,
                               exc_type=details.get("exc_type"), exc_message=details.get("exc_message"),
                               traceback=details.get("traceback"), output_tail=list(self.tail),
                               failed_at=details.get("failed_at", self.exited_at))

    def result(self) -> bytes | None:
        """
        Rank 0's cloudpickled return value; ``None`` for other ranks, and for a rank 0 that exited with status 0
        without returning (``os._exit(0)``), which ``horovodrun`` also counts as success.
        """
        if self.slot.rank != 0:
            return None
        try:
            with open(self.result_path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def kill(self) -> None:
        """Kill the rank's whole process group (no-op when nothing is left) and drop the lifeline."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None


DONE_SCOPE = "airflow-provider-horovod-done"
"""The rendezvous store scope where each task of a successful job records that its rank has exited."""
DONE_REPORT_ATTEMPTS = 3


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
        """Record that ``rank`` exited with status 0; ``initialized=False``: it never called ``hvd.init()``."""
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
        """Call ``watcher(rank)`` for every rank that reported (or reports later) an exit without ``hvd.init()``."""
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
        """
        expected = {str(r) for r in ranks}
        with self._cond:
            return self._cond.wait_for(lambda: expected <= self._ranks, timeout=timeout_s)


def _start_rendezvous(plan: list[Slot], peers: Iterable[str] = (), bind: str = "127.0.0.1"):
    """
    Start Horovod's ``RendezvousServer`` for ``plan`` on ``bind`` (the address the ranks are given), answering only
    the job's own hosts; return ``(server, port)``.

    Horovod's own ``start()`` listens on every interface; this one binds the chosen address only (loopback for
    ranks on the driver, task 0's host address in a barrier stage), on a free port found by Horovod's ``find_port``.

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
            sys.stderr.write(f"airflow-provider-horovod: refused a rendezvous request from {self.client_address[0]}, "
                             f"which is not one of this job's hosts {sorted(allowed)}\n")
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

    server = RendezvousServer()
    server._httpd, port = find_port(lambda addr: RendezvousHTTPServer((bind, addr[1]), _JobOnlyHandler, False))
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
            conn.request("PUT", f"/{DONE_SCOPE}/{rank}", body=b"1" if initialized else b"0",
                         headers={"Content-Length": "1"})
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
    raise LaunchError(f"rank {rank} finished but could not tell the rendezvous store at {addr}:{port} "
                      f"({DONE_REPORT_ATTEMPTS} attempts, last: {last}); failing the stage so task 0 does not wait")


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


def _left_uninitialized(rank: int) -> str:
    return (f"rank {rank} ended (exit code 0) without calling hvd.init(); call hvd.init() on every rank, or on none "
            "(a function that does not use Horovod)")


def _stderr_sink(slot: Slot, line: str) -> None:
    sys.stderr.write(f"[rank {slot.rank}] {line}\n")
    sys.stderr.flush()


def run_on_driver(spec: JobSpec, stdout: Callable[[str], None] | None = None) -> bytes | None:
    """
    Run ``spec.np`` ranks as processes on this machine (``HorovodRunner(np=-N)``); no Spark tasks.

    Output of forwarded ranks goes to ``stdout`` (default: this process's stdout), the rest to stderr.
    The first rank to fail stops all others at once.

    :return: rank 0's cloudpickled return value.
    :raises RankFailedError: a rank exited non-zero.
    """

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    out = stdout or emit

    def sink(slot: Slot, line: str) -> None:
        if spec.forwards(slot):
            out(f"[rank {slot.rank}] {line}")
        else:
            _stderr_sink(slot, line)

    plan = local_plan(spec.np)
    workdir = tempfile.mkdtemp(prefix="horovod-ranks-")
    server, port = _start_rendezvous(plan)
    owned = driver_owned_gpus(spec.np, os.environ.get(CUDA_VISIBLE_DEVICES)) if spec.use_gpu else []
    procs = [RankProcess(s, spec, gloo_env(s, rendezvous_addr="127.0.0.1", rendezvous_port=port, iface="lo",
                                           gloo_timeout_s=spec.gloo_timeout_s), workdir, sink,
                         devices=device_env(spec.use_gpu, owned, plan, i, spec.gpu_visibility))
             for i, s in enumerate(plan)]
    exited: queue.Queue[tuple[RankProcess, RankFailedError | None]] = queue.Queue()
    try:
        for p in procs:
            p.start()
            threading.Thread(target=lambda p=p: exited.put((p, p.run_to_end(host="driver"))), daemon=True).start()
        for remaining in range(len(procs), 0, -1):
            p, failure = exited.get()
            if failure is None and not p.ever_initialized:
                for other in procs:
                    if other is not p:
                        other.peer_left(_left_uninitialized(p.slot.rank))
            if failure is not None:
                failures = [failure]
                # The other ranks usually fail within moments (Horovod shuts them down); collect them so the
                # root cause, not the first bystander to exit, is reported.
                for _ in range(remaining - 1):
                    try:
                        _other, other_failure = exited.get(timeout=FAILURE_GRACE_S)
                    except queue.Empty:
                        break
                    if other_failure is not None:
                        failures.append(other_failure)
                raise root_cause(failures)
        return procs[0].result()
    finally:
        for p in procs:
            p.kill()
        _stop_rendezvous(server)
        shutil.rmtree(workdir, ignore_errors=True)


def _host_of(address: str) -> str:
    import socket

    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    return socket.gethostbyname(host.strip("[]"))


def _preflight(host: str) -> None:
    """Fail fast, naming the interpreter and host, when the executor's Python lacks what ranks need."""
    import importlib.util

    for module in ("horovod.runner.http.http_server", "horovod.torch", "cloudpickle"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            raise LaunchError(
                f"{module.split('.')[0]} ({module}) is not importable by the executor's Python {sys.executable} on "
                f"{host}: install it there (Horovod built with Gloo and PyTorch), or point spark.pyspark.python / "
                "PYSPARK_PYTHON at an interpreter that has it"
            )


def _task_gpus(ctx, host: str) -> list[str]:
    """This barrier task's GPUs as device IDs (Spark's addresses mapped through the executor's own list)."""
    info = ctx.resources().get(GPU_RESOURCE)
    return owned_gpus(list(info.addresses) if info is not None else [], os.environ.get(CUDA_VISIBLE_DEVICES),
                      where=f"task {ctx.partitionId()} on {host}")


def _rank_interface(spec: JobSpec, rendezvous_addr: str, host: str) -> str:
    """The interface for Gloo/NCCL: :data:`~.plan.IFACE_ENV` (rank ``env``, then executor) or the route."""
    override = spec.env.get(IFACE_ENV) or os.environ.get(IFACE_ENV)
    try:
        return choose_interface(rendezvous_addr, override)
    except ValueError as err:
        raise LaunchError(f"on {host}: {err}") from None


def _check_host_name(plan: list[Slot], host: str) -> None:
    """
    Fail fast when ranks on other hosts could not reach this one's Gloo connections (a multi-host job with an
    unpatched Horovod only).

    An unpatched Horovod 0.28's process-set Gloo contexts bind to the address of this machine's host name, not to
    ``HOROVOD_GLOO_IFACE`` (see :func:`~.plan.gloo_host_address`); Gloo itself would abort later with
    ``connect [127.0.0.1]: Connection refused`` or ``Unable to find address for: <name>``. A build patched by
    ``scripts/build_horovod.sh`` (:func:`~.plan.horovod_honours_gloo_iface`) needs no check.
    """
    import ipaddress
    import socket

    if len({s.host_key for s in plan}) < 2 or horovod_honours_gloo_iface():
        return
    name = socket.gethostname()
    address = gloo_host_address(name)
    if address is not None and not ipaddress.ip_address(address.split("%")[0]).is_loopback:
        return
    found = "does not resolve to an address of this machine" if address is None else f"resolves to {address}"
    raise LaunchError(
        f"on {host}: the host name {name!r} {found}. Horovod's Gloo binds its connections to the address of the "
        f"host name (it ignores HOROVOD_GLOO_IFACE there), so ranks on the other hosts could not connect. Make "
        f"{name!r} resolve, on that machine, to an address the other hosts reach (e.g. {host} in /etc/hosts "
        "instead of a 127.x line), or install Horovod built by scripts/build_horovod.sh, patched to use "
        "HOROVOD_GLOO_IFACE there"
    )


def barrier_task(spec: JobSpec, _rows: Iterable[object]) -> Iterator[bytes]:
    """
    The body of every task of the barrier stage: plan, rendezvous, start one rank, watch it.

    Partition 0 runs Horovod's ``RendezvousServer``; every task puts what the others need (the server's port
    from partition 0, each task's GPUs) in the JSON it gathers with ``allGather``, then starts its rank with
    the full Gloo and device environment. A rank that fails raises at once (the barrier stage aborts and Spark
    kills the other tasks, whose ranks die with their lifeline). On success every other task reports its rank's
    exit to the rendezvous store and task 0 waits for all of them (:class:`RanksDone`), so the store outlives
    every rank.

    :return: an iterator yielding rank 0's cloudpickled return value from partition 0, nothing elsewhere.
    :raises RankFailedError: this task's rank failed; its message ends with a marker the driver decodes.
    :raises LaunchError: the task cannot start its rank (no GPU with ``use_gpu``, an unusable interface
        override or host name).
    """
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    addresses = [_host_of(info.address) for info in ctx.getTaskInfos()]
    _preflight(addresses[partition])
    if len(addresses) != spec.np:
        raise LaunchError(f"barrier stage has {len(addresses)} tasks but np={spec.np}")
    plan = build_plan(addresses)
    slot = plan[partition]
    _check_host_name(plan, addresses[partition])
    mine = _task_gpus(ctx, addresses[partition]) if spec.use_gpu else []
    server = None
    port = None
    if partition == 0:
        server, port = _start_rendezvous(plan, peers=addresses, bind=addresses[0])
    try:
        infos = [json.loads(m) for m in ctx.allGather(json.dumps({"port": port, "gpus": mine}))]
        port = int(infos[0]["port"])
        devices = device_env(spec.use_gpu, [info["gpus"] for info in infos], plan, partition, spec.gpu_visibility)
        rendezvous_addr = addresses[0]
        gloo = gloo_env(slot, rendezvous_addr=rendezvous_addr, rendezvous_port=port,
                        iface=_rank_interface(spec, rendezvous_addr, addresses[partition]),
                        gloo_timeout_s=spec.gloo_timeout_s)
        client = LogClient(spec.log_address, spec.log_token or "") if spec.log_address else None
        forward = client is not None and spec.forwards(slot)

        def sink(s: Slot, line: str) -> None:
            if not (forward and spec.executors_share_driver_stderr):
                _stderr_sink(s, line)  # the executor's full copy
            if forward:
                client.send(f"[rank {s.rank}] {line}")

        workdir = tempfile.mkdtemp(prefix="horovod-rank-")
        proc = RankProcess(slot, spec, gloo, workdir, sink, devices=devices)
        if server is not None:
            server.ranks_done.on_uninitialized(lambda rank: proc.peer_left(_left_uninitialized(int(rank))))
        try:
            proc.start()
            err = proc.run_to_end(host=addresses[partition])
            if err is not None:
                reported = client is not None and client.report_failure(err.to_dict())
                # the report lets the driver tell the root cause from bystanders; without a channel the error
                # text itself must carry it through Spark's exception
                if err.is_secondary:
                    # This rank failed because another one did (Horovod shut it down). That rank's task, or
                    # Spark's own reason for losing it, should abort the stage and be what the user reads;
                    # this task waits a bounded grace (and is usually killed by the abort meanwhile).
                    time.sleep(FAILURE_GRACE_S)
                if not reported:
                    err.args = (f"{err}\n{err.marker()}",)
                raise err
            result = proc.result()
        finally:
            proc.kill()
            if client is not None:
                client.close()
            shutil.rmtree(workdir, ignore_errors=True)
        if server is not None:  # task 0: the store must outlive every rank
            server.ranks_done.wait_for(s.rank for s in plan if s.rank != slot.rank)
        else:
            _report_done(rendezvous_addr, port, slot.rank, initialized=proc.ever_initialized)
        if result is not None:
            yield result
    finally:
        if server is not None:
            _stop_rendezvous_soon(server)
