"""
Follow a running Horovod job's barrier stage through the Spark monitoring REST API and log state changes, not noise
(the stage's progress as Spark sees it; the training's own progress is the ranks' ``report()``).

:func:`describe` turns one snapshot of ``/jobs``, ``/stages`` and ``/executors`` into facts (one message per
topic); :class:`ProgressWatcher` polls every ``poll_interval_s`` and logs a topic only when its message changes:
barrier stage waiting for N free slots -> starting -> N/N ranks running on which executors -> stage attempt failed
(reason) -> finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_horovod.clients import (
    ExecutorInfo,
    JobInfo,
    RetryPolicy,
    SparkRestAccess,
    SparkRestClient,
    SparkRestError,
    StageInfo,
)
from airflow_provider_horovod.utils.poller import Log, Poller

JOB_GROUP_PREFIX = "horovod-"
"""``HorovodRunner`` runs its barrier stage under a Spark job group with this prefix."""


@dataclass(frozen=True)
class Snapshot:
    """What the REST API said at one poll."""

    jobs: Sequence[JobInfo]
    stages: Sequence[StageInfo]
    executors: Sequence[ExecutorInfo]


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no reason given"


def describe(snapshot: Snapshot) -> dict[str, str]:
    """
    The facts worth telling about the Horovod barrier stage(s) in ``snapshot``.

    :return: ``{topic: message}``; topics are ``"stage-<id>-<attempt>"``.
    """
    facts: dict[str, str] = {}
    stage_ids = {
        sid for job in snapshot.jobs if (job.job_group or "").startswith(JOB_GROUP_PREFIX) for sid in job.stage_ids
    }
    for stage in sorted(snapshot.stages, key=lambda s: (s.stage_id, s.attempt_id)):
        if stage.stage_id not in stage_ids:
            continue
        topic = f"stage-{stage.stage_id}-{stage.attempt_id}"
        n = stage.num_tasks
        lost = stage.num_failed_tasks + stage.num_killed_tasks
        if stage.status == "ACTIVE" and lost:
            # one failed task aborts a barrier stage: the others are being killed, not starting or waiting
            facts[topic] = (
                f"barrier stage {stage.stage_id}: {stage.num_failed_tasks} task(s) failed, "
                f"{stage.num_killed_tasks} killed; Spark is aborting the stage"
            )
        elif stage.status == "ACTIVE" and stage.num_completed_tasks > 0:
            # ranks finish one by one at the end: that is not a stage waiting for slots
            facts[topic] = (
                f"barrier stage {stage.stage_id}: {stage.num_completed_tasks}/{n} ranks finished, "
                f"{stage.num_active_tasks} still running"
            )
        elif stage.status == "ACTIVE" and stage.num_active_tasks == 0:
            since = f" (submitted {stage.submission_time})" if stage.submission_time else ""
            facts[topic] = f"barrier stage {stage.stage_id} waiting for {n} free task slots{since}"
        elif stage.status == "ACTIVE" and stage.num_active_tasks < n:
            # Spark launches a barrier stage's tasks all at once or not at all: the slots are granted, the
            # remaining task-start events are on their way
            facts[topic] = f"barrier stage {stage.stage_id} starting: {stage.num_active_tasks}/{n} tasks launched"
        elif stage.status == "ACTIVE" and (busy := [e for e in snapshot.executors if e.active_tasks > 0]):
            where = ", ".join(
                f"executor {e.id} ({e.host_port}): {e.active_tasks} task{'s' if e.active_tasks != 1 else ''}"
                for e in busy
            )
            facts[topic] = f"{n}/{n} ranks running on {where}"
        # ACTIVE with every task running but no executor counting one: the executors' view is behind the stage's
        # (its tasks are ending, or just started); no new fact until one of them agrees
        elif stage.status == "FAILED":
            facts[topic] = (
                f"barrier stage {stage.stage_id} attempt {stage.attempt_id} failed: {_first_line(stage.failure_reason)}"
            )
        elif stage.status == "COMPLETE":
            facts[topic] = f"barrier stage {stage.stage_id} finished: {stage.num_completed_tasks}/{n} ranks done"
    return facts


class ProgressWatcher(Poller):
    """
    Polls a Spark application's REST API in a background thread and logs what changed.

    Never raises into the job: an unreachable API is logged once and polling goes on.

    :param ui_url: the application's Spark UI, e.g. ``http://127.0.0.1:4040``.
    :param app_id: the application id.
    :param log: called with each message (e.g. ``operator.log.info``).
    :param poll_interval_s: seconds between polls.
    :param access: the bearer token and CA bundle of the Spark connection (a UI behind ``spark.ui.filters``'
        ``JWSFilter``, or served over HTTPS).
    """

    rest_timeout_s = 30.0
    """Timeout of each REST call, seconds: generous, since a freshly started UI answers its first request slowly, and
    giving up on it makes Spark log a broken pipe."""

    def __init__(
        self, ui_url: str, app_id: str, log: Log, *, poll_interval_s: float = 5.0, access: SparkRestAccess | None = None
    ) -> None:
        super().__init__(f"spark-progress-{app_id}", poll_interval_s, log, access)
        self._ui_url = ui_url
        self._app_id = app_id
        self._last: dict[str, str] = {}
        self._failures_in_a_row = 0
        self._unavailable_reported = False

    def poll_once(self, client: SparkRestClient) -> None:
        """One poll: read the API and log the facts that changed."""
        try:
            snapshot = Snapshot(
                jobs=client.jobs(self._app_id),
                stages=client.stages(self._app_id),
                executors=client.executors(self._app_id),
            )
        except (SparkRestError, OSError, RuntimeError) as err:  # unreachable or finished: not our job to fail
            self._failures_in_a_row += 1
            # An application that just finished closes its UI before the watcher stops: only a UI that never
            # answered, for several polls, is worth a line.
            if (
                not self._last
                and self._failures_in_a_row >= 3
                and not self._unavailable_reported
                and not self._stop.is_set()
            ):
                self._log(
                    f"Spark REST API at {self._ui_url} not answering ({type(err).__name__}); no progress "
                    "lines until it does"
                )
                self._unavailable_reported = True
            return
        self._failures_in_a_row = 0
        for topic, message in describe(snapshot).items():
            if self._last.get(topic) != message:
                self._last[topic] = message
                self._log(message)

    def _run(self) -> None:
        retry = RetryPolicy(max_attempts=1)  # the next poll is the retry
        with SparkRestClient(
            ui_url=self._ui_url, timeout_s=self.rest_timeout_s, retry=retry, access=self._access
        ) as client:
            self._every_interval(lambda: self.poll_once(client))
