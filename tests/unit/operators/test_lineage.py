"""OpenLineage naming of the model output and the training inputs."""

from __future__ import annotations

from airflow.sdk import Asset
from openlineage.client.serde import Serde

from airflow_provider_horovod.operators.lineage import (
    TRAINING_FACET,
    dataset_name,
    input_locations,
    operator_lineage,
    training_run_facet,
)


def test_dataset_names_follow_openlineage_conventions():
    assert dataset_name("/data/models/../models/try-1") == ("file", "/data/models/try-1")
    assert dataset_name("file:///data/x") == ("file", "/data/x")
    assert dataset_name("s3://bucket/models/run-1") == ("s3://bucket", "models/run-1")
    assert dataset_name("gs://b/k") == ("gs://b", "k")


def test_inputs_from_inlets_first_else_path_arguments():
    args_only = input_locations(
        [],
        ["relative/not-data", 3],
        {"data": "/data/digits.npz", "lr": 0.1, "features": "s3://bucket/features", "name": "x"},
    )
    assert args_only == ["/data/digits.npz", "s3://bucket/features"]
    inlet = Asset("features", uri="s3://bucket/features")
    assert input_locations([inlet, Asset("named-only")], [], {"data": "/data/digits.npz"}) == ["s3://bucket/features"]


def test_operator_lineage_has_the_model_as_output():
    lineage = operator_lineage("/artifacts/dag/run/train/try-1", ["s3://bucket/features"])
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", "/artifacts/dag/run/train/try-1")]
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("s3://bucket", "features")]
    assert operator_lineage(None, []).outputs == []


def test_the_training_run_facet_serializes_with_its_metrics_and_producer():
    facet = training_run_facet(np=2, launcher="torch", metrics={"loss": 0.25, "acc": 0.9})
    lineage = operator_lineage("/a/try-1", [], run_facets={TRAINING_FACET: facet})
    as_json = Serde.to_dict(lineage.run_facets[TRAINING_FACET])
    assert {k: as_json[k] for k in ("np", "launcher", "metrics")} == {
        "np": 2,
        "launcher": "torch",
        "metrics": {"loss": 0.25, "acc": 0.9},
    }
    assert as_json["_producer"] and as_json["_schemaURL"].startswith("http"), as_json
    assert (as_json["restarts"], as_json["restarted_at_steps"]) == (0, [])
    assert training_run_facet(np=-2, launcher="horovod", metrics=None).metrics == {}
    restarted = training_run_facet(np=2, launcher="horovod", metrics=None, restarts=[{"number": 1, "step": 12}])
    assert (restarted.restarts, restarted.restarted_at_steps) == (1, [12])
