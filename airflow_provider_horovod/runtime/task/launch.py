"""
Starting and watching ranks (Horovod's, or ``torch.distributed``'s with the torchrun environment): inside Spark
barrier tasks (``np > 0``, :func:`barrier_task`) or on the
driver (``np < 0``, :func:`run_on_driver`).

Both paths share :class:`~.rank_process.RankProcess` (one child process per rank). The rendezvous store is in
:mod:`~.rendezvous`, a task's checks before it starts its rank in :mod:`~.checks`, the job itself in
:mod:`~.jobspec`.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from airflow_provider_horovod.runtime.bounds import MAX_LINE_CHARS, LongLines, cut
from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.rank_errors import RankFailedError, root_cause
from airflow_provider_horovod.runtime.task.backends import Rendezvous, RendezvousPoint, backend_for
from airflow_provider_horovod.runtime.task.checks import (
    _host_of,
    _preflight,
    _rank_interface,
    _task_gpus,
)
from airflow_provider_horovod.runtime.task.fork_client import ForkServerLink, server_environ
from airflow_provider_horovod.runtime.task.gpus import CUDA_VISIBLE_DEVICES, device_env, driver_owned_gpus
from airflow_provider_horovod.runtime.task.plan import Slot, build_plan, local_plan
from airflow_provider_horovod.runtime.task.rank_env import omp_threads
from airflow_provider_horovod.runtime.task.rank_failure import FAILURE_GRACE_S
from airflow_provider_horovod.runtime.task.rank_process import RankProcess
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.logs import ControlListener, Heartbeats, LogClient, stop_reason
from airflow_provider_horovod.runtime.wire.protocol import ENV_PREIMPORT


def stderr_sink(slot: Slot, line: str) -> None:
    """The executor's own copy of a rank's output line: its stderr (the Spark UI's task log), prefixed with the rank."""
    sys.stderr.write(f"[rank {slot.rank}] {line}\n")
    sys.stderr.flush()


def consequence_note(rank: int) -> str:
    """
    The log line that follows a bystander rank's traceback (a rank stopped because another one failed: Horovod's
    "has been shut down", Gloo's "Connection closed by peer"), so the task log does not read it as the cause.

    :param rank: the bystander rank.
    """
    return (
        f"[rank {rank}] ^ rank {rank} stopped because another rank failed first: its traceback above is a "
        "consequence; the job's error names the rank that failed and why"
    )


def _left_uninitialized(rank: int) -> str:
    return (
        f"rank {rank} ended (exit code 0) without calling hvd.init(); call hvd.init() on every rank, or on none "
        "(a function that does not use Horovod)"
    )


def run_on_driver(
    spec: JobSpec, stdout: Callable[[str], None] | None = None, metrics: Callable[[dict], None] | None = None
) -> bytes | None:
    """
    Run ``spec.np`` ranks as processes on this machine (``HorovodRunner(np=-N)``); no Spark tasks.

    Output of forwarded ranks goes to ``stdout`` (default: this process's stdout), the rest to stderr.
    The first rank to fail stops all others at once.

    :param spec: the job.
    :param stdout: where forwarded ranks' lines go; default: this process's stdout.
    :param metrics: called with every rank's ``report()`` records; ``None``: ``report()`` is a no-op.
    :return: rank 0's cloudpickled return value.
    :raises RankFailedError: a rank exited non-zero.
    :raises LaunchError: this Python cannot import what the launcher needs (Horovod, or ``torch.distributed``).
    """

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    out = stdout or emit

    long_lines = LongLines()  # these ranks' output is the task log itself: a line cut there is kept whole in a file

    def sink(slot: Slot, line: str) -> None:
        line = long_lines.line(slot.rank, line)
        if spec.forwards(slot):
            out(f"[rank {slot.rank}] {line}")
        else:
            stderr_sink(slot, line)

    _preflight("the driver", spec.launcher.name)
    plan = local_plan(spec.np)
    workdir = tempfile.mkdtemp(prefix="horovod-ranks-")
    backend = backend_for(spec.launcher.name)
    rendezvous = backend.open_rendezvous(plan, bind="127.0.0.1")
    point = RendezvousPoint(addr="127.0.0.1", iface="lo", gloo_timeout_s=spec.settings.gloo_timeout_s)
    envs = [backend.rank_env(s, plan, replace(point, port=rendezvous.port, run_id=rendezvous.run_id)) for s in plan]
    owned = driver_owned_gpus(spec.np, os.environ.get(CUDA_VISIBLE_DEVICES)) if spec.settings.use_gpu else []
    threads = omp_threads(spec, os.environ)  # torchrun's rule for several processes on one machine
    procs = [
        RankProcess(
            s,
            spec,
            envs[i],
            workdir,
            sink,
            devices=device_env(spec.settings.use_gpu, owned, plan, i, spec.settings.gpu_visibility),
            metrics=metrics,
            threads=threads,
        )
        for i, s in enumerate(plan)
    ]
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
                cause = root_cause(failures)
                for bystander in failures:
                    if bystander is not cause and bystander.is_secondary and spec.forwards(procs[bystander.rank].slot):
                        out(consequence_note(bystander.rank))
                raise cause
        return procs[0].result()
    finally:
        for p in procs:
            p.kill()
        rendezvous.close()
        shutil.rmtree(workdir, ignore_errors=True)


def barrier_task(spec: JobSpec, _rows: Iterable[object]) -> Iterator[bytes]:
    """
    The body of every task of the barrier stage: plan, rendezvous, start one rank, watch it.

    Partition 0 opens the launcher's rendezvous (:meth:`~.backends.LaunchBackend.open_rendezvous`: Horovod's
    ``RendezvousServer``, or the port rank 0's ``torch.distributed`` store listens on); every task puts what the
    others need (that port from partition 0, each task's GPUs) in the JSON it gathers with ``allGather``, then
    starts its rank with the launcher's full environment and its devices. A rank that fails raises at once (the
    barrier stage aborts and Spark kills the other tasks, whose ranks die with their lifeline). On success every
    other task reports its rank's exit to the rendezvous store and task 0 waits for all of them (:class:`RanksDone`),
    so the store outlives every rank.

    :param spec: the job (shipped in the task closure).
    :param _rows: the partition's rows (unused).
    :return: an iterator yielding rank 0's cloudpickled return value from partition 0, nothing elsewhere.
    :raises RankFailedError: this task's rank failed; its message ends with a marker the driver decodes.
    :raises LaunchError: the task cannot start its rank (no GPU with ``use_gpu``, an unusable interface
        override or host name).
    """
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    addresses = [_host_of(info.address) for info in ctx.getTaskInfos()]
    _preflight(addresses[partition], spec.launcher.name)
    if len(addresses) != spec.np:
        raise LaunchError(f"barrier stage has {len(addresses)} tasks but np={spec.np}")
    plan = build_plan(addresses)
    slot = plan[partition]
    backend = backend_for(spec.launcher.name)
    backend.check_task(plan, addresses[partition])
    mine = _task_gpus(ctx, addresses[partition]) if spec.settings.use_gpu else []
    rendezvous_addr = addresses[0]
    iface = _rank_interface(spec, rendezvous_addr, addresses[partition])
    point = RendezvousPoint(addr=rendezvous_addr, iface=iface, gloo_timeout_s=spec.settings.gloo_timeout_s)
    client = LogClient(spec.log_address, spec.log_token or "") if spec.log_address else None
    forward = client is not None and spec.forwards(slot)

    shared = forward and spec.executors_share_driver_stderr  # an embedded local[N] master: the driver's stderr
    long_lines = LongLines()

    def sink(s: Slot, line: str) -> None:
        if not shared:
            stderr_sink(s, line)  # the executor's full copy
        if forward and client is not None:  # the task log's copy, within MAX_LINE_CHARS
            short = long_lines.line(s.rank, line) if shared else cut(line, MAX_LINE_CHARS, "the executor's stderr")
            client.send(f"[rank {s.rank}] {short}")

    def launch_env(port: int | None, run_id: str | None) -> dict[str, str]:
        return backend.rank_env(slot, plan, replace(point, port=port, run_id=run_id))

    # The rank starts before the allGather below and imports its framework while the tasks gather (about a
    # second for all but the last task to arrive); the port and devices follow with release().
    gloo = launch_env(None, None)
    devices = {} if spec.settings.use_gpu else device_env(False, [], plan, partition, spec.settings.gpu_visibility)
    workdir = tempfile.mkdtemp(prefix="horovod-rank-")
    proc = RankProcess(
        slot, spec, gloo, workdir, sink, devices=devices, metrics=client.send_metrics if client is not None else None
    )
    rendezvous: Rendezvous | None = None
    # the driver treats a task whose heartbeats stop as lost (runtime/driver/heartbeats.py)
    beats = contextlib.ExitStack()
    if client is not None and spec.settings.heartbeat_timeout_s is not None:
        beat = {"task": partition, "rank": slot.rank, "host": addresses[partition], "stage": ctx.stageId()}
        beats.enter_context(Heartbeats(client, {**beat, "pid": os.getpid()}))

    def told(message: str) -> None:  # the driver's word (rank 0's task only)
        reason = stop_reason(message)
        if reason is not None:
            proc.request_stop(reason)

    link: ForkServerLink | None = None
    try:
        try:
            proc.start(deferred=True, fork_key=spec.fork_key)
            if proc.forked:
                imported = proc.environ.get(ENV_PREIMPORT) or "nothing the function names"
                sink(
                    slot,
                    f"airflow-provider-horovod: forked from the job's fork server on this host ({imported} "
                    "imported there)",
                )
            if spec.fork_key:  # a job that may restart: the next attempt's ranks fork from a server on this host
                link = beats.enter_context(ForkServerLink(spec.fork_key, server_environ(proc.environ), proc.joined))
            if spec.stoppable and slot.rank == 0 and spec.log_address:  # rank 0 saves checkpoints: it stops at one
                beats.enter_context(ControlListener(spec.log_address, spec.log_token or "", told))
            if partition == 0:
                rendezvous = backend.open_rendezvous(plan, bind=addresses[0], peers=addresses)
                rendezvous.on_uninitialized(lambda rank: proc.peer_left(_left_uninitialized(rank)))
            mine_info = {
                "port": rendezvous.port if rendezvous else None,
                "run_id": rendezvous.run_id if rendezvous else None,
                "gpus": mine,
            }
            # over the driver's log channel when there is one (at once; Spark's allGather answers at a full second)
            infos = client.gather(partition, spec.np, mine_info) if client is not None else None
            if infos is None:
                infos = [json.loads(m) for m in ctx.allGather(json.dumps(mine_info))]
            port = int(infos[0]["port"])
            proc.release(
                launch_env(port, infos[0]["run_id"]),
                device_env(
                    spec.settings.use_gpu,
                    [info["gpus"] for info in infos],
                    plan,
                    partition,
                    spec.settings.gpu_visibility,
                ),
            )
            err = proc.run_to_end(host=addresses[partition])
            if err is not None:
                if err.is_secondary and forward and client is not None:
                    client.send(consequence_note(slot.rank))  # its traceback reached the log first: a consequence
                # the report lets the driver tell the root cause from bystanders (and is the task's last word: a
                # failed stage's driver stops listening once every task still connected has reported); without a
                # channel the error text itself must carry it through Spark's exception
                reported = client is not None and client.report_failure(err.to_dict())
                if err.is_secondary:
                    # This rank failed because another one did (Horovod shut it down). That rank's task, or
                    # Spark's own reason for losing it, should abort the stage and be what the user reads;
                    # this task waits until the driver, knowing the stage failed, closes its channel, within a
                    # bounded grace (all of it without a channel to watch). Spark would kill it only 2-4 s after
                    # the abort, holding the slot a restart of the job waits for.
                    grace_ends = time.monotonic() + FAILURE_GRACE_S
                    if not (reported and client is not None and client.wait_closed(FAILURE_GRACE_S)):
                        time.sleep(max(0.0, grace_ends - time.monotonic()))
                if not reported:
                    err.args = (f"{err}\n{err.marker()}",)
                raise err
            result = proc.result()
            if link is not None:
                link.job_succeeded()
        finally:
            proc.kill()
            if rendezvous is not None:
                rendezvous.release_port()
            beats.close()
            if client is not None:
                client.close()
            shutil.rmtree(workdir, ignore_errors=True)
        if rendezvous is not None:  # task 0: a store served here must outlive every rank
            rendezvous.wait_for_ranks(s.rank for s in plan if s.rank != slot.rank)
        else:
            backend.rank_done(rendezvous_addr, port, slot.rank, initialized=proc.ever_initialized)
        if result is not None:
            yield result
    finally:
        if rendezvous is not None:
            rendezvous.close(soon=True)
