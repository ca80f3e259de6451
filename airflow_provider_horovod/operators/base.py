"""
:class:`DistributedTrainingOperator`: what ``HorovodRunnerOperator`` and ``TorchDistributedOperator`` share (siblings
over this base, as Ray Train's ``TorchTrainer`` and ``HorovodTrainer`` are over ``DataParallelTrainer``).

A try builds one :class:`~airflow_provider_horovod.job.TrainingJob` from the rendered arguments, hands it to one
deploy mode (:mod:`airflow_provider_horovod.operators.modes`: client, standalone cluster, Spark Connect), which does
the job methods Airflow's ``ResumableJobMixin`` asks for, and tells the try's observers
(:mod:`airflow_provider_horovod.operators.observers`: MLflow, OpenLineage, the model's asset events) at each named
point of the job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, ResumableJobMixin

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.connect import HorovodConnectHook
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.links import MlflowRunLink, SparkUILink
from airflow_provider_horovod.operators._arguments import (
    SETTING_NAMES,
    checked_settings,
    rendered_slot_wait_timeout,
    signed_payload,
)
from airflow_provider_horovod.operators._reporting import JobReporter
from airflow_provider_horovod.operators.common import (
    DEFAULT_MAX_RETURN_BYTES,
    _default_deferrable,
    validate_deploy_mode,
)
from airflow_provider_horovod.operators.lineage import LineageObserver, completed_lineage, default_inject_flag
from airflow_provider_horovod.operators.mlflow_tracking import (
    MlflowRunObserver,
    MlflowSettings,
    check_mlflow_arguments,
)
from airflow_provider_horovod.operators.modes import resolve_deploy_mode
from airflow_provider_horovod.operators.modes.base import DeployMode
from airflow_provider_horovod.operators.modes.client import ClientMode
from airflow_provider_horovod.operators.modes.cluster import ClusterMode, ClusterOptions
from airflow_provider_horovod.operators.modes.connect import ConnectMode
from airflow_provider_horovod.operators.observers import FinishedTry, ModelAssetEvents, Observers
from airflow_provider_horovod.paths import default_artifact_dir, default_checkpoint_dir
from airflow_provider_horovod.runtime.launchers import get_launcher
from airflow_provider_horovod.runtime.settings import (
    DEFAULT_ELASTIC_WAIT_S,
    DEFAULT_GLOO_TIMEOUT_S,
    DEFAULT_GPU_VISIBILITY,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_LAUNCHER,
    DEFAULT_SLOT_WAIT_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    JobSettings,
    validate_timeout,
)
from airflow_provider_horovod.standalone.durable import DurableClusterJob
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.utils.storage import credentials_env, shared_conn_id, storage_location
from airflow_provider_horovod.xcom_keys import XCOM_ARTIFACT_DIR, XCOM_CHECKPOINT_DIR

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DistributedTrainingOperator"]


class DistributedTrainingOperator(ResumableJobMixin, BaseOperator):
    """
    Run a training function on Spark as one barrier stage of ``np`` tasks, each starting one rank of its
    ``launcher``; rank 0's return value becomes the task's ``return_value`` XCom, the files the
    job wrote under its artifact directory ``artifact_paths``, the Spark application id ``spark_app_id``, the
    directory itself ``artifact_dir``, and the task instance's checkpoint directory (the same for every try)
    ``checkpoint_dir``. Use one of its subclasses:
    :class:`~airflow_provider_horovod.operators.horovod.HorovodRunnerOperator` (``hvd.init()``) or
    :class:`~airflow_provider_horovod.operators.torch_distributed.TorchDistributedOperator` (the torchrun
    environment).

    .. seealso:: ``docs/getting-started.md`` and ``docs/how-it-works.md``

    :param python_callable: the training function; it joins the other ranks (``hvd.init()``,
        ``init_process_group()``), trains, and writes its model under
        :func:`airflow_provider_horovod.runtime.artifact_dir`. Define imports inside it.
    :param op_args: positional arguments for the callable. (templated)
    :param op_kwargs: keyword arguments for the callable. (templated)
    :param np: number of ranks: ``> 0`` runs a barrier stage of ``np`` Spark tasks; ``< 0`` runs ``-np`` processes
        on the Spark driver. ``0`` is refused.
    :param conn_id: a Spark provider ``spark`` connection (default ``spark_default``; undefined, or ``None``:
        an embedded ``local[np]`` master on 127.0.0.1), or a ``spark_connect`` connection: the barrier job then
        runs from this worker through a Spark Connect session, with no JVM here. (templated)
    :param conf: extra Spark properties; they override the provider's defaults. (templated)
    :param env_vars: environment variables for the Spark driver and every rank. (templated)
    :param artifact_dir: path or URI where the ranks write model files; defaults to a directory unique to this
        dag/run/task/try under ``[horovod] artifact_root``. (templated)
    :param checkpoint_dir: path or URI the ranks see through :func:`airflow_provider_horovod.runtime.checkpoint_dir`
        (``save_checkpoint``, ``load_checkpoint``), the same for every try of the task instance, so a retry resumes;
        default ``<artifact_root>/<dag>/<run>/<task>[/map-<i>]/checkpoints``. It may name a connection as
        ``artifact_dir`` may (the same one). See ``docs/checkpoints.md``. (templated)
    :param driver_log_verbosity: ``"log_callback_only"`` (rank 0's output in the task log) or ``"all"``
        (every rank's). Every rank's full output is always in its executor's stderr.
    :param gloo_timeout_s: seconds Gloo waits at rendezvous and in a collective before failing.
    :param start_timeout_s: seconds each rank may take to load the function and join the others (``hvd.init()``,
        ``init_process_group()``); past it the task fails naming the ranks that never joined. ``None``: no limit.
    :param training_timeout_s: seconds each rank may run in all (``None``: no limit; Airflow's
        ``execution_timeout`` also applies and stops the Spark job).
    :param max_return_value_bytes: largest return value accepted for XCom, bytes (default 1 MiB): rank 0 does not
        send a larger cloudpickle (the task fails once the job has ended, ``artifact_paths`` pushed, the files
        kept); a value that passes is measured again as XCom serializes it. Models go under ``artifact_dir()``.
    :param spark_name: the Spark application name; default ``airflow-<launcher>-<dag_id>-<task_id>``. (templated)
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``executor_memory``, ``jars``, ...).
    :param poll_interval_s: seconds between polls of the Spark monitoring REST API while the job runs (the stage's
        state changes in the task log) and of the driver's state in cluster mode. ``None`` turns polling off.
    :param deploy_mode: ``"client"`` (the Spark driver runs in this task, via spark-submit) or ``"cluster"`` (the
        driver runs on a Spark standalone worker, submitted through the master's REST submission server);
        ``None``: the connection's ``deploy-mode`` extra, else client.
    :param deferrable: in cluster mode, free the worker slot while training: defer to
        :class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`. Default from
        ``[operators] default_deferrable``. Client mode always runs synchronously (the driver lives in the task).
    :param cancel_on_kill: kill the Spark driver when the task is killed, times out, or its trigger fails.
    :param durable: cluster deploy mode: persist the submitted driver to the task state store before waiting, so a
        retry after a worker crash reattaches to it or reads its result (``ResumableJobMixin``, as on
        ``SparkSubmitOperator``; Airflow 3.3+). Client mode cannot reattach. See ``docs/how-it-works.md``.
    :param openlineage_inject_parent_job_info: add the ``spark.openlineage.parentJob*`` properties to the Spark conf
        so Spark's own OpenLineage listener links its events to this task (default ``[openlineage]
        spark_inject_parent_job_info``, else ``False``; as on ``SparkSubmitOperator``).
    :param openlineage_inject_transport_info: add the OpenLineage transport (``spark.openlineage.transport.*``) to
        the Spark conf (default ``[openlineage] spark_inject_transport_info``, else ``False``).
    :param staging_dir: cluster mode: where the payload, the runtime, the driver program and the result travel
        between this task and the driver on a Spark worker: a directory the workers share (path or ``file://``),
        or object storage (``s3://...``, ``s3://conn_id@bucket/...``, an ``ObjectStoragePath``; the worker fetches
        the driver program by a presigned URL, the driver uses the connection's credentials; no shared filesystem
        needed). Default ``<artifact_root>/.staging/<dag>/<run>/<task>/try-<n>``. (templated)
    :param use_gpu: give each rank the GPUs Spark scheduled for its task (``CUDA_VISIBLE_DEVICES``); the
        application's ``conf`` must set ``spark.task.resource.gpu.amount`` (and executors a GPU discovery
        script), else the task fails up front saying so. ``False``: ranks see no GPU.
    :param gpu_visibility: with ``use_gpu``: ``"host"`` (each rank sees its host's task GPUs ordered by local
        rank: ``torch.cuda.set_device(local_rank)``) or ``"rank"`` (only its own: ``set_device(0)``).
        See ``docs/gpu-and-multihost.md``.
    :param slot_wait_timeout_s: seconds the Spark driver waits for ``np`` free task slots when the cluster is
        busy (default 3600); ``None``: no limit. The task log says what it waits for, on change (in cluster mode
        read from the standalone master); a job that can never fit fails in seconds with the counts, on a
        standalone master before anything is submitted. Bound concurrency the Airflow way with a pool:
        ``docs/shared-clusters.md``. (templated)
    :param timeline: record the Horovod Timeline to ``horovod_timeline.json`` in the artifact directory (one of
        ``artifact_paths``; the Horovod launcher only). TensorBoard logs need no flag
        (:func:`airflow_provider_horovod.runtime.tensorboard_dir`, XCom ``tensorboard_dir``).
    :param launcher: how the ranks start: ``"horovod"`` (the function calls ``hvd.init()``) or ``"torch"`` (each
        rank gets the torchrun environment and calls ``torch.distributed.init_process_group()`` itself). See
        :mod:`airflow_provider_horovod.runtime.launchers`.
    :param max_restarts: how many times the Spark driver starts the barrier job again within this try after an
        attempt fails for a reason that is nobody's bug: a lost executor or host, a rank killed by a signal, a
        rendezvous that never completed (int from 0; default 0: never, as torchrun's ``--max-restarts``). The ranks
        resume through ``load_checkpoint()``; each restart is a line in the task log. Past it, the try fails with
        every restart named. With it, and ``spark.decommission.enabled`` in ``conf`` and on the workers, a spot node's
        termination notice moves the job at its next ``save_checkpoint()`` when a spare executor is there (a planned
        restart, not counted; ``docs/fault-tolerance.md``). See :mod:`airflow_provider_horovod.runtime.driver.restarts`.
    :param restart_on: exception types raised by the training code that restart the attempt too (classes or names
        such as ``"torch.OutOfMemoryError"``; ``"*"``: every one). Default none: the code's own exception fails at
        once, as it would fail again.
    :param heartbeat_timeout_s: seconds without a barrier task's heartbeat (each task sends one every 2 s to the
        Spark driver) after which the driver treats the task's host as lost, frozen or cut off: it cancels the
        attempt, asks Spark to replace that executor, and ``max_restarts`` restarts the job, where Spark alone waits
        ``spark.network.timeout`` (120 s). Default 30; at least 6; ``None``: Spark's detection only. See
        :mod:`airflow_provider_horovod.runtime.driver.heartbeats`.
    :param min_np: elastic ranks (with ``max_restarts``): a restart whose ``np`` slots do not come back within
        ``elastic_wait_s`` (a worker lost for good) runs with as many ranks as there are slots, never fewer than
        ``min_np``, and grows back to ``np`` after its next ``save_checkpoint()`` once all ``np`` slots are free again
        (not counted in ``max_restarts``); the function sees its attempt's world size (scale the
        learning rate and shards with it: ``docs/fault-tolerance.md``). ``None`` (default): always ``np``.
    :param elastic_wait_s: seconds a restart waits for all ``np`` slots before it starts with fewer (default 30, as
        torchrun's ``last_call_timeout``).
    :param mlflow_conn_id: an MLflow connection: one MLflow run per try, every rank logging into it
        (``docs/mlflow.md``, :class:`~airflow_provider_horovod.operators.mlflow_tracking.MlflowSettings`);
        ``None`` (default): no tracking.
    :param mlflow_experiment: the experiment's name (default: the DAG id). (templated)
    :param mlflow_register_model: register a version of this model from the run (default ``None``: none).
    :param mlflow_model_alias: the alias the new version gets (default ``"candidate"``; ``None``: none).
    :param mlflow_model_path: which file is the model: a glob against the artifact paths relative to the artifact
        directory (``"*.pt"``); ``None`` (default): the return value's ``model_uri``, else its ``model_path``.
    :raises ValueError: an argument is invalid, naming it and what it allows (raised when the DAG is parsed).
    :raises TypeError: ``python_callable`` is not callable.
    """

    template_fields: Sequence[str] = (
        "op_args",
        "op_kwargs",
        "conn_id",
        "conf",
        "env_vars",
        "artifact_dir",
        "checkpoint_dir",
        "spark_name",
        "staging_dir",
        "slot_wait_timeout_s",
        "mlflow_experiment",
    )
    template_fields_renderers = {"op_kwargs": "py", "op_args": "py", "conf": "json", "env_vars": "json"}
    operator_extra_links = (SparkUILink(), MlflowRunLink())
    external_id_key = DurableClusterJob.external_id_key
    """Task-state-store key of the persisted cluster-mode job (renaming it breaks in-flight retries)."""

    # The JobSettings fields among the arguments (operators._arguments.SETTING_NAMES), kept as checked
    np: int
    driver_log_verbosity: str
    gloo_timeout_s: int
    start_timeout_s: float | None
    training_timeout_s: float | None
    slot_wait_timeout_s: float | str | None  # a template until rendered
    use_gpu: bool
    gpu_visibility: str
    timeline: bool
    max_return_value_bytes: int
    launcher: str
    max_restarts: int
    restart_on: tuple[str, ...]
    heartbeat_timeout_s: float | None
    min_np: int | None
    elastic_wait_s: float
    op_args: Collection[Any]
    op_kwargs: Mapping[str, Any]

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        np: int = 2,
        conn_id: str | None = HorovodHook.default_conn_name,
        conf: dict[str, Any] | None = None,
        env_vars: dict[str, str] | None = None,
        artifact_dir: str | None = None,
        checkpoint_dir: str | None = None,
        driver_log_verbosity: str = "log_callback_only",
        gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S,
        start_timeout_s: float | None = DEFAULT_START_TIMEOUT_S,
        training_timeout_s: float | None = None,
        max_return_value_bytes: int = DEFAULT_MAX_RETURN_BYTES,
        spark_name: str | None = None,
        spark_submit_kwargs: dict[str, Any] | None = None,
        poll_interval_s: float | None = 5.0,
        deploy_mode: str | None = None,
        deferrable: bool = _default_deferrable(),
        cancel_on_kill: bool = True,
        durable: bool | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        staging_dir: str | None = None,
        use_gpu: bool = False,
        gpu_visibility: str = DEFAULT_GPU_VISIBILITY,
        slot_wait_timeout_s: float | str | None = DEFAULT_SLOT_WAIT_TIMEOUT_S,
        timeline: bool = False,
        launcher: str = DEFAULT_LAUNCHER,
        max_restarts: int = 0,
        restart_on: Collection[type[BaseException] | str] | str = (),
        heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S,
        min_np: int | None = None,
        elastic_wait_s: float = DEFAULT_ELASTIC_WAIT_S,
        mlflow_conn_id: str | None = None,
        mlflow_experiment: str | None = None,
        mlflow_register_model: str | None = None,
        mlflow_model_alias: str | None = "candidate",
        mlflow_model_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        # Named here (not left to **kwargs) so default_args={"durable": ...} reaches it, as in SparkSubmitOperator;
        # ResumableJobMixin takes it (on Airflow < 3.3 the compat stand-in warns that it has no effect).
        if durable is not None:
            kwargs["durable"] = durable
        super().__init__(**kwargs)
        self._durable_explicit = durable is not None
        self.openlineage_inject_parent_job_info = (
            default_inject_flag("spark_inject_parent_job_info")
            if openlineage_inject_parent_job_info is None
            else openlineage_inject_parent_job_info
        )
        self.openlineage_inject_transport_info = (
            default_inject_flag("spark_inject_transport_info")
            if openlineage_inject_transport_info is None
            else openlineage_inject_transport_info
        )
        if not callable(python_callable):
            raise TypeError(f"python_callable must be callable, got {type(python_callable).__name__}")
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        # every knob the runtime shares is checked by JobSettings, as in HorovodRunner and the hooks; a templated
        # slot_wait_timeout_s is checked once rendered (job_settings)
        settings = checked_settings(
            np=np,
            driver_log_verbosity=driver_log_verbosity,
            gloo_timeout_s=gloo_timeout_s,
            start_timeout_s=start_timeout_s,
            training_timeout_s=training_timeout_s,
            slot_wait_timeout_s=slot_wait_timeout_s,
            use_gpu=use_gpu,
            gpu_visibility=gpu_visibility,
            timeline=timeline,
            max_return_value_bytes=max_return_value_bytes,
            conf=conf,
            env_vars=env_vars,
            spark_submit_kwargs=spark_submit_kwargs,
            launcher=launcher,
            max_restarts=max_restarts,
            restart_on=restart_on,
            heartbeat_timeout_s=heartbeat_timeout_s,
            min_np=min_np,
            elastic_wait_s=elastic_wait_s,
        )
        for name in SETTING_NAMES:  # np, ..., launcher: the checked values, under the same names (job_settings)
            setattr(self, name, getattr(settings, name))
        if isinstance(slot_wait_timeout_s, str):
            self.slot_wait_timeout_s = slot_wait_timeout_s  # a template, read once rendered
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.env_vars = dict(env_vars or {})
        self.artifact_dir = artifact_dir
        self.checkpoint_dir = checkpoint_dir
        self.spark_name = spark_name
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.poll_interval_s = validate_timeout("poll_interval_s", poll_interval_s)
        self.deploy_mode = None if deploy_mode is None else validate_deploy_mode(deploy_mode, source="deploy_mode")
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.staging_dir = staging_dir
        check_mlflow_arguments(
            mlflow_conn_id=mlflow_conn_id,
            mlflow_experiment=mlflow_experiment,
            mlflow_register_model=mlflow_register_model,
            mlflow_model_alias=mlflow_model_alias,
            mlflow_model_path=mlflow_model_path,
        )
        self.mlflow_conn_id = mlflow_conn_id
        self.mlflow_experiment = mlflow_experiment
        self.mlflow_register_model = mlflow_register_model
        self.mlflow_model_alias = mlflow_model_alias
        self.mlflow_model_path = mlflow_model_path
        self._mode: DeployMode | None = None  # the deploy mode this try runs in, chosen once in execute()
        self._reporter: JobReporter | None = None  # this try's reporting steps, made with its deploy mode
        self._observers: Observers | None = None  # this try's observers, made once its arguments are rendered
        self._mlflow: MlflowRunObserver | None = None

    # -- what the links show -------------------------------------------------------------------------------------
    @property
    def spark_ui_url(self) -> str | None:
        """What the "Spark UI" link shows for the try this instance runs (the live UI, then the history server)."""
        return None if self._reporter is None else self._reporter.spark_ui_url

    @property
    def mlflow_run_url(self) -> str | None:
        """What the "MLflow run" link shows for the try this instance runs."""
        return None if self._mlflow is None else self._mlflow.run_url

    # -- the try's job -------------------------------------------------------------------------------------------
    def job_settings(self) -> JobSettings:
        """
        The job's knobs, with ``slot_wait_timeout_s`` rendered (:meth:`training_job` adds the try's checkpoint
        directory and number, :data:`~airflow_provider_horovod.operators._arguments.PER_TRY_SETTINGS`).

        :raises ValueError: the rendered ``slot_wait_timeout_s`` is not a positive number, ``None`` or ``"none"``.
        """
        values = {name: getattr(self, name) for name in SETTING_NAMES}
        return JobSettings(**{**values, "slot_wait_timeout_s": rendered_slot_wait_timeout(self.slot_wait_timeout_s)})

    def _payload(self) -> tuple[bytes, bytes]:
        """``(key, payload)``: the callable and its arguments, signed with a key made for this try."""
        return signed_payload(self.python_callable, self.op_args, self.op_kwargs, log=self.log)

    def training_job(self, context: Context) -> TrainingJob:
        """
        This try's job, from the rendered arguments: the signed payload, the settings with this try's checkpoint
        directory and number, the artifact directory, the environment (``env_vars`` over the credentials of a
        connection that ``artifact_dir`` / ``checkpoint_dir`` name, which travel as ``AWS_*`` variables: never in
        conf, arguments, logs or XCom), the Spark properties and names.

        :param context: the task's Airflow context.
        :raises ValueError: the two locations name different connections, or one of a type with no credentials for
            the ranks; a rendered setting is invalid.
        :raises HorovodJobError: the callable or an argument cannot be pickled.
        """
        ti = context["ti"]
        artifact_dir, artifact_conn_id = storage_location(self.artifact_dir or default_artifact_dir(context))
        checkpoint_dir, checkpoint_conn_id = storage_location(self.checkpoint_dir or default_checkpoint_dir(context))
        conn_id = shared_conn_id(artifact_dir=artifact_conn_id, checkpoint_dir=checkpoint_conn_id)
        storage_env = credentials_env(conn_id) if conn_id else {}
        key, payload = self._payload()
        settings = self.job_settings().replace(checkpoint_dir=checkpoint_dir, try_number=ti.try_number)
        return TrainingJob(
            key=key,
            payload=payload,
            settings=settings,
            artifact_dir=artifact_dir,
            env={**storage_env, **self.env_vars},
            conf=dict(self.conf),
            app_name=self.spark_name or f"airflow-{get_launcher(self.launcher).name}-{self.dag_id}-{self.task_id}",
            label=f"{self.dag_id}.{self.task_id}",
            has_storage_credentials=bool(storage_env),
        )

    def _new_observers(self) -> Observers:
        """This try's observers, from the rendered arguments: OpenLineage, the model's asset events, MLflow."""
        self._mlflow = (
            None
            if self.mlflow_conn_id is None
            else MlflowRunObserver(
                MlflowSettings(
                    params={**{f"arg{i}": v for i, v in enumerate(self.op_args)}, **self.op_kwargs},
                    conn_id=self.mlflow_conn_id,
                    experiment=self.mlflow_experiment,
                    register_model=self.mlflow_register_model,
                    model_alias=self.mlflow_model_alias,
                    model_path=self.mlflow_model_path,
                ),
                self.log,
                self.outlets,
            )
        )
        lineage = LineageObserver(
            inject_parent_job_info=self.openlineage_inject_parent_job_info,
            inject_transport_info=self.openlineage_inject_transport_info,
        )
        observers = [lineage, ModelAssetEvents(self.outlets, self.log)]
        self._observers = Observers([*observers, *([self._mlflow] if self._mlflow is not None else [])])
        return self._observers

    @property
    def observers(self) -> Observers:
        """This try's observers (made on first use)."""
        return self._observers if self._observers is not None else self._new_observers()

    def _new_reporter(self) -> JobReporter:
        self._reporter = JobReporter(
            log=self.log,
            conn_id=self.conn_id,
            poll_interval_s=self.poll_interval_s,
            max_return_value_bytes=self.max_return_value_bytes,
        )
        return self._reporter

    def _deploy_mode(self, job: TrainingJob) -> DeployMode:
        """The deploy mode this try runs in, with its hook and reporter (reads the connection; no other I/O)."""
        reporter = self._new_reporter()
        name = resolve_deploy_mode(conn_id=self.conn_id, deploy_mode=self.deploy_mode, np=self.np)
        if name == "client":
            hook = HorovodHook(conn_id=self.conn_id, spark_submit_kwargs=self.spark_submit_kwargs)
            return ClientMode(job, hook, reporter, deferrable=self.deferrable)
        if name == "connect":
            return ConnectMode(
                job, HorovodConnectHook(conn_id=self.conn_id or HorovodConnectHook.default_conn_name), reporter
            )
        return ClusterMode(
            job,
            self._cluster_hook(),
            reporter,
            ClusterOptions(
                defer=self.defer,
                deferrable=self.deferrable,
                cancel_on_kill=self.cancel_on_kill,
                poll_interval_s=self.poll_interval_s,
                staging_dir=self.staging_dir,
            ),
        )

    def _resumed_cluster_mode(self) -> ClusterMode:
        """The cluster mode a try resumes in after its trigger (no new job)."""
        return ClusterMode(None, self._cluster_hook(), self._new_reporter())

    def _cluster_hook(self) -> HorovodStandaloneHook:
        """
        The standalone cluster-mode hook.

        :raises HorovodJobError: ``conn_id`` is ``None`` (cluster mode needs a standalone master's connection).
        """
        if self.conn_id is None:
            raise HorovodJobError("deploy_mode='cluster' needs conn_id naming a spark://host:port standalone master")
        return HorovodStandaloneHook(conn_id=self.conn_id)

    # -- the try -------------------------------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        """Build the job, submit it, wait; push ``spark_app_id``, ``artifact_dir``, ``artifact_paths``; return rank
        0's value."""
        return self._observed(context, self._execute)

    def _execute(self, context: Context) -> Any:
        ti = context["ti"]
        job = self.observers.created(context, self.training_job(context))
        mode = self._mode = self._deploy_mode(job)
        mode.check()
        self.log.info(
            "%s job: np=%d, %s deploy mode, payload %d bytes, artifact_dir %s, checkpoint_dir %s (try %d)",
            get_launcher(self.launcher).label,
            self.np,
            mode.name,
            len(job.payload),
            job.artifact_dir,
            job.checkpoint_dir,
            ti.try_number,
        )
        ti.xcom_push(key=XCOM_ARTIFACT_DIR, value=job.artifact_dir)
        ti.xcom_push(key=XCOM_CHECKPOINT_DIR, value=job.checkpoint_dir)
        if mode.resumable:
            return self.execute_resumable(context)  # submit_job, poll_until_complete, get_job_result below
        if self.durable and self._durable_explicit:
            self.log.warning(
                "durable=True has no effect in %s deploy mode: the Spark driver runs in this task's "
                "process and ends with it, so a retry starts the training again; use "
                "deploy_mode='cluster' to reattach after a worker crash",
                mode.name,
            )
        external_id = self.submit_job(context)
        self.poll_until_complete(external_id, context)
        return self.get_job_result(external_id, context)

    def _observed(self, context: Context, run: Callable[[Context], Any], *, resumed: bool = False) -> Any:
        """
        ``run(context)`` with the try's observers told: ``resumed`` first when the try comes back from its trigger,
        then ``finished`` with the value, or ``failed`` with the error (a deferral is neither).
        """
        from airflow.providers.common.compat.sdk import TaskDeferred

        observers = self._new_observers()
        try:
            if resumed:
                observers.resumed(context)
            value = run(context)
            result = None if self._reporter is None else self._reporter.result
            artifact_dir = None if self._reporter is None else self._reporter.artifact_dir
            observers.finished(context, FinishedTry(value, result, artifact_dir))
        except TaskDeferred:
            raise
        except BaseException as err:
            observers.failed(context, err)
            raise
        return value

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger (cluster mode): validate its event, read the result, push XComs, or raise."""
        return self._observed(context, lambda ctx: self._resumed_cluster_mode().complete(ctx, event), resumed=True)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """When the trigger failed or timed out (``__fail__``), kill the driver before failing the task."""
        if next_method != "__fail__":
            return super().resume_execution(next_method, next_kwargs, context)
        if self.cancel_on_kill:
            self._resumed_cluster_mode().kill_after_trigger_failure(context)
        return self._observed(
            context,
            lambda ctx: super(DistributedTrainingOperator, self).resume_execution(next_method, next_kwargs, ctx),
            resumed=True,
        )

    def defer(self, *, trigger: Any, **kwargs: Any) -> Any:
        """
        Defer to ``trigger``, once the try's observers have given it what they need (the MLflow run, which the
        trigger ends ``KILLED`` when the deferred task is killed).

        :param trigger: the trigger.
        :param kwargs: ``method_name``, ``kwargs``, ``timeout``, as ``BaseOperator.defer`` takes them.
        :raises TaskDeferred: always.
        """
        return super().defer(trigger=self.observers.deferring(trigger), **kwargs)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """
        The model's artifact directory as the output dataset, ``inlets`` (or the function's path arguments) as
        inputs, the ``horovod_training`` run facet (:func:`~airflow_provider_horovod.operators.lineage.
        completed_lineage`); called by the OpenLineage provider's listener after the task succeeded.

        :param task_instance: the finished task instance.
        :return: an ``OperatorLineage``.
        """
        return completed_lineage(
            task_instance,
            np=self.np,
            launcher=self.launcher,
            inlets=self.inlets,
            op_args=self.op_args,
            op_kwargs=self.op_kwargs,
        )

    # -- the job methods of ResumableJobMixin, each done by the try's deploy mode ------------------------------------
    @property
    def mode(self) -> DeployMode:
        """
        The deploy mode this try runs in.

        :raises RuntimeError: before ``execute`` chose it.
        """
        if self._mode is None:
            raise RuntimeError("the deploy mode is chosen in execute(); no job method runs before it")
        return self._mode

    def submit_job(self, context: Context) -> Any:
        """Submit the job the observers have seen (see :meth:`DeployMode.submit_job`); return the record that
        ``durable`` persists."""
        mode = self.mode
        mode.use(self.observers.submitting(context, mode.job))
        record = mode.submit_job(context)
        self.observers.submitted(context, record)
        return record

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """The stored job's state (see :meth:`DeployMode.get_job_status`), which the observers are told."""
        mode = self.mode
        status = mode.get_job_status(external_id, context)
        self.observers.found(
            context, external_id, status, active=mode.is_job_active(status), succeeded=mode.is_job_succeeded(status)
        )
        return status

    def is_job_active(self, status: str) -> bool:
        """Whether a retry waits for the job (see :meth:`DeployMode.is_job_active`)."""
        return self.mode.is_job_active(status)

    def is_job_succeeded(self, status: str) -> bool:
        """Whether the job succeeded (see :meth:`DeployMode.is_job_succeeded`)."""
        return self.mode.is_job_succeeded(status)

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """Wait for the job (see :meth:`DeployMode.poll_until_complete`)."""
        self.observers.attached(context, external_id)
        return self.mode.poll_until_complete(external_id, context)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """Push the result's XComs, return rank 0's value (see :meth:`DeployMode.get_job_result`)."""
        self.observers.attached(context, external_id)
        return self.mode.get_job_result(external_id, context)

    def on_kill(self) -> None:
        """
        The task is being killed (marked failed or success, cleared, stopped): the observers are told, and with
        ``cancel_on_kill`` the Spark job and every training process of this try are stopped.

        Airflow's task runner calls this from its SIGTERM handler: in the main thread, between two steps of whatever
        that thread was doing, possibly inside a log write that holds a lock the kill's own log lines need. So the
        kill runs in a thread of its own and, called on the main thread, is not waited for (it is not a daemon: the
        process does not end before it); the interrupted code goes on, and fails once spark-submit is gone.
        """
        if not self.cancel_on_kill:
            return
        self.observers.killed()
        if self._mode is None:
            return
        killer = threading.Thread(target=self._mode.on_kill, name="horovod-on-kill")
        killer.start()
        if threading.current_thread() is not threading.main_thread():
            killer.join()
