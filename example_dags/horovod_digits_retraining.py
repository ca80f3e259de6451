"""
Retraining pipeline: prepare data -> train with Horovod on Spark (2 ranks) -> evaluate the model from XCom.

Runs as is on an embedded local Spark (no connection needed): ``make demo``. The data is scikit-learn's
bundled ``load_digits`` (1,797 real 8x8 handwritten digits), so nothing is downloaded.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, XComArg, task

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

ACCURACY_THRESHOLD = 0.9


def build_model():
    """A small MLP for 8x8 digit images (64 inputs, 10 classes)."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )


def train_digits(
    data_path: str, epochs: int = 30, batch_size: int = 32, lr: float = 0.05, checkpoint_every: int = 5
) -> dict:
    """
    Horovod training function: runs on every rank; rank 0 logs the loss to TensorBoard, checkpoints every few
    epochs, saves the model and returns its metrics. A retry of the task resumes from the latest checkpoint.

    The Horovod part of the set-up (data sharded by rank, gradients averaged by ``hvd.DistributedOptimizer``,
    parameters broadcast from rank 0) is :func:`horovod_trainer` below.

    :param data_path: ``.npz`` written by ``prepare_data``, readable by every rank.
    :param epochs: passes over each rank's shard of the training data.
    :param batch_size: samples per step on each rank.
    :param lr: learning rate of a single rank (scaled by the number of ranks, see :func:`horovod_trainer`).
    :param checkpoint_every: save a checkpoint (model and optimizer) every this many epochs.
    :return: on rank 0: ``model_path``, ``final_loss`` (mean over the last epoch and all ranks), ``ranks``, and
        which epochs this try trained: ``try_number``, ``resumed_from_epoch`` (0: from scratch), ``epochs``;
        ``{}`` on the other ranks.
    """
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import (
        artifact_dir,
        load_checkpoint,
        report,
        save_checkpoint,
        tensorboard_dir,
        try_number,
    )

    hvd.init()
    torch.manual_seed(1234)
    model = build_model()
    trainer = horovod_trainer(model, data_path, batch_size, lr)
    # every try of this task instance shares checkpoint_dir(): a retry starts after the last epoch saved
    start_epoch, avg = 0, None
    resumed = load_checkpoint()  # every rank reads the same latest checkpoint; the log says "resuming from ..."
    if resumed is not None:
        state, start_epoch = resumed
        model.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod's convention: rank 0's state wins
        hvd.broadcast_optimizer_state(trainer.optimizer, root_rank=0)
    writer = None
    if hvd.rank() == 0:  # TensorBoard logs next to the model; the task pushes their directory as XCom tensorboard_dir
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(tensorboard_dir())

    total_steps = epochs * trainer.steps_per_epoch
    for epoch in range(start_epoch + 1, epochs + 1):
        total = torch.zeros(2)  # (sum of losses, steps) on this rank
        for i in range(trainer.steps_per_epoch):
            loss = trainer.step().item()
            total += torch.tensor([loss, 1.0])
            # cheap every step (throttled): the task log's progress line, metrics.jsonl, the UI's chart
            report(step=(epoch - 1) * trainer.steps_per_epoch + i + 1, total_steps=total_steps, epoch=epoch, loss=loss)
        avg = hvd.allreduce(total, op=hvd.Sum)
        # once per epoch, and every one kept (sample=False): an epoch here is shorter than report()'s 0.5 s sampling
        report(
            step=epoch * trainer.steps_per_epoch,
            total_steps=total_steps,
            epoch=epoch,
            epoch_loss=float(avg[0] / avg[1]),
            sample=False,
        )
        if writer is not None:
            writer.add_scalar("loss/train", float(avg[0] / avg[1]), epoch)
        if hvd.rank() == 0 and (epoch == 1 or epoch % 5 == 0):
            print(f"epoch {epoch:2d}/{epochs}  loss {avg[0] / avg[1]:.4f}  (size={hvd.size()})", flush=True)
        if epoch % checkpoint_every == 0:  # rank 0 writes (the others return at once); the last 3 are kept
            save_checkpoint({"model": model.state_dict(), "optimizer": trainer.optimizer.state_dict()}, step=epoch)

    if hvd.rank() == 0:
        writer.close()
        path = os.path.join(artifact_dir(), "model.pt")  # the final model: this try's artifact directory
        torch.save(model.state_dict(), path)
        print(f"saved model to {path}", flush=True)
        return {
            "model_path": path,
            "final_loss": None if avg is None else round(float(avg[0] / avg[1]), 4),
            "ranks": hvd.size(),
            "try_number": try_number(),
            "resumed_from_epoch": start_epoch,
            "epochs": epochs,
        }
    return {}


