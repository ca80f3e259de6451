"""
TensorBoard logs and the Horovod Timeline, kept with the model in the job's artifact directory.

- :func:`tensorboard_dir` gives the training function a TensorBoard log directory, ``<artifact_dir>/tensorboard``.
  The operator pushes it as XCom ``tensorboard_dir`` and logs the ``tensorboard --logdir`` command that shows it.
- ``timeline=True`` (``HorovodRunner``, the operator, ``@task.horovod``) sets ``HOROVOD_TIMELINE`` for every rank,
  so Horovod's coordinator (rank 0) records its Timeline (every collective's negotiation and processing phases) to
  ``<artifact_dir>/horovod_timeline.json``, one of ``artifact_paths``. Horovod writes it as a JSON array it never
  closes (Chrome's trace viewer accepts that); the rank closes it after Horovod's shutdown, so it is valid JSON.
  Open it in ``chrome://tracing`` or https://ui.perfetto.dev.

Both work with an artifact directory on object storage (``s3://...``): Horovod and TensorBoard's writers need
local files, so the rank writes to a local directory that it copies to the artifact directory when it ends (its
``atexit`` handlers run first; see :func:`~airflow_provider_horovod.runtime.rank.worker.exit_rank`). Live viewing
while training then needs a local or shared artifact directory.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from airflow_provider_horovod.runtime.artifacts import (
    ARTIFACT_DIR_ENV,
    artifact_dir,
    ensure_dir,
    is_remote,
    join_location,
)

TENSORBOARD_DIR_NAME = "tensorboard"
"""Name of the TensorBoard log directory inside the artifact directory."""
TIMELINE_FILE_NAME = "horovod_timeline.json"
"""Name of the Horovod Timeline file inside the artifact directory."""
ENV_TIMELINE = "HOROVOD_AIRFLOW_TIMELINE"
"""``"1"`` in a rank's environment: record the Horovod Timeline into the artifact directory."""

_mirrors: dict[str, str] = {}
"""Remote location -> the local directory that stands in for it in this process."""


def _upload(local: str, remote: str) -> None:
    """
    Copy ``local`` (a file or a directory tree) to ``remote``, then remove the local copy. A failure goes to
    stderr with both locations and keeps the local copy; it never raises (this runs at exit).
    """
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(remote)
        if os.path.isdir(local):
            for root, _dirs, files in os.walk(local):
                for name in files:
                    source = os.path.join(root, name)
                    fs.put_file(source, f"{path}/{os.path.relpath(source, local)}")
        elif os.path.exists(local):
            fs.put_file(local, path)
    except Exception as err:  # noqa: BLE001 - at exit there is nobody to raise to: say it where the rank logs
        print(
            f"airflow-provider-horovod: could not copy {local} to {remote} (kept there): {type(err).__name__}: {err}",
            file=sys.stderr,
            flush=True,
        )
        return
    shutil.rmtree(local if os.path.isdir(local) else os.path.dirname(local), ignore_errors=True)


def _local_stand_in(remote: str) -> str:
    """A local directory for ``remote``, copied there when this process ends (one per location)."""
    if remote not in _mirrors:
        _mirrors[remote] = local = tempfile.mkdtemp(prefix="horovod-airflow-")
        atexit.register(_upload, local, remote)
    return _mirrors[remote]


def tensorboard_dir() -> str:
    """
    A TensorBoard log directory for this training run: ``<artifact_dir>/tensorboard``, created if missing.

    Call it inside the training function, usually on rank 0 only, and give it to a summary writer
    (``torch.utils.tensorboard.SummaryWriter(tensorboard_dir())``, Keras' ``TensorBoard(log_dir=...)``); close
    the writer before the function returns. Its files are among ``artifact_paths``, and the operator pushes the
    directory as XCom ``tensorboard_dir`` and logs ``tensorboard --logdir <it>``. With an artifact directory on
    object storage the writer gets a local directory that is copied to ``<artifact_dir>/tensorboard`` when the
    rank ends.

    :return: a local directory path.
    :raises RuntimeError: called outside a job that was given an artifact directory (see
        :func:`~airflow_provider_horovod.runtime.artifact_dir`).
    """
    location = join_location(artifact_dir(), TENSORBOARD_DIR_NAME)
    if is_remote(location):
        return _local_stand_in(location)
    os.makedirs(location, exist_ok=True)
    return location


def tensorboard_location(artifact_location: str, artifact_paths: list[str]) -> str | None:
    """
    The job's TensorBoard directory when the job wrote into it, else ``None``.

    :param artifact_location: the job's artifact directory (path or URI).
    :param artifact_paths: the files the job wrote (from ``list_artifacts``: absolute paths or full URIs).
    """
    location = join_location(artifact_location, TENSORBOARD_DIR_NAME)
    if not is_remote(location):
        prefix = "file://" if location.startswith("file://") else ""
        location = prefix + os.path.abspath(location.removeprefix("file://"))
    return location if any(p.startswith(location.rstrip("/") + "/") for p in artifact_paths) else None


def close_timeline(path: str) -> None:
    """
    Close the JSON array of a Horovod Timeline file Horovod has finished writing (after ``hvd.shutdown()``).

    Horovod 0.28 writes ``[``, then one ``{...},`` per line, and never the closing ``]``. This replaces the last
    comma with ``]`` in place (the file may be large: only its end is read). A file that is empty, already ends
    with ``]``, or does not exist is left alone.

    :param path: the timeline file.
    """
    try:
        with open(path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read()
            body = tail.rstrip()
            if not body or body.endswith(b"]"):
                return
            body = body.removesuffix(b",")
            f.seek(size - len(tail))
            f.truncate()
            f.write(body + b"\n]\n")
    except FileNotFoundError:
        return


def _finish_timeline(local: str, remote: str | None) -> None:
    close_timeline(local)
    if remote is not None:
        _upload(local, remote)


def start_timeline(rank: int) -> None:
    """
    In a rank's process, before the training function runs: when the job asked for the Horovod Timeline
    (``HOROVOD_AIRFLOW_TIMELINE=1``), point ``HOROVOD_TIMELINE`` at ``<artifact_dir>/horovod_timeline.json`` (a
    local stand-in for an object-storage directory) and, on rank 0, close the file when the process ends. The
    closing ``atexit`` handler is registered before the function's ``hvd.init()`` registers Horovod's shutdown,
    so it runs after it (handlers run last-in, first-out). A ``HOROVOD_TIMELINE`` the user set wins.

    :param rank: this process's rank (Horovod's coordinator, rank 0, writes the file).
    """
    location = os.environ.get(ARTIFACT_DIR_ENV)
    if os.environ.get(ENV_TIMELINE) != "1" or not location or os.environ.get("HOROVOD_TIMELINE"):
        return
    target = join_location(location, TIMELINE_FILE_NAME)
    if is_remote(target):
        local, remote = os.path.join(tempfile.mkdtemp(prefix="horovod-airflow-"), TIMELINE_FILE_NAME), target
    else:
        ensure_dir(location)
        local, remote = target, None
    os.environ["HOROVOD_TIMELINE"] = local
    if rank == 0:
        atexit.register(_finish_timeline, local, remote)
