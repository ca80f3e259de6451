"""Test DAGs for the UI page: real trainings (embedded local Spark, np=2) that report their progress every step, with
``report()`` (Horovod) and without (a Transformers ``Trainer`` under ``@task.torch_distributed``)."""

from __future__ import annotations

import sys

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_reporting(steps: int):
    """
    ``steps`` steps, each reported; rank 1's are slower (no collective per step), so the page marks it. Rank 1 joins
    the rendezvous only once the file ``go`` is in the artifact directory (the test writes it when the page has shown
    rank 0 alone in ``hvd.init()``; at most 120 s).
    """
    import math
    import os
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir, report

    if os.environ["HOROVOD_RANK"] == "1":
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(artifact_dir(), "go")) and time.monotonic() < deadline:
            time.sleep(0.1)
    hvd.init()
    for step in range(1, steps + 1):
        report(step=step, total_steps=steps, loss=2.0 * math.exp(-step / 40) + 0.05, acc=1 - math.exp(-step / 30))
        time.sleep(0.25 if hvd.rank() == 0 else 0.35)
    hvd.allreduce(torch.ones(1), name="done")  # rank 0 waits for the straggler here
    return steps


with DAG(
    dag_id="horovod_progress_page",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_reporting,
        op_kwargs={"steps": 100},
        np=2,
        conf={"spark.pyspark.python": sys.executable},
    )


def fail_then_resume(steps: int):
    """Try 1 checkpoints at step 10 and fails; try 2 resumes there and trains a loss over four decades to the end."""
    import time

    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import load_checkpoint, report, save_checkpoint, try_number

    hvd.init()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    for step in range(start + 1, steps + 1):
        report(step=step, total_steps=steps, loss=2.3 * 10 ** (-4 * step / steps))
        time.sleep(0.1)  # a few sampled points a second
        if step == 10:
            save_checkpoint({"step": step}, step=step)
            if try_number() == 1:
                raise ValueError("corrupt shard on the first try")
    return steps


def no_report():
    return "done"


with DAG(
    dag_id="horovod_progress_retry",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 1, "retry_delay": pendulum.duration(seconds=0)},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=fail_then_resume,
        op_kwargs={"steps": 40},
        np=2,
        conf={"spark.pyspark.python": sys.executable},
    )
    HorovodRunnerOperator(task_id="silent", python_callable=no_report, np=-1)


with DAG(
    dag_id="horovod_progress_trainer",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):

    @task.torch_distributed(np=2, conf={"spark.pyspark.python": sys.executable})
    def train():
        """A Transformers ``Trainer`` as written for torchrun, with no ``report()``: its progress reaches the tab."""
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

        from airflow_provider_horovod.runtime import artifact_dir

        class Numbers(torch.utils.data.Dataset):
            def __len__(self):
                return 256

            def __getitem__(self, i):
                ids = torch.tensor([(i * 7 + k) % 50 for k in range(8)])
                return {"input_ids": ids, "labels": ids}

        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=1, n_head=2))
        args = TrainingArguments(
            output_dir=f"{artifact_dir()}/trainer",
            per_device_train_batch_size=4,
            num_train_epochs=2,
            logging_steps=4,
            report_to=[],
            save_strategy="no",
            learning_rate=1e-3,
            disable_tqdm=True,
        )
        result = Trainer(model=model, args=args, train_dataset=Numbers()).train()
        return {"steps": result.global_step, "world_size": args.world_size}

    train()


def killed_then_restarted(steps: int):
    """Rank 1 is SIGKILLed at step 12 of the first attempt; max_restarts=1 starts the job again, which resumes from
    the step-10 checkpoint and trains to the end (issue #36)."""
    import os
    import signal
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import load_checkpoint, report, restart_count, save_checkpoint

    hvd.init()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    for step in range(start + 1, steps + 1):
        hvd.allreduce(torch.ones(1), name=f"step{step}")
        report(step=step, total_steps=steps, loss=1.0 / step)
        time.sleep(0.1)
        if step % 5 == 0:
            save_checkpoint({"step": step}, step=step)
        if restart_count() == 0 and step == 12 and hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    return restart_count()


with DAG(
    dag_id="horovod_progress_restart",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=killed_then_restarted,
        op_kwargs={"steps": 30},
        np=2,
        max_restarts=1,
        conf={"spark.pyspark.python": sys.executable},
    )
