"""
The provider where Horovod is not installed (issue #24, item 5), on Python 3.11 and 3.12.

The provider's **built wheel** goes into a fresh virtualenv per Python with Airflow, PyTorch, PySpark and cloudpickle
but **no Horovod** (Horovod is never a pip dependency: ``scripts/build_horovod.sh`` builds it; the test checks that
``import horovod`` fails there). In that virtualenv:

- the operator module imports and the example DAGs parse (Airflow's ``DagBag``, no import errors);
- ``TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(fn)`` runs a DDP all_reduce on two rank
  processes and returns rank 0's value;
- ``HorovodRunner(np=-2).run(fn)`` fails at once with a ``LaunchError`` that names the missing Horovod and the
  ``[horovod]`` extra.

The virtualenvs (``nohvd-py3.11-<key>``, ``nohvd-py3.12-<key>``) are kept between runs and clones (tests/kept_venv.py),
keyed by the interpreter, the constraints, the Airflow version and the install steps (as the bring-your-own one is, see
tests/e2e/test_bring_your_own.py); the wheel is built and installed afresh every run. PyTorch comes from the package
index with ``requirements/constraints-user.txt``'s version: on 3.11 a CPU build where one is on the index (this
machine's ``/opt/wheels``), on 3.12 PyPI's Linux build, which brings the CUDA libraries (about 4.7 GB; the PyTorch CPU
index is not reachable from here). A Python that is not installed is skipped, naming it.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.kept_venv import kept_venv

pytestmark = [pytest.mark.spark, pytest.mark.timeout(2400)]

AIRFLOW = "3.3.2"
"""The Airflow the project's ./.venv runs (constraints-user.txt leaves Airflow to the user)."""
CONSTRAINTS = REPO / "requirements" / "constraints-user.txt"
PYTHONS = {"3.11": "python3.11", "3.12": "python3.12"}
INSTALL_TIMEOUT_S = 1200


def _interpreter(version: str) -> str | None:
    """``pythonX.Y`` on PATH when it runs (a pyenv shim of a version not selected does not), else pyenv's
    (``$PYENV_ROOT/versions/X.Y.*``)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(PYTHONS[version])]
    candidates += [str(d / "bin" / PYTHONS[version]) for d in sorted(root.glob(f"{version}.*"), reverse=True)]
    for exe in candidates:
        if (
            exe
            and os.path.exists(exe)
            and subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=60).returncode == 0
        ):
            return exe
    return None


def _run(
    cmd: list, *, timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd)
    if check:
        assert proc.returncode == 0, (
            f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def _pip(venv: Path, *args: str) -> None:
    _run(
        [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q", *args], timeout_s=INSTALL_TIMEOUT_S
    )


def _install_dependencies(python: str, venv: Path) -> None:
    """A fresh virtualenv with Airflow, PyTorch, PySpark and cloudpickle (tested versions), no Horovod."""
    _run([python, "-m", "venv", venv], timeout_s=300)
    _pip(
        venv,
        "install",
        "-c",
        str(CONSTRAINTS),
        f"apache-airflow=={AIRFLOW}",
        "torch",
        "pyspark",
        "py4j",
        "cloudpickle",
        "apache-airflow-providers-apache-spark",
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout built as a wheel."""
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps", "-w", out, REPO],
        timeout_s=600,
    )
    (found,) = out.glob("airflow_provider_horovod-*.whl")
    return found


def kept_dependencies(version: str) -> tuple[Path, bool] | None:
    """
    The kept virtualenv of Python ``version`` with the dependencies but not the provider (made when missing).

    :param version: ``"3.11"`` or ``"3.12"``.
    :returns: its path and whether this call made it; ``None`` where that Python is not installed.
    """
    python = _interpreter(version)
    if python is None:
        return None
    full_version = _run([python, "-c", "import sys; print(sys.version)"], timeout_s=60).stdout.strip()
    return kept_venv(
        f"nohvd-py{version}",
        [full_version, AIRFLOW, CONSTRAINTS.read_text(), inspect.getsource(_install_dependencies)],
        lambda path: _install_dependencies(python, path),
    )


