"""
What both Spark REST clients (:mod:`~airflow_provider_horovod.clients.spark_rest`,
:mod:`~airflow_provider_horovod.clients.spark_rest_async`) hold: their endpoints, timeout and retry policy.
"""

from __future__ import annotations

import httpx

from airflow_provider_horovod.clients.spark_rest_calls import Endpoints, RetryPolicy, timeout

DEFAULT_TIMEOUT_S = 10.0
"""Default timeout of one attempt of a call, seconds."""
HEADERS = {"Accept": "application/json"}
"""The headers of every request."""


class SparkRestBase:
    """
    The base URLs, timeout, retry policy and connection pool of a Spark REST client; the calls are the subclasses'.

    :param ui_url: an application's web UI or a history server, for the monitoring calls.
    :param master_ui_url: the standalone master's web UI, for ``master_state``.
    :param rest_url: the master's REST submission server, for the submission calls.
    :param timeout_s: default timeout of one attempt, seconds.
    :param retry: the retry policy (default: :class:`RetryPolicy`'s).
    :param transport: an httpx transport of the subclass's kind to use instead of the network.
    :raises ValueError: when ``timeout_s`` is not positive.
    """

    _http_type: type[httpx.Client] | type[httpx.AsyncClient]
    """The subclass's httpx client: blocking or asyncio."""

    def __init__(self, *, ui_url: str | None = None, master_ui_url: str | None = None, rest_url: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None) -> None:
        timeout(timeout_s)  # validates
        self.endpoints = Endpoints(ui_url=ui_url, master_ui_url=master_ui_url, rest_url=rest_url)
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._http = self._http_type(transport=transport, headers=HEADERS, follow_redirects=True)

    def _timeout(self, timeout_s: float | None) -> httpx.Timeout:
        return timeout(self.timeout_s if timeout_s is None else timeout_s)

    def __repr__(self) -> str:
        e = self.endpoints
        return (f"{type(self).__name__}(ui_url={e.ui_url!r}, master_ui_url={e.master_ui_url!r}, "
                f"rest_url={e.rest_url!r}, timeout_s={self.timeout_s})")
