"""
The interface of a deploy mode: the job methods Airflow's ``ResumableJobMixin`` asks of an operator, plus reading
the result, for one way of running the Spark driver.

``HorovodRunnerOperator`` makes one :class:`DeployMode` per try and delegates to it, the way the Spark provider's
``SparkSubmitOperator`` delegates to its private deployment backends. A mode is given everything it uses: the try's
:class:`JobRequest`, its hook and a :class:`~airflow_provider_horovod.operators._reporting.JobReporter`; it never sees
the operator, so each mode is tested on its own against a fake hook (``tests/unit/operators/modes/test_deploy_modes.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_horovod.operators._reporting import JobReporter
    from airflow_provider_horovod.runtime.settings import JobSettings


@dataclass(frozen=True)
class JobRequest:
    """
    What one try runs: made by the operator once its arguments are rendered, before anything is submitted.

    :param key: the payload's HMAC key (made for this try).
    :param payload: the signed payload (the callable and its arguments).
    :param artifact_dir: path or URI where the ranks write.
    :param settings: the job's knobs.
    :param env: environment variables for the driver and every rank (``env_vars`` and the store's credentials).
    :param label: ``dag_id.task_id``, for names and logs.
    :param has_storage_credentials: ``artifact_dir`` names a connection whose credentials travel in ``env``.
    """

    key: bytes
    payload: bytes
    artifact_dir: str
    settings: JobSettings
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""
    has_storage_credentials: bool = False


class DeployMode:
    """
    One deploy mode of ``HorovodRunnerOperator``: how the job is submitted, watched, read back and stopped.

    Creating one does no I/O.

    :param request: what this try runs (``None`` only for a mode that resumes after a deferral, with no new job).
    :param hook: the mode's hook (client, standalone cluster or Spark Connect).
    :param reporter: the try's reporting steps (application id, links, the result's XComs).
    """

    name = ""
    """``client``, ``cluster`` or ``connect``."""
    resumable = False
    """Whether a retry can reattach to the job (then the operator runs ``execute_resumable``)."""

    def __init__(self, request: JobRequest | None, hook: Any, reporter: JobReporter) -> None:
        self.request = request
        self.hook = hook
        self.reporter = reporter
        self.log = reporter.log

    @property
    def job(self) -> JobRequest:
        """This try's request.

        :raises RuntimeError: the mode was made without one (it only resumes after a deferral).
        """
        if self.request is None:
            raise RuntimeError(f"the {self.name} deploy mode was made without a job request")
        return self.request

    def check(self) -> None:
        """
        Refuse what this mode cannot do, before anything is submitted.

        :raises HorovodJobError: the combination is not supported.
        """

    def submit_job(self, context: Context) -> Any:
        """
        Start the job.

        :param context: the task's Airflow context.
        :return: the job's external id (JSON), or ``None`` when there is none to persist.
        """
        raise NotImplementedError

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """
        The job's state as its system names it.

        :param external_id: what :meth:`submit_job` returned.
        :param context: the task's Airflow context.
        """
        raise NotImplementedError

    def is_job_active(self, status: str) -> bool:
        """
        Whether a retry should wait for the job rather than start another.

        :param status: a state from :meth:`get_job_status`.
        """
        return False

    def is_job_succeeded(self, status: str) -> bool:
        """
        Whether the job ended in success.

        :param status: a state from :meth:`get_job_status`.
        """
        return False

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """
        Wait until the job ends.

        :param external_id: what :meth:`submit_job` returned.
        :param context: the task's Airflow context.
        :raises HorovodJobError: the job failed.
        """
        raise NotImplementedError

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Push the result's XComs and return rank 0's value.

        :param external_id: what :meth:`submit_job` returned.
        :param context: the task's Airflow context.
        :raises HorovodJobError: the job failed.
        :raises HorovodResultError: the value cannot go to XCom.
        """
        raise NotImplementedError

    def on_kill(self) -> None:
        """Stop the job and every training process of this try (called when ``cancel_on_kill`` is set)."""


class DelegatesToDeployMode:
    """
    The job methods of Airflow's ``ResumableJobMixin``, mixed into the operator, and its ``on_kill``: each goes to the
    deploy mode this try runs in (``self._mode``, chosen once in ``execute``).
    """

    _mode: DeployMode | None
    cancel_on_kill: bool

    def submit_job(self, context: Context) -> Any:
        """Submit the job (see :meth:`DeployMode.submit_job`); return its id, which ``durable`` persists."""
        return self._mode.submit_job(context)

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """The job's state (see :meth:`DeployMode.get_job_status`)."""
        return self._mode.get_job_status(external_id, context)

    def is_job_active(self, status: str) -> bool:
        """Whether a retry waits for the job (see :meth:`DeployMode.is_job_active`)."""
        return self._mode.is_job_active(status)

    def is_job_succeeded(self, status: str) -> bool:
        """Whether the job succeeded (see :meth:`DeployMode.is_job_succeeded`)."""
        return self._mode.is_job_succeeded(status)

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """Wait for the job (see :meth:`DeployMode.poll_until_complete`)."""
        return self._mode.poll_until_complete(external_id, context)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """Push the result's XComs, return rank 0's value (see :meth:`DeployMode.get_job_result`)."""
        return self._mode.get_job_result(external_id, context)

    def on_kill(self) -> None:
        """
        Stop the Spark job and every training process of this try (``cancel_on_kill``).

        Airflow's task runner calls this from its SIGTERM handler: in the main thread, between two steps of whatever
        that thread was doing, possibly inside a log write that holds a lock the kill's own log lines need. So the
        kill runs in a thread of its own and, called on the main thread, is not waited for (it is not a daemon: the
        process does not end before it); the interrupted code goes on, and fails once spark-submit is gone.
        """
        if not (self.cancel_on_kill and self._mode is not None):
            return
        killer = threading.Thread(target=self._mode.on_kill, name="horovod-on-kill")
        killer.start()
        if threading.current_thread() is not threading.main_thread():
            killer.join()
