"""
Artifact directories on object storage: a plain URI for the ranks, and the connection's credentials as the
standard environment variables of the storage's SDK.

The credentials travel the way ``env_vars`` do (the spark-submit process's environment, then inside the pickled
barrier-stage closure to every rank): never as Spark properties, command-line arguments, log lines or XCom.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse, urlunparse

AWS_CONN_TYPES = frozenset({"aws", "s3"})


def storage_location(location: Any) -> tuple[str, str | None]:
    """
    ``(uri, conn_id)`` for an artifact location.

    :param location: a local path, an fsspec URI (``s3://bucket/x``), an Airflow ``ObjectStoragePath`` (its
        ``conn_id`` is kept), or a URI in Airflow's ``scheme://conn_id@bucket/path`` form.
    :return: the location as a URI the ranks' fsspec can open, without a connection id, and the connection id
        (``None`` when the location names none: credentials then come from the environment as usual).
    """
    conn_id = getattr(location, "conn_id", None)
    protocol = getattr(location, "protocol", None)
    if protocol is not None and hasattr(location, "path"):  # ObjectStoragePath (a UPath)
        path = str(location.path)
        if protocol in ("", "file", "local"):
            return path, conn_id
        return f"{protocol}://{path.lstrip('/')}", conn_id
    text = str(location)
    parsed = urlparse(text)
    if len(parsed.scheme) > 1 and parsed.scheme != "file" and "@" in parsed.netloc:
        user, _, host = parsed.netloc.rpartition("@")
        if user and ":" not in user:  # Airflow's conn_id@bucket form, never a password in a URI
            return urlunparse(parsed._replace(netloc=host)), user
    return text, None


def shared_conn_id(**conn_ids: str | None) -> str | None:
    """
    The one connection whose credentials the ranks get, for locations that each name one or none (the ranks' storage
    SDK reads a single set of ``AWS_*`` variables).

    :param conn_ids: parameter name (``artifact_dir``, ``checkpoint_dir``) to the connection id it names, or ``None``.
    :return: the connection id, or ``None`` when none names one.
    :raises ValueError: two name different connections; the message names both parameters.
    """
    named = {name: conn for name, conn in conn_ids.items() if conn}
    if len(set(named.values())) > 1:
        raise ValueError(
            f"{' and '.join(f'{n} names connection {c!r}' for n, c in named.items())}: the ranks get "
            "the credentials of one connection; name the same one (or none) in both"
        )
    return next(iter(named.values()), None)


def credentials_env(conn_id: str) -> dict[str, str]:
    """
    The environment variables that give the storage SDK (botocore, under s3fs) the connection's credentials.

    An ``aws`` connection: login is the access key id, password the secret access key; extra ``endpoint_url``
    (or ``service_config.s3.endpoint_url``), ``region_name`` and ``aws_session_token`` are honoured.

    :raises ValueError: the connection is of a type this provider cannot turn into credentials.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type not in AWS_CONN_TYPES:
        raise ValueError(
            f"artifact_dir names connection {conn_id!r} of type {conn.conn_type!r}: only 'aws' connections (S3 and "
            "S3-compatible stores) can supply the ranks' credentials; for other stores give a plain URI and "
            "configure credentials on the Spark driver and executors"
        )
    extra = conn.extra_dejson or {}
    endpoint = extra.get("endpoint_url") or ((extra.get("service_config") or {}).get("s3") or {}).get("endpoint_url")
    env = {
        "AWS_ACCESS_KEY_ID": conn.login,
        "AWS_SECRET_ACCESS_KEY": conn.password,
        "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": extra.get("region_name"),
    }
    return {k: str(v) for k, v in env.items() if v}