def _venv(version: str, wheel: Path) -> Path:
    started = time.monotonic()
    kept = kept_dependencies(version)
    if kept is None:
        pytest.skip(f"no Python {version} here ({PYTHONS[version]} not on PATH, none under pyenv)")
    venv, fresh = kept
    built = time.monotonic()
    _pip(venv, "uninstall", "-y", "airflow-provider-horovod")
    _pip(venv, "install", "--no-deps", str(wheel))
    _run([venv / "bin" / "python", "-m", "pip", "check"], timeout_s=120)
    print(
        f"\n{venv.name} {'created' if fresh else 'reused'} in {built - started:.0f} s, provider installed in "
        f"{time.monotonic() - built:.0f} s"
    )
    return venv


@pytest.fixture(scope="module", params=sorted(PYTHONS))
def venv(request, wheel) -> Path:
    return _venv(request.param, wheel)


CHECKS = textwrap.dedent("""
    import json, os, sys, time

    def allreduce(scale):
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item() * scale}
        dist.destroy_process_group()
        return out

    def hvd_job():
        import horovod.torch as hvd

        hvd.init()
        return hvd.rank()

    if __name__ == "__main__":
        report = {"python": sys.version.split()[0]}
        try:
            import horovod  # noqa: F401
            report["horovod"] = "importable"
        except ImportError as err:
            report["horovod"] = f"{type(err).__name__}: {err}"
        import airflow_provider_horovod
        report["provider_file"] = airflow_provider_horovod.__file__
        import airflow_provider_horovod.operators.horovod  # noqa: F401
        from airflow.dag_processing.dagbag import DagBag

        sys.path.insert(0, sys.argv[1])  # Airflow puts the DAG folder on sys.path (the Keras DAG imports its module)
        bag = DagBag(dag_folder=sys.argv[1])  # AIRFLOW__CORE__LOAD_EXAMPLES=False: only the provider's
        report["dags"] = sorted(bag.dag_ids)
        report["import_errors"] = {os.path.basename(k): v[-500:] for k, v in bag.import_errors.items()}
        from airflow_provider_horovod.runtime import HorovodRunner, TorchDistributor

        started = time.monotonic()
        report["torch"] = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False,
                                           start_timeout_s=120).run(allreduce, 10)
        report["torch_seconds"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        try:
            HorovodRunner(np=-2, start_timeout_s=60).run(hvd_job)
            report["horovod_job"] = "ran"
        except Exception as err:
            report["horovod_job"] = f"{type(err).__name__}: {err}"
        report["horovod_job_seconds"] = round(time.monotonic() - started, 2)
        print("REPORT " + json.dumps(report), flush=True)
""")


@pytest.fixture(scope="module")
def report(venv, tmp_path_factory) -> dict:
    """Run :data:`CHECKS` with the virtualenv's Python (the example DAGs as the DAG folder); its report."""
    tmp = tmp_path_factory.mktemp("checks")
    script = tmp / "checks.py"
    script.write_text(CHECKS)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "SPARK_", "PYSPARK_", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(
        {
            "PATH": f"{venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "AIRFLOW_HOME": str(tmp / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    proc = _run([venv / "bin" / "python", script, REPO / "example_dags"], timeout_s=300, env=env, cwd=tmp, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-4000:] + proc.stderr[-4000:]
    found = json.loads(lines[-1][len("REPORT ") :])
    print(json.dumps(found, indent=1))
    return found


def test_horovod_is_absent_and_the_wheel_is_imported(report, venv):
    assert report["horovod"].startswith(("ModuleNotFoundError", "ImportError")), report["horovod"]
    assert report["provider_file"].startswith(str(venv)), "the built wheel, not this checkout, must be imported"


def test_the_dags_parse(report):
    errors = dict(report["import_errors"])
    # without the mlflow extra, the MLflow example fails to parse, and says how to install it
    mlflow_error = errors.pop("mlflow_retraining.py", None)
    assert mlflow_error is None or "pip install 'airflow-provider-horovod[mlflow]'" in mlflow_error, mlflow_error
    assert not errors, errors
    assert {"horovod_digits_retraining", "horovod_keras_digits"} <= set(report["dags"]), report["dags"]


def test_torch_distributor_runs_ddp(report):
    # rank 0's value of a DDP all_reduce over 2 ranks: (1 + 2) x 10
    assert report["torch"] == {"rank": 0, "world": 2, "sum": 30.0}


def test_a_horovod_job_fails_at_once_naming_horovod_and_the_extra(report):
    message = report["horovod_job"]
    assert message.startswith("LaunchError: horovod (horovod."), message  # before any rank starts
    assert "the driver's Python" in message and "[horovod]" in message, message
    assert report["horovod_job_seconds"] < 30, report
