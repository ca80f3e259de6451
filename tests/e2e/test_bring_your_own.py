"""
Bring your own Airflow and Spark, installed as docs/getting-started.md says.

The provider's **built wheel** goes into a virtualenv of its own with the **oldest Airflow the provider claims**
(3.1.x, not the 3.3 of ./.venv), with ``requirements/constraints-user.txt`` (which must not move that Airflow).
A DAG then runs through that Airflow's ``airflow dags test`` against a real Spark standalone cluster on 127.0.0.1
(tests/standalone.py) whose drivers and executors use an interpreter that has torch, cloudpickle, PySpark and
Horovod but **not this package** (``conf={"spark.pyspark.python": ...}``): the runtime reaches them only through
``--py-files``. Client, cluster and deferred cluster deploy mode; event logs go to a Spark History Server the test
starts, where the "Spark UI" link points once each application has ended.

The Airflow install (about 2 minutes on 2 cores, downloads from the index) is kept between runs and clones
(tests/kept_venv.py), keyed by the constraints, the Airflow version and the install steps, and made again when any
changes; the wheel is built and installed afresh on every run.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.history_server import history_server
from tests.kept_venv import kept_venv
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(1800)]

BYO_AIRFLOW = "3.1.8"
"""The oldest Airflow line pyproject.toml claims (apache-airflow>=3.1), latest patch release."""
CONSTRAINTS = REPO / "requirements" / "constraints-user.txt"
HERE = Path(__file__).resolve().parent


def _run(
    cmd: list[str], *, timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


def _pip(venv: Path, *args: str, timeout_s: float = 900) -> None:
    _run([venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q", *args], timeout_s=timeout_s)


def _install_airflow_and_dependencies(venv: Path) -> None:
    """
    The documented steps up to the provider: an Airflow of one's own (the user's, installed as they like), then
    the provider's dependencies under constraints-user.txt, with that Airflow pinned so pip cannot move it.
    """
    _run([sys._base_executable, "-m", "venv", venv], timeout_s=300)
    _pip(venv, "install", "-U", "pip>=24")
    _pip(venv, "install", f"apache-airflow=={BYO_AIRFLOW}")  # "your Airflow"
    _pip(
        venv,
        "install",
        "-c",
        str(CONSTRAINTS),
        f"apache-airflow=={BYO_AIRFLOW}",
        "apache-airflow-providers-apache-spark",
        "pyspark-client",
        "cloudpickle",
    )  # not pyspark: step 4 brings it


def _install_provider(venv: Path, wheel: Path, *, fresh: bool) -> None:
    """The documented provider step, then the pyspark re-pin (pyspark-client overwrites pyspark's files): in a kept
    virtualenv made by this run, or one whose re-pin never finished (the run that made it was stopped in between:
    no ``spark-submit``)."""
    _pip(venv, "uninstall", "-y", "airflow-provider-horovod")  # the same version may be there from a past run
    _pip(venv, "install", "-c", str(CONSTRAINTS), f"apache-airflow=={BYO_AIRFLOW}", str(wheel))
    if fresh or not (venv / "bin" / "spark-submit").exists():
        _pip(venv, "install", "--force-reinstall", "--no-deps", "-c", str(CONSTRAINTS), "pyspark")
        _pip(venv, "install", "-c", str(CONSTRAINTS), "py4j")  # the docs' step 4: pyspark-client does not bring it
        _run([venv / "bin" / "python", "-m", "pip", "check"], timeout_s=120)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout built as a wheel (the build backend comes from the index, like any user's build)."""
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps", "-w", out, REPO],
        timeout_s=600,
    )
    (found,) = out.glob("airflow_provider_horovod-*.whl")
    return found


def kept_airflow() -> tuple[Path, bool]:
    """The kept virtualenv with Airflow 3.1 and the provider's dependencies (made when missing); its path and whether
    this call made it."""
    return kept_venv(
        "byo",
        [BYO_AIRFLOW, sys.version, CONSTRAINTS.read_text(), inspect.getsource(_install_airflow_and_dependencies)],
        _install_airflow_and_dependencies,
    )


