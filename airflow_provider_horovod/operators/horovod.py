"""``HorovodRunnerOperator``: run a Horovod training function as a Spark barrier job from a DAG."""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, ResumableJobMixin

from airflow_provider_horovod.exceptions import HorovodJobError, HorovodResultError
from airflow_provider_horovod.hooks.connect import HorovodConnectHook
from airflow_provider_horovod.lineage import OpenLineageMixin, default_inject_flag
from airflow_provider_horovod.operators._durable import DurableClusterJob
from airflow_provider_horovod.hooks.horovod import HorovodHook, JobResult, cleanup_staging, read_job_result
from airflow_provider_horovod.hooks.slots import ClusterSlotsWatcher
from airflow_provider_horovod.hooks.staging import Staging
from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook
from airflow_provider_horovod.hooks.storage import credentials_env, storage_location
from airflow_provider_horovod.hooks.progress import ProgressWatcher
from airflow_provider_horovod.links import XCOM_SPARK_UI_URL, SparkUILink
from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.payload import LARGE_PAYLOAD_BYTES, dumps_payload
from airflow_provider_horovod.runtime.plan import DEFAULT_GLOO_TIMEOUT_S
from airflow_provider_horovod.runtime.gpus import DEFAULT_GPU_VISIBILITY, validate_gpu_visibility
from airflow_provider_horovod.runtime.launch import DEFAULT_START_TIMEOUT_S
from airflow_provider_horovod.runtime.runner import validate_np, validate_timeout, validate_verbosity
from airflow_provider_horovod.runtime.slots import DEFAULT_SLOT_WAIT_TIMEOUT_S
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger, validate_event

if TYPE_CHECKING:
    from airflow.sdk import Context

XCOM_RETURN_VALUE = "return_value"
"""XCom key of rank 0's return value."""
XCOM_ARTIFACT_PATHS = "artifact_paths"
"""XCom key of the list of full paths/URIs of the files the job wrote under its artifact directory."""
XCOM_SPARK_APP_ID = "spark_app_id"
"""XCom key of the Spark application id (pushed as soon as the driver reports it)."""
XCOM_SUBMISSION_ID = "spark_submission_id"
"""XCom key of the standalone driver (submission) id in cluster mode, pushed before waiting."""
XCOM_ARTIFACT_DIR = "artifact_dir"
"""XCom key of the artifact directory (path or URI) the ranks wrote to."""
# XCOM_SPARK_UI_URL ("spark_ui_url", the Spark UI link's key) lives in airflow_provider_horovod.links.

ARTIFACT_ROOT_ENV = "AIRFLOW__HOROVOD__ARTIFACT_ROOT"
DEFAULT_MAX_RETURN_BYTES = 1024 * 1024
RESERVED_SPARK_SUBMIT_KWARGS = frozenset({"conn_id", "conf", "py_files", "name", "application_args", "env_vars",
                                          "deploy_mode", "application"})
"""``SparkSubmitHook`` arguments the hook sets itself (client mode): passing them in ``spark_submit_kwargs`` is refused."""


def default_artifact_root() -> str:
    """
    Where per-try artifact directories go when the operator is not given ``artifact_dir``.

    ``[horovod] artifact_root`` in the Airflow config (env ``AIRFLOW__HOROVOD__ARTIFACT_ROOT``), else
    ``$AIRFLOW_HOME/horovod-artifacts``. It must be reachable by every executor (a shared filesystem or an
    object-store URI) when Spark runs on more than one machine.
    """
    from airflow_provider_horovod._compat import conf

    root = conf.get("horovod", "artifact_root", fallback=None)
    if root:
        return root
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return os.path.join(home, "horovod-artifacts")


DEPLOY_MODES = ("client", "cluster")


def validate_deploy_mode(value: object, *, source: str) -> str:
    """
    Check a deploy mode.

    :raises ValueError: not one of ``"client"`` or ``"cluster"``; the message names ``source``.
    """
    if value not in DEPLOY_MODES:
        raise ValueError(f"{source}: deploy mode must be one of {DEPLOY_MODES}, got {value!r}")
    return str(value)