def horovod_trainer(model, data_path: str, batch_size: int, lr: float = 0.05, cuda: bool = False):
    """
    Data-parallel SGD for ``model`` on this rank's shard of the data; call it after ``hvd.init()`` on every rank.

    Each rank keeps every ``hvd.size()``-th training sample starting at ``hvd.rank()``. SGD (momentum 0.9,
    learning rate ``lr * hvd.size()``) is wrapped in ``hvd.DistributedOptimizer``, which averages the gradients
    over the ranks, and rank 0's parameters and optimizer state are broadcast so every rank starts alike.
    (The benchmarks and the GPU check time this very function: ``benchmarks/example_model.py``.)

    :param model: the freshly built ``torch.nn.Module``; moved to the training device in place.
    :param data_path: ``.npz`` with ``x_train`` (features) and ``y_train`` (class labels), readable by every rank.
    :param batch_size: samples per step on each rank.
    :param lr: learning rate of a single rank.
    :param cuda: train on GPU ``hvd.local_rank()``; otherwise on the CPU with one thread per rank.
    :return: a namespace: ``step()`` trains on this rank's next batch and returns its loss (each epoch visits
        the shard in a new random order), the ``optimizer`` (for checkpoints), ``steps_per_epoch`` (the same on
        every rank, so their collective operations match), this rank's shard ``x`` and ``y``, and the ``device``.
    """
    from types import SimpleNamespace

    import horovod.torch as hvd
    import numpy as np
    import torch

    if cuda:
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    data = np.load(data_path)
    x = torch.tensor(data["x_train"][hvd.rank() :: hvd.size()], dtype=torch.float32, device=device)
    y = torch.tensor(data["y_train"][hvd.rank() :: hvd.size()], dtype=torch.long, device=device)
    steps_per_epoch = (len(data["x_train"]) // hvd.size()) // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{len(data['x_train'])} samples make no batch of {batch_size} on each of {hvd.size()} ranks")

    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    order, done = None, 0

    def step() -> torch.Tensor:
        nonlocal order, done
        j = done % steps_per_epoch
        if j == 0:  # a new epoch, a new order
            order = torch.randperm(len(x), device=device)
        idx = order[j * batch_size : (j + 1) * batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        done += 1
        return loss.detach()

    return SimpleNamespace(step=step, optimizer=optimizer, steps_per_epoch=steps_per_epoch, x=x, y=y, device=device)


with DAG(
    dag_id="horovod_digits_retraining",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["horovod", "spark", "example"],
    doc_md=__doc__,
):

    @task
    def prepare_data(**context) -> str:
        """Split load_digits 80/20 (stratified) and write it where every rank can read it."""
        import numpy as np
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        from airflow_provider_horovod.paths import data_dir

        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.2, stratify=y, random_state=0)
        # the run's data directory in the provider's layout (<artifact root>/data/<run>, the id encoded)
        out_dir = data_dir(context["run_id"])
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "digits.npz")
        np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        print(f"prepared {len(x_train)} training and {len(x_test)} held-out digits at {path}")
        return path

    data_path = prepare_data()

    train = HorovodRunnerOperator(
        task_id="train",
        python_callable=train_digits,
        op_kwargs={"data_path": data_path, "epochs": 30},
        np=2,
        timeline=True,  # Horovod Timeline -> horovod_timeline.json among artifact_paths (chrome://tracing, Perfetto)
        retries=1,  # the retry resumes from the latest checkpoint (XCom checkpoint_dir; docs/checkpoints.md)
        retry_delay=pendulum.duration(seconds=10),
    )

    @task
    def evaluate(artifact_paths: list[str], data_path: str) -> float:
        """Load the model from the path in XCom and measure accuracy on the held-out digits."""
        import numpy as np
        import torch

        model_path = next(p for p in artifact_paths if p.endswith("model.pt"))
        model = build_model()
        model.load_state_dict(torch.load(model_path))
        model.eval()
        data = np.load(data_path)
        with torch.no_grad():
            pred = model(torch.tensor(data["x_test"], dtype=torch.float32)).argmax(dim=1).numpy()
        accuracy = float((pred == data["y_test"]).mean())
        print(f"held-out accuracy of {model_path}: {accuracy:.4f} on {len(pred)} digits")
        if accuracy < ACCURACY_THRESHOLD:
            raise ValueError(f"accuracy {accuracy:.4f} is below the {ACCURACY_THRESHOLD} threshold")
        return accuracy

    evaluate(XComArg(train, key="artifact_paths"), data_path)
