"""
``@task.horovod``, model asset events and the example data-to-model chain, under a real Airflow deployment
(scheduler, dag-processor, triggerer, api-server; LocalExecutor), one deployment for the module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.airflow_deployment import airflow_deployment, copy_dags
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def chain_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chain")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, chain_root: Path):
    dags = copy_dags(tmp_path_factory.mktemp("dags"), HERE / "dags" / "horovod_taskflow.py",
                     REPO / "example_dags" / "horovod_features_chain.py")
    with airflow_deployment(dags, extra_env={"HOROVOD_EXAMPLE_ROOT": str(chain_root),
                                             "AIRFLOW__CORE__PARALLELISM": "2"}) as deployment:
        yield deployment


def dag_runs(airflow, dag_id: str) -> list[dict]:
    return airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "start_date"}).json()["dag_runs"]


def test_task_horovod_returns_rank_zero_value_with_multiple_outputs_mapping_and_assets(airflow):
    run_id = airflow.trigger("horovod_taskflow")
    state = airflow.wait_for_run("horovod_taskflow", run_id, timeout_s=600)
    states = airflow.task_states("horovod_taskflow", run_id)
    assert state == "success", states
    assert states == {"learning_rates": "success", "train": "success", "report": "success",
                      "sweep[0]": "success", "sweep[1]": "success"}
    model_path = airflow.xcom("horovod_taskflow", run_id, "train", "model_path")  # multiple_outputs
    assert airflow.xcom("horovod_taskflow", run_id, "train", "total") == 10.0  # 0.5 * SCALE on 2 ranks
    assert airflow.xcom("horovod_taskflow", run_id, "report") == f"{model_path}|10.0"
    paths = airflow.xcom("horovod_taskflow", run_id, "train", "artifact_paths")
    assert paths == [model_path] and open(model_path).read() == "lr=0.5"
    assert airflow.xcom("horovod_taskflow", run_id, "train", "spark_app_id").startswith("local-")
    # mapped over the upstream's list: 2 * lr * epochs, per map index, each its own Spark job and artifact dir
    assert [airflow.xcom("horovod_taskflow", run_id, "sweep", map_index=i) for i in (0, 1)] == [
        pytest.approx(0.6), pytest.approx(1.2)]
    assert airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_dir", map_index=1).endswith("/sweep/map-1/try-1")
    # timeline=True through the decorator: each mapped job's Horovod Timeline, closed as valid JSON
    for i in (0, 1):
        sweep_dir = airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_dir", map_index=i)
        assert airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_paths", map_index=i) == [
            f"{sweep_dir}/horovod_timeline.json"]
        with open(f"{sweep_dir}/horovod_timeline.json") as f:
            assert "ALLREDUCE" in {r.get("name") for r in json.load(f)}
    # the asset events carry the model's location; the alias made a per-run asset named by the artifact dir
    events = airflow.asset_events(source_dag_id="horovod_taskflow", source_run_id=run_id)
    by_uri = {e["uri"]: e for e in events}
    model_event = by_uri["taskflow_model"]
    artifact_dir = airflow.xcom("horovod_taskflow", run_id, "train", "artifact_dir")
    assert model_event["extra"]["artifact_paths"] == [model_path]
    assert model_event["extra"]["artifact_dir"] == artifact_dir
    assert model_event["extra"]["return_value"]["total"] == 10.0
    assert model_event["extra"]["spark_app_id"].startswith("local-")
    assert by_uri["file://" + os.path.abspath(artifact_dir)]["extra"]["artifact_paths"] == [model_path]


def test_data_to_model_chain_runs_from_asset_events(airflow, chain_root):
    """Only features_etl is triggered; the two others run because of its asset event, then the model's."""
    for dag_id in ("retrain_on_features", "evaluate_and_promote"):
        airflow.unpause(dag_id)
    run_id = airflow.trigger("features_etl")
    assert airflow.wait_for_run("features_etl", run_id, timeout_s=300) == "success"
    retrain = _single_run(airflow, "retrain_on_features")
    assert airflow.wait_for_run("retrain_on_features", retrain["dag_run_id"], timeout_s=600) == "success"
    evaluate = _single_run(airflow, "evaluate_and_promote")
    assert airflow.wait_for_run("evaluate_and_promote", evaluate["dag_run_id"], timeout_s=300) == "success"
    assert retrain["run_type"] == evaluate["run_type"] == "asset_triggered"
    etl = _task(airflow, "features_etl", run_id, "write_features")
    trained_ti = _task(airflow, "retrain_on_features", retrain["dag_run_id"], "retrain")
    evaluated_ti = _task(airflow, "evaluate_and_promote", evaluate["dag_run_id"], "evaluate_and_promote")
    assert etl["end_date"] <= trained_ti["start_date"] and trained_ti["end_date"] <= evaluated_ti["start_date"]
    result = airflow.xcom("evaluate_and_promote", evaluate["dag_run_id"], "evaluate_and_promote")
    trained = airflow.xcom("retrain_on_features", retrain["dag_run_id"], "retrain", "model_path")
    assert result["model_path"] == trained  # found through the triggering asset event
    assert result["promoted"] is True and result["accuracy"] > 0.9
    assert (chain_root / "production" / "model.pt").read_bytes() == Path(trained).read_bytes()
    assert sorted(p.name for p in (chain_root / "features" / "train").glob("part-*.parquet")) != []


def _task(airflow, dag_id: str, run_id: str, task_id: str) -> dict:
    return next(ti for ti in airflow.task_instances(dag_id, run_id) if ti["task_id"] == task_id)


def _single_run(airflow, dag_id: str, timeout_s: float = 180) -> dict:
    from tests.airflow_deployment import _poll

    runs = _poll(f"an asset-triggered run of {dag_id}", lambda: dag_runs(airflow, dag_id) or None, timeout_s,
                 interval_s=2)
    assert len(runs) == 1, runs
    return runs[0]
