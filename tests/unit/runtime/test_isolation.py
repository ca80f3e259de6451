"""The runtime runs on Spark clusters without Airflow: importing it must not load Airflow."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

from airflow_provider_horovod.runtime.driver.shipping import runtime_zip
from tests.package_imports import PACKAGE_DIR, imports

RUNTIME = "airflow_provider_horovod.runtime"

CHECK = (
    "import sys; import airflow_provider_horovod.runtime as r; "
    "import airflow_provider_horovod.runtime.driver.program, airflow_provider_horovod.runtime.rank.worker, "
    "airflow_provider_horovod.runtime.task.launch, airflow_provider_horovod.runtime.driver.connect; "
    "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')); "
    "print(bad); sys.exit(1 if bad else 0)"
)


def test_runtime_imports_no_airflow():
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _in_runtime(module: str) -> bool:
    return module == RUNTIME or module.startswith(RUNTIME + ".")


def test_runtime_source_imports_no_airflow_and_nothing_outside_it():
    """Every import statement under runtime/, those in functions too: no Airflow, and of this package only the
    runtime (the executors and a cluster-mode driver get the runtime zip alone)."""
    found = [imp for imp in imports() if _in_runtime(imp.importer)]
    assert len(found) > 100  # it did read the runtime
    bad = [
        f"{imp.importer} line {imp.line}: {imp.target}"
        for imp in found
        if imp.target == "airflow"
        or imp.target.startswith("airflow.")
        or (imp.target.startswith("airflow_provider_horovod.") and not _in_runtime(imp.target))
    ]
    assert not bad, "the runtime imports from outside it:\n" + "\n".join(bad)


def test_runtime_zip_holds_only_the_runtime(tmp_path):
    data = runtime_zip()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    # every Python file of the runtime's tree, subpackages at any depth included, and nothing else
    tree = sorted(
        path.relative_to(PACKAGE_DIR.parent).as_posix()
        for path in (PACKAGE_DIR / "runtime").rglob("*.py")
        if "__pycache__" not in path.parts
    )
    assert "airflow_provider_horovod/runtime/rank/worker.py" in tree and len(tree) > 25
    assert sorted(names) == sorted(["airflow_provider_horovod/__init__.py", *tree])
    # The zip alone (no installed package, no Airflow) is enough to import the runtime.
    path = tmp_path / "rt.zip"
    path.write_bytes(data)
    code = (
        f"import sys; sys.path.insert(0, {str(path)!r}); import airflow_provider_horovod.runtime as rt; "
        f"assert rt.__file__.startswith({str(path)!r}), rt.__file__; " + CHECK.replace("import sys; ", "", 1)
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_barrier_task_module_imports_without_cloudpickle_or_horovod():
    """
    A task unpickles its function (runtime.task.launch.barrier_task) before its checks name what the executor's
    Python lacks: importing that module must need nothing but the standard library (and PySpark, inside it).
    """
    code = (
        "import sys; sys.modules['cloudpickle'] = None; sys.modules['horovod'] = None; "
        "import airflow_provider_horovod.runtime.task.launch as launch; "
        "assert 'cloudpickle' not in {m for m, v in sys.modules.items() if v is not None}"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
