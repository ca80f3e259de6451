"""
What watches a training try from outside the job: objects the operator calls at named points of the try, instead of
classes mixed into it that override its methods. :class:`JobObserver` names the points; the observers are MLflow
tracking (:class:`~airflow_provider_horovod.operators.mlflow_tracking.MlflowRunObserver`), OpenLineage
(:class:`~airflow_provider_horovod.operators.lineage.LineageObserver`) and the model's asset events
(:class:`ModelAssetEvents`). The operator makes them for each try, once its arguments are rendered, and calls them in
order through :class:`Observers`.

The points, in the order a try meets them:

``created``  the job is built (before the deploy mode is chosen): an observer may add to it
``found``  a retry found the job an earlier try persisted (``durable``), and read its state
``submitting``  right before the job is submitted (not when a retry reattaches): an observer may add to it
``submitted``  the job was submitted; an observer may add to the record ``durable`` persists
``attached``  the try waits for, or reads the result of, a job (its own, or one an earlier try submitted)
``deferring``  the try hands its wait to a trigger: an observer may give the trigger what it needs
``resumed``  the try comes back from its trigger
``finished``  the job succeeded and its result is read
``failed``  the try failed (also after ``killed``)
``killed``  the task is being killed (marked failed or success, cleared, stopped)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.utils.job_result import JobResult

__all__ = ["FinishedTry", "JobObserver", "ModelAssetEvents", "Observers"]


@dataclass(frozen=True)
class FinishedTry:
    """
    What a successful try brought back.

    :param value: rank 0's return value (the task's ``return_value``).
    :param result: the job's result as read (application id, artifact paths, metrics), when the try read it.
    :param artifact_dir: the job's artifact directory.
    """

    value: Any
    result: JobResult | None
    artifact_dir: str | None


class JobObserver:
    """
    Something the operator tells about a try's job at named points (the module's table). Every point does nothing
    here; an observer overrides the ones it needs. An observer that raises fails the try, as the job would.
    """

    def created(self, context: Any, job: TrainingJob) -> TrainingJob:
        """
        The try's job is built.

        :param context: the task's Airflow context.
        :param job: the job.
        :return: the job to run (``job``, or one made from it).
        """
        return job

    def found(self, context: Any, record: Any, status: str, *, active: bool, succeeded: bool) -> None:
        """
        A retry read the state of the job an earlier try persisted.

        :param context: the task's Airflow context.
        :param record: the persisted record.
        :param status: the job's state, as its system names it.
        :param active: the retry will wait for that job rather than submit another.
        :param succeeded: that job ended in success.
        """

    def submitting(self, context: Any, job: TrainingJob) -> TrainingJob:
        """
        The job is about to be submitted.

        :param context: the task's Airflow context.
        :param job: the job.
        :return: the job to submit (``job``, or one made from it).
        """
        return job

    def submitted(self, context: Any, record: Any) -> None:
        """
        The job was submitted.

        :param context: the task's Airflow context.
        :param record: what ``durable`` persists (a dict an observer may add keys to), or ``None``.
        """

    def attached(self, context: Any, record: Any) -> None:
        """
        The try waits for, or reads the result of, the job ``record`` names.

        :param context: the task's Airflow context.
        :param record: the job's record (this try's, or an earlier try's), or ``None``.
        """

    def deferring(self, trigger: Any) -> Any:
        """
        The try defers to ``trigger``.

        :param trigger: the trigger.
        :return: the trigger to defer to (``trigger``, or one made from it).
        """
        return trigger

    def resumed(self, context: Any) -> None:
        """
        The try comes back from its trigger (``execute_complete``, or a trigger's failure).

        :param context: the task's Airflow context.
        """

    def finished(self, context: Any, outcome: FinishedTry) -> None:
        """
        The job succeeded and its result was read.

        :param context: the task's Airflow context.
        :param outcome: what it brought back.
        """

    def failed(self, context: Any, error: BaseException) -> None:
        """
        The try failed.

        :param context: the task's Airflow context.
        :param error: why.
        """

    def killed(self) -> None:
        """The task is being killed (its ``on_kill``); the try's ``failed`` follows when it fails."""


class Observers:
    """
    A try's observers, called in order at each point.

    :param observers: the observers.
    """

    def __init__(self, observers: Iterable[JobObserver] = ()) -> None:
        self.observers = list(observers)

    def created(self, context: Any, job: TrainingJob) -> TrainingJob:
        """Every observer's :meth:`JobObserver.created`, each given the job the one before returned."""
        for observer in self.observers:
            job = observer.created(context, job)
        return job

    def found(self, context: Any, record: Any, status: str, *, active: bool, succeeded: bool) -> None:
        """Every observer's :meth:`JobObserver.found`."""
        for observer in self.observers:
            observer.found(context, record, status, active=active, succeeded=succeeded)

    def submitting(self, context: Any, job: TrainingJob) -> TrainingJob:
        """Every observer's :meth:`JobObserver.submitting`, each given the job the one before returned."""
        for observer in self.observers:
            job = observer.submitting(context, job)
        return job

    def submitted(self, context: Any, record: Any) -> None:
        """Every observer's :meth:`JobObserver.submitted`."""
        self._notify("submitted", context, record)

    def attached(self, context: Any, record: Any) -> None:
        """Every observer's :meth:`JobObserver.attached`."""
        self._notify("attached", context, record)

    def deferring(self, trigger: Any) -> Any:
        """Every observer's :meth:`JobObserver.deferring`, each given the trigger the one before returned."""
        for observer in self.observers:
            trigger = observer.deferring(trigger)
        return trigger

    def resumed(self, context: Any) -> None:
        """Every observer's :meth:`JobObserver.resumed`."""
        self._notify("resumed", context)

    def finished(self, context: Any, outcome: FinishedTry) -> None:
        """Every observer's :meth:`JobObserver.finished`."""
        self._notify("finished", context, outcome)

    def failed(self, context: Any, error: BaseException) -> None:
        """Every observer's :meth:`JobObserver.failed`."""
        self._notify("failed", context, error)

    def killed(self) -> None:
        """Every observer's :meth:`JobObserver.killed`."""
        self._notify("killed")

    def _notify(self, point: str, *args: Any) -> None:
        """Call every observer's ``point`` method with ``args``, in order (the points that return nothing)."""
        for observer in self.observers:
            getattr(observer, point)(*args)


class ModelAssetEvents(JobObserver):
    """
    The model's location on the asset events of the task's outlets (:mod:`airflow_provider_horovod.assets`), once
    the job succeeded: ``artifact_dir``, ``artifact_paths``, ``spark_app_id``, the metrics and a small return value.

    :param outlets: the task's ``outlets``.
    :param log: the task's logger.
    """

    def __init__(self, outlets: Iterable[Any], log: Any) -> None:
        self.outlets = list(outlets or [])
        self.log = log

    def finished(self, context: Any, outcome: FinishedTry) -> None:
        """Attach the model's location to this task's outlet events (nothing without outlets)."""
        from airflow_provider_horovod.assets import attach_model_events, model_event_extra

        if not self.outlets or outcome.result is None or outcome.artifact_dir is None:
            return
        result = outcome.result
        extra = model_event_extra(
            artifact_dir=outcome.artifact_dir,
            artifact_paths=result.artifact_paths,
            app_id=result.app_id,
            return_value=outcome.value,
            metrics=result.metrics,
            restarts=result.restarts,
        )
        attached = attach_model_events(context.get("outlet_events"), self.outlets, extra)
        if attached:
            self.log.info("Asset events of %s carry the model's location: %s", ", ".join(attached), extra)
