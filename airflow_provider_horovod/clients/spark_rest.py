"""
Clients for Spark's REST APIs over httpx: :class:`SparkRestClient` (blocking, here) and
:class:`~airflow_provider_horovod.clients.spark_rest_async.AsyncSparkRestClient` (asyncio, for triggers). Both speak to

* an application's **monitoring API** (``{ui_url}/api/v1/applications[/{id}/jobs|stages|executors]``), served by
  the running driver's web UI (``spark.ui.port``, 4040 by default) or by a history server;
* a standalone **master's state page** (``{master_ui_url}/json/``);
* a standalone master's **REST submission server** (``{rest_url}/v1/submissions/create|status|kill``, port 6066
  by default, enabled with ``spark.master.rest.enabled=true``).

Every call has a timeout (``timeout_s``) and is retried with exponential backoff on connection errors, timeouts
and HTTP 5xx (:class:`RetryPolicy`); an HTTP 4xx raises :class:`SparkRestError` at once (401/403, a refused bearer
token: :class:`SparkRestAuthError`; a certificate that cannot be verified: :class:`SparkRestTLSError`). ``create``
is retried only when the connection could not be made, so a driver is never submitted twice. Neither client imports
Airflow.

Example::

    with SparkRestClient(master_ui_url="http://127.0.0.1:8080", rest_url="http://127.0.0.1:6066") as spark:
        sub = spark.create_submission(app_resource="file:/jobs/app.jar", main_class="org.example.Main",
                                      spark_properties={"spark.master": "spark://127.0.0.1:7077"})
        status = spark.driver_status(sub.submission_id)   # DriverStatus: .driver_state, .is_terminal ...
        spark.kill_submission(sub.submission_id)

    async with AsyncSparkRestClient(ui_url="http://127.0.0.1:4040", timeout_s=5) as spark:
        jobs = await spark.jobs(app_id)                     # list[JobInfo]
"""

from __future__ import annotations

from typing import Any, TypeVar, Unpack

import httpx
import tenacity

from airflow_provider_horovod.clients import spark_rest_calls as calls
from airflow_provider_horovod.clients._spark_rest_base import SparkRestBase
from airflow_provider_horovod.clients.spark_app_models import ApplicationInfo, ExecutorInfo, JobInfo, StageInfo
from airflow_provider_horovod.clients.spark_master_models import DriverStatus, MasterState, SubmissionResponse

T = TypeVar("T")


