"""The operator tells a try's observers at each named point, in order, and each observer does its part: OpenLineage's
Spark properties on the job, the model's location on the asset events, and a job that observers add to is the job
submitted."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from airflow.sdk import DAG, Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.operators.lineage import LineageObserver
from airflow_provider_horovod.operators.modes.base import DeployMode
from airflow_provider_horovod.operators.observers import FinishedTry, JobObserver, ModelAssetEvents, Observers
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.utils.job_result import JobResult

LOG = logging.getLogger(__name__)


def train() -> int:
    return 1


class _TI:
    dag_id, task_id, run_id, map_index, try_number = "d", "train", "manual__1", -1, 1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, *, task_ids: str, key: str, map_indexes: int = -1) -> Any:
        return self.xcom.get(key)


class Recorder(JobObserver):
    """Writes down every point it is told of; adds a variable to the job before submission."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def created(self, context, job):
        self.seen.append(("created", job.label))
        return job

    def submitting(self, context, job):
        self.seen.append(("submitting", dict(job.env)))
        return job.with_env({"OBSERVED": "1"})

    def submitted(self, context, record):
        self.seen.append(("submitted", record))
        record["observer"] = "was here"

    def attached(self, context, record):
        self.seen.append(("attached", dict(record)))

    def finished(self, context, outcome):
        self.seen.append(("finished", outcome.value))

    def failed(self, context, error):
        self.seen.append(("failed", str(error)))


class FakeMode(DeployMode):
    """A deploy mode that runs nothing: it records the job it was given to submit, and returns ``value``."""

    name = "fake"

    def __init__(self, job, reporter, value: Any) -> None:
        super().__init__(job, None, reporter)
        self.value, self.submitted_env = value, None

    def submit_job(self, context):
        self.submitted_env = dict(self.job.env)
        return {"submission_id": "driver-1"}

    def poll_until_complete(self, external_id, context):
        if isinstance(self.value, Exception):
            raise self.value

    def get_job_result(self, external_id, context):
        return self.value


def _run(monkeypatch, tmp_path, value: Any) -> tuple[list, FakeMode]:
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    with DAG("d", schedule=None):
        op = HorovodRunnerOperator(
            task_id="train", python_callable=train, np=2, conn_id=None, env_vars={"USER_VAR": "u"}
        )
    seen: list = []
    monkeypatch.setattr(
        op, "_new_observers", lambda: setattr(op, "_observers", Observers([Recorder(seen)])) or op._observers
    )
    modes: list[FakeMode] = []

    def fake_mode(job):
        modes.append(FakeMode(job, op._new_reporter(), value))
        return modes[-1]

    monkeypatch.setattr(op, "_deploy_mode", fake_mode)
    context = {"ti": _TI()}
    if isinstance(value, Exception):
        with pytest.raises(type(value)):
            op.execute(context)
    else:
        assert op.execute(context) == value
    return seen, modes[0]


def test_the_operator_tells_its_observers_each_point_in_order_and_submits_the_job_they_added_to(monkeypatch, tmp_path):
    seen, mode = _run(monkeypatch, tmp_path, {"loss": 0.1})
    record = {"submission_id": "driver-1", "observer": "was here"}
    assert seen == [
        ("created", "d.train"),
        ("submitting", {"USER_VAR": "u"}),
        ("submitted", record),
        ("attached", record),
        ("attached", record),
        ("finished", {"loss": 0.1}),
    ]
    assert mode.submitted_env == {"USER_VAR": "u", "OBSERVED": "1"}  # the observers' job is the one submitted


def test_a_failed_try_is_told_as_failed_and_never_as_finished(monkeypatch, tmp_path):
    seen, _ = _run(monkeypatch, tmp_path, RuntimeError("rank 1 failed"))
    assert seen[-1] == ("failed", "rank 1 failed") and not any(point == "finished" for point, _ in seen)


