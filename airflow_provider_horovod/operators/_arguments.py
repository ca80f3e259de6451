"""
``HorovodRunnerOperator``'s arguments on their way to a job: the knobs checked when the DAG file is parsed (by
:class:`~airflow_provider_horovod.runtime.settings.JobSettings`, as ``HorovodRunner`` and the hooks check them), the
templated ``slot_wait_timeout_s`` read once rendered, and the callable signed into a try's payload.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from typing import Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.operators.common import check_spark_arguments
from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.settings import (
    DEFAULT_ELASTIC_WAIT_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_LAUNCHER,
    JobSettings,
    check_barrier_conf,
)
from airflow_provider_horovod.runtime.wire.payload import LARGE_PAYLOAD_BYTES, dumps_payload

__all__ = ["checked_settings", "rendered_slot_wait_timeout", "signed_payload", "PER_TRY_SETTINGS", "SETTING_NAMES"]

PER_TRY_SETTINGS = ("checkpoint_dir", "try_number")
"""The :class:`JobSettings` fields the operator fills in for each try (``execute``), not from its knobs."""
SETTING_NAMES = tuple(f.name for f in fields(JobSettings) if f.name not in PER_TRY_SETTINGS)
"""The operator's arguments that are :class:`JobSettings` fields, kept under the same attribute names."""


def checked_settings(
    *,
    np: int,
    driver_log_verbosity: str,
    gloo_timeout_s: int,
    start_timeout_s: float | None,
    training_timeout_s: float | None,
    slot_wait_timeout_s: float | str | None,
    use_gpu: bool,
    gpu_visibility: str,
    timeline: bool,
    max_return_value_bytes: int,
    conf: Any,
    env_vars: Any,
    spark_submit_kwargs: Any,
    launcher: str = DEFAULT_LAUNCHER,
    max_restarts: int = 0,
    restart_on: Any = (),
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S,
    min_np: int | None = None,
    elastic_wait_s: float = DEFAULT_ELASTIC_WAIT_S,
) -> JobSettings:
    """
    Check the operator's arguments when the DAG file is parsed; return the job's knobs.

    A templated (string) ``slot_wait_timeout_s`` is checked once rendered (:func:`rendered_slot_wait_timeout`): the
    settings returned then hold ``None`` for it.

    :param np: number of Horovod processes.
    :param driver_log_verbosity: ``"log_callback_only"`` or ``"all"``.
    :param gloo_timeout_s: seconds Gloo waits at rendezvous and in a collective.
    :param start_timeout_s: seconds each rank may take to start, or ``None``.
    :param training_timeout_s: seconds each rank may run in all, or ``None``.
    :param slot_wait_timeout_s: seconds the driver waits for ``np`` task slots, ``None``, or a template string.
    :param use_gpu: give each rank its task's GPUs.
    :param gpu_visibility: ``"host"`` or ``"rank"``.
    :param timeline: record the Horovod Timeline.
    :param max_return_value_bytes: the largest return value accepted for XCom, bytes.
    :param conf: the operator's Spark properties.
    :param env_vars: the operator's environment variables.
    :param spark_submit_kwargs: the operator's further ``SparkSubmitHook`` arguments.
    :param launcher: ``"horovod"`` or ``"torch"``.
    :param max_restarts: restarts of the job within the try after a restartable failure.
    :param restart_on: the training code's exception types that restart it too.
    :param heartbeat_timeout_s: seconds without a barrier task's heartbeat before it counts as lost, or ``None``.
    :param min_np: the fewest ranks a restart may run with (elastic ranks), or ``None``.
    :param elastic_wait_s: seconds a restart waits for all ``np`` slots before it starts with fewer.
    :raises ValueError: an argument is invalid.
    """
    check_spark_arguments(conf=conf, env_vars=env_vars, spark_submit_kwargs=spark_submit_kwargs)
    check_barrier_conf(conf)
    return JobSettings(
        np=np,
        driver_log_verbosity=driver_log_verbosity,
        gloo_timeout_s=gloo_timeout_s,
        start_timeout_s=start_timeout_s,
        training_timeout_s=training_timeout_s,
        slot_wait_timeout_s=None if isinstance(slot_wait_timeout_s, str) else slot_wait_timeout_s,
        use_gpu=use_gpu,
        gpu_visibility=gpu_visibility,
        timeline=timeline,
        max_return_value_bytes=max_return_value_bytes,
        launcher=launcher,
        max_restarts=max_restarts,
        restart_on=restart_on,
        heartbeat_timeout_s=heartbeat_timeout_s,
        min_np=min_np,
        elastic_wait_s=elastic_wait_s,
    )


def rendered_slot_wait_timeout(value: float | str | None) -> float | None:
    """
    ``slot_wait_timeout_s`` as rendered: a number, ``None``, or a template's text (``"none"`` or empty: no limit).

    :param value: the rendered argument.
    :return: the seconds, or ``None``; a number is returned as given (``JobSettings`` checks it).
    :raises ValueError: the rendered text is not a number, ``"none"`` or empty.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return None if text.lower() in ("none", "") else float(text)
    except ValueError:
        raise ValueError(
            f"slot_wait_timeout_s must be a positive number of seconds or None, got {text!r} after rendering"
        ) from None


def signed_payload(
    python_callable: Callable[..., Any], op_args: Collection[Any], op_kwargs: Mapping[str, Any], *, log: Any
) -> tuple[bytes, bytes]:
    """
    ``(key, payload)``: the callable and its arguments, signed with a key made for this try.

    :param python_callable: the training function.
    :param op_args: its positional arguments.
    :param op_kwargs: its keyword arguments.
    :param log: where the warning about a large payload goes.
    :raises HorovodJobError: the callable or an argument cannot be pickled (the message names the culprit).
    """
    key = secrets.token_bytes(32)
    try:
        payload = dumps_payload(python_callable, list(op_args), dict(op_kwargs), key=key)
    except PayloadError as err:
        raise HorovodJobError(str(err)) from err
    if len(payload) > LARGE_PAYLOAD_BYTES:
        log.warning(
            "The training payload is %.0f MiB: data captured in the callable or its arguments "
            "travels with every task; pass a path and load it inside the function instead",
            len(payload) / 2**20,
        )
    return key, payload
