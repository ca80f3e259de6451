"""
What ``HorovodRunnerOperator``, its deploy modes and DAG authors share: where artifacts, checkpoints and staging go
(``default_artifact_root``, ``default_artifact_dir``, ``default_checkpoint_dir``), deploy-mode and history-server
settings, and the check of rank 0's return value before it goes to XCom. The XCom keys are in
:mod:`airflow_provider_horovod.xcom_keys`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_horovod.exceptions import HorovodResultError
from airflow_provider_horovod.runtime.checkpoints import CHECKPOINT_DIR_NAME
from airflow_provider_horovod.utils.spark_auth import check_no_auth_secret


ARTIFACT_ROOT_ENV = "AIRFLOW__HOROVOD__ARTIFACT_ROOT"
DEFAULT_MAX_RETURN_BYTES = 1024 * 1024
RESERVED_SPARK_SUBMIT_KWARGS = frozenset({"conn_id", "conf", "py_files", "name", "application_args", "env_vars",
                                          "deploy_mode", "application"})
"""``SparkSubmitHook`` arguments the hook sets itself (client mode): passing them in ``spark_submit_kwargs`` is refused."""


def default_artifact_root() -> str:
    """
    Where per-try artifact directories go when the operator is not given ``artifact_dir``.

    ``[horovod] artifact_root`` in the Airflow config (env ``AIRFLOW__HOROVOD__ARTIFACT_ROOT``), else
    ``$AIRFLOW_HOME/horovod-artifacts``. It must be reachable by every executor (a shared filesystem or an
    object-store URI) when Spark runs on more than one machine.
    """
    from airflow_provider_horovod._compat import conf

    root = conf.get("horovod", "artifact_root", fallback=None)
    if root:
        return root
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return os.path.join(home, "horovod-artifacts")


DEPLOY_MODES = ("client", "cluster")


def validate_deploy_mode(value: object, *, source: str) -> str:
    """
    Check a deploy mode.

    :param value: the value given (``deploy_mode=`` or the connection's ``deploy-mode`` extra).
    :param source: where it came from, for the message.
    :return: ``"client"`` or ``"cluster"``.
    :raises ValueError: not one of ``"client"`` or ``"cluster"``; the message names ``source``.
    """
    if value not in DEPLOY_MODES:
        raise ValueError(f"{source}: deploy mode must be one of {DEPLOY_MODES}, got {value!r}")
    return str(value)


def history_server_url(from_connection: str | None = None) -> str | None:
    """
    The Spark History Server the "Spark UI" link points to once the application has ended, if any.

    The connection's ``spark.airflowProviderHorovod.historyServerUrl`` extra (read by
    :func:`~airflow_provider_horovod.utils.spark_connection.connection_extras`), else ``[horovod] history_server_url``
    in the Airflow config (env ``AIRFLOW__HOROVOD__HISTORY_SERVER_URL``); the history server only knows applications
    that ran with ``spark.eventLog.enabled=true`` and an event log directory it reads.

    :param from_connection: the connection's History Server URL, when it names one.
    :return: the base URL, e.g. ``http://history:18080``, or ``None``.
    """
    from airflow_provider_horovod._compat import conf

    url = from_connection or conf.get("horovod", "history_server_url", fallback=None)
    return str(url).rstrip("/") if url else None


def history_app_url(base_url: str, app_id: str) -> str:
    """
    The application's page on a Spark History Server (``<base>/history/<app-id>/``).

    :param base_url: the history server, e.g. ``http://history:18080``.
    :param app_id: the Spark application id.
    """
    return f"{base_url.rstrip('/')}/history/{app_id}/"


def _default_deferrable() -> bool:
    from airflow_provider_horovod._compat import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def default_staging_dir(context: Mapping[str, Any]) -> str:
    """
    Cluster mode: ``<artifact_root>/.staging/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>`` (shared FS or object
    store), each id written by :func:`encode_id_path`, so two task instances never share one.

    :param context: the task's Airflow context (its ``ti``).
    :return: the staging directory of this try.
    """
    return os.path.join(default_artifact_root(), ".staging", *_try_parts(context["ti"]))


def default_artifact_dir(context: Mapping[str, Any]) -> str:
    """
    ``<root>/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>``: unique per task instance and try, so no retry and no
    other task overwrites or lists a model. Each id is written by :func:`encode_id_path`
    (``manual__2026-01-01T00:00:00+00:00`` becomes ``manual__2026-01-01T00~3A00~3A00~2B00~3A00``).

    :param context: the task's Airflow context (its ``ti``).
    :return: the artifact directory of this try (a path, or a URI under an object-store root).
    """
    return _under_artifact_root(_try_parts(context["ti"]))


def default_checkpoint_dir(context: Mapping[str, Any]) -> str:
    """
    ``<root>/<dag_id>/<run_id>/<task_id>[/map-<i>]/checkpoints`` (ids as in :func:`default_artifact_dir`): the same
    for every try of a task instance, shared with no other DAG run, task or map index.

    :param context: the task's Airflow context (its ``ti``).
    :return: the checkpoint directory of this task instance (a path, or a URI under an object-store root).
    """
    return _under_artifact_root([*_instance_parts(context["ti"]), CHECKPOINT_DIR_NAME])


def _under_artifact_root(parts: list[str]) -> str:
    root = default_artifact_root()
    return "/".join([root.rstrip("/"), *parts]) if "://" in root else os.path.join(root, *parts)


def _instance_parts(ti: Any) -> list[str]:
    """The relative path of a task instance's directory under its root: encoded ids, ``map-<i>`` if mapped."""
    mapped = [f"map-{ti.map_index}"] if getattr(ti, "map_index", -1) not in (-1, None) else []
    return [encode_id_path(ti.dag_id), encode_id_path(ti.run_id), encode_id_path(ti.task_id), *mapped]


