"""
Errors raised by the Spark REST clients (:mod:`airflow_provider_horovod.clients.spark_rest`).

Hierarchy::

    SparkRestError                  an HTTP 4xx answer, or an answer that cannot be understood
    ├── SparkRestUnavailableError   no usable answer after the last retry (connection error, timeout, HTTP 5xx)
    ├── SparkRestPayloadError       the answer is not the JSON shape Spark documents (missing or mistyped field)
    ├── SparkRestAuthError          HTTP 401 or 403: the server refused the bearer token (or its absence)
    ├── SparkRestTLSError           the server's certificate could not be verified (HTTPS)
    └── SparkSubmissionError        the standalone REST submission server answered ``"success": false``

An auth or certificate error is never retried: a new attempt would be refused the same way.

None of them import Airflow: the clients run in triggers and on Spark drivers alike.
"""

from __future__ import annotations

import ssl


class SparkRestError(Exception):
    """
    A Spark REST call failed.

    :param message: what went wrong, including the server's own message when it sent one.
    :param status_code: the HTTP status of the answer, or ``None`` when no answer came (connection refused,
        timeout).
    :param url: the URL that was requested (``None`` when the error arose outside a request, for instance when a
        recorded payload is parsed).
    """

    def __init__(self, message: str, *, status_code: int | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.url = url

    def __str__(self) -> str:
        where = (
            f" [{self.status_code if self.status_code is not None else 'no answer'} from {self.url}]"
            if self.url
            else ""
        )
        return f"{self.message}{where}"

    def __reduce__(self):  # keep the keyword-only attributes through pickling (triggers, multiprocessing)
        return (_rebuild, (type(self), self.message, self.status_code, self.url))


def _rebuild(cls: type[SparkRestError], message: str, status_code: int | None, url: str | None) -> SparkRestError:
    return cls(message, status_code=status_code, url=url)


class SparkRestUnavailableError(SparkRestError):
    """The server gave no usable answer within the retry policy (connection error, timeout or HTTP 5xx)."""


class SparkRestPayloadError(SparkRestError):
    """The server answered, but not with the JSON shape the Spark REST API documents."""


class SparkRestAuthError(SparkRestError):
    """
    The server answered HTTP 401 or 403: a ``JWSFilter`` (``spark.master.rest.filters``, ``spark.ui.filters``)
    refused the request's bearer token, or its absence. Never retried.
    """


class SparkRestTLSError(SparkRestError):
    """The server's TLS certificate could not be verified against the trusted CAs. Never retried."""


class SparkSubmissionError(SparkRestError):
    """The standalone REST submission server answered ``"success": false`` (unknown submission, master not ALIVE)."""


def certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind ``exc`` (an httpx ``ConnectError``), if that is what it was."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, ssl.SSLCertVerificationError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
