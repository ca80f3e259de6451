"""
Virtualenvs the install checks keep between runs and between clones, keyed by what goes into them.

The install checks (``tests/integration/test_without_horovod.py``, ``tests/e2e/test_bring_your_own.py``) each need a
virtualenv of their own with a few hundred MB to several GB of packages (Python 3.12's PyTorch from PyPI brings the
CUDA libraries). Making it again proves nothing new while its inputs are the same, so it is kept under
``$APH_VENV_CACHE`` (default ``~/.cache/airflow-provider-horovod/venvs``: outside the checkout, so that a fresh clone,
as CI runs, finds it too) in a folder named by the inputs' hash, and made again as soon as any input changes (the
interpreter's version, the constraints, the Airflow version, the install function's source). The package under test
is never kept: each check builds this checkout's wheel and installs it afresh into the kept environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

CACHE_ENV = "APH_VENV_CACHE"
COMPLETE = ".aph-complete"
"""Written last, once the install function has returned: a folder without it is a cut-off install, made again."""


def cache_root() -> Path:
    """Where kept virtualenvs live: ``$APH_VENV_CACHE``, else ``~/.cache/airflow-provider-horovod/venvs``."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "airflow-provider-horovod" / "venvs"
    return Path(os.environ.get(CACHE_ENV) or default)


def kept_venv(name: str, inputs: Iterable[str], install: Callable[[Path], None]) -> tuple[Path, bool]:
    """
    The kept virtualenv ``name`` for these inputs, made by ``install(path)`` when there is none.

    :param name: the environment's name (``nohvd-py3.12``, ``byo``); other versions of the same name are removed
        when a new one is made, so the cache holds one per name.
    :param inputs: every text that decides the environment's contents, the source of the install steps included
        (``inspect.getsource`` of the function that does them).
    :param install: makes the virtualenv at the path it is given (``python -m venv`` included).
    :returns: the virtualenv's path and whether it was made by this call.
    """
    key = hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16]
    root = cache_root()
    venv = root / f"{name}-{key}"
    if (venv / COMPLETE).exists():
        return venv, False
    root.mkdir(parents=True, exist_ok=True)
    # one maker per name: `make test` makes these in the background during its set-up (tests/install_venvs.py) while
    # a test that needs one may already be waiting for it here
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / COMPLETE).exists():
            return venv, False
        for old in root.glob(f"{name}-*"):
            shutil.rmtree(old, ignore_errors=True)
        started = time.monotonic()
        install(venv)
        (venv / COMPLETE).write_text(f"made in {time.monotonic() - started:.0f} s\n")
    return venv, True
