"""
What this provider reads on a Spark provider ``spark`` connection, besides host and port: every extra goes through
:func:`connection_extras`, the bearer token and TLS trust through :func:`rest_access`.

The extras live under ``spark.airflowProviderHorovod.*`` (:data:`EXTRAS`). The Spark provider's ``@task.pyspark``
copies every extra of its connection into the application's ``SparkConf``, and ``spark-submit`` logs
``Ignoring non-Spark config property: <key>`` for each key that does not start with ``spark.``; a ``spark.`` key it
does not know is carried silently (and ``SparkSubmitHook`` reads only its own extras). So one connection serves the
Spark provider's operators and this provider's without noise. The first layout (``rest-port``, ``ui-port``,
``history-server-url``...) is still read, with an ``AirflowProviderDeprecationWarning`` naming the new key; a new
key wins over its old one. ``deploy-mode`` is the Spark provider's own extra and is read as it is.

The connection's **password** is the bearer token (a JWS) for a standalone master whose REST submission server or web
UI runs ``org.apache.spark.ui.JWSFilter`` (docs/security.md). The RPC secret is the standard Spark property as an
extra, ``spark.authenticate.secret`` (read by :func:`~airflow_provider_horovod.utils.spark_auth.connection_auth_secret`,
which keeps it out of every object with a ``repr``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.clients import (
    SparkRestAccess,
    SparkRestAuthError,
    SparkRestClient,
    SparkRestError,
    SparkRestTLSError,
)
from airflow_provider_horovod.exceptions import HorovodAccessError, HorovodJobError

PREFIX = "spark.airflowProviderHorovod."
"""The namespace of this provider's extras on a ``spark`` connection."""

EXTRAS: dict[str, tuple[str, str | None]] = {
    "rest_port": (PREFIX + "restPort", "rest-port"),
    "rest_scheme": (PREFIX + "restScheme", "rest-scheme"),
    "ui_port": (PREFIX + "uiPort", "ui-port"),
    "ui_scheme": (PREFIX + "uiScheme", "ui-scheme"),
    "history_server_url": (PREFIX + "historyServerUrl", "history-server-url"),
    "ca_bundle": (PREFIX + "caBundle", None),
    "deploy_mode": (PREFIX + "deployMode", None),
}
"""Field of :class:`SparkConnectionExtras` -> (its extra, the deprecated extra it replaces, if any)."""

PROBE_ID = "airflow-provider-horovod-access-probe"
"""The submission id the access probe asks the status of (no driver has it: the master answers ``success: false``)."""
SCHEMES = ("http", "https")
_JWS = re.compile(r"[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+")


def _deprecation_warning() -> type[Warning]:
    try:
        from airflow.exceptions import AirflowProviderDeprecationWarning
    except ImportError:  # pragma: no cover - every supported Airflow has it
        return DeprecationWarning
    return AirflowProviderDeprecationWarning


def _read(extra: Mapping[str, Any], name: str, source: str) -> Any:
    new, old = EXTRAS[name]
    if extra.get(new) not in (None, ""):
        return extra[new]
    if old is not None and extra.get(old) not in (None, ""):
        warnings.warn(
            f"{source}: the extra {old!r} is deprecated, use {new!r} (the Spark provider's @task.pyspark "
            f"copies every extra into SparkConf and logs 'Ignoring non-Spark config property: {old}')",
            _deprecation_warning(),
            stacklevel=3,
        )
        return extra[old]
    return None


def _port(value: Any, name: str, default: int, source: str) -> int:
    if value is None:
        return default
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 0 < port < 65536:
        raise ValueError(f"{source}: {EXTRAS[name][0]} must be a TCP port (1-65535), got {value!r}")
    return port


def _scheme(value: Any, name: str, source: str) -> str:
    scheme = str(value or "http").lower()
    if scheme not in SCHEMES:
        raise ValueError(f"{source}: {EXTRAS[name][0]} must be one of {SCHEMES}, got {value!r}")
    return scheme