def history_server_url(conn_extra: Mapping[str, Any] | None = None) -> str | None:
    """
    The Spark History Server the "Spark UI" link points to once the application has ended, if any.

    The connection's ``history-server-url`` extra, else ``[horovod] history_server_url`` in the Airflow config
    (env ``AIRFLOW__HOROVOD__HISTORY_SERVER_URL``); the history server only knows applications that ran with
    ``spark.eventLog.enabled=true`` and an event log directory it reads.

    :param conn_extra: the Spark connection's extras, when there is a connection.
    :return: the base URL, e.g. ``http://history:18080``, or ``None``.
    """
    from airflow_provider_horovod._compat import conf

    url = (conn_extra or {}).get("history-server-url") or conf.get("horovod", "history_server_url", fallback=None)
    return str(url).rstrip("/") if url else None


def history_app_url(base_url: str, app_id: str) -> str:
    """The application's page on a Spark History Server (``<base>/history/<app-id>/``)."""
    return f"{base_url.rstrip('/')}/history/{app_id}/"


def _default_deferrable() -> bool:
    from airflow_provider_horovod._compat import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def default_staging_dir(context: Mapping[str, Any]) -> str:
    """Cluster mode: ``<artifact_root>/.staging/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>`` (shared FS or object store)."""
    ti = context["ti"]
    parts = [".staging", _safe(ti.dag_id), _safe(ti.run_id), _safe(ti.task_id)]
    if getattr(ti, "map_index", -1) not in (-1, None):
        parts.append(f"map-{ti.map_index}")
    parts.append(f"try-{ti.try_number}")
    return os.path.join(default_artifact_root(), *parts)


def _safe(part: object) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", str(part))


def default_artifact_dir(context: Mapping[str, Any]) -> str:
    """``<root>/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>``: unique per try, so no retry overwrites a model."""
    ti = context["ti"]
    parts = [_safe(ti.dag_id), _safe(ti.run_id), _safe(ti.task_id)]
    if getattr(ti, "map_index", -1) not in (-1, None):
        parts.append(f"map-{ti.map_index}")
    parts.append(f"try-{ti.try_number}")
    root = default_artifact_root()
    return "/".join([root.rstrip("/"), *parts]) if "://" in root else os.path.join(root, *parts)


def check_xcom_value(value: Any, *, max_bytes: int, artifact_paths: Sequence[str]) -> None:
    """
    Check that ``value`` can be stored in XCom as the task's return value.

    :raises HorovodResultError: it cannot be serialized by Airflow's serde, or is larger than ``max_bytes``
        once serialized; the message lists the artifact files (which stay where they are).
    """
    from airflow_provider_horovod._compat import serialize

    kept = ("; the model files are kept: " + ", ".join(artifact_paths)) if artifact_paths else ""
    try:
        size = len(json.dumps(serialize(value)))
    except Exception as err:
        raise HorovodResultError(
            f"rank 0 returned a {type(value).__module__}.{type(value).__qualname__}, which XCom cannot store "
            f"({type(err).__name__}). Return what downstream tasks need as plain values instead: file paths, "
            f"metrics (floats), small dicts/lists; save models and tensors under artifact_dir(){kept}"
        ) from err
    if size > max_bytes:
        raise HorovodResultError(
            f"rank 0 returned {size} bytes once serialized, above max_return_value_bytes={max_bytes}. Write large "
            f"results under artifact_dir() and return their paths{kept}"
        )


