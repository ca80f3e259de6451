"""Test DAG: two trainings whose task ids differ only in non-ASCII characters, and the "Spark UI" link's XComs."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_horovod.links import SparkUILink, push_spark_ui_url
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.xcom_keys import XCOM_SPARK_UI_URL


def write_model(tag):
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    if hvd.rank() == 0:
        with open(os.path.join(artifact_dir(), f"model-{tag}.txt"), "w") as f:
            f.write(tag)
    return tag if hvd.rank() == 0 else None


@task
def publish_link() -> dict:
    """What a running HorovodRunnerOperator publishes for its link, then the link as another operator reads it."""
    ti = get_current_context()["ti"]
    push_spark_ui_url(ti, "http://spark-ui.example:4040")
    return {"link": SparkUILink().get_link(ti.task, ti_key=ti)}


@task
def link_from_an_earlier_version() -> str:
    """A try of the operator before the link had its own key pushed the URL under the data key only."""
    ti = get_current_context()["ti"]
    ti.xcom_push(key=XCOM_SPARK_UI_URL, value="http://old-spark-ui.example:4040")
    return SparkUILink().get_link(ti.task, ti_key=ti)


with DAG(
    dag_id="horovod_unicode_ids",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=1,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(task_id="train_日本", python_callable=write_model, op_kwargs={"tag": "ja"}, np=2)
    HorovodRunnerOperator(task_id="train_中国", python_callable=write_model, op_kwargs={"tag": "zh"}, np=2)
    publish_link()
    link_from_an_earlier_version()