class SparkRestClient(SparkRestBase):
    """
    Blocking client for Spark's monitoring API, a standalone master's ``/json/`` and its REST submission server.

    Give only the base URLs you need; a call whose base URL is missing raises :class:`ValueError`. Use it as a
    context manager, or call :meth:`close`.

    :param ui_url: an application's web UI (``http://host:4040``) or a history server, for the monitoring calls.
    :param master_ui_url: the standalone master's web UI (``http://host:8080``), for :meth:`master_state`.
    :param rest_url: the master's REST submission server (``http://host:6066``), for the submission calls.
    :param timeout_s: default timeout of one attempt, in seconds, applied to each of connect, read, write and
        connection-pool wait; every method takes ``timeout_s=`` to override it.
    :param retry: the retry policy (default: 5 attempts, backoff 0.5 s doubling up to 4 s).
    :param transport: an httpx transport to use instead of the network (tests: ``httpx.MockTransport``).
    :param access: a :class:`~airflow_provider_horovod.clients._spark_rest_base.SparkRestAccess`: the bearer token
        every request carries (``Authorization: Bearer``, for a ``JWSFilter``) and the CA bundle for HTTPS.
    :raises ValueError: when ``timeout_s`` is not positive.
    :raises SparkRestTLSError: the CA bundle cannot be loaded.
    """

    _http_type = httpx.Client
    _http: httpx.Client

    def __enter__(self) -> SparkRestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _attempt(self, call: calls.Call[T], timeout_: httpx.Timeout) -> T:
        try:
            body: dict[str, Any] = {"data": call.body} if call.form else {"json": call.body}
            response = self._http.request(call.method, call.url, timeout=timeout_, **body)
        except httpx.RequestError as exc:
            raise calls.request_error(call, exc, self.access.origin) from exc
        return calls.decode(call, response, self.access.origin)

    def _run(self, call: calls.Call[T], timeout_s: float | None) -> T:
        retrying = tenacity.Retrying(**self.retry.tenacity_kwargs(call))
        return retrying(self._attempt, call, self._timeout(timeout_s))

    # -- application monitoring API ({ui_url}/api/v1) -------------------------------------------------------------

    def applications(self, *, timeout_s: float | None = None) -> list[ApplicationInfo]:
        """
        ``GET /api/v1/applications``: the applications this UI serves (one for a live driver UI).

        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: on HTTP 4xx or a malformed answer; :class:`SparkRestUnavailableError` when the UI
            gave no usable answer within the retry policy.
        :raises ValueError: when the client has no ``ui_url``.
        """
        return self._run(self.endpoints.applications(), timeout_s)

    def application(self, app_id: str, *, timeout_s: float | None = None) -> ApplicationInfo:
        """``GET /api/v1/applications/{app_id}``; raises :class:`SparkRestError` (404) for an unknown id.

        :param app_id: the application id (``app-...`` on a standalone cluster, ``local-...`` in local mode).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        """
        return self._run(self.endpoints.application(app_id), timeout_s)

    def jobs(self, app_id: str, *, status: str | None = None, timeout_s: float | None = None) -> list[JobInfo]:
        """``GET /api/v1/applications/{app_id}/jobs``, newest job first.

        :param app_id: the application id.
        :param status: only jobs in this state (``running``, ``succeeded``, ``failed``, ``unknown``).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(self.endpoints.jobs(app_id, status), timeout_s)

    def stages(self, app_id: str, *, status: str | None = None, timeout_s: float | None = None) -> list[StageInfo]:
        """``GET /api/v1/applications/{app_id}/stages``: every attempt of every stage, newest first.

        :param app_id: the application id.
        :param status: only stages in this state (``active``, ``complete``, ``pending``, ``failed``, ``skipped``).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(self.endpoints.stages(app_id, status), timeout_s)

    def executors(
        self, app_id: str, *, include_dead: bool = False, timeout_s: float | None = None
    ) -> list[ExecutorInfo]:
        """``GET /api/v1/applications/{app_id}/executors`` (or ``allexecutors``), the driver included.

        :param app_id: the application id.
        :param include_dead: also list removed executors (``allexecutors``; see ``remove_reason``).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(self.endpoints.executors(app_id, include_dead), timeout_s)

    # -- standalone master ------------------------------------------------------------------------------------------

    def master_state(self, *, timeout_s: float | None = None) -> MasterState:
        """``GET {master_ui_url}/json/``: workers, cores, applications and drivers of a standalone master.

        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`; :class:`ValueError` without ``master_ui_url``.
        """
        return self._run(self.endpoints.master_state(), timeout_s)

    def create_submission(
        self, *, timeout_s: float | None = None, **fields: Unpack[calls.SubmissionFields]
    ) -> SubmissionResponse:
        """
        ``POST {rest_url}/v1/submissions/create``: launch a driver in cluster deploy mode.

        Retried only when the connection could not be made (a retried ``create`` could start two drivers).

        :param app_resource: the application jar (or file) as a URL the workers can read (``file:/...``).
        :param main_class: the driver's main class (``org.apache.spark.deploy.PythonRunner`` for a Python file,
            with ``app_args=[file, py_files, *args]``).
        :param app_args: arguments of the main class.
        :param spark_properties: Spark configuration; include ``spark.master`` and ``spark.app.name``.
        :param environment_variables: environment of the driver (the master drops ``SPARK_LOCAL_IP``/``HOSTNAME``).
        :param client_spark_version: sent as ``clientSparkVersion`` (default: the installed pyspark's version).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :returns: the answer; ``submission_id`` is the driver id (``driver-...``).
        :raises SparkSubmissionError: when the master refuses (``"success": false``, e.g. a standby master).
        :raises SparkRestError: on HTTP 4xx (malformed request) with the server's message.
        """
        return self._run(self.endpoints.create_submission(**fields), timeout_s)

    def driver_status(self, submission_id: str, *, timeout_s: float | None = None) -> DriverStatus:
        """``GET {rest_url}/v1/submissions/status/{submission_id}``.

        :param submission_id: the driver id returned by :meth:`create_submission`.
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkSubmissionError: when the master does not know this submission.
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(self.endpoints.driver_status(submission_id), timeout_s)

    def kill_submission(self, submission_id: str, *, timeout_s: float | None = None) -> SubmissionResponse:
        """``POST {rest_url}/v1/submissions/kill/{submission_id}``: ask the master to kill a driver.

        The kill is asynchronous: poll :meth:`driver_status` until ``is_terminal`` (KILLED). An unknown or already
        finished driver is not an error: the answer has ``success=False`` and says so in ``message``.

        :param submission_id: the driver id.
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(self.endpoints.kill_submission(submission_id), timeout_s)

    def kill_driver_ui(self, submission_id: str, *, timeout_s: float | None = None) -> None:
        """``POST {master_ui_url}/driver/kill/`` (``id``, ``terminate=true``): the master web UI's kill link for a
        driver, for a master without a REST submission server (``spark.ui.killEnabled``, the default, must be on).

        As asynchronous as :meth:`kill_submission`, and the page says nothing back: poll the driver's state.

        :param submission_id: the driver id.
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications` (HTTP 401/403: the UI's filter refused the token).
        :raises ValueError: when the client has no ``master_ui_url``.
        """
        self._run(self.endpoints.kill_driver_ui(submission_id), timeout_s)

    def request_json(
        self, method: str, url: str, *, timeout_s: float | None = None, **options: Unpack[calls.RawCallOptions]
    ) -> Any:
        """Any call, with the same timeout, retries and errors, returning the decoded JSON as is.

        :param method: the HTTP method.
        :param url: the full URL.
        :param body: a JSON body to send.
        :param idempotent: whether to retry after the request may have reached the server (default: GET/HEAD).
        :param timeout_s: timeout of each attempt in seconds (default: the client's).
        :raises SparkRestError: as :meth:`applications`.
        """
        return self._run(calls.Endpoints.raw(method, url, **options), timeout_s)