class HorovodRunnerOperator(DurableClusterJob, OpenLineageMixin, ResumableJobMixin, BaseOperator):
    """
    Run a Horovod training function on Spark, the way Databricks' ``HorovodRunner`` does in a notebook.

    The callable and its arguments are serialized with cloudpickle and spark-submitted (through the Spark
    provider's ``SparkSubmitHook``) as one barrier stage of ``np`` tasks; each task starts one Horovod
    process with Gloo. Rank 0's return value becomes the task's ``return_value`` XCom; the files the job
    wrote under its artifact directory are pushed as ``artifact_paths``, the Spark application id as
    ``spark_app_id``, the directory itself as ``artifact_dir``.

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
    :param driver_log_verbosity: ``"log_callback_only"`` (rank 0's output in the task log) or ``"all"``
        (every rank's). Every rank's full output is always in its executor's stderr.
    :param gloo_timeout_s: seconds Gloo waits at rendezvous and in a collective before failing.
    :param start_timeout_s: seconds each rank may take to load the function and finish ``hvd.init()``; past it
        the task fails naming the ranks that never joined. ``None``: no limit.
    :param training_timeout_s: seconds each rank may run in all (``None``: no limit; Airflow's
        ``execution_timeout`` also applies and stops the Spark job).
    :param max_return_value_bytes: largest serialized return value accepted for XCom, bytes.
    :param spark_name: the Spark application name; default ``airflow-horovod-<dag_id>-<task_id>``. (templated)
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``executor_memory``, ``jars``, ...).
    :param poll_interval_s: seconds between polls of the Spark monitoring REST API while the job runs; the
        task log gets the barrier stage's state changes (waiting for slots, ranks running on which executors,
        a failed attempt and its reason). ``None`` turns polling off. Also the driver-state poll in cluster mode.
    :param deploy_mode: ``"client"`` (the Spark driver runs in this task, via spark-submit) or ``"cluster"`` (the
        driver runs on a Spark standalone worker, submitted through the master's REST submission server);
        ``None``: the connection's ``deploy-mode`` extra, else client.
    :param deferrable: in cluster mode, free the worker slot while training: defer to
        :class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`. Default from
        ``[operators] default_deferrable``. Client mode always runs synchronously (the driver lives in the task).
    :param cancel_on_kill: kill the Spark driver when the task is killed, times out, or its trigger fails.
    :param durable: cluster deploy mode: persist the submitted driver to the task state store before waiting, so
        that after the Airflow task process dies (worker crash, SIGKILL) the retry reattaches to the still-running
        driver instead of submitting a second one, or reads the result of one that finished meanwhile (Airflow's
        ``ResumableJobMixin``; the name and default ``True`` as on ``SparkSubmitOperator``). Needs Airflow 3.3+;
        below that it has no effect. Client mode cannot reattach (the driver lives in this task's process).
        See ``docs/how-it-works.md``.
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
    :raises ValueError: an argument is invalid (raised when the DAG is parsed).
    :raises TypeError: ``python_callable`` is not callable.
    """

    template_fields: Sequence[str] = ("op_args", "op_kwargs", "conn_id", "conf", "env_vars", "artifact_dir",
                                      "spark_name", "staging_dir", "slot_wait_timeout_s")
    template_fields_renderers = {"op_kwargs": "py", "op_args": "py", "conf": "json", "env_vars": "json"}
    operator_extra_links = (SparkUILink(),)
    ui_color = "#f6e3c5"

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
        self.np = validate_np(np)
        self.driver_log_verbosity = validate_verbosity(driver_log_verbosity)
        for pname, value in (("conf", conf), ("env_vars", env_vars), ("spark_submit_kwargs", spark_submit_kwargs)):
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{pname} must be a dict or None, got {type(value).__name__}")
        reserved = sorted(set(spark_submit_kwargs or {}) & RESERVED_SPARK_SUBMIT_KWARGS)
        if reserved:
            raise ValueError(f"spark_submit_kwargs: {reserved} are set by the provider (allowed: any other "
                             f"SparkSubmitHook argument; reserved: {sorted(RESERVED_SPARK_SUBMIT_KWARGS)}); give Spark "
                             "properties in conf=, environment variables in env_vars=, and install extra modules on "
                             "the executors")
        if isinstance(gloo_timeout_s, bool) or not isinstance(gloo_timeout_s, int) or gloo_timeout_s <= 0:
            raise ValueError(f"gloo_timeout_s must be a positive int (seconds), got {gloo_timeout_s!r}")
        self.start_timeout_s = validate_timeout("start_timeout_s", start_timeout_s)
        self.training_timeout_s = validate_timeout("training_timeout_s", training_timeout_s)
        if isinstance(max_return_value_bytes, bool) or not isinstance(max_return_value_bytes, int) \
                or max_return_value_bytes <= 0:
            raise ValueError(f"max_return_value_bytes must be a positive int, got {max_return_value_bytes!r}")
        if conf and str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
            raise ValueError("conf: spark.dynamicAllocation.enabled=true cannot be used; Spark refuses barrier "
                             "stages with dynamic allocation (SPARK-24942). Allowed: false or unset")
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.env_vars = dict(env_vars or {})
        self.artifact_dir = artifact_dir
        self.gloo_timeout_s = gloo_timeout_s
        self.max_return_value_bytes = max_return_value_bytes
        self.spark_name = spark_name
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.poll_interval_s = validate_timeout("poll_interval_s", poll_interval_s)
        self.deploy_mode = None if deploy_mode is None else validate_deploy_mode(deploy_mode, source="deploy_mode")
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.staging_dir = staging_dir
        if not isinstance(use_gpu, bool):
            raise ValueError(f"use_gpu must be True or False, got {use_gpu!r}")
        self.use_gpu = use_gpu
        self.gpu_visibility = validate_gpu_visibility(gpu_visibility)
        self.slot_wait_timeout_s = slot_wait_timeout_s if isinstance(slot_wait_timeout_s, str) \
            else validate_timeout("slot_wait_timeout_s", slot_wait_timeout_s)  # a template is checked once rendered
        self._submission_id: str | None = None
        self._spark_app_id: str | None = None
        self.spark_ui_url: str | None = None
        """What the "Spark UI" link shows for the try this instance runs (the live UI, then the history server)."""

    @cached_property
    def hook(self) -> HorovodHook:
        """The hook for this task (created on first use, never in ``__init__``)."""
        return HorovodHook(
            conn_id=self.conn_id, np=self.np, conf=self.conf,
            env_vars={**getattr(self, "_storage_env", {}), **self.env_vars},  # artifact_dir's credentials
            name=self.spark_name or f"airflow-horovod-{self.dag_id}-{self.task_id}",
            spark_submit_kwargs=self.spark_submit_kwargs,
        )

    def _payload(self) -> tuple[bytes, bytes]:
        """``(key, payload)``: the callable and its arguments, signed with a key made for this try."""
        key = secrets.token_bytes(32)
        try:
            payload = dumps_payload(self.python_callable, self.op_args, self.op_kwargs, key=key)
        except PayloadError as err:
            raise HorovodJobError(str(err)) from err
        if len(payload) > LARGE_PAYLOAD_BYTES:
            self.log.warning("The training payload is %.0f MiB: data captured in the callable or its arguments "
                             "travels with every task; pass a path and load it inside the function instead",
                             len(payload) / 2**20)
        return key, payload

    def _resolved_deploy_mode(self) -> str:
        """``client``, ``cluster``, or ``connect`` (a Spark provider ``spark_connect`` connection)."""
        if self.conn_id is None:
            return self.deploy_mode or "client"
        from airflow_provider_horovod._compat import AirflowNotFoundException

        try:
            conn = HorovodHook.get_connection(self.conn_id)
        except AirflowNotFoundException:
            return self.deploy_mode or "client"  # HorovodHook explains a missing non-default connection
        if conn.conn_type == "spark_connect":
            if self.np < 0:
                raise HorovodJobError(f"np={self.np}: over Spark Connect (connection {self.conn_id!r}) there is no "
                                      "driver machine to run ranks on; use np > 0 (barrier tasks)")
            return "connect"
        if self.deploy_mode is not None:
            return self.deploy_mode
        return validate_deploy_mode(conn.extra_dejson.get("deploy-mode") or "client",
                                    source=f"connection {self.conn_id!r}")

    def _slot_wait(self) -> float | None:
        """
        ``slot_wait_timeout_s`` once rendered: a number of seconds, or ``None``.

        :raises ValueError: the rendered template is not a positive number, ``None`` or ``"none"``.
        """
        value = self.slot_wait_timeout_s
        if isinstance(value, str):
            text = value.strip()
            try:
                value = None if text.lower() in ("none", "") else float(text)
            except ValueError:
                raise ValueError(f"slot_wait_timeout_s must be a positive number of seconds or None, got {text!r} "
                                 "after rendering") from None
        return validate_timeout("slot_wait_timeout_s", value)

    def _timeout_args(self) -> list[str]:
        """Driver-program flags for the timeouts and GPU settings (cluster mode)."""
        slot_wait = self._slot_wait()
        args = ["--gloo-timeout-s", str(self.gloo_timeout_s), "--gpu-visibility", self.gpu_visibility,
                "--slot-wait-timeout-s", "none" if slot_wait is None else str(slot_wait)]
        if self.use_gpu:
            args.append("--use-gpu")
        if self.start_timeout_s is not None:
            args += ["--start-timeout-s", str(self.start_timeout_s)]
        if self.training_timeout_s is not None:
            args += ["--training-timeout-s", str(self.training_timeout_s)]
        return args

    def _app_started(self, ti: Any, app_id: str, ui_url: str | None) -> ProgressWatcher | None:
        """Log and push the application id and UI URL; start progress polling when possible."""
        self.log.info("Spark application %s started%s", app_id, f"; Spark UI: {ui_url}" if ui_url else "")
        ti.xcom_push(key=XCOM_SPARK_APP_ID, value=app_id)
        self._spark_app_id = app_id
        if not ui_url:
            return None
        ti.xcom_push(key=XCOM_SPARK_UI_URL, value=ui_url)
        self.spark_ui_url = ui_url
        if not self.poll_interval_s:
            return None
        return ProgressWatcher(ui_url, app_id, self.log.info, poll_interval_s=self.poll_interval_s).start()

    def execute(self, context: Context) -> Any:
        """Serialize, submit, wait; push ``spark_app_id``, ``artifact_dir``, ``artifact_paths``; return rank 0's value."""
        ti = context["ti"]
        self.inject_openlineage_properties(context)
        # an ObjectStoragePath / s3://conn_id@bucket/x: a plain URI for the ranks, its connection's credentials
        # as AWS_* variables that travel like env_vars (never in conf, arguments, logs or XCom)
        artifact_dir, storage_conn_id = storage_location(self.artifact_dir or default_artifact_dir(context))
        self._storage_env = credentials_env(storage_conn_id) if storage_conn_id else {}
        key, payload = self._payload()
        deploy_mode = self._resolved_deploy_mode()
        if self._storage_env and deploy_mode == "connect":
            raise HorovodJobError(
                f"artifact_dir with a connection ({storage_conn_id!r}) is supported in client and cluster deploy "
                "modes; with Spark Connect give a plain URI and configure the store's credentials on the cluster")
        self.log.info("Horovod job: np=%d, %s deploy mode, payload %d bytes, artifact_dir %s", self.np, deploy_mode,
                      len(payload), artifact_dir)
        ti.xcom_push(key=XCOM_ARTIFACT_DIR, value=artifact_dir)
        if deploy_mode == "cluster":
            self._prepared = (key, payload, artifact_dir)
            return self.execute_resumable(context)  # DurableClusterJob: submit_job, poll_until_complete, ...
        if self.durable and self._durable_explicit:
            self.log.warning("durable=True has no effect in %s deploy mode: the Spark driver runs in this task's "
                             "process and ends with it, so a retry starts the training again; use "
                             "deploy_mode='cluster' to reattach after a worker crash", deploy_mode)
        if deploy_mode == "connect":
            return self._finish(ti, self.connect_hook.run(
                payload=payload, artifact_dir=artifact_dir, name=f"{self.dag_id}.{self.task_id}",
                runner_kwargs={"driver_log_verbosity": self.driver_log_verbosity, "env": self.env_vars,
                               "gloo_timeout_s": self.gloo_timeout_s, "start_timeout_s": self.start_timeout_s,
                               "training_timeout_s": self.training_timeout_s, "use_gpu": self.use_gpu,
                               "gpu_visibility": self.gpu_visibility, "slot_wait_timeout_s": self._slot_wait()},
            ))
        if self.deferrable:
            self.log.warning("deferrable=True needs deploy_mode='cluster' (in client mode the Spark driver runs in "
                             "this task's process); running synchronously")
        staging = tempfile.mkdtemp(prefix="horovod-airflow-")  # mode 0700
        watchers: list[ProgressWatcher] = []
        try:
            payload_path = os.path.join(staging, "payload.bin")
            fd = os.open(payload_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)

            def on_app_started(app_id: str, ui_url: str | None) -> None:
                if (watcher := self._app_started(ti, app_id, ui_url)) is not None:
                    watchers.append(watcher)

            result = self.hook.run_job(
                payload_path=payload_path, staging_dir=staging, key=key, artifact_dir=artifact_dir,
                driver_log_verbosity=self.driver_log_verbosity, gloo_timeout_s=self.gloo_timeout_s,
                start_timeout_s=self.start_timeout_s, training_timeout_s=self.training_timeout_s,
                use_gpu=self.use_gpu, gpu_visibility=self.gpu_visibility, on_app_started=on_app_started,
                slot_wait_timeout_s=self._slot_wait(),
            )
        finally:
            for watcher in watchers:
                watcher.stop()
            cleanup_staging(staging)
            self._link_history(ti)
        return self._finish(ti, result)

    def _link_history(self, ti: Any) -> None:
        """
        Once the application has ended: point the "Spark UI" link (XCom ``spark_ui_url``) at the application on
        the Spark History Server, when one is configured (see :func:`history_server_url`); the live UI is gone.
        """
        if not self._spark_app_id:
            return
        extra = None
        if self.conn_id is not None:
            try:
                extra = HorovodHook.get_connection(self.conn_id).extra_dejson
            except Exception:  # noqa: BLE001 - no connection (embedded local master): the config option applies
                extra = None
        base = history_server_url(extra)
        if not base:
            return
        self.spark_ui_url = history_app_url(base, self._spark_app_id)
        ti.xcom_push(key=XCOM_SPARK_UI_URL, value=self.spark_ui_url)
        self.log.info("The Spark UI link now points at the Spark History Server: %s", self.spark_ui_url)

    def _finish(self, ti: Any, result: JobResult) -> Any:
        """Push the result's XComs and return rank 0's value after checking XCom can store it."""
        import cloudpickle

        ti.xcom_push(key=XCOM_SPARK_APP_ID, value=result.app_id)
        ti.xcom_push(key=XCOM_ARTIFACT_PATHS, value=result.artifact_paths)
        self.log.info("Artifacts pushed to XCom %r: %s", XCOM_ARTIFACT_PATHS, result.artifact_paths)
        value = None if result.return_value is None else cloudpickle.loads(result.return_value)
        check_xcom_value(value, max_bytes=self.max_return_value_bytes, artifact_paths=result.artifact_paths)
        if self.outlets:
            self._attach_model_events(ti, result, value)
        return value

    def _attach_model_events(self, ti: Any, result: JobResult, value: Any) -> None:
        """Put the model's location on the asset events of this task's outlets (:mod:`airflow_provider_horovod.assets`)."""
        from airflow.sdk import get_current_context

        from airflow_provider_horovod.assets import attach_model_events, model_event_extra

        artifact_dir = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_ARTIFACT_DIR, map_indexes=ti.map_index)
        extra = model_event_extra(artifact_dir=artifact_dir, artifact_paths=result.artifact_paths,
                                  app_id=result.app_id, return_value=value)
        attached = attach_model_events(get_current_context().get("outlet_events"), self.outlets, extra)
        if attached:
            self.log.info("Asset events of %s carry the model's location: %s", ", ".join(attached), extra)

    @cached_property
    def connect_hook(self) -> HorovodConnectHook:
        """The Spark Connect hook for this task (created on first use)."""
        return HorovodConnectHook(conn_id=self.conn_id or HorovodConnectHook.default_conn_name, np=self.np)

    # --- cluster deploy mode (Spark standalone REST submission server) ---------------------------------------

    @cached_property
    def cluster_hook(self) -> HorovodStandaloneHook:
        """The standalone cluster-mode hook for this task (created on first use)."""
        if self.conn_id is None:
            raise HorovodJobError("deploy_mode='cluster' needs conn_id naming a spark://host:port standalone master")
        return HorovodStandaloneHook(conn_id=self.conn_id, np=self.np, conf=self.conf,
                                     env_vars={**getattr(self, "_storage_env", {}), **self.env_vars},
                                     name=self.spark_name or f"airflow-horovod-{self.dag_id}-{self.task_id}")

    def _defer_to_trigger(self, submission_id: str, staging: str) -> None:  # staging: Staging.record
        """Wait for the driver in the triggerer (``deferrable=True``); resumes in :meth:`execute_complete`."""
        self.defer(
            trigger=HorovodSparkJobTrigger(submission_id=submission_id, rest_url=self.cluster_hook.endpoints.rest_url,
                                           staging=staging, poll_interval_s=self.poll_interval_s or 5.0,
                                           cancel_on_kill=self.cancel_on_kill),
            method_name="execute_complete",
        )

    def _wait_for_driver(self, ti: Any, submission_id: str, staging: Staging):  # -> DriverStatus
        """Poll the driver's state every ``poll_interval_s`` until it ends, logging state changes."""
        import threading

        last_state, watcher, tick = None, None, threading.Event()
        slots = None if not self.poll_interval_s else ClusterSlotsWatcher(  # what the job waits for, from the master
            master_ui_url=self.cluster_hook.endpoints.master_ui_url, submission_id=submission_id,
            app_id=lambda: HorovodStandaloneHook.app_started(staging)[0], np=self.np,
            conf=self.conf, log=self.log.info, poll_interval_s=self.poll_interval_s).start()
        try:
            while True:
                status = self.cluster_hook.status(submission_id)
                if status.driver_state != last_state:
                    self.log.info("Driver %s is %s", submission_id, status.driver_state)
                    last_state = status.driver_state
                if watcher is None:
                    app_id, ui_url = HorovodStandaloneHook.app_started(staging)
                    if app_id:
                        watcher = self._app_started(ti, app_id, ui_url) or False
                if status.is_terminal:
                    return status
                tick.wait(self.poll_interval_s or 5.0)  # the poll interval
        finally:
            if watcher:
                watcher.stop()
            if slots is not None:
                slots.stop()
            self._link_history(ti)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger: validate its event, read the result, push XComs, or raise the failure."""
        event = validate_event(event)
        ti = context["ti"]
        self.log.info("Driver %s ended %s", event["submission_id"], event["driver_state"])
        if event["app_id"]:
            ti.xcom_push(key=XCOM_SPARK_APP_ID, value=event["app_id"])
            self._spark_app_id = event["app_id"]
            if event["ui_url"]:
                ti.xcom_push(key=XCOM_SPARK_UI_URL, value=event["ui_url"])
                self.spark_ui_url = event["ui_url"]
            self._link_history(ti)
        cause = None
        if event["status"] != "success":
            cause = RuntimeError(f"driver state {event['driver_state']}: {event['message'] or 'no message'}")
        return self._finish(ti, read_job_result(Staging(event["staging"]), app_id=event["app_id"],
                                                ui_url=event["ui_url"], submit_error=cause))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """When the trigger failed or timed out (``__fail__``), kill the driver before failing the task."""
        if next_method == "__fail__" and self.cancel_on_kill:
            submission_id = context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_SUBMISSION_ID)
            if submission_id:
                self.log.warning("The trigger failed: killing driver %s", submission_id)
                self.cluster_hook.kill(submission_id)
        return super().resume_execution(next_method, next_kwargs, context)

    def on_kill(self) -> None:
        """Stop the Spark job and every training process of this try (``cancel_on_kill``)."""
        if not self.cancel_on_kill:
            return
        if "hook" in self.__dict__:
            self.hook.on_kill()
        if "connect_hook" in self.__dict__:
            self.connect_hook.on_kill()
        if getattr(self, "_submission_id", None) and "cluster_hook" in self.__dict__:
            self.cluster_hook.kill(self._submission_id)
