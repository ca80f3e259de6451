"""
Spark's Python daemon (:mod:`pyspark.daemon`), started so that PySpark loads from compiled files.

Spark starts each executor's Python daemon (and, in ``local`` mode, the driver's) with ``SPARK_HOME``'s
``python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on ``PYTHONPATH`` (``PythonUtils.sparkPythonPath``). Those
zips hold sources only and Python never caches bytecode for a zip, so every fresh daemon, and every worker it forks
for a task, compiles the PySpark modules it imports: about 0.6 s of CPU each on a 2-core machine (0.78 s to import
``pyspark.daemon`` and ``pyspark.worker`` from the zips, 0.16 s from site-packages). A barrier job that starts on
fresh executors (on a shared cluster, every job) waits for that before any rank starts.

This module moves each of those zips behind the interpreter's own copy of the same package, when it has one whose
``version.py`` is byte-for-byte the zip's, and then runs :func:`pyspark.daemon.manager` unchanged. Without such a
copy (or on any error) the path stays as Spark made it. The hooks select it with ``spark.python.daemon.module``
(:func:`airflow_provider_horovod.utils.spark_conf.python_daemon_conf`); it reaches the executors in the runtime zip.

Imports nothing of PySpark before the path is set, and only the standard library.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Sequence
from importlib.machinery import PathFinder

SPARK_ZIPS = {"pyspark.zip": "pyspark", "py4j-": "py4j"}
"""Base-name prefixes of the zips Spark puts on the Python path (``py4j-<version>-src.zip``), and their package."""


def _package_of(entry: str) -> str | None:
    """The package of a Spark source zip on the path (:data:`SPARK_ZIPS`); ``None`` for any other entry."""
    name = os.path.basename(entry)
    if not name.endswith(".zip"):
        return None
    return next((package for prefix, package in SPARK_ZIPS.items() if name.startswith(prefix)), None)


def _same_version(zip_path: str, package: str, installed_dir: str) -> bool:
    try:
        with zipfile.ZipFile(zip_path) as zf:
            zipped = zf.read(f"{package}/version.py")
        with open(os.path.join(installed_dir, "version.py"), "rb") as f:
            return f.read() == zipped
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def movable(path: Sequence[str]) -> list[str]:
    """
    The entries of ``path`` that are Spark's source zips (``pyspark.zip``, ``py4j-*-src.zip``) of a package the
    rest of ``path`` also holds (a directory, e.g. site-packages) with an identical ``version.py``.

    :param path: an import path (``sys.path``).
    :return: those entries, in ``path``'s order; ``[]`` when there are none.
    """
    zips = {p: package for p in path if (package := _package_of(p))}
    rest = [p for p in path if p not in zips]
    found = []
    for zip_path, package in zips.items():
        spec = PathFinder.find_spec(package, rest)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations and os.path.isdir(locations[0]) and _same_version(zip_path, package, locations[0]):
            found.append(zip_path)
    return found


def behind(path: Sequence[str], moved: Sequence[str]) -> list[str]:
    """
    ``path`` with its entries that are in ``moved`` (compared as absolute paths) at its end, in their order.

    :param path: an import path (``sys.path``, or ``PYTHONPATH`` split on :data:`os.pathsep`).
    :param moved: the entries to put last (:func:`movable`).
    """
    last = {os.path.abspath(p) for p in moved}
    return [p for p in path if os.path.abspath(p) not in last] + [p for p in path if os.path.abspath(p) in last]


def main() -> None:
    """Put Spark's source zips behind the installed copies (:func:`movable`), then run Spark's daemon."""
    try:
        moved = movable(sys.path)
        if moved:
            sys.path[:] = behind(sys.path, moved)
            env_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            os.environ["PYTHONPATH"] = os.pathsep.join(behind(env_path, moved))  # for what the workers start
    except Exception as err:  # never worse than Spark's own daemon
        print(f"airflow-provider-horovod: kept Spark's Python path ({type(err).__name__}: {err})", file=sys.stderr)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