@dataclass(frozen=True)
class SparkConnectionExtras:
    """
    This provider's extras of one ``spark`` connection, with their defaults.

    :param rest_port: the standalone master's REST submission server port (``spark.master.rest.port``, 6066).
    :param rest_scheme: ``http`` or ``https`` for the REST submission server.
    :param ui_port: the master's web UI port (its ``/json/`` state page), 8080; with SSL, its HTTPS port.
    :param ui_scheme: ``http`` or ``https`` for the master's web UI and the applications' monitoring API.
    :param history_server_url: a Spark History Server (``http://history:18080``), or ``None``.
    :param ca_bundle: a PEM file of the CAs to trust over HTTPS, or ``None`` (the system's).
    :param deploy_mode: this provider's deploy mode for the connection (``client``/``cluster``), read before the
        Spark provider's ``deploy-mode``; ``None`` when unset.
    """

    rest_port: int = 6066
    rest_scheme: str = "http"
    ui_port: int = 8080
    ui_scheme: str = "http"
    history_server_url: str | None = None
    ca_bundle: str | None = None
    deploy_mode: str | None = None

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any] | None, source: str = "the Spark connection") -> SparkConnectionExtras:
        """
        Read ``extra`` (a connection's ``extra_dejson``).

        :param extra: the extras.
        :param source: what to name in warnings and errors, e.g. ``connection 'spark_default'``.
        :raises ValueError: a port or scheme extra is not one; the message names the extra and ``source``.
        """
        extra = extra or {}
        values = {name: _read(extra, name, source) for name in EXTRAS}
        history, ca, mode = values["history_server_url"], values["ca_bundle"], values["deploy_mode"]
        return cls(
            rest_port=_port(values["rest_port"], "rest_port", 6066, source),
            rest_scheme=_scheme(values["rest_scheme"], "rest_scheme", source),
            ui_port=_port(values["ui_port"], "ui_port", 8080, source),
            ui_scheme=_scheme(values["ui_scheme"], "ui_scheme", source),
            history_server_url=str(history).rstrip("/") if history else None,
            ca_bundle=str(ca) if ca else None,
            deploy_mode=str(mode) if mode else None,
        )


def connection_extras(conn: Any) -> SparkConnectionExtras:
    """
    This provider's extras of an Airflow connection (see :class:`SparkConnectionExtras`).

    :param conn: the connection (``conn_id``, ``extra_dejson``).
    :raises ValueError: a port or scheme extra is not one.
    """
    return SparkConnectionExtras.from_extra(conn.extra_dejson, f"connection {conn.conn_id!r}")


def rest_access(conn: Any, *, require_token_shape: bool = True) -> SparkRestAccess:
    """
    How the REST clients reach the connection's master: its password as the bearer token, its CA bundle.

    :param conn: the connection.
    :param require_token_shape: ``True`` (cluster deploy mode, which submits through the REST server): a password
        that is not a JWS is an error. ``False`` (client mode, whose spark-submit never uses the password; the
        token only serves the master's ``/json/`` and the monitoring API): such a password is not sent, with a
        warning, so a connection that keeps some other password keeps working.
    :raises ValueError: ``require_token_shape`` and the password is set but is not a JWS
        (``header.payload.signature``); the token is not shown.
    """
    token = (conn.password or "").strip() or None
    origin = f"Airflow connection {conn.conn_id!r}"
    if token is not None and not _JWS.fullmatch(token):
        problem = (
            f"{origin}: the password is the bearer token for the master's JWSFilter and must be a JWS "
            f"(header.payload.signature, base64url), which it is not ({len(token)} characters)"
        )
        if require_token_shape:
            raise ValueError(problem)
        warnings.warn(f"{problem}; it is not sent", UserWarning, stacklevel=2)
        token = None
    return SparkRestAccess(token=token, ca_bundle=connection_extras(conn).ca_bundle, origin=origin)


def probe_rest_access(client: SparkRestClient, rest_url: str, conn_id: str) -> None:
    """
    ``GET {rest_url}/v1/submissions/status/<probe>`` with the client's token and CA bundle: a master answers it for
    any id once a ``JWSFilter`` lets the request in, so a refusal shows before anything is staged or submitted.

    :param client: a client with the connection's access (:func:`rest_access`).
    :param rest_url: the REST submission server.
    :param conn_id: the connection, for the message.
    :raises HorovodAccessError: HTTP 401/403 (the token is missing or not signed with the server's key) or a
        certificate that cannot be verified; it fails the task without Airflow's retries (a retry would be refused
        the same way). The message names the connection and the HTTP status, never the token.
    :raises HorovodJobError: the server gave no usable answer.
    """
    try:
        client.request_json("GET", f"{rest_url}/v1/submissions/status/{PROBE_ID}")
    except (SparkRestAuthError, SparkRestTLSError) as err:
        raise HorovodAccessError(
            f"connection {conn_id!r}: the Spark master's REST submission server refused "
            f"access; nothing was submitted: {err}"
        ) from err
    except SparkRestError as err:
        raise HorovodJobError(
            f"connection {conn_id!r}: the Spark master's REST submission server did not answer a status request: {err}"
        ) from err
