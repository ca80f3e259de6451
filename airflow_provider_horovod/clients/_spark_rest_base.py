"""
What both Spark REST clients (:mod:`~airflow_provider_horovod.clients.spark_rest`,
:mod:`~airflow_provider_horovod.clients.spark_rest_async`) hold: their endpoints, timeout, retry policy and access
(bearer token, TLS trust).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

import httpx

from airflow_provider_horovod.clients.spark_rest_calls import Endpoints, RetryPolicy, timeout

DEFAULT_TIMEOUT_S = 10.0
"""Default timeout of one attempt of a call, seconds."""
HEADERS = {"Accept": "application/json"}
"""The headers of every request."""


@dataclass(frozen=True)
class SparkRestAccess:
    """
    How to reach a secured Spark REST API: the bearer token a ``JWSFilter`` checks, the CAs to trust over HTTPS, and
    what to name in an error (the Airflow connection they came from). The token never appears in the repr.

    :param token: a JWS (``header.payload.signature``) sent as ``Authorization: Bearer <token>``; ``None``: no
        ``Authorization`` header.
    :param ca_bundle: a PEM file of the CAs that sign the server's certificate; ``None``: the system's trusted CAs
        (certificates are verified either way).
    :param origin: where the token and CA bundle come from, for error messages, e.g. ``Airflow connection
        'spark_secure'``.
    """

    token: str | None = field(default=None, repr=False)
    ca_bundle: str | None = None
    origin: str | None = None

    def headers(self) -> dict[str, str]:
        """The request headers: :data:`HEADERS`, with ``Authorization`` when there is a token."""
        return {**HEADERS, "Authorization": f"Bearer {self.token}"} if self.token else dict(HEADERS)

    def verify(self) -> ssl.SSLContext | bool:
        """
        httpx's ``verify``: an SSL context trusting ``ca_bundle``, else ``True`` (the default trust store).

        :raises SparkRestTLSError: the CA bundle cannot be read or is not PEM certificates.
        """
        if not self.ca_bundle:
            return True
        from airflow_provider_horovod.clients.spark_rest_errors import SparkRestTLSError

        try:
            return ssl.create_default_context(cafile=self.ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise SparkRestTLSError(
                f"cannot load the CA bundle {self.ca_bundle!r}{' of ' + self.origin if self.origin else ''}: {exc}"
            ) from exc


class SparkRestBase:
    """
    The base URLs, timeout, retry policy, access and connection pool of a Spark REST client; the calls are the
    subclasses'.

    :param ui_url: an application's web UI or a history server, for the monitoring calls.
    :param master_ui_url: the standalone master's web UI, for ``master_state``.
    :param rest_url: the master's REST submission server, for the submission calls.
    :param timeout_s: default timeout of one attempt, seconds.
    :param retry: the retry policy (default: :class:`RetryPolicy`'s).
    :param transport: an httpx transport of the subclass's kind to use instead of the network.
    :param access: bearer token and TLS trust (default: none, the system's CAs).
    :raises ValueError: when ``timeout_s`` is not positive.
    :raises SparkRestTLSError: ``access.ca_bundle`` cannot be loaded.
    """

    _http_type: type[httpx.Client] | type[httpx.AsyncClient]
    """The subclass's httpx client: blocking or asyncio."""

    def __init__(
        self,
        *,
        ui_url: str | None = None,
        master_ui_url: str | None = None,
        rest_url: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        access: SparkRestAccess | None = None,
    ) -> None:
        timeout(timeout_s)  # validates
        self.endpoints = Endpoints(ui_url=ui_url, master_ui_url=master_ui_url, rest_url=rest_url)
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.access = access or SparkRestAccess()
        self._http = self._http_type(
            transport=transport,  # type: ignore[arg-type]
            headers=self.access.headers(),
            follow_redirects=True,
            verify=self.access.verify(),
        )

    def _timeout(self, timeout_s: float | None) -> httpx.Timeout:
        return timeout(self.timeout_s if timeout_s is None else timeout_s)

    def __repr__(self) -> str:
        e = self.endpoints
        return (
            f"{type(self).__name__}(ui_url={e.ui_url!r}, master_ui_url={e.master_ui_url!r}, "
            f"rest_url={e.rest_url!r}, timeout_s={self.timeout_s}, access={self.access!r})"
        )
