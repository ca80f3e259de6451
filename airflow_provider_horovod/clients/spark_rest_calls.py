"""
What the sync and async Spark REST clients share: the calls (method, URL, body, parser), the retry policy, and the
turning of an HTTP answer into a value or a :class:`SparkRestError`. No I/O happens here.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NotRequired, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx
import tenacity

from airflow_provider_horovod.clients import spark_app_models as app
from airflow_provider_horovod.clients import spark_master_models as master
from airflow_provider_horovod.clients import spark_rest_errors as errors
from airflow_provider_horovod.clients._spark_model import parse_list

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """
    One REST call.

    :param method: the HTTP method.
    :param url: the full URL.
    :param parse: turns the decoded JSON body of a 2xx answer into the result; raises :class:`SparkRestError`.
    :param body: the JSON body to send, if any (with ``form``: an HTML form, and no body is read back).
    :param idempotent: whether the call may be repeated after it possibly reached the server (read timeout,
        HTTP 5xx). A non-idempotent call (``create``) is retried only when the connection could not be made.
    """

    method: str
    url: str
    parse: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    idempotent: bool = True
    form: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    """
    When to call again after a connection error, a timeout or an HTTP 5xx (never after a 4xx: an HTTP 401/403, a
    refused bearer token, and a certificate that cannot be verified are final).

    Waits are ``initial_backoff_s * 2 ** (n - 1)`` after the n-th failed attempt, capped at ``max_backoff_s``. The
    worst case for one call is ``max_attempts * timeout_s`` plus the waits, unless ``deadline_s`` cuts it shorter.

    :param max_attempts: attempts in all, the first included (1 disables retries).
    :param initial_backoff_s: seconds to wait after the first failed attempt.
    :param max_backoff_s: the longest wait between two attempts, in seconds.
    :param deadline_s: if set, no new attempt starts once this many seconds have passed since the first one.
    """

    max_attempts: int = 5
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 4.0
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoffs must not be negative")

    def tenacity_kwargs(self, call: Call[Any]) -> dict[str, Any]:
        """Keyword arguments for :class:`tenacity.Retrying` / :class:`tenacity.AsyncRetrying` running ``call``."""
        stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(self.max_attempts)
        if self.deadline_s is not None:
            stop = stop | tenacity.stop_after_delay(self.deadline_s)
        return {
            "stop": stop,
            "wait": tenacity.wait_exponential(multiplier=self.initial_backoff_s, max=self.max_backoff_s),
            "retry": tenacity.retry_if_exception(lambda exc: is_retryable(call, exc)),
            "reraise": True,
            "before_sleep": _log_retry(call),
        }


def is_retryable(call: Call[Any], exc: BaseException) -> bool:
    """Whether ``exc``, raised by an attempt of ``call``, deserves another attempt (never an auth or TLS error)."""
    final = isinstance(exc, (errors.SparkRestAuthError, errors.SparkRestTLSError))
    if final or not isinstance(exc, errors.SparkRestUnavailableError):
        return False
    # unless it is idempotent, the request may have reached the server unless the connection itself failed
    return call.idempotent or isinstance(exc.__cause__, (httpx.ConnectError, httpx.ConnectTimeout))


def _log_retry(call: Call[Any]) -> Callable[[tenacity.RetryCallState], None]:
    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "Spark REST %s %s failed (attempt %d): %s; retrying in %.2f s",
            call.method,
            call.url,
            state.attempt_number,
            exc,
            state.next_action.sleep if state.next_action else 0.0,
        )

    return before_sleep


def timeout(timeout_s: float) -> httpx.Timeout:
    """The httpx timeout for one attempt: ``timeout_s`` seconds for each of connect, read, write and pool wait."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    return httpx.Timeout(timeout_s)


def _named(origin: str | None) -> str:
    return f" of the {origin}" if origin else ""


def request_error(call: Call[Any], exc: httpx.RequestError, origin: str | None = None) -> errors.SparkRestError:
    """
    The error for an attempt that got no usable answer; raise it ``from exc`` (the retry policy reads the cause).

    A certificate that cannot be verified gives :class:`SparkRestTLSError` (final); another transport error
    (connection refused or reset, timeout) :class:`SparkRestUnavailableError`, retryable; anything else httpx refuses
    (an undecodable body, too many redirects) a plain :class:`SparkRestError`.

    :param origin: where the client's access settings come from (``Airflow connection 'x'``), for the message.
    """
    if (cert := errors.certificate_error(exc)) is not None:
        return errors.SparkRestTLSError(
            f"Spark REST {call.method}: the server's TLS certificate could not be verified "
            f"({cert.verify_message or cert}): set the CA bundle{_named(origin)} to the PEM file of the CA that "
            "signed it (its extra spark.airflowProviderHorovod.caBundle; see docs/security.md, HTTPS)",
            url=call.url,
        )
    if not isinstance(exc, httpx.TransportError):
        return errors.SparkRestError(f"Spark REST {call.method} failed: {type(exc).__name__}: {exc}", url=call.url)
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not connect or read"
    return errors.SparkRestUnavailableError(
        f"Spark REST {call.method} {kind}: {type(exc).__name__}: {exc}", url=call.url
    )


