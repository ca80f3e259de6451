"""
The runtime as a zip for executors (``--py-files``, ``addPyFile``, Spark Connect ``addArtifacts``):
:func:`runtime_zip` and the file name it ships under, shared by the classic and the Connect path.
"""

from __future__ import annotations

import io
import os
import zipfile

RUNTIME_ZIP_NAME = "airflow_provider_horovod_runtime.zip"


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
