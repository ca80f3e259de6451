"""
Entry point of one Horovod rank: ``python -m airflow_provider_horovod.runtime.rank.worker``.

Started by :class:`~airflow_provider_horovod.runtime.task.rank_process.RankProcess` in a fresh process (so GPU
variables are set before CUDA starts) and its own process group. Everything it needs comes through the environment:

- the Horovod/Gloo variables of its slot (``HOROVOD_RANK``, ``HOROVOD_SIZE``, ...);
- ``HOROVOD_AIRFLOW_PAYLOAD``: path of the payload file; ``HOROVOD_AIRFLOW_RESULT``: where rank 0 writes
  its cloudpickled return value; ``HOROVOD_AIRFLOW_ERROR``: where a failing rank writes its exception;
- ``HOROVOD_AIRFLOW_MAX_RESULT_BYTES``: the largest pickle rank 0 writes there; a larger value is dropped and a
  pickled :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` written instead, so the rank still
  succeeds and nothing large goes through the executor's and the driver's JVMs
  (:func:`~airflow_provider_horovod.runtime.rank.result.pickle_result`);
- ``HOROVOD_AIRFLOW_LIFELINE_FD``: the read end of a pipe whose write end the launcher holds. When the
  launcher dies (task killed, stage aborted, executor lost) the pipe reaches EOF and this process kills its
  whole process group, so no training process outlives its Spark task;
- ``HOROVOD_AIRFLOW_RELEASE_FD`` / ``HOROVOD_AIRFLOW_PREIMPORT``: a rank started before the rendezvous port is
  known imports these modules, then reads its remaining variables from that pipe (:func:`wait_for_release`);
- ``HOROVOD_AIRFLOW_ARTIFACT_DIR``: what ``artifact_dir()`` returns; with ``HOROVOD_AIRFLOW_TIMELINE=1`` the
  Horovod Timeline goes there (:func:`~airflow_provider_horovod.runtime.observability.start_timeline`);
- ``HOROVOD_AIRFLOW_CHECKPOINT_DIR`` / ``HOROVOD_AIRFLOW_TRY_NUMBER``: what ``checkpoint_dir()`` and
  ``try_number()`` return (:mod:`~airflow_provider_horovod.runtime.checkpoints`);
- ``HOROVOD_AIRFLOW_LIBRARY_PROGRESS=0``: no progress callback added to a Transformers or Lightning ``Trainer``
  (:mod:`~airflow_provider_horovod.runtime.library_progress`, installed before the function loads).

It ends through :func:`exit_rank`: ``atexit`` handlers and file flushes, then ``os._exit`` without the
interpreter's teardown.

The function initialises Horovod itself, exactly as under ``horovodrun``: whatever it passes to ``hvd.init``
(process sets, ``comm``), and ``hvd.shutdown()`` followed by ``hvd.init()`` again, reach Horovod unchanged. The
worker only wraps ``HorovodBasics.init`` (shared by ``horovod.torch``, ``horovod.tensorflow`` and
``horovod.keras``) to report when a rank enters and leaves ``hvd.init()`` (the launcher's ``start_timeout_s``
clock) and to check that Horovod sees all ``np`` ranks. The function ends as a ``horovodrun`` process does:
returning, or ``sys.exit(0)`` / ``sys.exit()``, is success (rank 0's value, ``None`` for an exit); a non-zero
``sys.exit`` status, an exception, or ``KeyboardInterrupt`` is a failure reported with its exit status.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from airflow_provider_horovod.runtime import library_progress
from airflow_provider_horovod.runtime.checkpoints import StopAtCheckpoint
from airflow_provider_horovod.runtime.launchers import HOROVOD
from airflow_provider_horovod.runtime.rank.backends import rank_backend_for
from airflow_provider_horovod.runtime.rank.guards import Progress
from airflow_provider_horovod.runtime.rank.result import (
    error_record,
    exit_status,
    pickle_result,
    qualname,
    write_atomic,
)
from airflow_provider_horovod.runtime.rank_errors import LOAD_ERROR, STOPPED_AT_CHECKPOINT
from airflow_provider_horovod.runtime.wire.protocol import (
    ENV_CHECK_SIZE,
    ENV_ERROR,
    ENV_LAUNCHER,
    ENV_LIFELINE,
    ENV_MAX_RESULT,
    ENV_PAYLOAD,
    ENV_PREIMPORT,
    ENV_RELEASE,
    ENV_RESULT,
    PROGRESS_LOADED,
)


def _hold_lifeline(fd: int) -> None:
    try:
        while os.read(fd, 1024):
            pass
    except OSError:
        pass
    # The launcher is gone: take the whole group (this process and anything it started) down with it.
    os.killpg(os.getpgrp(), signal.SIGKILL)


def import_ahead(modules: str) -> None:
    """
    Import ``modules`` (comma-separated names) before the function asks for them: a started rank while it waits for
    its release, the fork server once for all the ranks it forks. One that fails to import is skipped: the function's
    own import reports it, where the user expects it.

    :param modules: the names, as :data:`~airflow_provider_horovod.runtime.wire.protocol.ENV_PREIMPORT` holds them.
    """
    for name in filter(None, modules.split(",")):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001,S110 - reported by the function's own import, not here
            pass


def wait_for_release(fd: int, modules: str) -> bool:
    """
    For a rank started ahead of its rendezvous port: import ``modules`` meanwhile, then read the remaining
    variables from ``fd`` (one JSON object, up to end of file) into ``os.environ``.

    :param fd: read end of the release pipe (closed here).
    :param modules: comma-separated module names; one that fails to import is skipped (the function's own import
        reports it, where the user expects it).
    :return: ``False`` when the launcher closed the pipe without releasing the rank (it is stopping).
    """
    import_ahead(modules)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    if not chunks:
        return False
    os.environ.update(json.loads(b"".join(chunks)))
    return True


def main() -> int:
    """Run the payload's function as this rank; return the process exit status."""
    lifeline = os.environ.get(ENV_LIFELINE)
    if lifeline is not None:
        threading.Thread(target=_hold_lifeline, args=(int(lifeline),), name="lifeline", daemon=True).start()
    backend = rank_backend_for(os.environ.get(ENV_LAUNCHER, HOROVOD))
    rank = int(os.environ.get(backend.rank_variable, "0"))
    error_path = os.environ[ENV_ERROR]
    progress = Progress()
    check_size = os.environ.get(ENV_CHECK_SIZE)
    expected = int(check_size) if check_size else None
    backend.on_start(rank, expected, progress)
    library_progress.install()
    release = os.environ.get(ENV_RELEASE)
    if release is not None and not wait_for_release(int(release), os.environ.get(ENV_PREIMPORT, "")):
        return 1
    try:
        backend.on_released(expected, progress)
    except ImportError as err:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        write_atomic(
            error_path,
            error_record(
                LOAD_ERROR,
                f"{backend.launcher.label} is not importable by this rank's Python {sys.executable}: {err}",
                tb,
            ),
        )
        return 1
    from airflow_provider_horovod.runtime.wire.payload import loads_payload

    try:
        fn, args, kwargs = loads_payload(Path(os.environ[ENV_PAYLOAD]).read_bytes())
    except Exception as err:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        cause = err.__cause__
        message = str(err) if cause is None else f"{qualname(cause)}: {cause} (Python {sys.executable})"
        write_atomic(error_path, error_record(LOAD_ERROR, message, tb))
        return 1
    progress.report(PROGRESS_LOADED)
    value = None
    try:
        value = fn(*args, **kwargs)
    except StopAtCheckpoint as stop:  # not a failure: the driver starts the job again from that checkpoint
        write_atomic(error_path, error_record(STOPPED_AT_CHECKPOINT, str(stop), ""))
        return 1
    except SystemExit as exit_:
        status = exit_status(exit_.code)
        if status != 0:
            tb = traceback.format_exc()
            sys.stderr.write(tb)
            message = f"the training function called sys.exit({exit_.code!r})"
            write_atomic(error_path, error_record("SystemExit", message, tb))
            return status
    except BaseException as err:  # noqa: BLE001 - KeyboardInterrupt too: every failure is reported
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        inner = _stop_at_checkpoint_in(err)
        if inner is not None:  # a finally (or except) block raised while the stop went through it: still the stop
            write_atomic(error_path, error_record(STOPPED_AT_CHECKPOINT, str(inner), ""))
            return 1
        write_atomic(error_path, error_record(qualname(err), str(err), tb))
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if rank == 0:
        limit = os.environ.get(ENV_MAX_RESULT)
        try:
            data = pickle_result(value, int(limit) if limit else None)
        except Exception as err:
            tb = traceback.format_exc()
            message = (
                f"rank 0's return value ({type(value).__name__}) cannot be pickled: {err}. "
                "Return paths, metrics or other plain values."
            )
            write_atomic(error_path, error_record("TypeError", message, tb))
            return 1
        write_atomic(os.environ[ENV_RESULT], data)
    return 0


