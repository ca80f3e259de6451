"""
Training pipeline with PyTorch DDP: prepare data -> train with ``torch.distributed`` on Spark (2 ranks) -> evaluate
the model from XCom.

The same digits model and data as ``horovod_digits_retraining``, trained with plain ``torch.distributed`` instead of
Horovod (``docs/torch-distributed.md`` sets the two side by side): each rank gets the torchrun environment and calls
``init_process_group("gloo")`` itself, ``DistributedSampler`` gives it its share of the data, and
``DistributedDataParallel`` averages the gradients. Runs as is on an embedded local Spark (no connection needed);
the data is scikit-learn's bundled ``load_digits``, so nothing is downloaded.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, XComArg, task

from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator

ACCURACY_THRESHOLD = 0.9


def build_model():
    """A small MLP for 8x8 digit images (64 inputs, 10 classes): ``horovod_digits_retraining``'s."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )


def train_digits_ddp(
    data_path: str, epochs: int = 30, batch_size: int = 32, lr: float = 0.05, checkpoint_every: int = 5
) -> dict:
    """
    DDP training function: runs on every rank; rank 0 checkpoints every few epochs (a retry resumes from the latest),
    saves the model under ``artifact_dir()`` and returns metrics.

    :param data_path: ``.npz`` written by ``prepare_data``, readable by every rank.
    :param epochs: passes over each rank's share of the training data.
    :param batch_size: samples per step on each rank.
    :param lr: learning rate of a single rank (scaled by the number of ranks, as the Horovod example does).
    :param checkpoint_every: save a checkpoint (model and optimizer) every this many epochs.
    :return: on rank 0: ``model_path``, ``final_loss`` (mean over the last epoch and all ranks), ``ranks``,
        ``backend``, ``try_number``, ``resumed_from_epoch``; ``{}`` on the other ranks.
    """
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from airflow_provider_horovod.runtime import artifact_dir, load_checkpoint, save_checkpoint, try_number

    dist.init_process_group("gloo")  # env:// -- MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE come from the launcher
    try:
        rank, size = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(1234)
        torch.set_num_threads(1)
        data = np.load(data_path)
        dataset = TensorDataset(
            torch.tensor(data["x_train"], dtype=torch.float32), torch.tensor(data["y_train"], dtype=torch.long)
        )
        sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=True, seed=0, drop_last=True)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
        module, start_epoch, total = build_model(), 0, None
        resumed = load_checkpoint()  # every rank reads this task instance's latest checkpoint, if a try saved one
        if resumed is not None:
            state, start_epoch = resumed
            module.load_state_dict(state["model"])
        model = DistributedDataParallel(module)  # broadcasts rank 0's parameters to every rank
        optimizer = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=0.9)
        if resumed is not None:
            optimizer.load_state_dict(state["optimizer"])
        loss_fn = torch.nn.CrossEntropyLoss()

        for epoch in range(start_epoch + 1, epochs + 1):
            sampler.set_epoch(epoch)  # a new order each epoch, the same split on every rank
            total = torch.zeros(2)  # (sum of losses, steps) on this rank
            for x, y in loader:
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()  # DDP averages the gradients over the ranks here
                optimizer.step()
                total += torch.tensor([loss.item(), 1.0])
            dist.all_reduce(total)
            if rank == 0 and (epoch == 1 or epoch % 5 == 0):
                print(f"epoch {epoch:2d}/{epochs}  loss {total[0] / total[1]:.4f}  (world_size={size})", flush=True)
            if epoch % checkpoint_every == 0:  # rank 0 writes, the other ranks return at once
                save_checkpoint({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, step=epoch)

        if rank != 0:
            return {}
        path = os.path.join(artifact_dir(), "model.pt")
        torch.save(model.module.state_dict(), path)  # the plain model's weights, loadable without DDP
        print(f"saved model to {path}", flush=True)
        return {
            "model_path": path,
            "final_loss": None if total is None else round(float(total[0] / total[1]), 4),
            "ranks": size,
            "backend": dist.get_backend(),
            "try_number": try_number(),
            "resumed_from_epoch": start_epoch,
        }
    finally:
        dist.destroy_process_group()


with DAG(
    dag_id="ddp_digits_training",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torch", "ddp", "spark", "example"],
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
        out_dir = data_dir(context["run_id"], "ddp")
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "digits.npz")
        np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        print(f"prepared {len(x_train)} training and {len(x_test)} held-out digits at {path}")
        return path

    data_path = prepare_data()

    train = TorchDistributedOperator(
        task_id="train",
        python_callable=train_digits_ddp,
        op_kwargs={"data_path": data_path, "epochs": 30},
        np=2,
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