def _job(**conf: str) -> TrainingJob:
    return TrainingJob(key=b"k", payload=b"p", settings=JobSettings(np=2), artifact_dir="/a", conf=conf)


def test_lineage_adds_the_enabled_openlineage_properties_to_the_job_s_conf_and_keeps_the_user_s(monkeypatch):
    from airflow.providers.openlineage.utils import spark as ol_spark

    # the OpenLineage provider's macros read a task instance of the metadata database; here they name this one
    run_id = "01234567-89ab-cdef-0123-456789abcdef"
    for name, value in (
        ("lineage_job_namespace", lambda: "airflow-ns"),
        ("lineage_job_name", lambda ti: "d.train"),
        ("lineage_run_id", lambda ti: run_id),
        ("lineage_root_run_id", lambda ti: run_id),
        ("lineage_root_job_name", lambda ti: "d"),
    ):
        monkeypatch.setattr(ol_spark, name, value)
    job = _job(**{"spark.executor.memory": "1g"})
    assert LineageObserver(inject_parent_job_info=False, inject_transport_info=False).created({}, job) is job
    context = {"ti": _TI()}
    injected = LineageObserver(inject_parent_job_info=True, inject_transport_info=False).created(context, job)
    assert injected.conf == {
        "spark.executor.memory": "1g",
        "spark.openlineage.parentJobNamespace": "airflow-ns",
        "spark.openlineage.parentJobName": "d.train",
        "spark.openlineage.parentRunId": run_id,
        "spark.openlineage.rootParentRunId": run_id,
        "spark.openlineage.rootParentJobName": "d",
        "spark.openlineage.rootParentJobNamespace": "airflow-ns",
    }
    assert job.conf == {"spark.executor.memory": "1g"}  # the job it was given is left as it was
    mine = _job(**{"spark.openlineage.parentJobName": "mine"})
    kept = LineageObserver(inject_parent_job_info=True, inject_transport_info=False).created(context, mine)
    assert kept.conf == {"spark.openlineage.parentJobName": "mine"}  # a property the user set wins


def test_the_model_s_location_goes_on_each_outlet_s_event_and_an_alias_gets_the_run_s_own_asset(tmp_path):
    model, alias = Asset("model://digits"), AssetAlias("digits-models")
    events = OutletEventAccessors()
    result = JobResult(
        app_id="app-1", ui_url=None, artifact_paths=[f"{tmp_path}/model.pt"], return_value=None, metrics={"loss": 0.1}
    )
    outcome = FinishedTry({"accuracy": 0.97}, result, str(tmp_path))
    ModelAssetEvents([model, alias], LOG).finished({"outlet_events": events}, outcome)
    extra = events[model].extra
    assert extra == {
        "artifact_dir": str(tmp_path),
        "artifact_paths": [f"{tmp_path}/model.pt"],
        "spark_app_id": "app-1",
        "metrics": {"loss": 0.1},
        "return_value": {"accuracy": 0.97},
    }
    [aliased] = events[alias].asset_alias_events
    assert aliased.dest_asset_key.uri == f"file://{tmp_path}" and aliased.extra == extra
    untouched = OutletEventAccessors()
    ModelAssetEvents([], LOG).finished({"outlet_events": untouched}, outcome)  # no outlets: nothing to attach
    ModelAssetEvents([model], LOG).finished({"outlet_events": untouched}, FinishedTry(1, None, None))
    assert untouched[model].extra == {}


def test_observers_are_called_in_order_each_given_what_the_one_before_returned():
    class Adds(JobObserver):
        def __init__(self, name: str) -> None:
            self.name = name

        def created(self, context, job):
            return job.with_env({"ORDER": job.env.get("ORDER", "") + self.name})

        def deferring(self, trigger):
            return [*trigger, self.name]

    observers = Observers([Adds("a"), Adds("b"), JobObserver()])
    assert observers.created({}, _job()).env == {"ORDER": "ab"}
    assert observers.deferring([]) == ["a", "b"]
