"""
What ``HorovodRunnerOperator`` and its deploy modes share: deploy-mode and history-server settings, the checks of
the Spark arguments, and the check of rank 0's return value before it goes to XCom. The XCom keys are in
:mod:`airflow_provider_horovod.xcom_keys`; where artifacts, checkpoints and staging go, in
:mod:`airflow_provider_horovod.paths`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow_provider_horovod.exceptions import HorovodResultError
from airflow_provider_horovod.utils.spark_auth import check_no_auth_secret

DEFAULT_MAX_RETURN_BYTES = 1024 * 1024
RESERVED_SPARK_SUBMIT_KWARGS = frozenset(
    {"conn_id", "conf", "py_files", "name", "application_args", "env_vars", "deploy_mode", "application"}
)
"""
``SparkSubmitHook`` arguments the hook sets itself (client mode): passing them in ``spark_submit_kwargs`` is refused.
"""


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


def history_server_url(from_connection: str | None = None) -> str | None:
    """
    The Spark History Server the "Spark UI" link points to once the application has ended, if any.

    The connection's ``spark.airflowProviderHorovod.historyServerUrl`` extra (read by
    :func:`~airflow_provider_horovod.utils.spark_connection.connection_extras`), else ``[horovod] history_server_url``
    in the Airflow config (env ``AIRFLOW__HOROVOD__HISTORY_SERVER_URL``); the history server only knows applications
    that ran with ``spark.eventLog.enabled=true`` and an event log directory it reads.

    :param from_connection: the connection's History Server URL, when it names one.
    :return: the base URL, e.g. ``http://history:18080``, or ``None``.
    """
    from airflow_provider_horovod._compat import conf

    url = from_connection or conf.get("horovod", "history_server_url", fallback=None)
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


def check_xcom_value(value: Any, *, max_bytes: int, artifact_paths: Sequence[str]) -> None:
    """
    Check that ``value`` can be stored in XCom as the task's return value.

    Rank 0 already refused a value whose cloudpickle is larger than ``max_bytes`` (it sends a
    :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` instead); a value that passed is measured
    again here, serialized as XCom stores it.

    :param value: rank 0's return value, unpickled, or the refusal rank 0 sent instead.
    :param max_bytes: the largest serialized size accepted, bytes.
    :param artifact_paths: the job's files, named in the message.
    :raises HorovodResultError: rank 0 refused the value, or it cannot be serialized by Airflow's serde, or is
        larger than ``max_bytes`` once serialized; the message lists the artifact files (which stay where they are).
    """
    from airflow_provider_horovod._compat import serialize
    from airflow_provider_horovod.runtime.errors import ReturnValueRefused

    kept = ("; the model files are kept: " + ", ".join(artifact_paths)) if artifact_paths else ""
    refused = isinstance(value, ReturnValueRefused)
    if refused:  # measured on rank 0, as a pickle
        size, max_bytes = value.size, value.limit
    else:
        try:
            size = len(json.dumps(serialize(value)))
        except Exception as err:
            raise HorovodResultError(
                f"rank 0 returned a {type(value).__module__}.{type(value).__qualname__}, which XCom cannot store "
                f"({type(err).__name__}). Return what downstream tasks need as plain values instead: file paths, "
                f"metrics (floats), small dicts/lists; save models and tensors under artifact_dir(){kept}"
            ) from err
    if refused or size > max_bytes:
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
    :raises ValueError: one is not a dict or ``None``, ``spark_submit_kwargs`` names an argument the provider sets
        itself (:data:`RESERVED_SPARK_SUBMIT_KWARGS`), or ``conf``/``env_vars`` holds the Spark RPC secret
        (:func:`~airflow_provider_horovod.utils.spark_auth.check_no_auth_secret`).
    """
    for pname, value in (("conf", conf), ("env_vars", env_vars), ("spark_submit_kwargs", spark_submit_kwargs)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{pname} must be a dict or None, got {type(value).__name__}")
    check_no_auth_secret(conf, env_vars)
    reserved = sorted(set(spark_submit_kwargs or {}) & RESERVED_SPARK_SUBMIT_KWARGS)
    if reserved:
        raise ValueError(
            f"spark_submit_kwargs: {reserved} are set by the provider (allowed: any other "
            f"SparkSubmitHook argument; reserved: {sorted(RESERVED_SPARK_SUBMIT_KWARGS)}); give Spark "
            "properties in conf=, environment variables in env_vars=, and install extra modules on "
            "the executors"
        )
