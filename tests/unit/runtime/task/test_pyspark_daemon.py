"""
The Python daemon the hooks start (runtime/task/pyspark_daemon.py): Spark's source zips move behind an installed copy of
the same version, and only then; and the properties that select it (utils/spark_conf.py python_daemon_conf).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from airflow_provider_horovod.runtime.driver.shipping import RUNTIME_ZIP_NAME, runtime_zip
from airflow_provider_horovod.runtime.task.pyspark_daemon import behind, movable
from airflow_provider_horovod.utils.spark_conf import PYTHON_DAEMON_MODULE, python_daemon_conf

MODULE = "spark.python.daemon.module"
PATH = "spark.executorEnv.PYTHONPATH"


def _spark_zips(tmp_path, pyspark_version: str, py4j_version: str) -> tuple[str, str]:
    """A SPARK_HOME's python/lib: pyspark.zip and py4j-*-src.zip holding the given version.py texts."""
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    made = []
    for name, package, version in (
        ("pyspark.zip", "pyspark", pyspark_version),
        ("py4j-0.10.9.9-src.zip", "py4j", py4j_version),
    ):
        with zipfile.ZipFile(lib / name, "w") as zf:
            zf.writestr(f"{package}/__init__.py", "")
            zf.writestr(f"{package}/version.py", version)
        made.append(str(lib / name))
    return made[0], made[1]


def _site(tmp_path, **versions: str) -> str:
    """A site-packages directory with the given packages installed (their version.py texts)."""
    site = tmp_path / "site-packages"
    for package, version in versions.items():
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        (site / package / "version.py").write_text(version)
    return str(site)


def test_zips_move_behind_the_installed_copy_of_the_same_version(tmp_path):
    pyspark_zip, py4j_zip = _spark_zips(tmp_path, '__version__ = "4.2.0"\n', '__version__ = "0.10.9.9"\n')
    site = _site(tmp_path, pyspark='__version__ = "4.2.0"\n', py4j='__version__ = "0.10.9.9"\n')
    path = ["/work", pyspark_zip, py4j_zip, "/usr/lib/python311.zip", site]
    assert movable(path) == [pyspark_zip, py4j_zip]
    assert behind(path, movable(path)) == ["/work", "/usr/lib/python311.zip", site, pyspark_zip, py4j_zip]


def test_zips_stay_first_without_an_identical_installed_copy(tmp_path):
    pyspark_zip, py4j_zip = _spark_zips(tmp_path, '__version__ = "4.2.0"\n', '__version__ = "0.10.9.9"\n')
    # another PySpark version installed: its modules would not match the JVM; no py4j at all
    site = _site(tmp_path, pyspark='__version__ = "4.1.1"\n')
    path = [pyspark_zip, py4j_zip, site]
    assert movable(path) == []
    assert movable([pyspark_zip, py4j_zip]) == []  # nothing installed
    assert behind(path, []) == path


def test_behind_moves_relative_and_absolute_spellings_and_adds_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    moved = [str(tmp_path / "pyspark.zip")]
    assert behind(["pyspark.zip", "other"], moved) == ["other", "pyspark.zip"]
    assert behind(["other"], moved) == ["other"]


def test_the_daemon_module_runs_from_the_runtime_zip_and_imports_pyspark_compiled(tmp_path):
    """
    What an executor's daemon sees: Spark's zips first on PYTHONPATH, the runtime zip after them, no package of this
    project installed. The module (run as ``-m``, as Spark runs it) reorders the path before it imports PySpark.
    """
    import pyspark

    spark_lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zips = sorted(os.path.join(spark_lib, n) for n in os.listdir(spark_lib) if n.endswith(".zip"))
    assert any(z.endswith("pyspark.zip") for z in zips), zips
    (tmp_path / RUNTIME_ZIP_NAME).write_bytes(runtime_zip())
    # pyspark.daemon.manager() serves forever: a stub in its place imports the worker module, as a forked worker
    # does, and says where PySpark and the runtime came from; PySpark itself is imported by the module's main()
    probe = (
        "import runpy, sys, types\n"
        "def manager():\n"
        "    import pyspark.worker\n"
        "    print(sys.modules['pyspark'].__file__, sys.modules['airflow_provider_horovod'].__file__)\n"
        "stub = types.ModuleType('pyspark.daemon')\n"
        "stub.manager = manager\n"
        "sys.modules['pyspark.daemon'] = stub\n"
        f"runpy.run_module({PYTHON_DAEMON_MODULE!r}, run_name='__main__', alter_sys=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([*zips, RUNTIME_ZIP_NAME])  # relative, as the hooks set it
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    pyspark_file, runtime_file = out.stdout.split()
    assert ".zip" not in pyspark_file and pyspark_file == pyspark.__file__  # site-packages, compiled
    assert runtime_file.startswith(str(tmp_path / RUNTIME_ZIP_NAME))  # the module came from the shipped zip


def test_conf_selects_the_module_and_appends_the_runtime_zip():
    assert python_daemon_conf({}, RUNTIME_ZIP_NAME) == {MODULE: PYTHON_DAEMON_MODULE, PATH: RUNTIME_ZIP_NAME}
    assert python_daemon_conf({PATH: "/opt/libs"}, "/stage/rt.zip") == {
        MODULE: PYTHON_DAEMON_MODULE,
        PATH: os.pathsep.join(["/opt/libs", "/stage/rt.zip"]),
    }


def test_conf_leaves_a_users_or_the_clusters_choice_alone():
    assert python_daemon_conf({MODULE: "pyspark.daemon"}, RUNTIME_ZIP_NAME) == {}  # the documented way off
    assert python_daemon_conf({"spark.python.use.daemon": "false"}, RUNTIME_ZIP_NAME) == {}
    for key in (MODULE, "spark.python.use.daemon", PATH):  # spark-defaults.conf sets it: --conf would replace it
        assert python_daemon_conf({}, RUNTIME_ZIP_NAME, {key}) == {}
