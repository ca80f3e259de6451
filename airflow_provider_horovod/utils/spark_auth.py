"""
Spark's RPC authentication secret (``spark.authenticate.secret``) on its way to a job, and nowhere else.

The secret comes from the cluster's own ``spark-defaults.conf`` (which ``spark-submit`` reads) or from the Spark
connection's :data:`CONNECTION_SECRET_EXTRA` extra (:func:`connection_auth_secret`), never from DAG code
(:func:`check_no_auth_secret` refuses it in ``conf``/``env_vars``). A secret from the connection reaches
``spark-submit`` in a properties file only its owner can read (:func:`write_auth_properties`), never as ``--conf`` on
the command line, where ``ps`` shows it. ``docs/security.md`` describes the set-up. No I/O at import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "AUTH_PROPERTIES_FILE",
    "AUTH_SECRET_CONF",
    "AUTH_SECRET_ENV",
    "CONNECTION_SECRET_EXTRA",
    "auth_submit_kwargs",
    "check_no_auth_secret",
    "connection_auth_secret",
    "write_auth_properties",
]

AUTH_SECRET_CONF = "spark.authenticate.secret"
"""The Spark property that holds the shared secret of a standalone cluster's RPC authentication."""
AUTH_SECRET_ENV = "_SPARK_AUTH_SECRET"
"""The environment variable Spark's ``SecurityManager`` also reads the secret from (a standalone worker sets it for
the executors it starts)."""
AUTH_PROPERTIES_FILE = "spark-auth.properties"
"""The name of the properties file :func:`auth_submit_kwargs` writes in a job's private staging directory."""
CONNECTION_SECRET_EXTRA = AUTH_SECRET_CONF
"""The Spark connection's extra that holds the secret: the Spark property's own name, so the Spark provider's
``@task.pyspark`` on the same connection (which copies every extra into its ``SparkConf``) authenticates too. Its name
contains ``secret``: Airflow masks its value."""


def check_no_auth_secret(conf: Mapping[str, Any] | None, env_vars: Mapping[str, Any] | None = None) -> None:
    """
    Refuse the RPC secret in DAG code: it would be in the DAG file, the rendered template fields and the
    ``spark-submit`` command line.

    :param conf: the operator's or hook's Spark properties (``conf=``), or ``None``.
    :param env_vars: its environment variables (``env_vars=``), or ``None``.
    :raises ValueError: ``conf`` sets ``spark.authenticate.secret`` or ``env_vars`` sets ``_SPARK_AUTH_SECRET``;
        the message says where the secret goes instead.
    """
    found = [f"conf[{AUTH_SECRET_CONF!r}]" for key in (conf or {}) if str(key).strip() == AUTH_SECRET_CONF]
    found += [f"env_vars[{AUTH_SECRET_ENV!r}]" for key in (env_vars or {}) if str(key).strip() == AUTH_SECRET_ENV]
    if found:
        raise ValueError(
            f"{', '.join(found)}: the Spark RPC secret cannot be given in DAG code (it would show in the DAG file, "
            f"the rendered template fields and the spark-submit command line). Allowed: put it in the Spark "
            f"connection's {CONNECTION_SECRET_EXTRA!r} extra, or in the spark-defaults.conf of this machine's "
            f"Spark (SPARK_CONF_DIR); the other spark.authenticate* settings may stay in conf"
        )


def connection_auth_secret(conn: Any) -> str | None:
    """
    The RPC secret of a Spark connection: its :data:`CONNECTION_SECRET_EXTRA` extra.

    The one place the provider reads it (the connection's extras layout may move it; route it from here).

    :param conn: an Airflow ``Connection``.
    :return: the secret, or ``None`` when the extra is missing or empty.
    :raises ValueError: the value is not a string, or has a line break or surrounding whitespace (a Java
        properties file would cut or trim it).
    """
    value = (conn.extra_dejson or {}).get(CONNECTION_SECRET_EXTRA)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value != value.strip() or "\n" in value or "\r" in value:
        raise ValueError(
            f"connection {conn.conn_id!r}: the {CONNECTION_SECRET_EXTRA!r} extra must be a string "
            "without line breaks or surrounding whitespace"
        )
    return value


def _escape(text: str, *, key: bool = False) -> str:
    """``text`` as ``java.util.Properties.load`` reads it back (a key also escapes its separators)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\" or (key and ch in "=: #!") or (ch == " " and i == 0):
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04x}" for unit in _utf16(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def write_auth_properties(
    path: str | os.PathLike[str],
    secret: str,
    *,
    base_file: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> str:
    """
    Write a properties file for ``spark-submit --properties-file`` that only its owner can read (mode 0600): the
    secret and ``spark.authenticate=true``, after the lines of ``base_file`` (the user's own properties file) and
    ``properties``.

    :param path: the file to create; it must not exist yet.
    :param secret: the RPC secret.
    :param base_file: a properties file whose lines come first (the user's ``properties_file``), or ``None``.
    :param properties: Spark properties written before the secret (cluster mode's whole application), or ``None``.
    :return: ``path``, as a string.
    :raises FileExistsError: ``path`` exists.
    :raises OSError: ``base_file`` cannot be read, or ``path`` cannot be written.
    """
    base = Path(base_file).read_text() if base_file else ""
    text = f"{base.rstrip()}\n" if base.strip() else ""
    text += "".join(f"{_escape(k, key=True)}={_escape(v)}\n" for k, v in (properties or {}).items())
    text += f"spark.authenticate=true\n{AUTH_SECRET_CONF}={_escape(secret)}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return str(path)


def auth_submit_kwargs(
    conn: Any | None, staging_dir: str | os.PathLike[str], submit_kwargs: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """
    ``SparkSubmitHook`` arguments that give ``spark-submit`` the connection's RPC secret, if it has one: a
    ``properties_file`` (:func:`write_auth_properties`, in ``staging_dir``) with the user's own ``properties_file``
    lines first.

    :param conn: the Spark connection (an Airflow ``Connection``); ``None`` (the embedded ``local[np]`` master):
        the arguments stay as they are.
    :param staging_dir: the job's private directory (the file goes there; it is removed with it).
    :param submit_kwargs: the user's ``spark_submit_kwargs``.
    :return: ``(kwargs, load_spark_defaults)``: the arguments, and whether ``spark-submit`` must be told
        ``--load-spark-defaults`` (a properties file of ours would otherwise hide this machine's
        ``spark-defaults.conf``; a user's own file hid it already and still does).
    :raises ValueError: the connection's secret is malformed (:func:`connection_auth_secret`).
    :raises OSError: the file cannot be written, or the user's ``properties_file`` cannot be read.
    """
    kwargs = dict(submit_kwargs)
    secret = None if conn is None else connection_auth_secret(conn)
    if secret is None:
        return kwargs, False
    user_file = kwargs.get("properties_file")
    kwargs["properties_file"] = write_auth_properties(
        Path(staging_dir) / AUTH_PROPERTIES_FILE, secret, base_file=user_file
    )
    return kwargs, not user_file
