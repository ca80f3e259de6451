"""
Where a job's files go under the artifact root, and the directory name each Airflow id gets there: the one layout the
operator's deploy modes write, DAGs (the examples' data) use, and the UI plugin reads back.

::

    <root>/<dag>/<run>/<task>[/map-<i>]/try-<n>               default_artifact_dir(): a try's own files
    <root>/<dag>/<run>/<task>[/map-<i>]/checkpoints           default_checkpoint_dir(): shared by the tries
    <root>/.staging/<dag>/<run>/<task>[/map-<i>]/try-<n>      default_staging_dir(): cluster mode's staging
    <root>/data[/<name>...]/<run>                             data_dir(): what a DAG run prepares for its training

``<root>`` is :func:`default_artifact_root`; each id is written by :func:`encode_id_path`. A try's directories are
siblings, so an earlier try's is found from the latest's (:func:`try_artifact_dir`, the UI's try picker; the
cluster-mode hook's look for earlier tries' drivers). What a job writes inside its artifact directory
(``progress.json``, ``tensorboard/``, ...) is the runtime's, named there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

ARTIFACT_ROOT_ENV = "AIRFLOW__HOROVOD__ARTIFACT_ROOT"
"""The environment variable of ``[horovod] artifact_root`` (:func:`default_artifact_root`)."""
CHECKPOINT_DIR_NAME = "checkpoints"
"""The default checkpoint directory's name, under the task instance's directory of the artifact root."""
STAGING_DIR_NAME = ".staging"
"""The staging directories' tree under the artifact root, beside the DAGs' (no encoded id begins with ``.``)."""
DATA_DIR_NAME = "data"
"""The tree under the artifact root where DAG runs leave data for their training (:func:`data_dir`)."""
_MAP_PREFIX = "map-"
"""A mapped task instance's directory is ``map-<map index>``, under its task's."""
_TRY_PREFIX = "try-"
"""A try's directory is ``try-<try number>``, under its task instance's."""
_TRY_SUFFIX = re.compile(rf"(.*/)?{_TRY_PREFIX}(\d+)/?$")


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


def default_staging_dir(context: Mapping[str, Any]) -> str:
    """
    Cluster mode: ``<artifact_root>/.staging/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>`` (shared FS or object
    store), each id written by :func:`encode_id_path`, so two task instances never share one.

    :param context: the task's Airflow context (its ``ti``).
    :return: the staging directory of this try.
    """
    return os.path.join(default_artifact_root(), STAGING_DIR_NAME, *_try_parts(context["ti"]))


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


def data_dir(run_id: str, *names: str) -> str:
    """
    ``<root>/data[/<name>...]/<run_id>``: where a DAG run's tasks leave data for its training (the example DAGs'
    prepared datasets), the run id written by :func:`encode_id_path`.

    :param run_id: the DAG run's id (the task context's ``run_id``).
    :param names: directories between ``data`` and the run's, e.g. ``"ddp"`` for one DAG's own tree.
    :return: the directory (a path, or a URI under an object-store root); it is not created.
    """
    return _under_artifact_root([DATA_DIR_NAME, *names, encode_id_path(run_id)])


def _under_artifact_root(parts: list[str]) -> str:
    root = default_artifact_root()
    return "/".join([root.rstrip("/"), *parts]) if "://" in root else os.path.join(root, *parts)


def _instance_parts(ti: Any) -> list[str]:
    """The relative path of a task instance's directory under its root: encoded ids, ``map-<i>`` if mapped."""
    mapped = [f"{_MAP_PREFIX}{ti.map_index}"] if getattr(ti, "map_index", -1) not in (-1, None) else []
    return [encode_id_path(ti.dag_id), encode_id_path(ti.run_id), encode_id_path(ti.task_id), *mapped]


def _try_parts(ti: Any) -> list[str]:
    """The relative path of a try's directory under its root: the task instance's, then ``try-<n>``."""
    return [*_instance_parts(ti), f"{_TRY_PREFIX}{ti.try_number}"]


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
    ``.``, ``..``, empty or hidden, and no dag's directory is the ``.staging`` one beside it
    (:data:`STAGING_DIR_NAME`). The result is ASCII, valid in any file name and unreserved in URIs (RFC 3986:
    nothing for a URI parser, ``fsspec`` or Hadoop to decode or split), and decodable (:func:`decode_id_path`): two
    different ids never get the same directory.

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
    if not all(names) or "" in (name[: -len(_CONTINUED)] for name in init):
        raise ValueError(f"{path!r} is not an encoded id: it has an empty name")
    if last.endswith(_CONTINUED) or any(not name.endswith(_CONTINUED) for name in init):
        raise ValueError(f"{path!r} is not an encoded id: only the names before the last one end in '~'")
    text = "".join(name[: -len(_CONTINUED)] for name in init) + last
    data = bytearray()
    i = 0
    while i < len(text):
        if _ESCAPED.match(text, i):
            data.append(int(text[i + 1 : i + 3], 16))
            i += 3
        elif text[i] in _PLAIN:
            data += text[i].encode()
            i += 1
        else:
            raise ValueError(f"{path!r} is not an encoded id: {text[i]!r} at {i} is neither [A-Za-z0-9._-] nor ~XX")
    return data.decode("utf-8", "surrogatepass")


def try_artifact_dir(artifact_dir: str, current_try: int, wanted_try: int) -> str | None:
    """
    The artifact directory of an earlier try: Airflow keeps only the latest try's XComs, and the provider's default
    directories end in ``try-<n>``.

    :param artifact_dir: the latest try's XCom ``artifact_dir``.
    :param current_try: the task instance's try number (the try that pushed ``artifact_dir``).
    :param wanted_try: the try asked for.
    :return: the directory, or ``None`` when it cannot be told (a directory the DAG author chose, or a reattached
        job's directory that names another try).
    """
    if wanted_try == current_try:
        return artifact_dir
    match = _TRY_SUFFIX.match(artifact_dir)
    if not match or int(match.group(2)) != current_try:
        return None
    return f"{match.group(1) or ''}{_TRY_PREFIX}{wanted_try}"
