"""Names of the environment variables through which a launcher hands a rank its job (launcher <-> worker)."""

from __future__ import annotations

ENV_PAYLOAD = "HOROVOD_AIRFLOW_PAYLOAD"
"""Path of the rank's private copy of the payload."""
ENV_RESULT = "HOROVOD_AIRFLOW_RESULT"
"""Where rank 0 writes its cloudpickled return value."""
ENV_MAX_RESULT = "HOROVOD_AIRFLOW_MAX_RESULT_BYTES"
"""The largest cloudpickled return value rank 0 writes, bytes (the job's ``max_return_value_bytes``); a larger one is
replaced by a pickled :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused`. Unset: no limit."""
ENV_ERROR = "HOROVOD_AIRFLOW_ERROR"
"""Where a failing rank writes ``{"exc_type", "exc_message", "traceback"}`` as JSON."""
ENV_LIFELINE = "HOROVOD_AIRFLOW_LIFELINE_FD"
"""File descriptor of the lifeline pipe's read end (EOF = the launcher is gone)."""
ENV_CHECK_SIZE = "HOROVOD_AIRFLOW_CHECK_SIZE"
"""The expected ``hvd.size()`` (world size); the worker checks it each time the function's own ``hvd.init()``
(``init_process_group()``) returns."""
ENV_LAUNCHER = "HOROVOD_AIRFLOW_LAUNCHER"
"""The job's launcher (``horovod`` or ``torch``): which init call the worker watches (``hvd.init()`` or
``torch.distributed.init_process_group()``)."""
ENV_PROGRESS = "HOROVOD_AIRFLOW_PROGRESS_FD"
"""File descriptor the rank writes its milestones to: ``L`` function loaded (about to be called), ``I`` entering
``hvd.init()``, ``R`` ``hvd.init()`` returned with the right size. ``I``/``R`` repeat for every ``hvd.init()``."""
ENV_METRICS = "HOROVOD_AIRFLOW_METRICS_FD"
"""File descriptor the rank's :func:`~airflow_provider_horovod.runtime.reports.report` writes its records to, one
JSON object per line (``{"time", "rank", "step", "total_steps", "epoch", "metrics"}``); unset outside a job."""
ENV_RESTART_COUNT = "HOROVOD_AIRFLOW_RESTART_COUNT"
"""How many times the driver restarted the job before this attempt (0 on the first); what
:func:`~airflow_provider_horovod.runtime.checkpoints.restart_count` returns."""
ENV_LIBRARY_PROGRESS = "HOROVOD_AIRFLOW_LIBRARY_PROGRESS"
"""``0`` (or ``false``/``no``/``off``) in the job's environment: the rank does not add its progress callback to a
Transformers or Lightning ``Trainer`` (:mod:`~airflow_provider_horovod.runtime.library_progress`); on otherwise."""
ENV_FORK_SERVER = "HOROVOD_AIRFLOW_FORK_SERVER"
"""``0`` (or ``false``/``no``/``off``) in the job's environment: no fork server for the job's restarts; every rank
starts as a process of its own (:mod:`~airflow_provider_horovod.runtime.rank.fork_server`); on otherwise."""
ENV_RELEASE = "HOROVOD_AIRFLOW_RELEASE_FD"
"""File descriptor of a pipe on which a rank started before the rendezvous port is known waits for its remaining
variables (one JSON object, then end of file) before it loads the function; end of file without them: exit 1."""
ENV_PREIMPORT = "HOROVOD_AIRFLOW_PREIMPORT"
"""Comma-separated modules such a rank imports while it waits (failures are ignored: the function's own import
reports them)."""
ENV_STOP_FLAG = "HOROVOD_AIRFLOW_STOP_FLAG"
"""The path of a file that a barrier rank's task creates, holding the reason, when the driver asks the attempt to stop
at its next checkpoint (all ``np`` slots free again for a shrunk attempt, an executor being decommissioned);
:func:`~airflow_provider_horovod.runtime.save_checkpoint` on rank 0 then stops the function after saving
(:class:`~airflow_provider_horovod.runtime.checkpoints.StopAtCheckpoint`)."""
RANK_STOP_FILE = "stop"
"""That file, in the rank's own directory (:data:`ENV_STOP_FLAG` names it)."""
RANK_PAYLOAD_FILE = "payload.bin"
"""The rank's private copy of the payload, in the rank's own directory (the task's; :data:`ENV_PAYLOAD` names it)."""
RANK_VALUE_FILE = "result.pkl"
"""Rank 0's cloudpickled return value, in the rank's own directory (:data:`ENV_RESULT` names it)."""
RANK_ERROR_FILE = "error.json"
"""A failing rank's error, in the rank's own directory (:data:`ENV_ERROR` names it)."""
RANK_FRAMEWORK_ERROR_FILE = "framework-error.json"
"""The error file the rank's framework writes, in the rank's own directory (torchrun's ``TORCHELASTIC_ERROR_FILE``,
named by the launcher's ``error_file_variable``)."""
PROGRESS_LOADED = b"L"
PROGRESS_INIT = b"I"
PROGRESS_READY = b"R"
WORKER_MODULE = "airflow_provider_horovod.runtime.rank.worker"
"""Run with ``python -m`` to start a rank."""
RANK_ENV_NAMES = "HOROVOD_AIRFLOW_RANK_ENV"
"""Comma-separated names of the driver's environment variables that go on to every rank (operator ``env_vars``)."""


def switched_off(value: str | None) -> bool:
    """
    How an on/off variable of the job's environment (:data:`ENV_LIBRARY_PROGRESS`, :data:`ENV_FORK_SERVER`) reads:
    ``0``, ``false``, ``no`` or ``off`` in any case is off; unset or anything else, on.

    :param value: the variable's value, or ``None`` when unset.
    """
    return (value or "").strip().lower() in ("0", "false", "no", "off")
