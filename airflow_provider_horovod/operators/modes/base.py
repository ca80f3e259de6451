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
    from airflow_provider_horovod.utils.job_result import JobResult


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


GONE = "GONE"
"""The status of a job whose driver lived in a task process (client mode, Spark Connect): it ended with it."""


class SynchronousMode(DeployMode):
    """
    A deploy mode whose job runs inside this task's process and ends with it (client mode, Spark Connect): nothing
    to reattach to, the result held in memory from :meth:`poll_until_complete` to :meth:`get_job_result`.

    :param request: the try's job.
    :param hook: the mode's hook; its ``on_kill`` stops the job.
    :param reporter: the try's reporting steps.
    """

    def __init__(self, request: TrainingJob, hook: Any, reporter: JobReporter) -> None:
        super().__init__(request, hook, reporter)
        self._result: JobResult | None = None

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """
        Always :data:`GONE`: a retry never finds the job of an earlier try (it ran in that try's process).

        :param external_id: what :meth:`submit_job` returned.
        :param context: the task's Airflow context.
        """
        return GONE

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Push the XComs of the job just run and return rank 0's value.

        :param external_id: what :meth:`submit_job` returned.
        :param context: the task's Airflow context.
        :raises RuntimeError: :meth:`poll_until_complete` has not run the job.
        :raises HorovodResultError: the value cannot go to XCom.
        """
        if self._result is None:
            raise RuntimeError(f"the {self.name} deploy mode has no result before poll_until_complete ran the job")
        return self.reporter.finish(context["ti"], self._result)

    def on_kill(self) -> None:
        """Stop the job through the hook (spark-submit and its ranks; the Spark Connect session's operations)."""
        self.hook.on_kill()
