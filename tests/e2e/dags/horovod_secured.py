"""
Test DAG: a Spark standalone master whose REST server and web UI run a JWSFilter and whose UI serves HTTPS.

``horovod_secured``: the Spark provider's ``@task.pyspark`` on the connection (new extras layout), then a deferrable
cluster-mode Horovod task on the same connection. ``pyspark_old_layout``: ``@task.pyspark`` on a connection with the
deprecated extras (the Spark provider logs them as non-Spark properties).
"""

from __future__ import annotations

import sys

import pendulum

from airflow.providers.apache.spark.decorators.pyspark import pyspark_task
from airflow.sdk import DAG
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

CONF = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
        "spark.driver.cores": "1", "spark.driver.memory": "512m", "spark.executor.memory": "512m"}


def allreduce():
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    return {"size": hvd.size(), "total": total.item()} if hvd.rank() == 0 else None


def spark_master(spark=None):
    master = spark.sparkContext.master
    spark.stop()  # give the cores back before the Horovod job asks for them
    return master


START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(dag_id="horovod_secured", schedule=None, start_date=START, catchup=False, default_args={"retries": 0}):
    pyspark = pyspark_task(spark_master, task_id="pyspark", conn_id="spark_secure")()
    pyspark >> HorovodRunnerOperator(task_id="deferred", python_callable=allreduce, np=2, conn_id="spark_secure",
                                     deploy_mode="cluster", deferrable=True, conf=CONF, poll_interval_s=1)

with DAG(dag_id="pyspark_old_layout", schedule=None, start_date=START, catchup=False):
    pyspark_task(spark_master, task_id="pyspark", conn_id="spark_secure_old")()
