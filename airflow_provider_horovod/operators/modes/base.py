"""
The interface of a deploy mode: the job methods Airflow's ``ResumableJobMixin`` asks of an operator, plus reading
the result, for one way of running the Spark driver.

The training operators (:class:`~airflow_provider_horovod.operators.base.DistributedTrainingOperator`) make one
:class:`DeployMode` per try and delegate to it, the way the Spark provider's ``SparkSubmitOperator`` delegates to its
private deployment backends. A mode is given everything it uses: the try's
:class:`~airflow_provider_horovod.job.TrainingJob`, its hook and a
:class:`~airflow_provider_horovod.operators._reporting.JobReporter`; it never sees the operator, so each mode is tested
on its own against a fake hook (``tests/unit/operators/modes/test_deploy_modes.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.operators._reporting import JobReporter


class DeployMode:
    """
    One deploy mode of the training operators: how the job is submitted, watched, read back and stopped.

    Creating one does no I/O.

    :param request: the try's job (``None`` only for a mode that resumes after a deferral, with no new job).
    :param hook: the mode's hook (client, standalone cluster or Spark Connect).
    :param reporter: the try's reporting steps (application id, links, the result's XComs).
    """

    name = ""
    """``client``, ``cluster`` or ``connect``."""
    resumable = False
    """Whether a retry can reattach to the job (then the operator runs ``execute_resumable``)."""

    def __init__(self, request: TrainingJob | None, hook: Any, reporter: JobReporter) -> None:
        self.request = request
        self.hook = hook
        self.reporter = reporter
        self.log = reporter.log

    @property
    def job(self) -> TrainingJob:
        """This try's job.

        :raises RuntimeError: the mode was made without one (it only resumes after a deferral).
        """
        if self.request is None:
            raise RuntimeError(f"the {self.name} deploy mode was made without a job")
        return self.request

    def use(self, job: TrainingJob) -> None:
        """
        Run ``job`` from now on: the try's job as its observers left it right before submission (an MLflow run's
        environment added).

        :param job: the job to submit.
        """
        self.request = job

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
