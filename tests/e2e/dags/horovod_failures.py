"""Test DAG: independent HorovodRunnerOperator tasks that fail (or not) in the ways users meet."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


class TrainedModel:
    """Not something XCom can store."""

    def __init__(self, path):
        self.path = path


def fail_on_rank_one():
    import horovod.torch as hvd
    import torch

    hvd.init()
    print("loading shard", flush=True)
    if hvd.rank() == 1:
        raise ValueError("corrupt shard on rank 1")
    hvd.allreduce(torch.tensor([1.0]))


def return_a_model():
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    path = os.path.join(artifact_dir(), f"weights-{hvd.rank()}.bin")
    with open(path, "wb") as f:
        f.write(b"\x00" * 16)
    return TrainedModel(path)


def save_model_return_bytes():
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    if hvd.rank() != 0:
        return None
    with open(os.path.join(artifact_dir(), "model.pt"), "wb") as f:
        f.write(b"\x00" * 16)
    return b"w" * 50_000  # the model's bytes: above the task's max_return_value_bytes


def rank_and_size(tag):
    import horovod.torch as hvd

    hvd.init()
    return {"rank": hvd.rank(), "size": hvd.size(), "tag": tag}


with DAG(
    dag_id="horovod_failures",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(task_id="rank_fails", python_callable=fail_on_rank_one, np=2)
    HorovodRunnerOperator(task_id="unstorable_return", python_callable=return_a_model, np=2)
    HorovodRunnerOperator(
        task_id="oversize_return", python_callable=save_model_return_bytes, np=2, max_return_value_bytes=2000
    )
    HorovodRunnerOperator(task_id="on_driver", python_callable=rank_and_size, op_kwargs={"tag": "{{ ds }}"}, np=-2)
