"""Where a training function writes its model, and how the job finds what it wrote afterwards."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from airflow_provider_horovod.runtime.wire.progress_format import METRICS_FILE, PROGRESS_FILE

_PROGRESS_FILES = frozenset({METRICS_FILE, PROGRESS_FILE})

ARTIFACT_DIR_ENV = "HOROVOD_AIRFLOW_ARTIFACT_DIR"
"""Environment variable that carries the artifact directory into every rank."""


def is_remote(location: str) -> bool:
    """Whether ``location`` is an fsspec URI other than ``file://`` (object storage), not a local or shared path."""
    scheme = urlparse(location).scheme
    return len(scheme) > 1 and scheme != "file"  # a one-letter scheme is a Windows drive


def join_location(location: str, name: str) -> str:
    """``name`` inside ``location``: ``location/name`` for a URI (object storage), ``os.path.join`` for a path."""
    return f"{location.rstrip('/')}/{name}" if is_remote(location) else os.path.join(location, name)


def local_path(location: str) -> str:
    """The local path of ``location``: a ``file://`` URI's path, or ``location`` itself (a path)."""
    return urlparse(location).path if location.startswith("file://") else location


def ensure_dir(location: str) -> None:
    """
    Create ``location`` (a local path, ``file://`` URI, or any fsspec URI such as ``s3://bucket/x``).

    :raises ImportError: a remote URI was given and ``fsspec`` (or its protocol's package) is not installed.
    """
    if is_remote(location):
        import fsspec

        # a filesystem made from the environment as it is now, not fsspec's instance cached earlier in this process
        # with other credentials or another endpoint (the environment is not part of its cache key)
        fs, path = fsspec.core.url_to_fs(location, skip_instance_cache=True)
        fs.makedirs(path, exist_ok=True)
    else:
        os.makedirs(local_path(location), exist_ok=True)


def artifact_dir() -> str:
    """
    The directory (path or URI) where this training run should write its model files.

    Call it inside the training function. The caller chose it (``HorovodRunner(artifact_dir=...)``, or the
    operator's per-try default) and it is created if missing. Every file written below it is reported back
    as ``artifact_paths`` (XCom) when the job succeeds.

    :return: a local path or a URI (``s3://...``, ``gs://...``, ``file://...``), as given by the caller.
    :raises RuntimeError: called outside a job that was given an artifact directory.
    """
    return env_location(
        ARTIFACT_DIR_ENV,
        "HorovodRunner(..., artifact_dir=...) or HorovodRunnerOperator (which always sets one).",
        name="artifact_dir()",
    )


def env_location(env: str, hint: str, *, name: str) -> str:
    """
    The directory (path or URI) in environment variable ``env``, created if missing: what ``artifact_dir()`` and
    ``checkpoint_dir()`` return.

    :param env: the variable the launcher sets in every rank.
    :param hint: the end of the error's message: what to call it from, or what to give.
    :param name: the caller, for the message (``"artifact_dir()"``).
    :raises RuntimeError: ``env`` is not set: "<name> has no directory: <env> is not set. Call it inside a function
        run by <hint>".
    """
    location = os.environ.get(env)
    if not location:
        raise RuntimeError(f"{name} has no directory: {env} is not set. Call it inside a function run by {hint}")
    ensure_dir(location)
    return location


def list_artifacts(location: str) -> list[str]:
    """
    Every file below ``location``, as full paths (local) or full URIs (remote), sorted; the job's own progress
    files at its top (``metrics.jsonl``, ``progress.json``) are not listed: XCom ``metrics`` and the UI read them.

    :param location: the artifact directory (path or URI).
    :return: an empty list when the directory does not exist.
    """
    if is_remote(location):
        import fsspec

        fs, path = fsspec.core.url_to_fs(location, skip_instance_cache=True)  # see ensure_dir
        if not fs.exists(path):
            return []
        top = path.rstrip("/")
        return sorted(
            fs.unstrip_protocol(p)
            for p in fs.find(path)
            if p.rsplit("/", 1)[0] != top or p.rsplit("/", 1)[-1] not in _PROGRESS_FILES
        )
    root = local_path(location)
    found: list[str] = []
    for dirpath, _dirs, files in os.walk(root):
        mine = os.path.abspath(dirpath) == os.path.abspath(root)
        found.extend(os.path.abspath(os.path.join(dirpath, f)) for f in files if not (mine and f in _PROGRESS_FILES))
    prefix = "file://" if location.startswith("file://") else ""
    return sorted(prefix + p for p in found)
