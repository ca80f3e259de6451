"""
``HorovodRunnerOperator``: run a Horovod training function as a Spark barrier job from a DAG.

The operator validates its arguments, serializes the callable, and delegates the job to one deploy mode object
per try (:mod:`airflow_provider_horovod.operators.modes`: client, standalone cluster, Spark Connect), which
implements the job methods Airflow's ``ResumableJobMixin`` asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, ResumableJobMixin

from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.lineage import OpenLineageMixin, default_inject_flag
from airflow_provider_horovod.links import MlflowRunLink, SparkUILink
from airflow_provider_horovod.operators.common import DEFAULT_MAX_RETURN_BYTES, _default_deferrable, validate_deploy_mode
from airflow_provider_horovod.operators._arguments import (
    SETTING_NAMES, checked_settings, rendered_slot_wait_timeout, signed_payload,
)
from airflow_provider_horovod.operators._hooks import OperatorHooks
from airflow_provider_horovod.operators._mlflow import MlflowTracking
from airflow_provider_horovod.operators._reporting import JobReporter
from airflow_provider_horovod.operators.modes import resolve_deploy_mode
from airflow_provider_horovod.operators.modes.base import DelegatesToDeployMode, DeployMode, JobRequest
from airflow_provider_horovod.operators.modes.client import ClientMode
from airflow_provider_horovod.operators.modes.cluster import ClusterMode, ClusterOptions
from airflow_provider_horovod.operators.modes.connect import ConnectMode
from airflow_provider_horovod.runtime.launchers import get_launcher
from airflow_provider_horovod.runtime.settings import (
    DEFAULT_GLOO_TIMEOUT_S, DEFAULT_GPU_VISIBILITY, DEFAULT_LAUNCHER, DEFAULT_SLOT_WAIT_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S, JobSettings, validate_timeout,
)
from airflow_provider_horovod.standalone.durable import DurableClusterJob
from airflow_provider_horovod.xcom_keys import XCOM_ARTIFACT_DIR, XCOM_CHECKPOINT_DIR

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["HorovodRunnerOperator"]


class HorovodRunnerOperator(OperatorHooks, MlflowTracking, DelegatesToDeployMode, OpenLineageMixin,
                            ResumableJobMixin, BaseOperator):
    """
    Run a Horovod training function on Spark, the way Databricks' ``HorovodRunner`` does in a notebook.

    The callable and its arguments are serialized with cloudpickle and spark-submitted (through the Spark
    provider's ``SparkSubmitHook``) as one barrier stage of ``np`` tasks; each task starts one Horovod
    process with Gloo. Rank 0's return value becomes the task's ``return_value`` XCom; the files the job
    wrote under its artifact directory are pushed as ``artifact_paths``, the Spark application id as
    ``spark_app_id``, the directory itself as ``artifact_dir``, and the task instance's checkpoint directory (the
    same for every try) as ``checkpoint_dir``.

    .. seealso:: ``docs/getting-started.md`` and ``docs/how-it-works.md``

    :param python_callable: the training function; it calls ``hvd.init()``, trains, and writes its model under
        :func:`airflow_provider_horovod.runtime.artifact_dir`. Define imports inside it.
    :param op_args: positional arguments for the callable. (templated)
    :param op_kwargs: keyword arguments for the callable. (templated)
    :param np: number of Horovod processes: ``> 0`` runs a barrier stage of ``np`` Spark tasks; ``< 0`` runs
        ``-np`` processes on the Spark driver. ``0`` is refused.
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
    :param start_timeout_s: seconds each rank may take to load the function and finish ``hvd.init()``; past it
        the task fails naming the ranks that never joined. ``None``: no limit.
    :param training_timeout_s: seconds each rank may run in all (``None``: no limit; Airflow's
        ``execution_timeout`` also applies and stops the Spark job).
    :param max_return_value_bytes: largest return value accepted for XCom, bytes (default 1 MiB): rank 0 does not
        send a larger cloudpickle (the task fails once the job has ended, ``artifact_paths`` pushed, the files
        kept); a value that passes is measured again as XCom serializes it. Models go under ``artifact_dir()``.
    :param spark_name: the Spark application name; default ``airflow-horovod-<dag_id>-<task_id>``. (templated)
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
        rank: ``torch.cuda.set_device(hvd.local_rank())``) or ``"rank"`` (only its own: ``set_device(0)``).
        See ``docs/gpu-and-multihost.md``.
    :param slot_wait_timeout_s: seconds the Spark driver waits for ``np`` free task slots when the cluster is
        busy (default 3600); ``None``: no limit. The task log says what it waits for, on change (in cluster mode
        read from the standalone master); a job that can never fit fails in seconds with the counts, on a
        standalone master before anything is submitted. Bound concurrency the Airflow way with a pool:
        ``docs/shared-clusters.md``. (templated)
    :param timeline: record the Horovod Timeline to ``horovod_timeline.json`` in the artifact directory (one of
        ``artifact_paths``). TensorBoard logs need no flag (:func:`airflow_provider_horovod.runtime.tensorboard_dir`,
        XCom ``tensorboard_dir``). See :mod:`airflow_provider_horovod.runtime.observability`.
    :param launcher: how the ranks start: ``"horovod"`` (the function calls ``hvd.init()``) or ``"torch"`` (each
        rank gets the torchrun environment and calls ``torch.distributed.init_process_group()`` itself; see
        :class:`~airflow_provider_horovod.operators.torch_distributed.TorchDistributedOperator` and
        ``docs/torch-distributed.md``). ``timeline`` needs ``"horovod"``.
    :param mlflow_conn_id: with ``mlflow_experiment`` (templated), ``mlflow_register_model``, ``mlflow_model_alias``,
        ``mlflow_model_path``: one MLflow run per try (``docs/mlflow.md``, ``operators._mlflow.MlflowTracking``).
    :raises ValueError: an argument is invalid (raised when the DAG is parsed).
    :raises TypeError: ``python_callable`` is not callable.
    """

    template_fields: Sequence[str] = ("op_args", "op_kwargs", "conn_id", "conf", "env_vars", "artifact_dir",
                                      "checkpoint_dir", "spark_name", "staging_dir", "slot_wait_timeout_s", "mlflow_experiment")
    template_fields_renderers = {"op_kwargs": "py", "op_args": "py", "conf": "json", "env_vars": "json"}
    operator_extra_links = (SparkUILink(), MlflowRunLink())
    ui_color = "#f6e3c5"
    external_id_key = DurableClusterJob.external_id_key
    """Task-state-store key of the persisted cluster-mode job (renaming it breaks in-flight retries)."""

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
        **kwargs: Any,
    ) -> None:
        # Named here (not left to **kwargs) so default_args={"durable": ...} reaches it, as in SparkSubmitOperator;
        # ResumableJobMixin takes it (on Airflow < 3.3 the compat stand-in warns that it has no effect).
        if durable is not None:
            kwargs["durable"] = durable
        super().__init__(**kwargs)
        self._durable_explicit = durable is not None
        self.openlineage_inject_parent_job_info = (default_inject_flag("spark_inject_parent_job_info")
                                                   if openlineage_inject_parent_job_info is None
                                                   else openlineage_inject_parent_job_info)
        self.openlineage_inject_transport_info = (default_inject_flag("spark_inject_transport_info")
                                                  if openlineage_inject_transport_info is None
                                                  else openlineage_inject_transport_info)
        if not callable(python_callable):
            raise TypeError(f"python_callable must be callable, got {type(python_callable).__name__}")
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        # every knob the runtime shares is checked by JobSettings, as in HorovodRunner and the hooks; a templated
        # slot_wait_timeout_s is checked once rendered (job_settings)
        settings = checked_settings(
            np=np, driver_log_verbosity=driver_log_verbosity, gloo_timeout_s=gloo_timeout_s,
            start_timeout_s=start_timeout_s, training_timeout_s=training_timeout_s,
            slot_wait_timeout_s=slot_wait_timeout_s, use_gpu=use_gpu, gpu_visibility=gpu_visibility,
            timeline=timeline, max_return_value_bytes=max_return_value_bytes, conf=conf, env_vars=env_vars,
            spark_submit_kwargs=spark_submit_kwargs, launcher=launcher)
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
        self._mode: DeployMode | None = None  # the deploy mode this try runs in, chosen once in execute()
        self._reporter: JobReporter | None = None  # this try's reporting steps, made with its deploy mode

    @property
    def spark_ui_url(self) -> str | None:
        """What the "Spark UI" link shows for the try this instance runs (the live UI, then the history server)."""
        return None if self._reporter is None else self._reporter.spark_ui_url

    def _new_reporter(self) -> JobReporter:
        self._reporter = JobReporter(log=self.log, conn_id=self.conn_id, poll_interval_s=self.poll_interval_s,
                                     max_return_value_bytes=self.max_return_value_bytes, outlets=self.outlets)
        return self._reporter

    def _deploy_mode(self, request: JobRequest) -> DeployMode:
        """The deploy mode this try runs in, with its hook and reporter (reads the connection; no other I/O)."""
        name = resolve_deploy_mode(conn_id=self.conn_id, deploy_mode=self.deploy_mode, np=self.np)
        reporter = self._new_reporter()
        if name == "client":
            return ClientMode(request, self.hook, reporter, deferrable=self.deferrable)
        if name == "connect":
            return ConnectMode(request, self.connect_hook, reporter)
        return ClusterMode(request, self.cluster_hook, reporter, ClusterOptions(
            defer=self.defer, deferrable=self.deferrable, cancel_on_kill=self.cancel_on_kill,
            poll_interval_s=self.poll_interval_s, staging_dir=self.staging_dir, conf=self.conf))

    def _payload(self) -> tuple[bytes, bytes]:
        """``(key, payload)``: the callable and its arguments, signed with a key made for this try."""
        return signed_payload(self.python_callable, self.op_args, self.op_kwargs, log=self.log)

    def job_settings(self) -> JobSettings:
        """
        The job's knobs, with ``slot_wait_timeout_s`` rendered (``execute`` adds the try's checkpoint directory and
        number, :data:`~airflow_provider_horovod.operators._arguments.PER_TRY_SETTINGS`, for the deploy mode's hook).

        :raises ValueError: the rendered ``slot_wait_timeout_s`` is not a positive number, ``None`` or ``"none"``.
        """
        values = {name: getattr(self, name) for name in SETTING_NAMES}
        return JobSettings(**{**values, "slot_wait_timeout_s": rendered_slot_wait_timeout(self.slot_wait_timeout_s)})

    def execute(self, context: Context) -> Any:
        """Serialize, submit, wait; push ``spark_app_id``, ``artifact_dir``, ``artifact_paths``; return rank 0's value."""
        return self.mlflow_tracked(context, self._execute)

    def _execute(self, context: Context) -> Any:
        ti = context["ti"]
        self.inject_openlineage_properties(context)
        artifact_dir, checkpoint_dir = self._storage_locations(context)
        key, payload = self._payload()
        settings = self.job_settings().replace(checkpoint_dir=checkpoint_dir, try_number=ti.try_number)
        request = JobRequest(key=key, payload=payload, artifact_dir=artifact_dir, settings=settings,
                             env=self._job_env(), label=f"{self.dag_id}.{self.task_id}",
                             has_storage_credentials=bool(self._storage_env))
        mode = self._mode = self._deploy_mode(request)
        mode.check()
        self.log.info("%s job: np=%d, %s deploy mode, payload %d bytes, artifact_dir %s, checkpoint_dir %s (try %d)",
                      get_launcher(self.launcher).label, self.np, mode.name, len(payload), artifact_dir,
                      checkpoint_dir, ti.try_number)
        ti.xcom_push(key=XCOM_ARTIFACT_DIR, value=artifact_dir)
        ti.xcom_push(key=XCOM_CHECKPOINT_DIR, value=checkpoint_dir)
        if mode.resumable:
            return self.execute_resumable(context)  # submit_job, poll_until_complete, get_job_result below
        if self.durable and self._durable_explicit:
            self.log.warning("durable=True has no effect in %s deploy mode: the Spark driver runs in this task's "
                             "process and ends with it, so a retry starts the training again; use "
                             "deploy_mode='cluster' to reattach after a worker crash", mode.name)
        external_id = self.submit_job(context)
        self.poll_until_complete(external_id, context)
        return self.get_job_result(external_id, context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger (cluster mode): validate its event, read the result, push XComs, or raise."""
        return self.mlflow_tracked(context, lambda ctx: ClusterMode(None, self.cluster_hook, self._new_reporter())
                                   .complete(ctx, event), resumed=True)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """When the trigger failed or timed out (``__fail__``), kill the driver before failing the task."""
        if next_method != "__fail__":
            return super().resume_execution(next_method, next_kwargs, context)
        if self.cancel_on_kill:
            ClusterMode(None, self.cluster_hook, self._new_reporter()).kill_after_trigger_failure(context)
        return self.mlflow_tracked(context, lambda ctx: super(HorovodRunnerOperator, self).resume_execution(
            next_method, next_kwargs, ctx), resumed=True)
