"""Test DAG of one team in a multi-team deployment: a training task whose progress only that team may read."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train():
    """Never runs: the test deployment has no scheduler; the task instance is what the page's endpoint reads."""
    return 0


with DAG(dag_id="team_training", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    HorovodRunnerOperator(task_id="train", python_callable=train, np=2)
