"""
:class:`AsyncSparkRestClient`: the asyncio twin of :class:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient`
(same calls, results, errors, timeouts and retries), for Airflow triggers. It never imports Airflow.
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


class AsyncSparkRestClient(SparkRestBase):
    """
    The asyncio twin of :class:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient` (same parameters,
    methods, results and errors, as coroutines), for Airflow triggers. Use it as an async context manager, or await
    :meth:`aclose`.

    :param transport: an async httpx transport (``httpx.MockTransport`` works for both clients).
    """

    _http_type = httpx.AsyncClient
    _http: httpx.AsyncClient

    async def __aenter__(self) -> AsyncSparkRestClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _attempt(self, call: calls.Call[T], timeout_: httpx.Timeout) -> T:
        try:
            body: dict[str, Any] = {"data": call.body} if call.form else {"json": call.body}
            response = await self._http.request(call.method, call.url, timeout=timeout_, **body)
        except httpx.RequestError as exc:
            raise calls.request_error(call, exc, self.access.origin) from exc
        return calls.decode(call, response, self.access.origin)

    async def _run(self, call: calls.Call[T], timeout_s: float | None) -> T:
        retrying = tenacity.AsyncRetrying(**self.retry.tenacity_kwargs(call))
        return await retrying(self._attempt, call, self._timeout(timeout_s))

    async def applications(self, *, timeout_s: float | None = None) -> list[ApplicationInfo]:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.applications`."""
        return await self._run(self.endpoints.applications(), timeout_s)

    async def application(self, app_id: str, *, timeout_s: float | None = None) -> ApplicationInfo:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.application`."""
        return await self._run(self.endpoints.application(app_id), timeout_s)

    async def jobs(self, app_id: str, *, status: str | None = None, timeout_s: float | None = None) -> list[JobInfo]:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.jobs`."""
        return await self._run(self.endpoints.jobs(app_id, status), timeout_s)

    async def stages(
        self, app_id: str, *, status: str | None = None, timeout_s: float | None = None
    ) -> list[StageInfo]:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.stages`."""
        return await self._run(self.endpoints.stages(app_id, status), timeout_s)

    async def executors(
        self, app_id: str, *, include_dead: bool = False, timeout_s: float | None = None
    ) -> list[ExecutorInfo]:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.executors`."""
        return await self._run(self.endpoints.executors(app_id, include_dead), timeout_s)

    async def master_state(self, *, timeout_s: float | None = None) -> MasterState:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.master_state`."""
        return await self._run(self.endpoints.master_state(), timeout_s)

    async def create_submission(
        self, *, timeout_s: float | None = None, **fields: Unpack[calls.SubmissionFields]
    ) -> SubmissionResponse:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.create_submission`."""
        return await self._run(self.endpoints.create_submission(**fields), timeout_s)

    async def driver_status(self, submission_id: str, *, timeout_s: float | None = None) -> DriverStatus:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.driver_status`."""
        return await self._run(self.endpoints.driver_status(submission_id), timeout_s)

    async def kill_submission(self, submission_id: str, *, timeout_s: float | None = None) -> SubmissionResponse:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.kill_submission`."""
        return await self._run(self.endpoints.kill_submission(submission_id), timeout_s)

    async def kill_driver_ui(self, submission_id: str, *, timeout_s: float | None = None) -> None:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.kill_driver_ui`."""
        await self._run(self.endpoints.kill_driver_ui(submission_id), timeout_s)

    async def request_json(
        self, method: str, url: str, *, timeout_s: float | None = None, **options: Unpack[calls.RawCallOptions]
    ) -> Any:
        """See :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.request_json`."""
        return await self._run(calls.Endpoints.raw(method, url, **options), timeout_s)
