"""
:class:`RankProcess`: one Horovod rank as a child process, shared by the barrier tasks and the driver path.

One fresh ``python -m airflow_provider_horovod.runtime.rank.worker`` process per rank, in its own process group, tied
to its launcher by a lifeline pipe, with its output prefixed by rank, kept as a tail for error messages, and routed
to the driver by a sink (:data:`Sink`; the executor's own copy: :func:`~.launch.stderr_sink`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_horovod.runtime.bounds import MAX_LINE_CHARS, cut
from airflow_provider_horovod.runtime.rank_errors import RankFailedError
from airflow_provider_horovod.runtime.task.fork_client import ForkedProcess, Unanswered, fork_rank
from airflow_provider_horovod.runtime.task.plan import Slot, child_environ
from airflow_provider_horovod.runtime.task.rank_env import RankPipes, framework_error_path, worker_environ
from airflow_provider_horovod.runtime.task.rank_failure import exit_failure, next_deadline, timeout_failure
from airflow_provider_horovod.runtime.wire import protocol
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.progress_format import MILESTONE_EVENT, MILESTONES, json_records

OUTPUT_TAIL_LINES = 100
"""How many of a rank's last output lines an error carries."""

Sink = Callable[[Slot, str], None]
MetricsSink = Callable[[dict], None]
"""Called with each record a rank's ``report()`` sent (a dict, see :mod:`~airflow_provider_horovod.runtime.reports`)."""