@pytest.fixture(scope="module")
def byo_venv(wheel: Path) -> Path:
    """A virtualenv with Airflow 3.1 and the provider's wheel, no torch, no Horovod (the executors have them)."""
    started = time.monotonic()
    venv, fresh = kept_airflow()
    _install_provider(venv, wheel, fresh=fresh)
    print(f"\n{venv.name} {'created' if fresh else 'reused'}, provider installed in {time.monotonic() - started:.0f} s")
    python = venv / "bin" / "python"
    versions = json.loads(
        _run(
            [
                python,
                "-c",
                (
                    "import json, airflow, pyspark, cloudpickle, importlib.metadata as m; print(json.dumps({"
                    "'airflow': airflow.__version__, 'pyspark': pyspark.__version__, "
                    "'client': m.version('pyspark-client'),"
                    "'cloudpickle': cloudpickle.__version__, 'provider': m.version('airflow-provider-horovod')}))"
                ),
            ],
            timeout_s=120,
            cwd=wheel.parent,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert versions["airflow"] == BYO_AIRFLOW  # the constraints did not move the user's Airflow
    assert versions["pyspark"] == versions["client"]
    return venv


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> Path:
    """
    An interpreter with torch, cloudpickle, PySpark and Horovod but not this package: a virtualenv of the same
    base Python whose ``.pth`` line adds ./.venv's site-packages as a plain path, so the ``.pth`` files in there,
    the provider's editable-install hook among them, are not processed (no second torch install).
    """
    venv = tmp_path_factory.mktemp("executor-python") / "venv"
    _run([sys._base_executable, "-m", "venv", "--without-pip", venv], timeout_s=120)
    (purelib,) = Path(venv / "lib").glob("python*/site-packages")
    (purelib / "project_site_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    check = subprocess.run(
        [python, "-c", "import airflow_provider_horovod"], capture_output=True, text=True, cwd=venv, timeout=60
    )
    assert check.returncode != 0 and "No module named 'airflow_provider_horovod'" in check.stderr
    _run([python, "-c", "import torch, cloudpickle, pyspark, horovod.torch"], timeout_s=120, cwd=venv)
    return python


def test_built_wheel_on_airflow_3_1_with_executors_without_the_provider(byo_venv, executor_python, tmp_path):
    with (
        standalone_cluster(workers=2, cores_per_worker=2, work_dir=tmp_path / "spark") as cluster,
        history_server(tmp_path / "spark-events") as hs,
    ):
        dags = tmp_path / "dags"
        dags.mkdir()
        shutil.copy(HERE / "dags" / "horovod_byo.py", dags)
        connection = json.loads(cluster.airflow_connection())
        connection["extra"]["spark.airflowProviderHorovod.historyServerUrl"] = hs.url
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "SPARK_", "PYSPARK_", "VIRTUAL_ENV", "PYTHON"))
        }
        env.update(
            {
                "PATH": f"{byo_venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",  # not ./.venv's
                "AIRFLOW_HOME": str(tmp_path / "airflow"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "SPARK_LOCAL_IP": "127.0.0.1",
                "AIRFLOW_CONN_SPARK_BYO": json.dumps(connection),
                "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(tmp_path / "artifacts"),  # the workers' "shared filesystem"
                "BYO_EXECUTOR_PYTHON": str(executor_python),
                "BYO_EVENT_LOG_DIR": str(hs.log_dir),
            }
        )
        airflow = str(byo_venv / "bin" / "airflow")
        _run([airflow, "db", "migrate"], env=env, timeout_s=600, cwd=tmp_path)
        started = time.monotonic()
        proc = subprocess.run(
            [airflow, "dags", "test", "horovod_byo"],
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            cwd=tmp_path,
        )
        took = time.monotonic() - started
        log = proc.stdout + proc.stderr
        (tmp_path / "dags-test.log").write_text(log)
        run = json.loads(
            _run(
                [byo_venv / "bin" / "python", REPO / "scripts" / "show_run.py", "--json", "horovod_byo"],
                env=env,
                timeout_s=120,
                cwd=tmp_path,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        print(f"\nairflow dags test horovod_byo: {took:.0f} s")
        assert run["states"] == {"client": "success", "cluster": "success", "deferred": "success"}, (
            f"{log[-8000:]}\n(whole log: {tmp_path / 'dags-test.log'})\n{cluster.log_tail(15)}"
        )
        xcom = run["xcom"]
        for task in ("client", "cluster", "deferred"):
            value = xcom[f"{task}.return_value"]
            assert value["size"] == 2 and value["total"] == 3.0
            assert value["python"] == str(executor_python)  # the ranks ran on the interpreter without the package
            assert "airflow_provider_horovod_runtime.zip" in value["runtime"]  # ... which came with --py-files
            paths = xcom[f"{task}.artifact_paths"]
            assert [Path(p).name for p in paths] == [f"{task}.pt"] and Path(paths[0]).is_file()
            app_id = xcom[f"{task}.spark_app_id"]
            assert app_id.startswith("app-")
            assert log.count(f"Spark application {app_id} started") == 1, task  # once, not again from the driver
            # once the application has ended, the link is its page on the history server, which serves it
            assert xcom[f"{task}.spark_ui_url"] == f"{hs.url}/history/{app_id}/"
            hs.wait_for_app(app_id)
            page = httpx.get(xcom[f"{task}.spark_ui_url"], follow_redirects=True, timeout=30)
            assert page.status_code == 200 and app_id in page.text, page.text[:500]
        client_ui = re.search(r"Spark application app-\S+ started; Spark UI: (\S+)", log)
        assert client_ui and client_ui.group(1).startswith("http://127.0.0.1:"), log[-6000:]  # not localhost
        assert "localhost:" not in log.split("Spark UI:", 1)[1].split("\n", 1)[0]
        assert log.count("2/2 ranks running on") >= 3, log[-6000:]  # progress lines, the deferred task's too
        assert "XCom not found" not in log
        assert "Error while finding module specification" not in log
