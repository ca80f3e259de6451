"""
Test DAGs for secured Spark clusters (tests/e2e/test_secured_deployment.py, docs/security.md).

A standalone master whose REST server and web UI run a JWSFilter and whose UI serves HTTPS (connection
``spark_secure``, the token as its password): ``horovod_secured``: the Spark provider's ``@task.pyspark`` on the
connection (new extras layout), then a deferrable cluster-mode Horovod task on the same connection;
``horovod_secured_wrong_token``: the same deferrable task on a connection with a wrong token, one retry allowed;
``pyspark_old_layout``: ``@task.pyspark`` on a connection with the deprecated extras (the Spark provider logs them as
non-Spark properties).

A standalone cluster with ``spark.authenticate`` and RPC/IO encryption, no REST server (connection ``spark_auth``,
the secret in its ``spark.authenticate.secret`` extra): ``horovod_auth``: np=2 in client mode, then in cluster mode
(spark-submit's legacy gateway, deferred: the triggerer polls the master's ``/json/``), both writing Spark event logs
to ``{{ var.value.secured_event_log_dir }}``; ``horovod_auth_kill``: a deferred cluster-mode task that trains until
it is stopped.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.decorators.pyspark import pyspark_task
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
}


def allreduce():
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    return {"size": hvd.size(), "total": total.item()} if hvd.rank() == 0 else None


def allreduce_until_stopped():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    print("training started", flush=True)
    for _ in range(600):
        hvd.allreduce(torch.ones(1))
        time.sleep(1)


def spark_master(spark=None):
    master = spark.sparkContext.master
    spark.stop()  # give the cores back before the Horovod job asks for them
    return master


START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(dag_id="horovod_secured", schedule=None, start_date=START, catchup=False, default_args={"retries": 0}):
    pyspark = pyspark_task(spark_master, task_id="pyspark", conn_id="spark_secure")()
    pyspark >> HorovodRunnerOperator(
        task_id="deferred",
        python_callable=allreduce,
        np=2,
        conn_id="spark_secure",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )

with DAG(dag_id="pyspark_old_layout", schedule=None, start_date=START, catchup=False):
    pyspark_task(spark_master, task_id="pyspark", conn_id="spark_secure_old")()

with DAG(
    dag_id="horovod_secured_wrong_token",
    schedule=None,
    start_date=START,
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    HorovodRunnerOperator(
        task_id="deferred",
        python_callable=allreduce,
        np=2,
        conn_id="spark_secure_wrong",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )

ENCRYPTION = {"spark.network.crypto.enabled": "true", "spark.io.encryption.enabled": "true"}
EVENT_LOG = {
    "spark.eventLog.enabled": "true",
    "spark.eventLog.dir": "{{ var.value.secured_event_log_dir }}",
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
}
AUTH_CONF = {**CONF, **ENCRYPTION, "spark.executor.cores": "1", "spark.cores.max": "2"}

with DAG(dag_id="horovod_auth", schedule=None, start_date=START, catchup=False, default_args={"retries": 0}):
    client = HorovodRunnerOperator(
        task_id="client",
        python_callable=allreduce,
        np=2,
        conn_id="spark_auth",
        deploy_mode="client",
        conf={**AUTH_CONF, **EVENT_LOG},
        poll_interval_s=1,
    )
    client >> HorovodRunnerOperator(
        task_id="cluster",
        python_callable=allreduce,
        np=2,
        conn_id="spark_auth",
        deploy_mode="cluster",
        deferrable=True,
        conf={**AUTH_CONF, **EVENT_LOG},
        poll_interval_s=1,
    )

with DAG(dag_id="horovod_auth_kill", schedule=None, start_date=START, catchup=False, default_args={"retries": 0}):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=allreduce_until_stopped,
        np=2,
        conn_id="spark_auth",
        deploy_mode="cluster",
        deferrable=True,
        conf=AUTH_CONF,
        poll_interval_s=1,
    )
