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
    The runtime subpackage as a zip for ``--py-files`` / ``addPyFile`` (executors need no Airflow).

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
        runtime_dir = os.path.join(pkg_dir, "runtime")
        for name in sorted(os.listdir(runtime_dir)):
            if name.endswith(".py"):
                zf.write(os.path.join(runtime_dir, name), f"airflow_provider_horovod/runtime/{name}")
    return buf.getvalue()