def _stop_at_checkpoint_in(err: BaseException) -> StopAtCheckpoint | None:
    """The :class:`StopAtCheckpoint` that ``err`` was raised while handling (``__context__``) or from, if any."""
    seen: set[int] = set()
    cause: BaseException | None = err.__cause__ or err.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, StopAtCheckpoint):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _flush_open_files() -> None:
    """Flush every open Python file object, as the interpreter's teardown would when it finalises them."""
    writers = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads obj.__class__, which some module proxies turn into warnings
        if issubclass(type(obj), writers):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # noqa: BLE001,S110 - a file that cannot flush would not have at teardown either
                pass


def exit_rank(status: int) -> None:
    """
    End this rank with ``status`` once its result or error is written, without the interpreter's teardown.

    Tearing down an interpreter that has loaded torch takes 0.5-0.6 s (module and native destructors), and the
    barrier task waits for it on every rank. What a normal exit does for the function is done first: ``atexit``
    handlers run (Horovod's own ``shutdown``, ``logging``'s, the function's) and every open Python file object is
    flushed, so nothing the function wrote is lost. A non-daemon thread the function left running is waited for
    before that, as a normal exit waits for it.

    :param status: the process exit status (what :func:`main` returned).
    """
    while running := [
        t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]:
        for thread in running:  # it may start others before it ends: look again
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - the documented handlers, run as the interpreter would
    _flush_open_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    exit_rank(main())
