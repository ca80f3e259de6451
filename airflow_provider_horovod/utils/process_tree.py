"""The client-mode hook's ``spark-submit`` child: tied to the task process's life, and stopped with its children."""

from __future__ import annotations

import contextlib
import sys

__all__ = ["die_with_parent", "terminate_tree"]


def die_with_parent() -> None:
    """
    In the spark-submit child, before exec: ask Linux to SIGTERM it when the Airflow task process dies.

    ``on_kill`` covers SIGTERM and timeouts; this covers a task process that is SIGKILLed (OOM killer,
    ``kill -9``), which would otherwise orphan the driver and its training processes.
    """
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def terminate_tree(pid: int, timeout_s: float = 15.0) -> None:
    """
    SIGTERM a process and all its descendants; SIGKILL those still alive after ``timeout_s`` seconds.

    :param pid: the process at the top of the tree (gone already: nothing to do).
    :param timeout_s: seconds the tree has to exit after SIGTERM.
    """
    import psutil

    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _gone, alive = psutil.wait_procs(tree, timeout=timeout_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