def _try_parts(ti: Any) -> list[str]:
    """The relative path of a try's directory under its root: the task instance's, then ``try-<n>``."""
    return [*_instance_parts(ti), f"try-{ti.try_number}"]


NAME_MAX = 255
"""The longest directory name, in bytes, that Linux file systems take: an id's encoding longer than this is split."""
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_ESCAPED = re.compile(r"~[0-9A-F]{2}")
_CONTINUED = "~"
"""Ends every name of a split id but its last: a ``~`` that no two hex digits follow, which no encoding holds."""


def encode_id_path(value: object) -> str:
    """
    The directory name that stands for an Airflow id (dag, run or task id) in artifact and staging paths.

    Letters, digits, ``.``, ``_`` and ``-`` stay as they are, so plain ids read as themselves; every other character
    becomes ``~`` and two upper-case hex digits per byte of its UTF-8 encoding (``:`` is ``~3A``, ``+`` ``~2B``,
    ``~`` itself ``~7E``, ``日`` ``~E6~97~A5``), and so does a ``.`` that would begin a name (``~2E``): no name is
    ``.``, ``..``, empty or hidden, and no dag's directory is the ``.staging`` one beside it. The result is ASCII,
    valid in any file name and unreserved in URIs (RFC 3986: nothing for a URI parser, ``fsspec`` or Hadoop to
    decode or split), and decodable (:func:`decode_id_path`): two different ids never get the same directory.

    An id whose encoding is longer than :data:`NAME_MAX` bytes (Airflow ids have up to 250 characters, and a
    non-ASCII character takes up to 12) becomes several nested names, each at most :data:`NAME_MAX` bytes; each but
    the last ends in a ``~`` that no hex digits follow, which the encoding never produces, so a path of several ids
    still says where each one ends. (Paths stay under Linux's 4096-byte ``PATH_MAX`` unless ids of hundreds of
    non-ASCII characters add up; object stores take keys of up to 1024 bytes. On a case-insensitive file system,
    ids that differ only in the case of their letters share a directory.)

    :param value: the id; anything else is turned into its ``str``.
    :return: the name, or names joined with ``/``, e.g. ``train_~E6~97~A5~E6~9C~AC`` for ``train_日本``.
    :raises ValueError: the id is empty (Airflow ids never are).
    """
    text = str(value)
    if not text:
        raise ValueError("an empty id has no directory name")
    tokens = [c if c in _PLAIN else "".join(f"~{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in text]
    names = _split(tokens, NAME_MAX)
    if len(names) > 1:
        names = _split(tokens, NAME_MAX - len(_CONTINUED))
        names = [name + _CONTINUED for name in names[:-1]] + names[-1:]
    return "/".join(names)


def _split(tokens: list[str], limit: int) -> list[str]:
    """Greedily fill names of at most ``limit`` characters with whole tokens, a ``.`` that begins one encoded."""
    names: list[str] = []
    current = ""
    for token in tokens:
        if current and len(current) + len(token) > limit:
            names.append(current)
            current = ""
        current += "~2E" if not current and token == "." else token
    names.append(current)
    return names


def decode_id_path(path: str) -> str:
    """
    The id an :func:`encode_id_path` directory name stands for (the names of a split id joined with ``/``).

    :param path: the name(s), e.g. ``manual__2026-01-01T00~3A00~3A00~2B00~3A00``.
    :return: the id, e.g. ``manual__2026-01-01T00:00:00+00:00``.
    :raises ValueError: ``path`` is not such a name: a character outside ``[A-Za-z0-9._~-]``, a ``~`` without two
        upper-case hex digits, a split id's name that does not end in ``~`` (or a last one that does), bytes that are
        not UTF-8.
    """
    *init, last = names = path.split("/")
    if not all(names) or "" in (name[:-len(_CONTINUED)] for name in init):
        raise ValueError(f"{path!r} is not an encoded id: it has an empty name")
    if last.endswith(_CONTINUED) or any(not name.endswith(_CONTINUED) for name in init):
        raise ValueError(f"{path!r} is not an encoded id: only the names before the last one end in '~'")
    text = "".join(name[:-len(_CONTINUED)] for name in init) + last
    data = bytearray()
    i = 0
    while i < len(text):
        if _ESCAPED.match(text, i):
            data.append(int(text[i + 1:i + 3], 16))
            i += 3
        elif text[i] in _PLAIN:
            data += text[i].encode()
            i += 1
        else:
            raise ValueError(f"{path!r} is not an encoded id: {text[i]!r} at {i} is neither [A-Za-z0-9._-] nor ~XX")
    return data.decode("utf-8", "surrogatepass")


def check_xcom_value(value: Any, *, max_bytes: int, artifact_paths: Sequence[str]) -> None:
    """
    Check that ``value`` can be stored in XCom as the task's return value.

    Rank 0 already refused a value whose cloudpickle is larger than ``max_bytes`` (it sends a
    :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` instead); a value that passed is measured
    again here, serialized as XCom stores it.

    :param value: rank 0's return value, unpickled, or the refusal rank 0 sent instead.
    :param max_bytes: the largest serialized size accepted, bytes.
    :param artifact_paths: the job's files, named in the message.
    :raises HorovodResultError: rank 0 refused the value, or it cannot be serialized by Airflow's serde, or is
        larger than ``max_bytes`` once serialized; the message lists the artifact files (which stay where they are).
    """
    from airflow_provider_horovod._compat import serialize
    from airflow_provider_horovod.runtime.errors import ReturnValueRefused

    kept = ("; the model files are kept: " + ", ".join(artifact_paths)) if artifact_paths else ""
    refused = isinstance(value, ReturnValueRefused)
    if refused:  # measured on rank 0, as a pickle
        size, max_bytes = value.size, value.limit
    else:
        try:
            size = len(json.dumps(serialize(value)))
        except Exception as err:
            raise HorovodResultError(
                f"rank 0 returned a {type(value).__module__}.{type(value).__qualname__}, which XCom cannot store "
                f"({type(err).__name__}). Return what downstream tasks need as plain values instead: file paths, "
                f"metrics (floats), small dicts/lists; save models and tensors under artifact_dir(){kept}"
            ) from err
    if refused or size > max_bytes:
        raise HorovodResultError(
            f"rank 0 returned {size} bytes once serialized, above max_return_value_bytes={max_bytes}. Write large "
            f"results under artifact_dir() and return their paths{kept}"
        )


def check_spark_arguments(*, conf: Any, env_vars: Any, spark_submit_kwargs: Any) -> None:
    """
    Check the operator's Spark arguments (when the DAG is parsed).

    :param conf: Spark properties, a dict or ``None``.
    :param env_vars: environment variables, a dict or ``None``.
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments, a dict or ``None``.
    :raises ValueError: one is not a dict or ``None``, ``spark_submit_kwargs`` names an argument the provider sets
        itself (:data:`RESERVED_SPARK_SUBMIT_KWARGS`), or ``conf``/``env_vars`` holds the Spark RPC secret
        (:func:`~airflow_provider_horovod.utils.spark_auth.check_no_auth_secret`).
    """
    for pname, value in (("conf", conf), ("env_vars", env_vars), ("spark_submit_kwargs", spark_submit_kwargs)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{pname} must be a dict or None, got {type(value).__name__}")
    check_no_auth_secret(conf, env_vars)
    reserved = sorted(set(spark_submit_kwargs or {}) & RESERVED_SPARK_SUBMIT_KWARGS)
    if reserved:
        raise ValueError(f"spark_submit_kwargs: {reserved} are set by the provider (allowed: any other "
                         f"SparkSubmitHook argument; reserved: {sorted(RESERVED_SPARK_SUBMIT_KWARGS)}); give Spark "
                         "properties in conf=, environment variables in env_vars=, and install extra modules on "
                         "the executors")
