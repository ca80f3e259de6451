"""``HorovodRunner``: the ``sparkdl.HorovodRunner`` API on a Spark barrier stage, with the launch done in the tasks."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from airflow_provider_horovod.runtime.driver.connect import is_connect_session, run_barrier_connect
from airflow_provider_horovod.runtime.driver.heartbeats import HeartbeatWatch, Watchdog, executor_of_task
from airflow_provider_horovod.runtime.driver.metrics import MetricsCollector
from airflow_provider_horovod.runtime.driver.outcome import raise_for_stage_failure
from airflow_provider_horovod.runtime.driver.restarts import Restart, RestartBudget, restarted
from airflow_provider_horovod.runtime.driver.shipping import runtime_zip, ship_runtime
from airflow_provider_horovod.runtime.driver.slots import (
    LOG_PREFIX,
    job_group_executors,
    local_master_slots,
    not_enough_slots,
    offers_renewed,
    own_slots,
    stop_at_checkpoint_when,
    wait_for_slots,
)
from airflow_provider_horovod.runtime.errors import LaunchError, ReturnValueRefused, ReturnValueTooLargeError
from airflow_provider_horovod.runtime.mlflow_sink import MlflowMetricsSink, check_mlflow_installed, run_env
from airflow_provider_horovod.runtime.observability import ENV_TIMELINE, TIMELINE_FILE_NAME
from airflow_provider_horovod.runtime.settings import (
    DEFAULT_ELASTIC_WAIT_S,
    DEFAULT_GLOO_TIMEOUT_S,
    DEFAULT_GPU_VISIBILITY,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_LAUNCHER,
    DEFAULT_MAX_RETURN_VALUE_BYTES,
    DEFAULT_SLOT_WAIT_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    JobSettings,
    check_barrier_conf,
    spark_flag,
)
from airflow_provider_horovod.runtime.task.gpus import check_gpu_conf
from airflow_provider_horovod.runtime.task.launch import barrier_task, run_on_driver
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.logs import LogServer
from airflow_provider_horovod.runtime.wire.payload import LARGE_PAYLOAD_BYTES, dumps_payload
from airflow_provider_horovod.runtime.wire.protocol import ENV_FORK_SERVER, switched_off

STAGE_FAILED_DRAIN_S = 15.0
"""Once the barrier stage has failed, how long the driver waits for tasks still connected to the log channel that sent
no failure report yet (a rank still computing when its peer died: Spark kills it within seconds), seconds. Tasks that
reported are not waited for: their report is their last word, and they would wait out a grace (``FAILURE_GRACE_S``)
before Spark kills them, which delayed the error, and a restart, by about 3 s."""


class BarrierRunner:
    """
    Run a serialized training function on ``np`` ranks (a Spark barrier stage of ``np`` tasks, or ``-np`` processes
    on the driver) and bring back rank 0's value: what :class:`HorovodRunner` and
    :class:`~airflow_provider_horovod.runtime.torch_distributor.TorchDistributor` are, each with its own API, and what
    the driver program and the Spark Connect hook run settings already checked with.

    :param settings: the job's knobs (``np``, the launcher, timeouts, GPUs, ...).
    :param artifact_dir: path or URI the ranks see through :func:`~airflow_provider_horovod.runtime.artifact_dir`.
    :param env: extra environment variables for every rank.
    :param spark: the ``SparkSession`` to run on (classic or Spark Connect); default: the active session, else
        ``SparkSession.builder.getOrCreate()``.
    :param mlflow_run: log into an MLflow run: ``True`` the active run, or a run id; ``False``: none (see
        :class:`HorovodRunner`).
    :raises ValueError: ``settings.timeline`` without ``artifact_dir``, or a bad ``mlflow_run``.
    """

    def __init__(
        self,
        settings: JobSettings,
        *,
        artifact_dir: str | None = None,
        env: dict[str, str] | None = None,
        spark: Any = None,
        mlflow_run: bool | str = False,
    ) -> None:
        self.settings = settings
        """The job's knobs, checked."""
        if settings.timeline and not artifact_dir:
            raise ValueError(
                f"timeline=True needs artifact_dir: the Horovod Timeline is written there as {TIMELINE_FILE_NAME}"
            )
        self.spark = spark
        self.artifact_dir = artifact_dir
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        if settings.timeline:
            self.env.setdefault(ENV_TIMELINE, "1")
        if not isinstance(mlflow_run, bool | str) or mlflow_run == "":
            raise ValueError(f"mlflow_run must be True, False or a run id, got {mlflow_run!r}")
        if mlflow_run:
            check_mlflow_installed("mlflow_run")
        self.mlflow_run = mlflow_run
        self.last_metrics: dict[str, Any] = {}
        """Rank 0's last ``report()`` metrics of the latest run (empty before one, or when it reported none)."""
        self.restarts: list[Restart] = []
        """The restarts of the latest run (``max_restarts``), in order: empty when its first attempt ended it."""
        self._attempt_ranks: int | None = None  # the ranks of the attempt running (or that ended) last

    @property
    def np(self) -> int:
        """The number of processes as given: ``> 0`` barrier tasks, ``< 0`` processes on the driver."""
        return self.settings.np

    def run_call(self, fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """
        Run ``fn(*args, **kwargs)`` on every rank and return rank 0's return value.

        ``fn`` and its arguments travel with cloudpickle; functions defined in a module that executors cannot import
        (an Airflow DAG file, a notebook) travel by value. Imports belong inside ``fn``.

        :param fn: the training function; it joins the other ranks itself (``hvd.init()``, ``init_process_group()``).
        :param args: its positional arguments.
        :param kwargs: its keyword arguments.
        :return: what rank 0's ``fn`` returned.
        :raises ReturnValueTooLargeError: that value's pickle was larger than ``max_return_value_bytes``; rank 0
            did not send it (the message gives both sizes).
        :raises RankFailedError: a rank failed; the message names the rank and carries its traceback.
        :raises LaunchError: the stage could not run (not enough slots, dynamic allocation, ``use_gpu`` without
            GPU scheduling, Spark error).
        :raises PayloadError: ``fn`` or its arguments cannot be pickled.
        """
        payload = dumps_payload(fn, tuple(args), dict(kwargs or {}))
        if len(payload) > LARGE_PAYLOAD_BYTES:
            import warnings

            warnings.warn(
                f"the training payload is {len(payload) / 2**20:.0f} MiB: a dataset captured in the function "
                "or its arguments travels with every task; pass a path and load it inside main instead",
                stacklevel=3,
            )
        result = self.run_payload(payload)
        value = None if result is None else cloudpickle.loads(result)
        if isinstance(value, ReturnValueRefused):
            raise ReturnValueTooLargeError(value)
        return value

    def run_payload(self, payload: bytes, *, progress_mirror: str | None = None) -> bytes | None:
        """
        Run an already serialized payload; return rank 0's cloudpickled return value.

        Used by :meth:`run_call` and by the spark-submit driver program (the operator's path).

        :param payload: the payload bytes (:func:`~airflow_provider_horovod.runtime.wire.payload.dumps_payload`).
        :param progress_mirror: a directory (path or URI) that also gets ``progress.json`` (the driver program's
            result directory).
        The ranks' ``report()`` records become the job's progress line, ``<artifact_dir>/metrics.jsonl`` and
        ``progress.json`` (:class:`~airflow_provider_horovod.runtime.driver.metrics.MetricsCollector`); rank 0's last
        metrics are in :attr:`last_metrics` afterwards.

        :return: rank 0's cloudpickled return value, or ``None`` when it returned nothing to pickle; a pickled
            :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` when that value's pickle was larger
            than ``max_return_value_bytes`` (the caller reports it).
        :raises RankFailedError: a rank failed.
        :raises LaunchError: the stage could not run.
        """
        env = (
            self.env
            if not self.mlflow_run
            else {**run_env(None if self.mlflow_run is True else self.mlflow_run), **self.env}
        )
        # a job that may restart keeps a fork server per host for its next attempt's ranks (not with GPUs: a forked
        # process must not inherit a framework's device state), unless its environment turns it off
        forks = (
            self.settings.max_restarts > 0
            and self.np > 0
            and not self.settings.use_gpu
            and not switched_off(env.get(ENV_FORK_SERVER))
        )
        spec = JobSpec(
            payload=payload,
            settings=self.settings,
            artifact_dir=self.artifact_dir,
            env=env,
            fork_key=secrets.token_hex(16) if forks else None,
        )
        budget = RestartBudget(self.settings.max_restarts, self.settings.restart_on)
        self.restarts = budget.restarts
        with MetricsCollector(
            self.artifact_dir,
            mirror_dir=progress_mirror,
            sink=MlflowMetricsSink.from_env(env),
            ranks=spec.np,
            init_call=spec.launcher.init_call,
        ) as collector:
            try:
                while True:
                    try:
                        attempt = dataclasses.replace(spec, restart_count=budget.count, failures=budget.failures)
                        result = self._run_attempt(attempt, collector)
                        break
                    except Exception as err:
                        restart = budget.next_restart(
                            err, step=collector.snapshot().get("step"), ranks=self._attempt_ranks
                        )
                        if restart is None:
                            restarted(err, budget.restarts, budget.max_restarts)
                            raise
                    line = restart.line()
                    print(LOG_PREFIX + line, flush=True)
                    collector.restart(restart.to_dict())
                    collector.phase(line)
                    time.sleep(restart.backoff_s)  # the back-off (doubling), not a wait for anything
            except BaseException as err:
                collector.finish("failed", error=f"{type(err).__name__}: {err}")
                raise
            finally:
                self.last_metrics = collector.last_metrics
            collector.finish("finished")
        return result

    def _run_attempt(self, spec: JobSpec, collector: MetricsCollector) -> bytes | None:
        """One attempt of the job: the ranks on the driver, or one barrier stage."""
        self._attempt_ranks = spec.np
        if self.np < 0:
            collector.phase(f"starting {spec.np} rank{'s' if spec.np > 1 else ''} on the driver")
            return run_on_driver(spec, metrics=collector.add)
        return self._run_barrier(spec, collector.add, collector.phase)

    def _run_barrier(
        self, spec: JobSpec, metrics: Callable[[dict], None], phase: Callable[[str], None] = lambda text: None
    ) -> bytes | None:
        from pyspark.sql import SparkSession

        spark = self.spark or SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        if is_connect_session(spark):
            if not spec.restart_count and spec.settings.min_np is not None and spec.settings.min_np < spec.np:
                print(
                    f"{LOG_PREFIX}min_np={spec.settings.min_np} is not used over Spark Connect (the server's Spark "
                    f"schedules the stage): every attempt runs np={spec.np} ranks",
                    flush=True,
                )
            phase(f"starting {spec.np} ranks (a barrier stage over Spark Connect)")
            return run_barrier_connect(spark, spec, runtime_zip(), metrics)
        sc = spark.sparkContext
        conf = sc.getConf()
        try:
            check_barrier_conf(dict(conf.getAll()), source="this application's Spark conf")
        except ValueError as err:
            raise LaunchError(str(err)) from None
        if spec.settings.use_gpu:
            check_gpu_conf(dict(conf.getAll()))
        master = str(sc.master)
        slots = local_master_slots(master)
        if slots is not None and spec.np > slots:
            raise LaunchError(
                f"np={spec.np} needs {spec.np} task slots but the master {master} has {slots}; "
                f"use local[{spec.np}] or a smaller np"
            )
        ship_runtime(sc)
        if spec.restart_count and spec.settings.min_np is not None and spec.settings.min_np < spec.np:
            spec = self._elastic_spec(sc, spec, phase)
            self._attempt_ranks = spec.np
        host = conf.get("spark.driver.host", "127.0.0.1")
        group = f"horovod-{uuid.uuid4().hex[:12]}"
        stage_error: Exception | None = None
        results: list[bytes] = []
        timeout_s = self.settings.heartbeat_timeout_s
        heartbeats = HeartbeatWatch(timeout_s) if timeout_s is not None else None
        watchdog: Watchdog | None = None
        with LogServer(host, on_metrics=metrics, on_heartbeat=heartbeats.record if heartbeats else None) as logs:
            # a termination notice moves the job at a checkpoint only where the user opted in to restarts
            decommission = spec.settings.max_restarts > 0 and spark_flag(conf, "spark.decommission.enabled")
            spec = dataclasses.replace(
                spec,
                log_address=logs.address,
                log_token=logs.token,
                executors_share_driver_stderr=master.startswith("local"),
                stoppable=spec.grows_to is not None or decommission,
            )
            rdd = sc.parallelize(range(spec.np), spec.np).barrier().mapPartitions(functools.partial(barrier_task, spec))
            rdd.id()  # the stage's RDD (its pickled function included) exists in the JVM before the wait ...
            # ... so, once the slots come, only the job is left
            phase(f"waiting for {spec.np} task slots")

            def waiting(line: str) -> None:  # why it waits, with the counts: the task log's and the page's
                print(LOG_PREFIX + line, flush=True)
                phase(line)

            wait_for_slots(sc, spec.np, self.settings.slot_wait_timeout_s, log=waiting)
            phase(f"starting {spec.np} ranks (the barrier stage is submitted)")
            # the Spark UI's name of the job: "Horovod np=2", "torch.distributed np=2"
            sc.setJobGroup(group, f"{spec.launcher.label} np={spec.np}", interruptOnCancel=True)
            if heartbeats is not None:
                watchdog = Watchdog(
                    heartbeats,
                    cancel=functools.partial(sc.cancelJobGroup, group),
                    locate=functools.partial(executor_of_task, sc),
                    replace=lambda executor: sc._jsc.sc().killAndReplaceExecutor(executor),
                )
            stopping = (
                stop_at_checkpoint_when(
                    sc,
                    logs.tell,
                    ranks=spec.np,
                    grows_to=spec.grows_to,
                    decommission=functools.partial(job_group_executors, sc, group, spec.np) if decommission else None,
                    log=waiting,
                )
                if spec.stoppable
                else contextlib.nullcontext()
            )
            try:
                with watchdog or contextlib.nullcontext(), offers_renewed(sc, lambda: logs.accepted > 0), stopping:
                    results = rdd.collect()
            except KeyboardInterrupt:
                sc.cancelJobGroup(group)
                raise
            except Exception as err:
                stage_error = err
                logs.drain_timeout_s = STAGE_FAILED_DRAIN_S
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        # The log server is closed: every failure report a task sent has arrived.
        if stage_error is not None and watchdog is not None and watchdog.lost is not None:
            raise watchdog.error() from stage_error  # the cancellation was ours: a task went silent
        if stage_error is not None:
            raise_for_stage_failure(
                stage_error,
                logs.failures,
                lambda: not_enough_slots(sc, spec.np),
                np=spec.np,
                executor_host=functools.partial(_executor_host, sc),
            )
        return results[0] if results else None

    def _elastic_spec(self, sc: Any, spec: JobSpec, phase: Callable[[str], None]) -> JobSpec:
        """
        Elastic ranks (``min_np``), for a restart: ``spec`` when its ``np`` slots are there within
        ``elastic_wait_s`` (a restart after one with fewer ranks grows back), else ``spec`` with as many ranks as this
        application has slots, never fewer than ``min_np`` (waited for as at the start, up to
        ``slot_wait_timeout_s``), and ``grows_to`` set: the attempt grows back once all ``np`` slots are free
        (:func:`~.slots.stop_at_checkpoint_when`).
        """
        settings = spec.settings

        def log(line: str) -> None:
            print(LOG_PREFIX + line, flush=True)
            phase(line)

        try:
            wait_for_slots(sc, settings.np, settings.elastic_wait_s, log=log)
            return spec
        except LaunchError as err:  # not within elastic_wait_s, or never again (its host is gone)
            why = str(err).split("; ", 1)[-1]
        assert settings.min_np is not None
        if own_slots(sc)[0] < settings.min_np:
            wait_for_slots(sc, settings.min_np, settings.slot_wait_timeout_s, log=log)
        ranks = max(settings.min_np, min(settings.np, own_slots(sc)[0]))
        log(
            f"restart {spec.restart_count}: {ranks} of np={settings.np} ranks (min_np={settings.min_np}): all "
            f"{settings.np} slots did not come back within elastic_wait_s={settings.elastic_wait_s:g} s ({why}); it "
            f"grows back after a checkpoint once they are free"
        )
        grows_to = settings.np if ranks < settings.np else None
        return dataclasses.replace(spec, settings=settings.replace(np=ranks), grows_to=grows_to)


class HorovodRunner(BarrierRunner):
    """
    Run a Horovod training function on ``np`` processes and return what rank 0 returned.

    The API of Databricks' ``sparkdl.HorovodRunner``. With ``np > 0`` the job is one Spark barrier stage of
    ``np`` tasks on the active (or default) ``SparkSession``; each task starts one Horovod process with
    Gloo, whose rendezvous server runs in task 0. With ``np < 0``, ``-np`` processes run on the driver.

    :param np: number of processes (non-zero int); see above.
    :param driver_log_verbosity: ``"log_callback_only"`` (default) sends only rank 0's output to the
        driver's stdout; ``"all"`` sends every rank's. Every rank's full output is always kept in its
        executor's stderr (np > 0) or the driver's stderr (np < 0). Unlike Databricks there is no
        ``log_to_driver`` callback: rank 0's prints are the training log.
    :param artifact_dir: path or URI the ranks see through :func:`~airflow_provider_horovod.runtime.artifact_dir`.
    :param gloo_timeout_s: seconds Gloo waits in rendezvous and in a collective before failing (Horovod's
        default of 30 s is too short for ranks that start on busy executors).
    :param env: extra environment variables for every rank.
    :param start_timeout_s: seconds each rank may take to load the function and finish ``hvd.init()``;
        past it the job fails naming the ranks that never joined. ``None``: no limit.
    :param training_timeout_s: seconds each rank may run in all; ``None`` (default): no limit.
    :param spark: the ``SparkSession`` to run on (classic or Spark Connect); default: the active session, else
        ``SparkSession.builder.getOrCreate()``.
    :param use_gpu: ``True``: each rank gets the GPUs Spark scheduled for its task through
        ``CUDA_VISIBLE_DEVICES`` (the application must set ``spark.task.resource.gpu.amount``; with ``np < 0``
        rank ``r`` gets the driver's device ``r``). ``False`` (default): ranks see no GPU
        (``CUDA_VISIBLE_DEVICES=""``, as TorchDistributor does). A ``CUDA_VISIBLE_DEVICES`` in ``env`` wins.
    :param gpu_visibility: with ``use_gpu``, ``"host"`` (default: every rank sees its host's task GPUs, device
        ``hvd.local_rank()`` being its own, so ``torch.cuda.set_device(hvd.local_rank())``) or ``"rank"`` (only
        its own GPUs: ``torch.cuda.set_device(0)``). See :mod:`~airflow_provider_horovod.runtime.task.gpus`.
    :param slot_wait_timeout_s: seconds a barrier job (``np > 0``) waits on the driver for ``np`` task slots of
        its own application when the cluster is busy (default one hour); ``None``: no limit. The log says what
        it waits for, on change; a job that can never have them fails at once with the numbers. See
        :mod:`~airflow_provider_horovod.runtime.driver.slots`. Over Spark Connect there is no driver of ours: the
        server's ``spark.scheduler.barrier.maxConcurrentTasksCheck.*`` decide.
    :param timeline: record the Horovod Timeline (``HOROVOD_TIMELINE``, written by rank 0) to
        ``<artifact_dir>/horovod_timeline.json``, closed as valid JSON when rank 0 ends; needs ``artifact_dir``.
        See :mod:`~airflow_provider_horovod.runtime.observability`.
    :param max_return_value_bytes: the largest return value rank 0 sends back, in bytes of its cloudpickle (a
        positive int; default 64 MiB, far above metrics and paths, well below what a default 1 GiB driver and a 512
        MiB executor hold while the value crosses them in a few copies). Rank 0 measures its value's pickle and, when
        it is larger, does not send it: :meth:`run` raises
        :class:`~airflow_provider_horovod.runtime.errors.ReturnValueTooLargeError` as soon as the job has ended, and
        the files the ranks wrote stay. Databricks' ``HorovodRunner`` has no such limit; there the value travels
        through the executor's and the driver's JVM memory (a few copies of it), and one too large for them makes
        the job fail or hang. Return paths and metrics; write models under ``artifact_dir``.
    :param launcher: ``"horovod"`` (default: Horovod's Gloo rendezvous; the function calls ``hvd.init()``) or
        ``"torch"`` (the torchrun environment; the function calls ``torch.distributed.init_process_group()``;
        :class:`~airflow_provider_horovod.runtime.torch_distributor.TorchDistributor` is the API made for it).
    :param checkpoint_dir: path or URI the ranks see through
        :func:`~airflow_provider_horovod.runtime.checkpoint_dir` (and that :func:`~airflow_provider_horovod.runtime.
        save_checkpoint` / :func:`~airflow_provider_horovod.runtime.load_checkpoint` use): give the same one to the
        job that resumes. ``None`` (default): ``checkpoint_dir()`` raises. See ``docs/checkpoints.md``.
    :param try_number: which attempt this run is (1 for the first), for the ranks'
        :func:`~airflow_provider_horovod.runtime.try_number` and the resume log line; ``None`` (default): unknown.
    :param mlflow_run: log into an MLflow run (``docs/mlflow.md``): ``True`` the active run (``mlflow.start_run()``
        in this process), or a run id; every rank gets ``MLFLOW_RUN_ID``, the tracking URI and credentials, so
        ``mlflow.start_run()`` on rank 0 resumes it, and ``report()``'s metrics are logged into it from the driver.
        ``False`` (default): none (unless ``env`` names one).
    :param max_restarts: how many times the job starts again on the same Spark application after an attempt fails
        for a reason that is nobody's bug (a lost executor or host, a rank killed by a signal, a rendezvous that
        never completed), at once the first time, then after a back-off of 1, 2, 4, ... s; the ranks resume through
        ``load_checkpoint()`` and
        see :func:`~airflow_provider_horovod.runtime.restart_count`. Default 0: never (torchrun's
        ``--max-restarts``, Ray Train's ``max_failures``). With it and the session's ``spark.decommission.enabled``, a
        termination notice for an executor of the job moves it at rank 0's next ``save_checkpoint()`` when a spare
        executor is there (a planned restart, not counted). See
        :mod:`~airflow_provider_horovod.runtime.driver.restarts`.
    :param restart_on: exception types of the training code that restart an attempt too (classes or names,
        ``"*"``: every one); default none.
    :param heartbeat_timeout_s: seconds without a barrier task's heartbeat (every 2 s over the log channel) after
        which the driver treats the task as lost (its host frozen, cut off or gone): it cancels the stage, asks the
        cluster manager to replace that executor, and the attempt fails with an ``ExecutorLostError`` that
        ``max_restarts`` restarts, instead of waiting for ``spark.network.timeout`` (120 s). Default 30 s, at least
        6; ``None``: Spark's detection only. Barrier tasks on a classic ``SparkSession`` only (over Spark Connect
        the server's Spark decides). See :mod:`~airflow_provider_horovod.runtime.driver.heartbeats`.
    :param min_np: elastic ranks (``np > 0``, with ``max_restarts``): a restart whose ``np`` slots do not come back
        within ``elastic_wait_s`` (a host lost for good) runs with as many ranks as the application has slots, never
        fewer than ``min_np``. It grows back: once all ``np`` slots are free again (a new worker's executor), rank 0
        stops after its next :func:`~airflow_provider_horovod.runtime.save_checkpoint` and the job starts again
        with ``np`` ranks from there (a restart that ``max_restarts`` does not count). The function sees its
        attempt's world size (``hvd.size()``, ``WORLD_SIZE``): scale the learning rate and the data shards with it
        (``docs/fault-tolerance.md``). ``None`` (default): always ``np``.
    :param elastic_wait_s: seconds a restart waits for all ``np`` slots before it starts with fewer (default 30).
    :raises ValueError: an argument is invalid (raised here, before any Spark work), with the same message as the
        operator's and the decorator's (:class:`~airflow_provider_horovod.runtime.settings.JobSettings`).
    """

    def __init__(
        self,
        *,
        np: int,
        driver_log_verbosity: str = "log_callback_only",
        artifact_dir: str | None = None,
        gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S,
        env: dict[str, str] | None = None,
        start_timeout_s: float | None = DEFAULT_START_TIMEOUT_S,
        training_timeout_s: float | None = None,
        spark: Any = None,
        use_gpu: bool = False,
        gpu_visibility: str = DEFAULT_GPU_VISIBILITY,
        slot_wait_timeout_s: float | None = DEFAULT_SLOT_WAIT_TIMEOUT_S,
        timeline: bool = False,
        max_return_value_bytes: int = DEFAULT_MAX_RETURN_VALUE_BYTES,
        launcher: str = DEFAULT_LAUNCHER,
        checkpoint_dir: str | None = None,
        try_number: int | None = None,
        mlflow_run: bool | str = False,
        max_restarts: int = 0,
        restart_on: Sequence[type[BaseException] | str] | str = (),
        heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S,
        min_np: int | None = None,
        elastic_wait_s: float = DEFAULT_ELASTIC_WAIT_S,
    ) -> None:
        settings = JobSettings.from_arguments(locals())  # np, ..., try_number: the arguments named as its fields
        super().__init__(
            settings,
            artifact_dir=artifact_dir,
            env=env,
            spark=spark,
            mlflow_run=mlflow_run,
        )

    def run(self, main: Callable[..., Any], **kwargs: Any) -> Any:
        """
        Run ``main(**kwargs)`` on every rank and return rank 0's return value.

        ``main`` and ``kwargs`` travel with cloudpickle; functions defined in a module that executors cannot
        import (an Airflow DAG file, a notebook) travel by value. Imports belong inside ``main``.

        :param main: the training function; it calls ``hvd.init()`` (``init_process_group()``) itself.
        :param kwargs: keyword arguments for ``main``.
        :return: what rank 0's ``main`` returned.
        :raises: as :meth:`run_call` (``PayloadError``: ``main`` or ``kwargs`` cannot be pickled).
        """
        return self.run_call(main, (), kwargs)


def _executor_host(sc: Any, executor_id: str) -> str | None:
    """The host of executor ``executor_id`` (lost ones too) from the driver's status store, the REST API's source."""
    summary = sc._jsc.sc().statusStore().executorSummary(executor_id)
    return str(summary.hostPort()).rsplit(":", 1)[0] or None
