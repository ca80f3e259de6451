"""
End to end on a real Airflow deployment (api-server, scheduler, dag-processor, LocalExecutor) and real Spark: task
ids that differ only in non-ASCII characters get their own artifact directories, and the "Spark UI" link's XCom is
Airflow's own (written straight to the database) while the operator's data goes through a custom XCom backend.

Not ``airflow dags test``: its in-process Execution API cannot take a non-ASCII task id in a request path (httpx's
WSGI transport hands a2wsgi a ``PATH_INFO`` that is not latin-1, so every XCom push of such a task fails there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.airflow_deployment import airflow_deployment, copy_dags
from tests.conftest import REPO
from tests.e2e.marking_xcom_backend import MARK
from tests.e2e.test_real_worker import FinishedRun

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]

DAGS = Path(__file__).resolve().parent / "dags"
TASKS = {"train_日本": ("ja", "train_~E6~97~A5~E6~9C~AC"), "train_中国": ("zh", "train_~E4~B8~AD~E5~9B~BD")}
"""Task id -> (the tag its function writes, its directory name)."""


@pytest.fixture(scope="module")
def unicode_run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    dags = copy_dags(tmp_path_factory.mktemp("unicode-dags"), DAGS / "horovod_unicode_ids.py")
    backend = {
        "AIRFLOW__CORE__XCOM_BACKEND": "tests.e2e.marking_xcom_backend.MarkingXCom",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "AIRFLOW__CORE__PARALLELISM": "1",
    }
    with airflow_deployment(
        dags,
        home=tmp_path_factory.mktemp("unicode-home"),
        extra_env=backend,
        components=("api-server", "scheduler", "dag-processor"),
    ) as airflow:
        yield FinishedRun(airflow, "horovod_unicode_ids")


def stored(run: FinishedRun, task_id: str, key: str):
    """The XCom's value as the database holds it (the API's native form)."""
    value = run.xcom(task_id, key)
    return json.loads(value) if isinstance(value, str) and value[:1] in '{["' else value


def through_backend(run: FinishedRun, task_id: str, key: str):
    """The value of an XCom the marking backend stored; fails for one written straight to the database."""
    value = stored(run, task_id, key)
    assert isinstance(value, dict) and set(value) == {MARK}, (task_id, key, value)
    return value[MARK]


def test_tasks_differing_only_in_non_ascii_characters_list_only_their_own_model(unicode_run):
    failed = [unicode_run.why(t) for t, s in unicode_run.states.items() if s != "success"]
    assert not failed, "\n".join(failed)
    dirs = {task: through_backend(unicode_run, task, "artifact_dir") for task in TASKS}
    assert len(set(dirs.values())) == len(TASKS)
    for task, (tag, name) in TASKS.items():
        assert dirs[task].endswith(f"/{name}/try-1"), dirs
        assert through_backend(unicode_run, task, "artifact_paths") == [f"{dirs[task]}/model-{tag}.txt"]
        assert Path(dirs[task], f"model-{tag}.txt").read_text() == tag
        assert through_backend(unicode_run, task, "return_value") == tag


def test_the_link_is_written_apart_from_the_data_the_operator_pushes_through_the_backend(unicode_run):
    for task in TASKS:
        url = through_backend(unicode_run, task, "spark_ui_url")  # the operator's data, intact behind the backend
        assert url.startswith("http://127.0.0.1:"), unicode_run.why(task)
        assert stored(unicode_run, task, "_link_SparkUILink") == url  # Airflow's own write: a bare URL
        links = unicode_run.airflow.api(
            "GET", f"/api/v2/dags/{unicode_run.dag_id}/dagRuns/{unicode_run.run_id}/taskInstances/{task}/links"
        ).json()
        # what the UI's buttons open: the Spark UI; no MLflow run (the task does not track one: a disabled button)
        assert links["extra_links"] == {"Spark UI": url, "MLflow run": None}
    # while a task runs (push_spark_ui_url), and read by get_link for an operator that does not know its URL
    assert unicode_run.states["publish_link"] == "success", unicode_run.why("publish_link")
    assert through_backend(unicode_run, "publish_link", "spark_ui_url") == "http://spark-ui.example:4040"
    assert stored(unicode_run, "publish_link", "_link_SparkUILink") == "http://spark-ui.example:4040"
    assert through_backend(unicode_run, "publish_link", "return_value") == {"link": "http://spark-ui.example:4040"}
    # a try from before the link had its own key pushed the URL under the data key only: get_link still finds it
    assert (
        through_backend(unicode_run, "link_from_an_earlier_version", "return_value")
        == "http://old-spark-ui.example:4040"
    )
