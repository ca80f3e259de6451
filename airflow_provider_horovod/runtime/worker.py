"""
Entry point of one Horovod rank: ``python -m airflow_provider_horovod.runtime.worker``.

Started by :mod:`airflow_provider_horovod.runtime.launch` in a fresh process (so GPU variables are set
before CUDA starts) and its own process group. Everything it needs comes through the environment:

- the Horovod/Gloo variables of its slot (``HOROVOD_RANK``, ``HOROVOD_SIZE``, ...);
- ``HOROVOD_AIRFLOW_PAYLOAD``: path of the payload file; ``HOROVOD_AIRFLOW_RESULT``: where rank 0 writes
  its cloudpickled return value; ``HOROVOD_AIRFLOW_ERROR``: where a failing rank writes its exception;
- ``HOROVOD_AIRFLOW_LIFELINE_FD``: the read end of a pipe whose write end the launcher holds. When the
  launcher dies (task killed, stage aborted, executor lost) the pipe reaches EOF and this process kills its
  whole process group, so no training process outlives its Spark task.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from airflow_provider_horovod.runtime.protocol import (
    ENV_CHECK_SIZE,
    ENV_ERROR,
    ENV_LIFELINE,
    ENV_PAYLOAD,
    ENV_PROGRESS,
    ENV_RESULT,
    PROGRESS_LOADED,
    PROGRESS_READY,
)


def _hold_lifeline(fd: int) -> None:
    try:
        while os.read(fd, 1024):
            pass
    except OSError:
        pass
    # The launcher is gone: take the whole group (this process and anything it started) down with it.
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _check_horovod_world(expected_size: int) -> None:
    """Initialize Horovod and check it sees all ``expected_size`` ranks (not each process alone)."""
    try:
        import horovod.torch as hvd
    except ImportError as err:
        raise ImportError(f"horovod.torch cannot be imported by {sys.executable}: {err}. Install Horovod built "
                          "with PyTorch and Gloo on every executor.") from err
    hvd.init()
    if hvd.size() != expected_size:
        raise RuntimeError(
            f"Horovod initialized with size {hvd.size()} but the job has np={expected_size}: the rank environment "
            "(HOROVOD_RANK/SIZE/...) did not reach this process, so it would train alone."
        )


class _Progress:
    """Start-up milestones for the launcher, which enforces ``start_timeout_s`` with them."""

    def __init__(self) -> None:
        fd = os.environ.get(ENV_PROGRESS)
        self._fd = int(fd) if fd else None

    def report(self, milestone: bytes, *, last: bool = False) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, milestone)
        except OSError:
            pass
        if last:
            os.close(self._fd)
            self._fd = None


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main() -> int:
    """Run the payload's function as this rank; return the process exit status."""
    lifeline = os.environ.get(ENV_LIFELINE)
    if lifeline is not None:
        threading.Thread(target=_hold_lifeline, args=(int(lifeline),), name="lifeline", daemon=True).start()
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    progress = _Progress()
    try:
        import cloudpickle

        from airflow_provider_horovod.runtime.payload import loads_payload

        fn, args, kwargs = loads_payload(Path(os.environ[ENV_PAYLOAD]).read_bytes())
        progress.report(PROGRESS_LOADED)
        check_size = os.environ.get(ENV_CHECK_SIZE)
        if check_size:
            _check_horovod_world(int(check_size))
        progress.report(PROGRESS_READY, last=True)
        value = fn(*args, **kwargs)
        if rank == 0:
            try:
                data = cloudpickle.dumps(value)
            except Exception as err:
                raise TypeError(f"rank 0's return value ({type(value).__name__}) cannot be pickled: {err}. "
                                "Return paths, metrics or other plain values.") from err
            _write_atomic(os.environ[ENV_RESULT], data)
    except Exception as err:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        sys.stderr.flush()
        error = {"exc_type": f"{type(err).__module__}.{type(err).__qualname__}".removeprefix("builtins."),
                 "exc_message": str(err), "traceback": tb, "failed_at": time.time()}
        _write_atomic(os.environ[ENV_ERROR], json.dumps(error).encode())
        return 1
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
