"""
A training script run as one rank, as ``torchrun script.py ARGS`` runs it in each worker: the function a job made
from a script path calls (:func:`run_script`).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence


def run_script(path: str, args: Sequence[str] = ()) -> None:
    """
    Run the Python script at ``path`` as ``__main__`` with ``sys.argv = [path, *args]`` and its directory first on
    ``sys.path``, in this (the rank's) process; ``sys.argv`` and ``sys.path`` are restored afterwards.

    The script reads the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ...) and
    calls ``torch.distributed.init_process_group()`` itself. What it raises, or a non-zero ``sys.exit()``, fails
    the rank as a function's exception would.

    :param path: the script, an absolute path that exists where the ranks run.
    :param args: its command-line arguments.
    :raises FileNotFoundError: there is no file at ``path`` on this host.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no training script at {path} on this host (the ranks run the script from there)")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
