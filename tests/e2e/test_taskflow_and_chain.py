"""
``@task.horovod``, model asset events and the example data-to-model chain, and the torch.distributed launcher (the
DDP example DAG, ``@task.torch_distributed``, a torchrun script, a failing rank) in client mode, under a real Airflow
deployment (scheduler, dag-processor, triggerer, api-server; LocalExecutor), one deployment for the module.
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
    dags = copy_dags(
        tmp_path_factory.mktemp("dags"),
        HERE / "dags" / "horovod_taskflow.py",
        REPO / "example_dags" / "horovod_features_chain.py",
        REPO / "example_dags" / "ddp_digits_training.py",
        HERE / "dags" / "torch_distributed.py",
        HERE / "dags" / "ddp_script.py",
    )
    with airflow_deployment(
        dags, extra_env={"HOROVOD_EXAMPLE_ROOT": str(chain_root), "AIRFLOW__CORE__PARALLELISM": "2"}
    ) as deployment:
        yield deployment


def dag_runs(airflow, dag_id: str) -> list[dict]:
    return airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "start_date"}).json()["dag_runs"]


def test_task_horovod_returns_rank_zero_value_with_multiple_outputs_mapping_and_assets(airflow):
    run_id = airflow.trigger("horovod_taskflow")
    state = airflow.wait_for_run("horovod_taskflow", run_id, timeout_s=600)
    states = airflow.task_states("horovod_taskflow", run_id)
    assert state == "success", states
    assert states == {
        "learning_rates": "success",
        "train": "success",
        "report": "success",
        "sweep[0]": "success",
        "sweep[1]": "success",
    }
    model_path = airflow.xcom("horovod_taskflow", run_id, "train", "model_path")  # multiple_outputs
    assert airflow.xcom("horovod_taskflow", run_id, "train", "total") == 10.0  # 0.5 * SCALE on 2 ranks
    assert airflow.xcom("horovod_taskflow", run_id, "report") == f"{model_path}|10.0"
    paths = airflow.xcom("horovod_taskflow", run_id, "train", "artifact_paths")
    assert paths == [model_path] and open(model_path).read() == "lr=0.5"
    assert airflow.xcom("horovod_taskflow", run_id, "train", "spark_app_id").startswith("local-")
    # mapped over the upstream's list: 2 * lr * epochs, per map index, each its own Spark job and artifact dir
    assert [airflow.xcom("horovod_taskflow", run_id, "sweep", map_index=i) for i in (0, 1)] == [
        pytest.approx(0.6),
        pytest.approx(1.2),
    ]
    assert airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_dir", map_index=1).endswith("/sweep/map-1/try-1")
    # timeline=True through the decorator: each mapped job's Horovod Timeline, closed as valid JSON
    for i in (0, 1):
        sweep_dir = airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_dir", map_index=i)
        assert airflow.xcom("horovod_taskflow", run_id, "sweep", "artifact_paths", map_index=i) == [
            f"{sweep_dir}/horovod_timeline.json"
        ]
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


def test_the_ddp_example_dag_trains_and_evaluates(airflow):
    run_id = airflow.trigger("ddp_digits_training")
    state = airflow.wait_for_run("ddp_digits_training", run_id, timeout_s=600)
    states = airflow.task_states("ddp_digits_training", run_id)
    assert state == "success", (states, airflow.task_log("ddp_digits_training", run_id, "train")[-4000:])
    assert states == {"prepare_data": "success", "train": "success", "evaluate": "success"}
    artifact_dir = airflow.xcom("ddp_digits_training", run_id, "train", "artifact_dir")
    value = airflow.xcom("ddp_digits_training", run_id, "train")
    assert value["model_path"] == f"{artifact_dir}/model.pt" and os.path.isfile(value["model_path"])
    assert (value["ranks"], value["backend"]) == (2, "gloo") and value["final_loss"] < 0.5
    assert airflow.xcom("ddp_digits_training", run_id, "train", "artifact_paths") == [value["model_path"]]
    assert airflow.xcom("ddp_digits_training", run_id, "train", "spark_app_id").startswith("local-")
    assert airflow.xcom("ddp_digits_training", run_id, "evaluate") >= 0.9
    log = airflow.task_log("ddp_digits_training", run_id, "train")
    assert "torch.distributed job: np=2, client deploy mode" in log
    assert "[rank 0] epoch 30/30" in log and "(world_size=2)" in log and "[rank 1]" not in log


def test_task_torch_distributed_returns_rank_zero_value_with_the_torchrun_environment_and_assets(airflow):
    run_id = airflow.trigger("torch_taskflow")
    state = airflow.wait_for_run("torch_taskflow", run_id, timeout_s=600)
    states = airflow.task_states("torch_taskflow", run_id)
    assert state == "success", (states, airflow.task_log("torch_taskflow", run_id, "script")[-3000:])
    assert states == {"train": "success", "report": "success", "script": "success"}
    model_path = airflow.xcom("torch_taskflow", run_id, "train", "model_path")  # multiple_outputs
    assert airflow.xcom("torch_taskflow", run_id, "train", "total") == 30.0  # (1 + 2) * 10 over 2 ranks
    assert airflow.xcom("torch_taskflow", run_id, "report") == f"{model_path}|30.0"
    assert airflow.xcom("torch_taskflow", run_id, "train", "artifact_paths") == [model_path]
    assert open(model_path).read() == "total=30.0"
    envs = airflow.xcom("torch_taskflow", run_id, "train", "envs")
    assert [
        (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"], e["NODE_RANK"])
        for e in envs
    ] == [("0", "0", "2", "2", "0", "0"), ("1", "1", "2", "2", "0", "0")]
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"} and len({e["MASTER_PORT"] for e in envs}) == 1
    [event] = airflow.asset_events(source_dag_id="torch_taskflow", source_run_id=run_id)
    assert event["uri"] == "ddp_taskflow_model" and event["extra"]["artifact_paths"] == [model_path]
    # the torchrun script, unchanged: its rendered arguments, every rank's output (driver_log_verbosity="all")
    assert airflow.xcom("torch_taskflow", run_id, "script", default=None) is None
    log = airflow.task_log("torch_taskflow", run_id, "script")
    for rank in (0, 1):
        assert f"script rank {rank}/2 as __main__: total 6.0 tag {run_id}" in log, log[-3000:]


def test_a_failing_torch_rank_fails_the_task_naming_it(airflow):
    run_id = airflow.trigger("torch_failures")
    assert airflow.wait_for_run("torch_failures", run_id, timeout_s=300) == "failed"
    assert airflow.task_states("torch_failures", run_id) == {"rank_fails": "failed"}
    error = airflow.task_error("torch_failures", run_id, "rank_fails") or ""
    assert "torch.distributed rank 1 on 127.0.0.1 failed (exit code 1): ValueError: corrupt shard on rank 1" in error, (
        error
    )
    log = airflow.task_log("torch_failures", run_id, "rank_fails")
    assert 'raise ValueError("corrupt shard on rank 1")' in log  # the rank's own traceback
    assert "starting epoch 1" in log  # its last output lines
    ti = _task(airflow, "torch_failures", run_id, "rank_fails")
    # rank 0 sat in all_reduce: stopped at once, not after Gloo's timeout (gloo_timeout_s=300)
    assert _seconds(ti["end_date"]) - _seconds(ti["start_date"]) < 120, ti


def _seconds(timestamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(timestamp).timestamp()


def _task(airflow, dag_id: str, run_id: str, task_id: str) -> dict:
    return next(ti for ti in airflow.task_instances(dag_id, run_id) if ti["task_id"] == task_id)


def _single_run(airflow, dag_id: str, timeout_s: float = 180) -> dict:
    from tests.airflow_deployment import _poll

    runs = _poll(
        f"an asset-triggered run of {dag_id}", lambda: dag_runs(airflow, dag_id) or None, timeout_s, interval_s=2
    )
    assert len(runs) == 1, runs
    return runs[0]
