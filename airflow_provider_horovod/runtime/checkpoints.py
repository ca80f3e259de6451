"""
Checkpoints that survive the tries of one task instance: :func:`checkpoint_dir`, :func:`save_checkpoint`,
:func:`load_checkpoint` and :func:`try_number`, called inside the training function.

The operator gives every try of a task instance (same DAG, run, task and map index) the same directory,
``<artifact root>/<dag>/<run>/<task>[/map-<i>]/checkpoints`` unless ``checkpoint_dir=`` says otherwise, where the
artifact directory is new for every try; a retry therefore finds what the failed try saved, and a new DAG run never
sees another run's. The directory is a local (shared) path or an fsspec URI (``s3://...``), with the artifact
directory's credentials.

One checkpoint is two files, written in this order, so that a checkpoint cut off mid-write is never read back:

- ``step-<step>-<token>.pt``: ``torch.save(state)``; a local file is written under a temporary name and renamed,
  an object is one PUT (or one multipart upload), visible whole or not at all;
- ``step-<step>.json``: its manifest (the data file's name, size and SHA-256, the step, the try that saved it),
  written last, the same way. Only a checkpoint with a manifest whose data file matches it is loaded; the latest is
  the one with the highest step, and a damaged one is skipped for the one before it.

Only rank 0 writes; every rank reads. This module imports neither Airflow nor torch at import time.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import time
import uuid
from typing import Any

from airflow_provider_horovod.runtime.artifacts import env_location, is_remote, join_location, local_path
from airflow_provider_horovod.runtime.reports import env_rank, send_event
from airflow_provider_horovod.runtime.wire.progress_format import resume_line
from airflow_provider_horovod.runtime.wire.protocol import ENV_RESTART_COUNT, ENV_STOP_FLAG

CHECKPOINT_DIR_ENV = "HOROVOD_AIRFLOW_CHECKPOINT_DIR"
"""Environment variable that carries the checkpoint directory into every rank."""
TRY_NUMBER_ENV = "HOROVOD_AIRFLOW_TRY_NUMBER"
"""Environment variable that carries the Airflow try number (1 for the first try) into every rank."""
DEFAULT_KEEP = 3
"""How many checkpoints :func:`save_checkpoint` keeps by default (the newest ones)."""
_MANIFEST = re.compile(r"^step-(\d{12})\.json$")
_DATA = re.compile(r"^step-(\d{12})-[0-9a-f]{12}\.pt$")
_TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{12}$")
_PREFIX = "airflow-provider-horovod:"


class StopAtCheckpoint(BaseException):
    """
    Raised by :func:`save_checkpoint` on rank 0, after the checkpoint is saved, once the driver has asked the attempt
    to stop at its next checkpoint: all ``np`` slots are free again for an attempt with fewer ranks (elastic
    ``min_np``), or an executor of the attempt is being decommissioned (a spot node's termination notice). It ends the
    training function so that the job starts again from this checkpoint, a restart ``max_restarts`` does not count.
    Not an error; a ``BaseException`` so that an ``except Exception`` in the function lets it through (``finally``
    blocks run).

    :param step: the step just saved.
    :param reason: why the driver asked.
    """

    def __init__(self, step: int, reason: str) -> None:
        super().__init__(f"stopped after saving checkpoint step {step}: {reason}")
        self.step = step
        self.reason = reason


def checkpoint_dir() -> str:
    """
    The directory (path or URI) where this task instance keeps its checkpoints, the same for every try.

    Call it inside the training function. ``HorovodRunnerOperator`` (and ``@task.horovod``,
    ``TorchDistributedOperator``) always set one; ``HorovodRunner(checkpoint_dir=...)`` and
    ``TorchDistributor(..., checkpoint_dir=...)`` set it when given. It is created if missing.

    :return: a local path or a URI (``s3://...``, ``file://...``), as the caller gave it.
    :raises RuntimeError: called outside a job that was given a checkpoint directory.
    """
    return env_location(
        CHECKPOINT_DIR_ENV,
        "HorovodRunnerOperator (which always sets one), or give "
        "HorovodRunner(..., checkpoint_dir=...) / TorchDistributor(..., checkpoint_dir=...) a "
        "directory every rank can reach",
        name="checkpoint_dir()",
    )


def try_number() -> int | None:
    """
    The Airflow try this job runs in (1 for the first), as the operator set it; ``None`` outside an operator's job
    (``HorovodRunner(try_number=...)`` sets it too).
    """
    value = os.environ.get(TRY_NUMBER_ENV, "")
    return int(value) if value.isdigit() else None


def restart_count() -> int:
    """
    How many times the driver restarted this job within the try before the attempt running now: 0 on the first
    attempt (and outside a job), 1 after the first restart (``max_restarts``), planned restarts (at a checkpoint
    the driver asked for) included; torch ranks also get torchrun's ``TORCHELASTIC_RESTART_COUNT``, which counts only
    the restarts after a failure. A restarted attempt resumes through :func:`load_checkpoint` like a retry does.
    """
    value = os.environ.get(ENV_RESTART_COUNT, "")
    return int(value) if value.isdigit() else 0


class _Store:
    """The files of one checkpoint directory, local or on object storage (a fresh fsspec filesystem per use)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.remote = is_remote(location)
        if self.remote:
            import fsspec

            # made now, from the environment as it is now (not fsspec's instance cached earlier with other credentials)
            self.fs, self.root = fsspec.core.url_to_fs(location, skip_instance_cache=True)
        else:
            self.fs, self.root = None, local_path(location)

    def names(self) -> list[str]:
        try:
            if self.remote:
                return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False, refresh=True)]
            return os.listdir(self.root)
        except FileNotFoundError:
            return []

    def read(self, name: str) -> bytes:
        if self.remote:
            return self.fs.cat_file(f"{self.root.rstrip('/')}/{name}")
        with open(os.path.join(self.root, name), "rb") as f:
            return f.read()

    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` whole or not at all: one PUT, or a temporary local file renamed over it."""
        if self.remote:
            self.fs.pipe_file(f"{self.root.rstrip('/')}/{name}", data)
            return
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(self.root, name))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def remove(self, name: str) -> None:
        try:
            if self.remote:
                self.fs.rm_file(f"{self.root.rstrip('/')}/{name}")
            else:
                os.unlink(os.path.join(self.root, name))
        except FileNotFoundError:
            pass

    def where(self, name: str) -> str:
        return join_location(self.location, name)


def _check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int (the step or epoch training resumes after), got {step!r}")
    return step


def save_checkpoint(
    state: dict[str, Any], step: int, keep: int = DEFAULT_KEEP, *, directory: str | None = None
) -> str | None:
    """
    Save ``state`` as the checkpoint of ``step`` (rank 0 only: on every other rank this does nothing).

    ``state`` is what training resumes from, e.g. ``{"model": model.state_dict(), "optimizer":
    optimizer.state_dict()}``; it is serialized with ``torch.save`` in memory first (the checkpoint's size in extra
    memory, briefly), then written whole (see the module docstring). Afterwards only the newest ``keep`` checkpoints
    (by step) are left; files of checkpoints cut off mid-write go too. Saving a step again replaces its checkpoint.

    :param state: the state to save (tensors, numbers, strings and containers of them load with
        ``weights_only=True``).
    :param step: the step (or epoch) this state is after: a non-negative int; :func:`load_checkpoint` returns it.
    :param keep: how many checkpoints to keep, a positive int (default 3).
    :param directory: where to save; default :func:`checkpoint_dir`.
    :return: on rank 0 the data file's path or URI, else ``None``.
    :raises ValueError: ``step`` or ``keep`` is out of range.
    :raises RuntimeError: no ``directory`` and no checkpoint directory set for the job (:func:`checkpoint_dir`).
    :raises OSError: the directory cannot be written (object storage: the SDK's own errors).
    :raises StopAtCheckpoint: on rank 0, after saving, once the driver has asked the attempt to stop at a checkpoint
        (all ``np`` slots free again for a shrunk elastic attempt, an executor being decommissioned), so that the job
        starts again from here (``docs/fault-tolerance.md``). Let it through.
    """
    step = _check_step(step)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive int (how many checkpoints to keep), got {keep!r}")
    if env_rank() != 0:
        return None
    import torch

    location = directory or checkpoint_dir()
    store = _Store(location)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    name = f"step-{step:012d}-{uuid.uuid4().hex[:12]}.pt"
    store.write(name, data)
    manifest = {
        "format": 1,
        "step": step,
        "file": name,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "try_number": try_number(),
        "time": time.time(),
    }
    store.write(f"step-{step:012d}.json", json.dumps(manifest).encode())
    _prune(store, keep)
    print(
        f"{_PREFIX} saved checkpoint step {step}{_try_text(try_number())} ({len(data) / 2**20:.1f} MiB) to "
        f"{store.where(name)}",
        flush=True,
    )
    stop_flag = os.environ.get(ENV_STOP_FLAG)
    if stop_flag and os.path.exists(stop_flag):
        with open(stop_flag, encoding="utf-8", errors="replace") as f:
            reason = f.read().strip() or "the driver asked"
        print(f"{_PREFIX} stopping after checkpoint step {step}: {reason}", flush=True)
        raise StopAtCheckpoint(step, reason)
    return store.where(name)


def _prune(store: _Store, keep: int) -> None:
    """Keep the newest ``keep`` manifests and their data files; remove every other checkpoint file."""
    names = store.names()
    manifests = sorted((n for n in names if _MANIFEST.match(n)), reverse=True)
    referenced = set()
    for name in manifests[:keep]:
        try:
            referenced.add(json.loads(store.read(name))["file"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # damaged: its data file (if any) goes with the unreferenced ones; the manifest is skipped on load
    for name in manifests[keep:]:  # manifests first: none ever names a data file already gone
        store.remove(name)
    for name in names:
        if (_DATA.match(name) and name not in referenced) or _TEMP.match(name):
            store.remove(name)


def _try_text(number: int | None) -> str:
    return f" (try {number})" if number is not None else ""


def _complete(store: _Store, manifest_name: str) -> tuple[int, bytes, dict[str, Any]]:
    """The step, data and manifest of a checkpoint whose data file matches its manifest, else ``ValueError``."""
    manifest = json.loads(store.read(manifest_name))
    if not isinstance(manifest, dict) or not _DATA.match(str(manifest.get("file"))):
        raise ValueError("its manifest is not one save_checkpoint wrote")
    try:
        data = store.read(manifest["file"])
    except FileNotFoundError:
        raise ValueError(f"its data file {manifest['file']} is missing") from None
    if len(data) != manifest.get("bytes") or hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        raise ValueError(
            f"its data file {manifest['file']} has {len(data)} bytes that do not match the manifest's "
            f"{manifest.get('bytes')} bytes and SHA-256"
        )
    return int(manifest["step"]), data, manifest


def load_checkpoint(
    map_location: Any = "cpu", *, weights_only: bool = True, directory: str | None = None
) -> tuple[Any, int] | None:
    """
    The latest complete checkpoint, on every rank that calls it: ``(state, step)``, or ``None`` when there is none.

    Call it on every rank before training; every rank reads the same files, so all agree on the step. Rank 0 logs
    ``resuming from checkpoint step N (try T)`` (the task log), or that there is none. A checkpoint without its
    manifest, or whose data file does not match it (cut off mid-write, damaged), is skipped for the one before it.

    :param map_location: ``torch.load``'s ``map_location`` (default ``"cpu"``; e.g. ``f"cuda:{local_rank}"``).
    :param weights_only: ``torch.load``'s ``weights_only`` (default ``True``: tensors, numbers, strings and containers
        only, nothing executed); ``False`` for other objects saved in ``state``, from a checkpoint you trust.
    :param directory: where to look; default :func:`checkpoint_dir`.
    :return: ``(state, step)`` of the checkpoint with the highest step, or ``None``.
    :raises RuntimeError: no ``directory`` and no checkpoint directory set for the job (:func:`checkpoint_dir`).
    :raises OSError: the directory cannot be read (object storage: the SDK's own errors).
    """
    import torch

    location = directory or checkpoint_dir()
    store = _Store(location)
    loud = env_rank() == 0
    for name in sorted((n for n in store.names() if _MANIFEST.match(n)), reverse=True):
        try:
            step, data, manifest = _complete(store, name)
        except (ValueError, KeyError, TypeError) as err:
            if loud:
                print(f"{_PREFIX} skipping checkpoint {store.where(name)}: {err}", file=sys.stderr, flush=True)
            continue
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
        if loud:
            resumed = {
                "step": step,
                "try_number": try_number(),
                "saved_by": manifest.get("try_number"),
                "location": store.where(name),
            }
            print(f"{_PREFIX} {resume_line(resumed)}", flush=True)
            send_event("resumed", **resumed)  # progress.json: the Airflow side logs it in cluster mode
        return state, step
    if loud:
        print(
            f"{_PREFIX} no checkpoint in {location}: starting from the beginning{_try_text(try_number())}", flush=True
        )
    return None