@dataclass
class _Pipes:
    """
    One set of a rank's pipes: the environment naming the rank's ends, those ends by variable (the rank inherits them;
    this process closes them once it has started), and this process's ends.
    """

    env: dict[str, str]
    named: dict[str, int]
    lifeline: int
    release: int | None
    progress: int
    metrics: int | None

    def close(self, ours: bool) -> None:
        """Close the rank's ends; with ``ours``, this process's too (the rank was not started on them)."""
        fds = list(self.named.values())
        if ours:
            fds += [fd for fd in (self.lifeline, self.release, self.progress, self.metrics) if fd is not None]
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class RankProcess:
    """
    One Horovod rank running the payload in a child process.

    :param slot: the rank's place in the plan.
    :param spec: the job.
    :param gloo: the rank's Horovod/Gloo variables (from :func:`~.plan.gloo_env`).
    :param workdir: a private directory for the payload copy, the result and the error file.
    :param sink: called with every output line of the rank (without the newline).
    :param devices: the rank's device variables (from :func:`~.gpus.device_env`); ``spec.env`` overrides them.
    :param metrics: called with each record the rank's ``report()`` sends, and with an event record for each of its
        milestones (:data:`~airflow_provider_horovod.runtime.wire.progress_format.MILESTONE_EVENT`); ``None``: the
        rank's ``report()`` is a no-op.
    :param threads: its ``OMP_NUM_THREADS`` (:func:`~.rank_env.omp_threads`); ``None``: as inherited.
    """

    def __init__(
        self,
        slot: Slot,
        spec: JobSpec,
        gloo: dict[str, str],
        workdir: str,
        sink: Sink,
        devices: dict[str, str] | None = None,
        metrics: MetricsSink | None = None,
        threads: int | None = None,
    ) -> None:
        self.slot = slot
        self._threads = threads
        self._devices = dict(devices or {})
        self.tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self._spec = spec
        self._gloo = gloo
        self._sink = sink
        self._metrics = metrics
        self._dir = os.path.join(workdir, f"rank-{slot.rank}")
        self._proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._lifeline: int | None = None
        self._release: int | None = None
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
        self.forked = False
        """Forked from the job's fork server (:meth:`start`'s ``fork_key``), not started as a new process."""
        self.environ: dict[str, str] = {}
        """The rank's environment (set by :meth:`start`)."""

    def _open_pipes(self, deferred: bool) -> _Pipes:
        """The rank's pipes (:class:`_Pipes`) and the environment that names its ends."""
        read_end, lifeline = os.pipe()
        progress_read, progress_write = os.pipe()
        metrics_read, metrics_write = os.pipe() if self._metrics is not None else (None, None)
        release_read, release = os.pipe() if deferred else (None, None)
        extra = worker_environ(
            self._spec,
            launch_env=self._gloo,
            devices=self._devices,
            rank_dir=self._dir,
            pipes=RankPipes(read_end, progress_write, metrics=metrics_write, release=release_read),
            threads=self._threads,
        )
        named = {
            name: fd
            for name, fd in (
                (protocol.ENV_LIFELINE, read_end),
                (protocol.ENV_PROGRESS, progress_write),
                (protocol.ENV_METRICS, metrics_write),
                (protocol.ENV_RELEASE, release_read),
            )
            if fd is not None
        }
        env = child_environ(os.environ, extra, sys.path)
        return _Pipes(env, named, lifeline, release, progress_read, metrics_read)

    def joined(self) -> bool:
        """Wait until the rank has joined the others (its first ``hvd.init()`` returned): ``True``; or ended."""
        with self._changed:
            self._changed.wait_for(lambda: self.ever_initialized or self._exited)
            return self.ever_initialized

    @property
    def result_path(self) -> str:
        return os.path.join(self._dir, protocol.RANK_VALUE_FILE)

    @property
    def error_path(self) -> str:
        return os.path.join(self._dir, protocol.RANK_ERROR_FILE)

    def request_stop(self, reason: str) -> None:
        """
        Tell the rank to stop after its next checkpoint (the driver's :func:`~..wire.logs.stop_message`): rank 0's
        ``save_checkpoint()`` then ends the function right after saving. A no-op once told, or once its directory is
        gone.

        :param reason: why, for the rank's own line in the log.
        """
        final = os.path.join(self._dir, protocol.RANK_STOP_FILE)
        partial = f"{final}.{os.getpid()}.tmp"
        try:
            with open(partial, "w", encoding="utf-8") as f:
                f.write(reason)
            os.link(partial, final)  # whole or not at all, and only once (FileExistsError when told already)
        except OSError:  # told already, or the rank has ended
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(partial)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def start(self, deferred: bool = False, fork_key: str | None = None) -> None:
        """
        Start the rank's process (returns at once).

        :param deferred: start it before the rendezvous port (and, with ``use_gpu``, its devices) is known: it
            imports the Horovod frameworks its function names
            (:func:`~airflow_provider_horovod.runtime.launchers.preimports`; not with ``use_gpu``), then waits for
            :meth:`release` before loading the function. The tasks' gather and the rank's imports then
            overlap. The start timeout counts from :meth:`release`.
        :param fork_key: the job's fork key: fork the rank from the job's fork server on this host when there is one
            (:mod:`~airflow_provider_horovod.runtime.rank.fork_server`: its framework imported already), else start
            it as above. ``None``: start it.
        """
        os.makedirs(self._dir, mode=0o700)
        payload_path = os.path.join(self._dir, protocol.RANK_PAYLOAD_FILE)
        fd = os.open(payload_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._spec.payload)
        ends = self._open_pipes(deferred)
        forked = None
        if fork_key:
            try:
                forked = fork_rank(fork_key, ends.env, self._dir, ends.named)
            except Unanswered:  # a late fork could still take these descriptors: start the rank on new ones
                ends.close(ours=True)
                ends = self._open_pipes(deferred)
        self.environ = ends.env
        self.forked = forked is not None
        try:
            self._proc = forked or subprocess.Popen(
                [sys.executable, "-m", protocol.WORKER_MODULE],
                env=ends.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=tuple(ends.named.values()),
                cwd=self._dir,
            )
        except BaseException:
            ends.close(ours=True)
            raise
        finally:
            ends.close(ours=False)
        self._lifeline, self._release = ends.lifeline, ends.release
        progress_read, metrics_read = ends.progress, ends.metrics
        self._started_at = time.monotonic()
        self._reader = threading.Thread(target=self._pump, name=f"rank-{self.slot.rank}-output", daemon=True)
        self._reader.start()
        self._progress_reader = threading.Thread(
            target=self._follow_progress, args=(progress_read,), name=f"rank-{self.slot.rank}-progress", daemon=True
        )
        self._progress_reader.start()
        if metrics_read is not None:
            threading.Thread(
                target=self._follow_metrics, args=(metrics_read,), name=f"rank-{self.slot.rank}-metrics", daemon=True
            ).start()
        threading.Thread(target=self._watch_exit, name=f"rank-{self.slot.rank}-exit", daemon=True).start()

    def release(self, gloo: dict[str, str], devices: dict[str, str]) -> None:
        """
        Hand a :meth:`start`-ed ``deferred`` rank the variables known only after the barrier tasks gathered: its
        full Gloo variables (the rendezvous port) and devices (``spec.env`` still overrides them). No-op for a rank
        started otherwise or released already; a rank that died meanwhile is reported by :meth:`run_to_end`.

        :param gloo: the rank's Horovod/Gloo variables (from :func:`~.plan.gloo_env`, with the real port).
        :param devices: the rank's device variables (from :func:`~.gpus.device_env`).
        """
        if self._release is None:
            return
        late = {k: v for k, v in devices.items() if k not in self._spec.env}
        late.update({k: v for k, v in gloo.items() if self._gloo.get(k) != v})
        try:
            os.write(self._release, json.dumps(late).encode())  # a few hundred bytes: within the pipe's buffer
        except OSError:
            pass
        finally:
            os.close(self._release)
            self._release = None
        with self._changed:
            self._started_at = time.monotonic()

    def _follow_progress(self, fd: int) -> None:
        phases = {protocol.PROGRESS_LOADED: "running", protocol.PROGRESS_INIT: "init", protocol.PROGRESS_READY: "ready"}
        events = dict(zip(phases, MILESTONES, strict=True))  # the driver's names (the page's phase)
        try:
            while milestone := os.read(fd, 1):
                with self._changed:
                    self.phase = phases.get(milestone, self.phase)
                    if milestone == protocol.PROGRESS_INIT:
                        self._init_entered_at = time.monotonic()
                    elif milestone == protocol.PROGRESS_READY:
                        self.ever_initialized = True
                    self._changed.notify_all()
                if self._metrics is not None and milestone in events:
                    self._metrics(
                        {
                            "event": MILESTONE_EVENT,
                            "rank": self.slot.rank,
                            "milestone": events[milestone],
                            "time": time.time(),
                        }
                    )
        except OSError:
            pass
        finally:
            os.close(fd)

    def _follow_metrics(self, fd: int) -> None:
        assert self._metrics is not None
        with os.fdopen(fd, "rb") as lines:
            for record in json_records(lines):
                self._metrics(record)

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
            self.tail.append(cut(line, MAX_LINE_CHARS))  # the error's copy: bounded (100 huge lines stay small)
            self._sink(self.slot, line)

    def wait(self) -> int:
        """
        Wait for the process to exit and its output to drain; return its exit status. Once the rank has exited, what
        it started and left behind (DataLoader workers, a forked helper: its process group) is killed, as torchrun's
        agent kills its workers' groups: such a process would hold the rank's output pipe open, its ports and GPUs,
        and keep this launcher from reporting the rank's end.
        """
        assert self._proc is not None and self._reader is not None
        code = self._proc.wait()
        self.exited_at = time.time()  # the failure time of a rank that died without reporting (signal, os._exit)
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing of the rank's is left
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

        :param reason: why the peer left (the message this rank is stopped with).
        """
        with self._changed:
            self._peer_left = reason
            self._changed.notify_all()

    def run_to_end(self, host: str | None = None) -> RankFailedError | None:
        """
        Wait for the rank within the job's timeouts; return its failure, or ``None`` on success.

        ``start_timeout_s`` bounds loading the function (process start until it is called) and every
        ``hvd.init()`` (the rendezvous with the other ranks); the function's own work before ``hvd.init()`` is
        not counted. ``training_timeout_s`` bounds the whole run. A rank that misses one is killed (with its
        process group) and reported as failed with what it was doing.

        :param host: the rank's host, named in the error.
        """
        assert self._proc is not None
        deadline: tuple[float, str] | None = None
        with self._changed:
            while not self._exited:
                if self._peer_left is not None and self.phase == "init":
                    deadline = (time.monotonic(), "peer")
                    break
                deadline = next_deadline(self._spec, self.phase, self._started_at, self._init_entered_at)
                if deadline is None:
                    self._changed.wait()
                    continue
                remaining = deadline[0] - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            else:
                deadline = None
        if deadline is not None:
            return self._timed_out(deadline[1], host)
        return None if self.wait() == 0 else self.failure(host=host)

    def _timed_out(self, which: str, host: str | None) -> RankFailedError:
        self.kill()
        self.wait()
        return timeout_failure(
            which,
            rank=self.slot.rank,
            spec=self._spec,
            peer_left=self._peer_left,
            exit_code=self.returncode,
            host=host,
            output_tail=list(self.tail),
        )

    def failure(self, host: str | None = None) -> RankFailedError:
        """
        The error describing this rank's non-zero exit (reads the error file the worker wrote, if any).

        :param host: the rank's host, named in the error.
        """
        return exit_failure(
            rank=self.slot.rank,
            exit_code=self.returncode,
            error_path=self.error_path,
            host=host,
            output_tail=list(self.tail),
            exited_at=self.exited_at,
            launcher_name=self._spec.launcher.name,
            framework_error_path=framework_error_path(self._spec.launcher, self._dir),
        )

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
        if self._release is not None:
            os.close(self._release)
            self._release = None