def decode(call: Call[T], response: httpx.Response, origin: str | None = None) -> T:
    """
    Turn the answer to ``call`` into its value.

    :param origin: where the client's access settings come from (``Airflow connection 'x'``), for the message.
    :raises SparkRestAuthError: on HTTP 401/403 (a refused or missing bearer token; final).
    :raises SparkRestUnavailableError: on HTTP 5xx (retryable).
    :raises SparkRestError: on any other non-2xx answer, with the server's message.
    :raises SparkRestPayloadError: when a 2xx body is not the expected JSON.
    :raises SparkSubmissionError: when the REST submission server says ``"success": false``.
    """
    status = response.status_code
    if status in (401, 403):
        sent = "a bearer token" if "Authorization" in response.request.headers else "no bearer token"
        raise errors.SparkRestAuthError(
            f"Spark REST {call.method} answered HTTP {status} ({response.reason_phrase or 'refused'}): the server "
            f"refused the request, which carried {sent}; the password{_named(origin)} must be a JWS signed with the "
            "key of the server's org.apache.spark.ui.JWSFilter (see docs/security.md)",
            status_code=status,
            url=call.url,
        )
    if status >= 400:
        cls = errors.SparkRestUnavailableError if status >= 500 else errors.SparkRestError
        raise cls(
            f"Spark REST {call.method} answered HTTP {status}: {_server_message(response)}",
            status_code=status,
            url=call.url,
        )
    if call.form:
        return call.parse(None)
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.SparkRestPayloadError(
            f"Spark REST {call.method} answered HTTP {status} with a body that is not JSON: {response.text[:200]!r}",
            status_code=status,
            url=call.url,
        ) from exc
    try:
        return call.parse(data)
    except errors.SparkRestError as exc:
        if exc.url is not None:
            raise
        raise type(exc)(exc.message, status_code=status, url=call.url) from exc


