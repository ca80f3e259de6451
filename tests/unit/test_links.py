"""The "Spark UI" link: the live UI, then the Spark History Server; quiet when there is nothing to link to."""

from __future__ import annotations

import json

from airflow_provider_horovod.links import SparkUILink
from airflow_provider_horovod.operators.common import history_app_url, history_server_url
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.xcom_keys import XCOM_SPARK_UI_URL


def _train():
    return None


def test_the_link_is_what_the_operator_knows_without_an_xcom_request():
    op = HorovodRunnerOperator(task_id="t", python_callable=_train)
    # ti_key is never used while the operator knows (get_link would otherwise ask the API server for the XCom,
    # which logs "XCom not found" at error level for a task whose application has not started)
    assert SparkUILink().get_link(op, ti_key=None) == ""
    op._new_reporter().spark_ui_url = "http://127.0.0.1:4040"  # what the try's reporter learnt
    assert SparkUILink().get_link(op, ti_key=None) == "http://127.0.0.1:4040"


def test_the_link_has_its_own_xcom_key_apart_from_the_operators_data():
    """Airflow writes the link under its key straight to the database, bypassing a custom XCom backend: the operator's
    data key (pushed through the backend) must not be that key, or one overwrites the other."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    assert SparkUILink().xcom_key == "_link_SparkUILink" != XCOM_SPARK_UI_URL
    # the API server reads the link with the key stored in the serialized DAG, never calling get_link
    with DAG("links", schedule=None) as dag:
        HorovodRunnerOperator(task_id="t", python_callable=_train)
    serialized = DagSerialization.to_dict(dag)
    assert serialized["dag"]["tasks"][0]["__var"]["_operator_extra_links"] == {
        "Spark UI": "_link_SparkUILink",
        "MLflow run": "_link_MlflowRunLink",
    }
    link = DagSerialization.from_dict(serialized).get_task("t").operator_extra_link_dict["Spark UI"]
    assert link.xcom_key == "_link_SparkUILink"


def test_history_server_url_from_the_connection_then_the_config(monkeypatch):
    monkeypatch.delenv("AIRFLOW__HOROVOD__HISTORY_SERVER_URL", raising=False)
    assert history_server_url(None) is None
    monkeypatch.setenv("AIRFLOW__HOROVOD__HISTORY_SERVER_URL", "http://hs:18080/")
    assert history_server_url(None) == "http://hs:18080"
    assert history_server_url("http://other:18080/") == "http://other:18080"
    assert history_app_url("http://hs:18080", "app-20261130-0001") == "http://hs:18080/history/app-20261130-0001/"


class _TI:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_after_the_application_ends_the_link_points_at_the_history_server(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_HS",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://m",
                "port": 7077,
                "extra": {"spark.airflowProviderHorovod.historyServerUrl": "http://hs:18080"},
            }
        ),
    )
    op = HorovodRunnerOperator(task_id="t", python_callable=_train, conn_id="spark_hs", poll_interval_s=None)
    assert op.spark_ui_url is None  # before the try: no link
    # the live link's direct database write needs a running task's supervisor: record the call instead
    reporter = op._new_reporter()
    reporter.publish_link = lambda ti_, url: ti_.xcom_push("spark_ui_url", url)
    ti = _TI()
    reporter.link_history(ti)  # the application never started: nothing to link to
    assert ti.pushed == {} and op.spark_ui_url is None
    reporter.app_started(ti, "app-1", "http://127.0.0.1:4040")
    assert ti.pushed["spark_ui_url"] == "http://127.0.0.1:4040"
    assert SparkUILink().get_link(op, ti_key=None) == "http://127.0.0.1:4040"  # live
    reporter.link_history(ti)
    assert ti.pushed["spark_ui_url"] == "http://hs:18080/history/app-1/"
    assert SparkUILink().get_link(op, ti_key=None) == "http://hs:18080/history/app-1/"


def test_the_driver_advertises_an_address_rather_than_localhost():
    from airflow_provider_horovod.runtime.driver.program import advertised_ui_url

    # Spark names the UI after the canonical name of a loopback driver address: "localhost"
    assert advertised_ui_url("http://localhost:4040", "localhost") == "http://127.0.0.1:4040"
    assert advertised_ui_url("http://localhost:4041", None) == "http://127.0.0.1:4041"
    assert (
        advertised_ui_url("http://spark-driver.internal:4040", "spark-driver.internal")
        == "http://spark-driver.internal:4040"
    )
    assert advertised_ui_url(None, "localhost") is None


def test_publishing_the_live_link_outside_a_supervised_task_pushes_the_data_and_leaves_the_link():
    # operator.execute() called directly (no supervisor to write the link's key through): the data XCom still goes
    # out and nothing raises; Airflow writes the link itself as the try ends
    from airflow_provider_horovod.links import push_spark_ui_url

    ti = _TI()
    ti.dag_id, ti.task_id, ti.run_id, ti.map_index = "d", "t", "r", -1
    push_spark_ui_url(ti, "http://127.0.0.1:4040")
    assert ti.pushed == {"spark_ui_url": "http://127.0.0.1:4040"}
