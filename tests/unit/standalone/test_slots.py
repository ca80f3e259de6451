"""
The master's task slots seen from Airflow (standalone/slots.py): the executor-sizing ``SparkSubmitHook`` arguments,
the standalone defaults. The messages both sides share are tested with the cluster's view in
tests/unit/runtime/driver/test_slots.py.
"""

from __future__ import annotations


def test_the_executor_sizing_arguments_set_their_spark_properties():
    from airflow_provider_horovod.standalone.slots import submit_kwargs_conf

    assert submit_kwargs_conf({"executor_cores": 2, "total_executor_cores": 4, "jars": "x.jar"}) == {
        "spark.executor.cores": "2",
        "spark.cores.max": "4",
    }


def test_standalone_defaults_size_the_application_to_the_job():
    from airflow_provider_horovod.standalone.slots import standalone_defaults

    ui = "http://m1:8090"
    assert standalone_defaults(4, ui, {}) == {
        "spark.cores.max": "4",
        "spark.master.ui.port": "8090",
        "spark.airflowProviderHorovod.defaults": "spark.cores.max",
    }
    assert standalone_defaults(3, ui, {"spark.executor.cores": "2"})["spark.cores.max"] == "4"  # whole executors
    assert standalone_defaults(2, ui, {"spark.task.cpus": "2"})["spark.cores.max"] == "4"
    assert standalone_defaults(4, ui, {"spark.cores.max": "8", "spark.master.ui.port": "1"}) == {}  # conf wins


def test_a_cap_the_provider_set_is_not_quoted_as_the_users():
    from airflow_provider_horovod.runtime.cluster.resources import AppResources
    from airflow_provider_horovod.standalone.slots import standalone_defaults

    ours = AppResources.from_conf(
        {
            "spark.master": "spark://m:7077",
            **standalone_defaults(2, "http://m:8080", {"spark.executor.cores": "1"}),
            "spark.executor.cores": "1",
        }
    )
    assert ours.cap()[1].startswith("spark.cores.max=2 (the provider's default: the cores np task slots need)")
    assert "provider's default" in ours.settings
    theirs = AppResources.from_conf(
        {"spark.master": "spark://m:7077", "spark.cores.max": "2", "spark.executor.cores": "1"}
    )
    assert theirs.cap()[1].startswith("spark.cores.max=2 (spark.executor.cores=1")
