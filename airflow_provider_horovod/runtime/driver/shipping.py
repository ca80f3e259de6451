"""
The runtime as a zip for executors (``--py-files``, ``addPyFile``, Spark Connect ``addArtifacts``):
:func:`runtime_zip` and the file name it ships under, shared by the classic and the Connect path, and
:func:`ship_runtime`, the classic path's ``addPyFile``.
"""

from __future__ import annotations

import functools
import io
import os
import zipfile
from typing import Any

RUNTIME_ZIP_NAME = "airflow_provider_horovod_runtime.zip"

_shipped_to: set[str] = set()


def runtime_zip() -> bytes:
    """
    The runtime subpackage, subpackages included, as a zip for ``--py-files`` / ``addPyFile`` (no Airflow needed).

    When the package itself was imported from such a zip (a cluster-mode driver that fetched it from object
    storage), that zip is returned as it is.
    """
    import zipimport

    import airflow_provider_horovod

    loader = getattr(airflow_provider_horovod, "__loader__", None)
    if isinstance(loader, zipimport.zipimporter):
        with open(loader.archive, "rb") as f:
            return f.read()
    pkg_dir = os.path.dirname(airflow_provider_horovod.__file__)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(os.path.join(pkg_dir, "__init__.py"), "airflow_provider_horovod/__init__.py")
        for path in runtime_files(pkg_dir):
            zf.write(os.path.join(pkg_dir, path), f"airflow_provider_horovod/{path}")
    return buf.getvalue()


def runtime_files(pkg_dir: str) -> list[str]:
    """
    Every ``.py`` file of the runtime subpackage and its subpackages, as paths relative to ``pkg_dir`` (the
    ``airflow_provider_horovod`` folder) with ``/`` separators, sorted: what :func:`runtime_zip` ships.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(pkg_dir, "runtime")):
        dirnames[:] = sorted(d for d in dirnames if os.path.isfile(os.path.join(dirpath, d, "__init__.py")))
        rel = os.path.relpath(dirpath, pkg_dir).replace(os.sep, "/")
        found += [f"{rel}/{name}" for name in filenames if name.endswith(".py")]
    return sorted(found)


def ship_runtime(sc: Any) -> None:
    """
    Make the runtime importable on executors that do not have this package installed: :func:`runtime_zip` added
    with ``addPyFile`` once per application, unless ``spark.submit.pyFiles`` already ships it.

    :param sc: the ``SparkContext``.
    """
    if RUNTIME_ZIP_NAME in (sc.getConf().get("spark.submit.pyFiles", "") or ""):
        return
    if sc.applicationId in _shipped_to:
        return
    # one directory per application, the zip under its own name: executors fetch it into their working
    # directory as RUNTIME_ZIP_NAME, where the hooks' spark.executorEnv.PYTHONPATH expects it (spark_conf.py)
    path = os.path.join(_runtime_dir(), sc.applicationId, RUNTIME_ZIP_NAME)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(runtime_zip())
    sc.addPyFile(path)
    _shipped_to.add(sc.applicationId)


@functools.cache
def _runtime_dir() -> str:
    """
    This process's directory for the shipped runtime zip, removed when the interpreter exits.

    Spark serves an ``addPyFile`` file from where it lies for as long as the application runs (executors that join
    later fetch it then), so it cannot be deleted after the call; one directory per process, not one per job.
    """
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="horovod-runtime-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
