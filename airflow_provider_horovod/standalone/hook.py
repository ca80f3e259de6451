"""
``HorovodStandaloneHook``: cluster deploy mode on a Spark standalone master, through its REST submission server.

The driver program runs on a worker, so everything it needs travels through a **staging directory**
(:mod:`airflow_provider_horovod.utils.staging`) on a filesystem the workers share or on object storage: the
payload, the runtime zip (executors and the driver need neither Airflow nor this provider), a copy of the driver
program, and the files the driver writes back (``status.json`` as soon as the application exists, then
``result.json`` / ``result.pkl``).
Submission and tracking use the standalone master's REST API (``/v1/submissions/create|status|kill``) and
``/json``, through :mod:`airflow_provider_horovod.clients`; with the Spark RPC secret in the connection (no REST
server then) spark-submit's legacy gateway submits (:mod:`~airflow_provider_horovod.standalone.gateway`), the
master web UI's ``/json/`` and ``/driver/kill/`` follow and kill.

Connection (the Spark provider's ``spark`` type): host ``spark://master`` and port 7077; the password, when the
master's REST server (and web UI) run ``org.apache.spark.ui.JWSFilter``, is the bearer token (a JWS); extras
``spark.airflowProviderHorovod.restPort`` (default 6066), ``.restScheme`` (``http``/``https``), ``.uiPort`` (the
master web UI, default 8080), ``.uiScheme``, ``.caBundle`` (read by
:mod:`airflow_provider_horovod.utils.spark_connection`; docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_horovod.clients import (
    AsyncSparkRestClient,
    DriverStatus,
    RetryPolicy,
    SparkRestAccess,
    SparkRestClient,
)
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.standalone.gateway import submit_through_gateway
from airflow_provider_horovod.standalone.master import DriverRoute, StandaloneEndpoints, check_master_reachable
from airflow_provider_horovod.standalone.poll import outside_kill
from airflow_provider_horovod.standalone.slots import check_standalone_fits
from airflow_provider_horovod.standalone.submission import PYTHON_RUNNER, driver_submission, stage_job
from airflow_provider_horovod.utils.spark_auth import connection_auth_secret
from airflow_provider_horovod.utils.spark_connection import probe_rest_access, rest_access
from airflow_provider_horovod.utils.staging import Staging

SUBMISSION_FILE = "submission.json"


class HorovodStandaloneHook(BaseHook):
    """
    Submit, follow and kill a Horovod job in cluster deploy mode on a Spark standalone cluster.

    The hook keeps the connection and how it talks to the master; the job
    (:class:`~airflow_provider_horovod.job.TrainingJob`) comes with each :meth:`submit` call. Construction does no
    I/O; the connection is read on first use. The ``a_`` methods are the async twins of the
    calls the deferral trigger makes (as the Databricks trigger awaits ``DatabricksHook.a_get_run_state``): the same
    requests on the same :attr:`route`, the connection read off the event loop.

    :param conn_id: a Spark provider ``spark`` connection to a standalone master (see the module docstring); ``None``
        only with ``route``: no token, the system's CAs.
    :param timeout_s: timeout of each REST call, seconds.
    :param transport: an httpx transport for the REST calls instead of the network (tests: ``httpx.MockTransport``,
        which serves the sync and the async calls).
    :param route: the route of a driver submitted earlier, as a deferral trigger persisted it: its state and kill go
        there, whatever the connection says now; ``None``: the connection's (:attr:`route`).
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    hook_name = "Horovod on Spark standalone (cluster mode)"

    def __init__(
        self, *, conn_id: str | None, timeout_s: float = 30.0, transport: Any = None, route: DriverRoute | None = None
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.timeout_s = timeout_s
        self.transport = transport
        if route is not None:
            self.route = route
        self._wait_client: AsyncSparkRestClient | None = None

    @cached_property
    def endpoints(self) -> StandaloneEndpoints:
        """The master's endpoints, from the connection (:meth:`StandaloneEndpoints.of`)."""
        if self.conn_id is None:
            raise HorovodJobError("cluster deploy mode needs a connection to a spark://host:port master")
        return StandaloneEndpoints.of(self.get_connection(self.conn_id))

    @cached_property
    def _rpc_secret(self) -> str | None:
        return None if self.conn_id is None else connection_auth_secret(self.get_connection(self.conn_id))

    uses_gateway = property(
        lambda self: self._rpc_secret is not None,
        doc="Whether the connection has the RPC secret: spark-submit's gateway, not REST.",
    )

    @cached_property
    def route(self) -> DriverRoute:
        """Where this hook reads a driver's state and sends its kill: the REST submission server, or the master's
        web UI for a driver submitted through the gateway (:attr:`uses_gateway`)."""
        e = self.endpoints
        return DriverRoute(e.rest_url, e.master_ui_url if self.uses_gateway else None)

    @cached_property
    def access(self) -> SparkRestAccess:
        """The bearer token (the connection's password) and CA bundle of every REST call (never logged)."""
        return SparkRestAccess() if self.conn_id is None else rest_access(self.get_connection(self.conn_id))

    async def a_access(self) -> SparkRestAccess:
        """:attr:`access`, the connection read off the event loop (through the triggerer's API) the first time."""
        return await self._off_the_loop("access")

    async def _off_the_loop(self, name: str) -> Any:
        """A cached property, computed in a thread the first time: reading the connection is synchronous I/O."""
        if name not in vars(self):
            from asgiref.sync import sync_to_async

            await sync_to_async(getattr)(self, name)
        return getattr(self, name)

    def client(self, retry: RetryPolicy | None = None) -> SparkRestClient:
        """
        A REST client for this master (close it, or use it as a context manager).

        :param retry: the retry policy of its calls (default: :class:`RetryPolicy`'s defaults).
        """
        e = self.endpoints
        return SparkRestClient(**self._client_kwargs(e.rest_url, e.master_ui_url, retry), access=self.access)

    def _client_kwargs(self, rest_url: str, master_ui_url: str | None, retry: RetryPolicy | None) -> dict[str, Any]:
        """What the sync and the async client of this hook take, but its access."""
        return {
            "rest_url": rest_url,
            "master_ui_url": master_ui_url,
            "timeout_s": self.timeout_s,
            "retry": retry or RetryPolicy(),
            "transport": self.transport,
        }

    def check_access(self) -> None:
        """
        Probe the REST submission server with the connection's token and CA bundle before anything is submitted
        (:func:`~airflow_provider_horovod.utils.spark_connection.probe_rest_access`).

        :raises HorovodAccessError: HTTP 401/403 or a certificate that cannot be verified (no Airflow retry).
        :raises HorovodJobError: the server gave no usable answer.
        """
        with self.client(RetryPolicy(max_attempts=2)) as client:
            probe_rest_access(client, self.endpoints.rest_url, str(self.conn_id))

    def submit(self, job: TrainingJob, *, staging: Any) -> str:
        """
        Stage the job and create the driver on the cluster.

        :param job: the job: its signed payload (staged), its key (sent as the driver's environment only), its
            settings (the driver program's flags), environment, Spark properties, application name and artifact
            directory.
        :param staging: this try's staging directory: a :class:`~airflow_provider_horovod.utils.staging.Staging`,
            or a path on the shared filesystem (created, owner-only).
        :return: the submission (driver) id, ``driver-...``.
        :raises HorovodAccessError: the REST server refused the connection's token, or its certificate (probed
            first: nothing is staged or submitted).
        :raises HorovodJobError: the master refused the submission (or spark-submit reported no driver,
            :func:`~airflow_provider_horovod.standalone.gateway.submit_through_gateway`), or ``np`` task slots
            can never be had at the same time on this cluster next to the driver's own cores (checked before
            creating the driver), or an object-store staging location cannot be written or presigned.
        """
        self.check_master_reachable()
        if not self.uses_gateway:
            self.check_access()
        staging = Staging.of(staging)
        staging.create()
        stage_job(staging, job.payload)
        submission = driver_submission(
            staging,
            master_url=self.endpoints.master_url,
            master_ui_url=self.endpoints.master_ui_url,
            name=job.app_name,
            np=job.np,
            conf={str(k): str(v) for k, v in job.conf.items()},
            env_vars={str(k): str(v) for k, v in job.env.items()},
            key=job.key,
            artifact_dir=job.artifact_dir,
            settings=job.settings,
        )
        check_standalone_fits(
            master_url=self.endpoints.master_url,
            master_ui_url=self.endpoints.master_ui_url,
            np=job.np,
            conf=submission.properties,
            cluster_mode=True,
            log=self.log,
            access=self.access,
        )
        if self._rpc_secret is not None:
            submission_id = submit_through_gateway(
                staging, submission, master_url=self.endpoints.master_url, secret=self._rpc_secret
            )
        else:
            with self.client(RetryPolicy(max_attempts=3)) as client:
                response = client.create_submission(
                    app_resource=submission.app_resource,
                    main_class=PYTHON_RUNNER,
                    app_args=submission.app_args,
                    spark_properties=submission.properties,
                    environment_variables=submission.env,
                )
            if not response.success or not response.submission_id:
                raise HorovodJobError(f"the standalone master refused the submission: {response.message}")
            submission_id = response.submission_id
        staging.write_bytes(SUBMISSION_FILE, json.dumps({"submission_id": submission_id}).encode())
        self.log.info(
            "Submitted driver %s to %s (staging %s)", submission_id, self.endpoints.master_url, staging.record
        )
        return submission_id

    def check_master_reachable(self) -> None:
        """
        Fail at once, naming the address, when the master or its REST submission server does not accept a TCP
        connection (:func:`~airflow_provider_horovod.standalone.master.check_master_reachable`).

        :raises HorovodJobError: ``cannot reach Spark master spark://host:port (...)`` or ``cannot reach the
            Spark master's REST submission server http://host:port (...)``.
        """
        check_master_reachable(self.endpoints, conn_id=self.conn_id, gateway=self.uses_gateway)

    def _route_client(self, retry: RetryPolicy | None = None) -> SparkRestClient:
        route = self.route
        return SparkRestClient(**self._client_kwargs(route.rest_url, route.master_ui_url, retry), access=self.access)

    async def _a_route_client(self, retry: RetryPolicy | None = None) -> AsyncSparkRestClient:
        route = await self._off_the_loop("route")
        kwargs = self._client_kwargs(route.rest_url, route.master_ui_url, retry)
        return AsyncSparkRestClient(**kwargs, access=await self.a_access())

    def status(self, submission_id: str) -> DriverStatus:
        """
        The driver's state from the REST submission server, or the master's ``/json/`` (:attr:`route`).

        :param submission_id: the driver id (``driver-...``).
        :raises SparkRestError: the master did not answer with it (``SparkSubmissionError``: it does not know the
            driver).
        """
        with self._route_client() as client:
            if self.route.master_ui_url:
                return client.master_state().driver_status(submission_id)
            return client.driver_status(submission_id)

    async def __aenter__(self) -> HorovodStandaloneHook:
        """
        Open one async client on :attr:`route` for the :meth:`a_status` calls of a wait (the trigger's ``async with
        self.hook``, as the Databricks trigger opens its hook's session), the connection read first.

        :raises SparkRestTLSError: the connection's CA bundle cannot be loaded.
        :raises ValueError: the connection's password is not a JWS.
        """
        self._wait_client = await self._a_route_client()
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, self._wait_client = self._wait_client, None
        if client is not None:
            await client.aclose()

    @asynccontextmanager
    async def _a_wait_client(self) -> AsyncIterator[AsyncSparkRestClient]:
        """The client of the wait this hook was entered for, else one for this call."""
        if self._wait_client is not None:
            yield self._wait_client
            return
        async with await self._a_route_client() as client:
            yield client

    async def a_status(self, submission_id: str) -> DriverStatus:
        """
        The async twin of :meth:`status`, for the deferral trigger (on the client of its wait: ``async with hook``).

        :param submission_id: the driver id (``driver-...``).
        :raises SparkRestError: the master did not answer with it (``SparkSubmissionError``: it does not know the
            driver).
        """
        async with self._a_wait_client() as client:
            if self.route.master_ui_url:
                return (await client.master_state()).driver_status(submission_id)
            return await client.driver_status(submission_id)

    def kill(self, submission_id: str) -> None:
        """
        Ask the master to kill the driver (its executors and ranks go with the application), on :attr:`route`.

        :param submission_id: the driver id (``driver-...``).
        :raises SparkRestError: the master did not take the kill in 3 attempts.
        """
        with self._route_client(RetryPolicy(max_attempts=3)) as client:
            if self.route.master_ui_url:  # the master UI's kill link (spark.ui.killEnabled): it answers a redirect
                return client.kill_driver_ui(submission_id)
            response = client.kill_submission(submission_id)
        self.log.info("Kill of driver %s: %s", submission_id, response.message or response.success)

    async def a_kill(self, submission_id: str) -> None:
        """
        The async twin of :meth:`kill`, for the deferral trigger's ``on_kill``, with :class:`RetryPolicy`'s default
        attempts (the task does not come back to kill the driver after it), on a client of its own (``on_kill`` runs
        while the wait is cancelled).

        :param submission_id: the driver id (``driver-...``).
        :raises SparkRestError: the master did not take the kill.
        """
        async with await self._a_route_client() as client:
            if self.route.master_ui_url:
                return await client.kill_driver_ui(submission_id)
            response = await client.kill_submission(submission_id)
        self.log.info("Kill of driver %s: %s", submission_id, response.message or response.success)

    def kill_earlier_tries(self, staging: Any) -> list[str]:
        """
        Kill drivers of earlier tries of this task that are still running (siblings of ``staging``).

        A retry that submits must not run beside a live copy of the same training: the provider kills it. (With
        ``durable=True`` a retry reattaches to its active driver instead: :mod:`~.standalone.durable`.)

        :param staging: this try's staging directory (a :class:`~.utils.staging.Staging` or a path).
        :return: the driver ids that were still active and were killed.
        """
        killed = []
        for sibling in Staging.of(staging).siblings_with(SUBMISSION_FILE):
            submission_id = json.loads(sibling.read_bytes(SUBMISSION_FILE) or b"{}").get("submission_id")
            if submission_id and not self.status(submission_id).is_terminal:
                self.log.warning(
                    "Driver %s of an earlier try (%s) is still running: killing it", submission_id, sibling.record
                )
                self.kill(submission_id)
                killed.append(submission_id)
        return killed

    def killed_from_outside(self, submission_id: str, driver_state: str | None, app_id: str | None) -> str | None:
        """
        The headline for a driver that was killed through the master rather than failing on its own, else ``None``
        (:func:`~airflow_provider_horovod.standalone.poll.outside_kill`, with the application's state from the
        master's ``/json/`` when the driver's own state does not tell).

        :param submission_id: the driver id.
        :param driver_state: the driver's final state.
        :param app_id: its Spark application id, when it had started one.
        """
        app_state = None
        if app_id and driver_state not in ("KILLED", "FINISHED"):
            try:
                with self.client(RetryPolicy(max_attempts=2)) as client:
                    application = client.master_state().application(app_id)
                app_state = application.state if application is not None else None
            except Exception as err:  # noqa: BLE001 - the master cannot tell now: the driver's own account stands
                self.log.debug("Cannot read the master's state for %s: %s", app_id, err)
        return outside_kill(submission_id, driver_state, app_id, app_state)

    def get_conn(self) -> Any:
        """Not used: see :meth:`client`."""
        return None
