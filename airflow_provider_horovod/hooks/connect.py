"""
``HorovodConnectHook``: run the barrier job from the Airflow worker through a Spark Connect session.

No JVM runs on the Airflow worker: the Spark provider's ``SparkConnectHook`` turns the ``spark_connect``
connection into an ``sc://`` URL, and :class:`~airflow_provider_horovod.runtime.driver.runner.BarrierRunner` runs the
barrier stage with ``mapInArrow(..., barrier=True)`` over that session. Rank output reaches this worker's log
through the runtime's log channel (executors must be able to connect back to this machine; set
``HOROVOD_AIRFLOW_CALLBACK_HOST`` when the address they should use is not the one that routes to the server).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.utils.job_result import JobResult, facts_job_error, rank_job_error


class HorovodConnectHook(BaseHook):
    """
    Run a training job through Spark Connect and bring back the result. The hook keeps the connection; the job
    (:class:`~airflow_provider_horovod.job.TrainingJob`) comes with each :meth:`run` call.

    :param conn_id: a Spark provider ``spark_connect`` connection (host, port, extras for token/TLS/user).
    """

    conn_name_attr = "conn_id"
    default_conn_name = SparkConnectHook.default_conn_name
    hook_name = "Horovod over Spark Connect"

    def __init__(self, *, conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.conn_id = conn_id
        self._session: Any = None
        self._tag: str | None = None

    def run(self, job: TrainingJob) -> JobResult:
        """
        Open a Connect session, run the job's payload on ``np > 0`` barrier tasks, list the artifacts, close the
        session.

        :param job: the job: its payload (checked on each rank), settings, environment for every rank, artifact
            directory; its label is the session's user context.
        :raises HorovodJobError: a rank failed (``failure`` names it, with its traceback), the stage could not run,
            or the payload was refused: the same error as in the other deploy modes.
        """
        from pyspark.sql import SparkSession

        from airflow_provider_horovod.runtime.artifacts import ensure_dir, list_artifacts
        from airflow_provider_horovod.runtime.driver.restarts import told
        from airflow_provider_horovod.runtime.driver.runner import BarrierRunner
        from airflow_provider_horovod.runtime.errors import ExecutorLostError, HorovodRuntimeError, JobCancelledError
        from airflow_provider_horovod.runtime.rank_errors import RankFailedError

        artifact_dir = job.artifact_dir
        url = SparkConnectHook(conn_id=self.conn_id).get_connection_url()
        self.log.info("Spark Connect session to %s (%s)", url.split(";")[0], job.label)
        ensure_dir(artifact_dir)
        self._session = SparkSession.builder.remote(url).getOrCreate()
        app_id = self.application_id(self._session)
        runner = BarrierRunner(job.settings, artifact_dir=artifact_dir, env=dict(job.env), spark=self._session)
        try:
            result = runner.run_payload(job.payload)
        except RankFailedError as err:  # the rank's own traceback is in the message
            raise rank_job_error(told(err), err.to_dict(), app_id=app_id) from None
        except (ExecutorLostError, JobCancelledError) as err:
            raise (
                facts_job_error(type(err).__name__, told(err), err.facts(), app_id=app_id)
                or HorovodJobError(f"{type(err).__name__}: {err}", app_id=app_id)
            ) from err
        except HorovodRuntimeError as err:
            raise HorovodJobError(f"{type(err).__name__}: {err}", app_id=app_id) from err
        finally:
            self._session.stop()
            self._session = None
        return JobResult(
            app_id=app_id,
            ui_url=None,
            artifact_paths=list_artifacts(artifact_dir),
            return_value=result,
            metrics=runner.last_metrics,
            restarts=[r.to_dict() for r in runner.restarts],
        )

    def application_id(self, session: Any) -> str | None:
        """
        The Spark application id of the Connect server the session runs on (``spark.app.id`` of its conf, e.g.
        ``local-1700000000000`` or ``app-...``): the ``spark_app_id`` XCom and the MLflow run's ``spark.app_id`` tag.

        :param session: the open Spark Connect session.
        :return: the id, or ``None`` when the server does not tell it (then the job runs all the same).
        """
        try:
            app_id = session.conf.get("spark.app.id", None)
        except Exception as err:  # noqa: BLE001 - an id for the record, never a reason to fail the job
            self.log.warning("The Spark Connect server did not tell its application id (%s)", type(err).__name__)
            return None
        return str(app_id) if app_id else None

    def on_kill(self) -> None:
        """Interrupt every operation of the session (the barrier stage's tasks, and with them the ranks)."""
        if self._session is not None:
            self.log.info("Interrupting the Spark Connect session's operations")
            self._session.interruptAll()

    def get_conn(self) -> Any:
        """Not used."""
        return None
