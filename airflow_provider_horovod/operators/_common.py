"""
What ``HorovodRunnerOperator`` and its deploy modes share: XCom keys, where artifacts and staging go, deploy-mode
and history-server settings, and the check of rank 0's return value before it goes to XCom.

Every name here is re-exported by :mod:`airflow_provider_horovod.operators.horovod`, where users import them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_horovod.exceptions import HorovodResultError
from airflow_provider_horovod.links import XCOM_SPARK_UI_URL  # noqa: F401 - for the deploy modes, with the other keys

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
XCOM_TENSORBOARD_DIR = "tensorboard_dir"
"""XCom key of the TensorBoard log directory, pushed when the job wrote logs there (``runtime.tensorboard_dir``)."""
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

    :param value: the value given (``deploy_mode=`` or the connection's ``deploy-mode`` extra).
    :param source: where it came from, for the message.
    :return: ``"client"`` or ``"cluster"``.
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
    """
    The application's page on a Spark History Server (``<base>/history/<app-id>/``).

    :param base_url: the history server, e.g. ``http://history:18080``.
    :param app_id: the Spark application id.
    """
    return f"{base_url.rstrip('/')}/history/{app_id}/"


def _default_deferrable() -> bool:
    from airflow_provider_horovod._compat import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def default_staging_dir(context: Mapping[str, Any]) -> str:
    """
    Cluster mode: ``<artifact_root>/.staging/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>`` (shared FS or object store).

    :param context: the task's Airflow context (its ``ti``).
    """
    ti = context["ti"]
    parts = [".staging", _safe(ti.dag_id), _safe(ti.run_id), _safe(ti.task_id)]
    if getattr(ti, "map_index", -1) not in (-1, None):
        parts.append(f"map-{ti.map_index}")
    parts.append(f"try-{ti.try_number}")
    return os.path.join(default_artifact_root(), *parts)


def _safe(part: object) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", str(part))


def default_artifact_dir(context: Mapping[str, Any]) -> str:
    """
    ``<root>/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>``: unique per try, so no retry overwrites a model.

    :param context: the task's Airflow context (its ``ti``).
    """
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

    :param value: rank 0's return value, unpickled.
    :param max_bytes: the largest serialized size accepted, bytes.
    :param artifact_paths: the job's files, named in the message.
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


def check_spark_arguments(*, conf: Any, env_vars: Any, spark_submit_kwargs: Any) -> None:
    """
    Check the operator's Spark arguments (when the DAG is parsed).

    :param conf: Spark properties, a dict or ``None``.
    :param env_vars: environment variables, a dict or ``None``.
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments, a dict or ``None``.
    :raises ValueError: one is not a dict or ``None``, or ``spark_submit_kwargs`` names an argument the provider sets
        itself (:data:`RESERVED_SPARK_SUBMIT_KWARGS`).
    """
    for pname, value in (("conf", conf), ("env_vars", env_vars), ("spark_submit_kwargs", spark_submit_kwargs)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{pname} must be a dict or None, got {type(value).__name__}")
    reserved = sorted(set(spark_submit_kwargs or {}) & RESERVED_SPARK_SUBMIT_KWARGS)
    if reserved:
        raise ValueError(f"spark_submit_kwargs: {reserved} are set by the provider (allowed: any other "
                         f"SparkSubmitHook argument; reserved: {sorted(RESERVED_SPARK_SUBMIT_KWARGS)}); give Spark "
                         "properties in conf=, environment variables in env_vars=, and install extra modules on "
                         "the executors")


def check_result_and_conf(*, max_return_value_bytes: Any, conf: Mapping[str, Any] | None) -> None:
    """
    Check the XCom size limit and that ``conf`` allows a barrier stage (when the DAG is parsed).

    :param max_return_value_bytes: the largest serialized return value accepted, bytes (a positive int).
    :param conf: Spark properties, or ``None``.
    :raises ValueError: the limit is not a positive int, or ``conf`` turns on dynamic allocation (SPARK-24942).
    """
    if isinstance(max_return_value_bytes, bool) or not isinstance(max_return_value_bytes, int) \
            or max_return_value_bytes <= 0:
        raise ValueError(f"max_return_value_bytes must be a positive int, got {max_return_value_bytes!r}")
    if conf and str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        raise ValueError("conf: spark.dynamicAllocation.enabled=true cannot be used; Spark refuses barrier "
                         "stages with dynamic allocation (SPARK-24942). Allowed: false or unset")