def _server_message(response: httpx.Response) -> str:
    """The REST submission server's ``message`` when it sent an ErrorResponse, else the start of the body."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, Mapping) and isinstance(data.get("message"), str):
        return data["message"]
    text = response.text.strip()
    return text[:500] if text else response.reason_phrase


def _join(base: str | None, name: str, path: str) -> str:
    if not base:
        raise ValueError(f"this client was built without {name}; pass {name}= to use this call")
    return base.rstrip("/") + path


def _seg(value: str | int) -> str:
    return quote(str(value), safe="")


def _created(data: Any) -> master.SubmissionResponse:
    response = master.SubmissionResponse.from_json(data)
    if not response.success:
        raise errors.SparkSubmissionError(f"Spark REST submission refused: {response.message or 'no message'}")
    return response


def _status(data: Any) -> master.DriverStatus:
    status = master.DriverStatus.from_json(data)
    if not status.success:
        raise errors.SparkSubmissionError(
            f"the master does not know submission {status.submission_id!r}"
            + (f": {status.message}" if status.message else "")
        )
    return status


class SubmissionFields(TypedDict):
    """
    The keyword arguments of :func:`submission_request`, which both clients' ``create_submission`` take and pass on
    to :meth:`Endpoints.create_submission`; each is described at
    :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.create_submission`.
    """

    app_resource: str
    main_class: str
    app_args: NotRequired[Sequence[str]]
    spark_properties: NotRequired[Mapping[str, str] | None]
    environment_variables: NotRequired[Mapping[str, str] | None]
    client_spark_version: NotRequired[str | None]


def submission_request(
    *,
    app_resource: str,
    main_class: str,
    app_args: Sequence[str] = (),
    spark_properties: Mapping[str, str] | None = None,
    environment_variables: Mapping[str, str] | None = None,
    client_spark_version: str | None = None,
) -> dict[str, Any]:
    """The body of ``POST /v1/submissions/create`` (see :meth:`SparkRestClient.create_submission`)."""
    if client_spark_version is None:
        try:
            client_spark_version = importlib.metadata.version("pyspark")
        except importlib.metadata.PackageNotFoundError:
            client_spark_version = "4.0.0"
    return {
        "action": "CreateSubmissionRequest",
        "appResource": app_resource,
        "mainClass": main_class,
        "appArgs": [str(a) for a in app_args],
        "sparkProperties": {str(k): str(v) for k, v in (spark_properties or {}).items()},
        "environmentVariables": {str(k): str(v) for k, v in (environment_variables or {}).items()},
        "clientSparkVersion": client_spark_version,
    }


class RawCallOptions(TypedDict, total=False):
    """
    The optional arguments of :meth:`Endpoints.raw`, which both clients' ``request_json`` take and pass on; each is
    described at :meth:`~airflow_provider_horovod.clients.spark_rest.SparkRestClient.request_json`.
    """

    body: Mapping[str, Any] | None
    idempotent: bool | None


@dataclass(frozen=True)
class Endpoints:
    """
    Builds the :class:`Call` of every supported endpoint.

    :param ui_url: an application's web UI, e.g. ``http://127.0.0.1:4040`` (or a history server).
    :param master_ui_url: the standalone master's web UI, e.g. ``http://127.0.0.1:8080``.
    :param rest_url: the standalone master's REST submission server, e.g. ``http://127.0.0.1:6066``.
    """

    ui_url: str | None = None
    master_ui_url: str | None = None
    rest_url: str | None = None

    def _ui(self, path: str) -> str:
        return _join(self.ui_url, "ui_url", "/api/v1" + path)

    def applications(self) -> Call[list[app.ApplicationInfo]]:
        return Call("GET", self._ui("/applications"), lambda d: parse_list(app.ApplicationInfo, d, "applications"))

    def application(self, app_id: str) -> Call[app.ApplicationInfo]:
        return Call("GET", self._ui(f"/applications/{_seg(app_id)}"), app.ApplicationInfo.from_json)

    def jobs(self, app_id: str, status: str | None = None) -> Call[list[app.JobInfo]]:
        query = f"?status={_seg(status.lower())}" if status else ""
        return Call(
            "GET", self._ui(f"/applications/{_seg(app_id)}/jobs{query}"), lambda d: parse_list(app.JobInfo, d, "jobs")
        )

    def stages(self, app_id: str, status: str | None = None) -> Call[list[app.StageInfo]]:
        query = f"?status={_seg(status.lower())}" if status else ""
        return Call(
            "GET",
            self._ui(f"/applications/{_seg(app_id)}/stages{query}"),
            lambda d: parse_list(app.StageInfo, d, "stages"),
        )

    def executors(self, app_id: str, include_dead: bool = False) -> Call[list[app.ExecutorInfo]]:
        path = "allexecutors" if include_dead else "executors"
        return Call(
            "GET", self._ui(f"/applications/{_seg(app_id)}/{path}"), lambda d: parse_list(app.ExecutorInfo, d, path)
        )

    def master_state(self) -> Call[master.MasterState]:
        return Call("GET", _join(self.master_ui_url, "master_ui_url", "/json/"), master.MasterState.from_json)

    def create_submission(self, **fields: Unpack[SubmissionFields]) -> Call[master.SubmissionResponse]:
        body = submission_request(**fields)
        return Call(
            "POST", _join(self.rest_url, "rest_url", "/v1/submissions/create"), _created, body, idempotent=False
        )

    def driver_status(self, submission_id: str) -> Call[master.DriverStatus]:
        return Call("GET", _join(self.rest_url, "rest_url", f"/v1/submissions/status/{_seg(submission_id)}"), _status)

    def kill_submission(self, submission_id: str) -> Call[master.SubmissionResponse]:
        # Killing twice is harmless (the second answer says the driver already finished): idempotent.
        return Call(
            "POST",
            _join(self.rest_url, "rest_url", f"/v1/submissions/kill/{_seg(submission_id)}"),
            master.SubmissionResponse.from_json,
        )

    def kill_driver_ui(self, submission_id: str) -> Call[None]:  # the master UI's kill link; it answers a redirect
        return Call(
            "POST",
            _join(self.master_ui_url, "master_ui_url", "/driver/kill/"),
            lambda _: None,
            body={"id": submission_id, "terminate": "true"},
            form=True,
        )

    @staticmethod
    def raw(method: str, url: str, body: Mapping[str, Any] | None = None, idempotent: bool | None = None) -> Call[Any]:
        return Call(
            method.upper(),
            url,
            lambda d: d,
            body=body,
            idempotent=method.upper() in ("GET", "HEAD") if idempotent is None else idempotent,
        )
