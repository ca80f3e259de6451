"""``HorovodSparkJobTrigger``: wait for a cluster-mode Horovod driver without holding an Airflow worker slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_horovod.clients import AsyncSparkRestClient, RetryPolicy, SparkRestError
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.standalone.master import DriverRoute
from airflow_provider_horovod.standalone.poll import ProgressLog, read_app, read_poll, read_progress

if TYPE_CHECKING:
    from airflow_provider_horovod.clients import DriverStatus
    from airflow_provider_horovod.utils.staging import Staging


class HorovodSparkJobTrigger(BaseTrigger):
    """
    Poll the standalone master's REST submission server (or, with ``master_ui_url``, its web UI's ``/json/``) until
    the driver ends, then yield one event.

    The driver's state and its kill go through the standalone hook's async calls
    (:meth:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook.a_status`, ``a_kill``: httpx, so the
    triggerer's event loop is never blocked), as the Databricks trigger awaits ``a_get_run_state``, on the route this
    trigger was persisted with (:class:`~airflow_provider_horovod.standalone.master.DriverRoute`: ``rest_url``, and
    ``master_ui_url`` for a driver submitted through spark-submit's gateway). Each poll is read by
    :func:`~airflow_provider_horovod.standalone.poll.read_poll`, as the task's own wait reads it; the event is its
    :meth:`~airflow_provider_horovod.standalone.poll.DriverPoll.event` (the keys of
    :data:`~airflow_provider_horovod.standalone.poll.EVENT_KEYS`). Progress (driver state changes, the application
    id once the driver wrote it) is logged as it happens.

    :param submission_id: the driver id (``driver-...``).
    :param rest_url: the master's REST submission server, e.g. ``http://master:6066``.
    :param staging: the job's staging directory, where the driver writes ``status.json``: a shared-filesystem
        path or an object-store location (:attr:`airflow_provider_horovod.utils.staging.Staging.record`, with
        its connection id; the connection is read in the triggerer).
    :param poll_interval_s: seconds between polls.
    :param cancel_on_kill: kill the driver when the task is killed while deferred (Airflow 3.3 ``on_kill``).
    :param timeout_s: timeout of each REST call, seconds.
    :param conn_id: the Spark connection the driver was submitted through: the trigger reads its password (the bearer
        token of a ``JWSFilter``) and CA bundle in the triggerer, so no secret is serialized with it; ``None``: no
        token, the system's CAs.
    :param master_ui_url: the master's web UI, for a driver submitted through spark-submit's legacy gateway (a
        master with Spark RPC authentication runs no REST server): its state comes from ``/json/`` and a kill goes
        through the UI's kill link; ``None``: the REST submission server's status and kill calls.
    :param mlflow_conn_id: the MLflow connection of the task's run (``mlflow_conn_id`` of the operator), read in the
        triggerer; with ``mlflow_run_id``, a kill of the deferred task (:meth:`on_kill`) also ends that run
        ``KILLED``, since the task never comes back to end it. ``None``: no run.
    :param mlflow_run_id: the try's MLflow run.
    """

    def __init__(
        self,
        *,
        submission_id: str,
        rest_url: str,
        staging: str,
        poll_interval_s: float = 5.0,
        cancel_on_kill: bool = True,
        timeout_s: float = 30.0,
        conn_id: str | None = None,
        master_ui_url: str | None = None,
        mlflow_conn_id: str | None = None,
        mlflow_run_id: str | None = None,
    ) -> None:
        super().__init__()
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be > 0 seconds, got {poll_interval_s!r}")
        self.submission_id = submission_id
        self.rest_url = rest_url
        self.staging = staging
        self._staging: Staging | None = None  # made on first use
        self.poll_interval_s = poll_interval_s
        self.cancel_on_kill = cancel_on_kill
        self.timeout_s = timeout_s
        self.conn_id = conn_id
        self.master_ui_url = master_ui_url
        self.hook = HorovodStandaloneHook(
            conn_id=conn_id, timeout_s=timeout_s, route=DriverRoute(rest_url, master_ui_url)
        )
        """Follows and kills the driver; reads the connection (the token, the CA bundle) in the triggerer."""
        self.mlflow_conn_id = mlflow_conn_id
        self.mlflow_run_id = mlflow_run_id
        self._mlflow_hook: Any = None  # an MlflowHook with the connection read, once run() starts

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and the constructor's keyword arguments (exactly)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "submission_id": self.submission_id,
                "rest_url": self.rest_url,
                "staging": self.staging,
                "poll_interval_s": self.poll_interval_s,
                "cancel_on_kill": self.cancel_on_kill,
                "timeout_s": self.timeout_s,
                "conn_id": self.conn_id,
                "master_ui_url": self.master_ui_url,
                "mlflow_conn_id": self.mlflow_conn_id,
                "mlflow_run_id": self.mlflow_run_id,
            },
        )

    def with_mlflow_run(self, mlflow_conn_id: str, mlflow_run_id: str) -> HorovodSparkJobTrigger:
        """
        This trigger, ending the MLflow run ``mlflow_run_id`` ``KILLED`` when the deferred task is killed.

        :param mlflow_conn_id: the run's MLflow connection.
        :param mlflow_run_id: the run.
        """
        return type(self)(**{**self.serialize()[1], "mlflow_conn_id": mlflow_conn_id, "mlflow_run_id": mlflow_run_id})

    async def _read_mlflow_connection(self) -> None:
        """Read the MLflow connection once, while the trigger runs (not from :meth:`on_kill`: see there)."""
        if self.mlflow_run_id is None or self.mlflow_conn_id is None or self._mlflow_hook is not None:
            return
        from asgiref.sync import sync_to_async

        from airflow_provider_horovod.hooks.mlflow import MlflowHook

        hook = MlflowHook(self.mlflow_conn_id)
        try:
            await sync_to_async(hook.tracking_env)()
        except Exception as err:  # noqa: BLE001 - the training goes on; the run is ended when the task resumes
            self.log.warning("Cannot read the MLflow connection %r: %s", self.mlflow_conn_id, err)
            return
        self._mlflow_hook = hook

    async def _app(self) -> tuple[str | None, str | None]:
        """``(app_id, ui_url)`` from the driver's ``status.json`` (read off the event loop), else ``(None, None)``."""
        from asgiref.sync import sync_to_async

        from airflow_provider_horovod.utils.staging import Staging

        try:
            if self._staging is None:
                staging = Staging(self.staging)
                await sync_to_async(lambda: staging.credentials)()  # the connection, through the triggerer's API
                self._staging = staging
            return await asyncio.to_thread(read_app, self._staging)
        except Exception as err:  # noqa: BLE001 - e.g. the connection cannot be read now: try again next poll
            self.log.warning("Cannot read %s/status.json yet: %s", self.staging, err)
            return None, None

    async def _progress(self, ui_url: str, app_id: str, last: dict[str, str]) -> None:
        """
        One poll of the application's monitoring REST API: log the barrier stage's facts that changed, as the
        operator's progress lines do in sync mode. Best effort: an API that does not answer is skipped.
        """
        from airflow_provider_horovod.utils.stage_progress import Snapshot, describe

        try:
            async with AsyncSparkRestClient(
                ui_url=ui_url,
                timeout_s=self.timeout_s,
                access=await self.hook.a_access(),
                retry=RetryPolicy(max_attempts=1),
            ) as api:
                snapshot = Snapshot(
                    jobs=await api.jobs(app_id), stages=await api.stages(app_id), executors=await api.executors(app_id)
                )
        except (SparkRestError, OSError, RuntimeError):
            return  # not started answering yet, or the application just ended: the next poll tells
        for topic, message in describe(snapshot).items():
            if last.get(topic) != message:
                last[topic] = message
                self.log.info("%s", message)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """
        Yield one event once the driver is FINISHED, FAILED, KILLED or ERROR (or the master cannot answer).

        Meanwhile log the driver's state changes, the application's start with its Spark UI, and the barrier
        stage's progress (waiting for slots, ranks running on which executors, a failed attempt).
        """
        poll, progress = None, ProgressLog(since=time.time())
        facts: dict[str, str] = {}
        await self._read_mlflow_connection()
        async with self.hook:  # one client for the wait; a connection it cannot use fails the trigger
            while True:
                status: DriverStatus | SparkRestError
                try:
                    status = await self.hook.a_status(self.submission_id)
                except SparkRestError as err:
                    status = err
                app = poll.app if poll is not None and poll.app_id else await self._app()
                poll = read_poll(self.submission_id, status, app, poll)
                if poll.state_changed:
                    self.log.info("Driver %s is %s", self.submission_id, poll.driver_state)
                if poll.app_started:
                    self.log.info("Spark application %s started; Spark UI: %s", poll.app_id, poll.ui_url)
                if poll.done:
                    yield TriggerEvent(poll.event(self.staging))
                    return
                if poll.app_id and poll.ui_url:
                    await self._progress(poll.ui_url, poll.app_id, facts)
                if self._staging is not None and (
                    line := progress.line(await asyncio.to_thread(read_progress, self._staging))
                ):
                    self.log.info("Training: %s", line)
                await asyncio.sleep(self.poll_interval_s)

    async def on_kill(self) -> None:
        """
        The deferred task was killed by a user (marked failed or success, or cleared; Airflow 3.3+): kill the driver
        if ``cancel_on_kill``, then end the try's MLflow run (``mlflow_run_id``) ``KILLED`` with the tag
        ``horovod.error`` saying why (the task does not resume to end it; a failure to end it is logged).

        Airflow 3.3.2's triggerer also calls ``on_kill`` when a trigger merely moves to another triggerer (it cancels
        every trigger no longer assigned to it with the "user action" message), so with several triggerers set
        ``cancel_on_kill=False``. The trigger does not look up its task instance's state to tell the two apart:
        that lookup goes through the triggerer's supervisor, which did not answer within 5 s from ``on_kill`` in any
        run of the test deployment and in some runs stalled the triggerer itself.
        """
        if not self.cancel_on_kill:
            return
        # The triggerer cancels this trigger's task again at each of its state syncs (about every second) while
        # on_kill runs: shield the request so a repeated cancellation cannot cut it short.
        await asyncio.shield(asyncio.ensure_future(self._kill_driver_and_end_run()))

    async def _kill_driver_and_end_run(self) -> None:
        try:
            await self._kill_driver()
        finally:
            await self._end_mlflow_run()

    async def _end_mlflow_run(self) -> None:
        if self.mlflow_run_id is None:
            return
        try:
            if self._mlflow_hook is None:  # killed before run() read the connection
                await self._read_mlflow_connection()
            if self._mlflow_hook is None:
                return
            await self._mlflow_hook.end_run_async(
                self.mlflow_run_id,
                "KILLED",
                {
                    "horovod.error": (
                        f"killed while deferred (the task was marked failed or success, or cleared): driver "
                        f"{self.submission_id} killed"
                    )
                },
            )
            self.log.info("MLflow run %s ended KILLED", self.mlflow_run_id)
        except Exception as err:  # noqa: BLE001 - the kill is done; the run stays RUNNING
            self.log.warning("Cannot end MLflow run %s: %s: %s", self.mlflow_run_id, type(err).__name__, err)

    async def _kill_driver(self) -> None:
        self.log.info("Task killed while deferred: killing driver %s", self.submission_id)
        await self.hook.a_kill(self.submission_id)
