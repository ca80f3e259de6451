"""
The functions the contenders run on their ranks. Imports live inside them: they travel by value to the ranks.

Each returns a plain value so rank 0's result can be compared across launchers.
"""

from __future__ import annotations


def hvd_trivial() -> float:
    """B1 job for Horovod launchers: ``hvd.init()``, one allreduce, return the sum (== world size)."""
    import torch

    import horovod.torch as hvd

    hvd.init()
    return float(hvd.allreduce(torch.ones(1), op=hvd.Sum).item())


def torch_dist_trivial() -> float:
    """B1 job for ``TorchDistributor``: a torch.distributed gloo group, one all_reduce, return the sum."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return float(t.item())


def hvd_train_throughput(data_path: str, build_model, batch_size: int, warmup_steps: int, steps: int,
                         lr: float = 0.05) -> dict:
    """
    B3 job: the example DAG's training step (``build_model``, SGD + ``hvd.DistributedOptimizer``, one thread per
    rank) on the digits data, ``warmup_steps`` untimed then ``steps`` timed steps of ``batch_size`` per rank.

    :return: on rank 0: ``samples_per_s`` (global: steps x batch_size x size / timed seconds), ``size``, ``seconds``.
    """
    import time

    import numpy as np
    import torch

    import horovod.torch as hvd

    hvd.init()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    data = np.load(data_path)
    x = torch.tensor(data["x_train"][hvd.rank():: hvd.size()], dtype=torch.float32)
    y = torch.tensor(data["y_train"][hvd.rank():: hvd.size()], dtype=torch.long)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    per_epoch = len(x) // batch_size
    order = torch.randperm(len(x))

    def step(i: int) -> None:
        nonlocal order
        j = i % per_epoch
        if j == 0 and i:
            order = torch.randperm(len(x))
        idx = order[j * batch_size:(j + 1) * batch_size]
        optimizer.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        optimizer.step()

    for i in range(warmup_steps):
        step(i)
    hvd.allreduce(torch.zeros(1), name="warmup_done")
    start = time.perf_counter()
    for i in range(warmup_steps, warmup_steps + steps):
        step(i)
    hvd.allreduce(torch.zeros(1), name="timed_done")
    seconds = time.perf_counter() - start
    return {"samples_per_s": steps * batch_size * hvd.size() / seconds, "size": hvd.size(), "seconds": seconds}


def hvd_train_for(data_path: str, build_model, seconds: float, batch_size: int = 32) -> dict:
    """
    B4 job: train the example model for about ``seconds`` (rank 0's clock decides; every 20 steps the ranks
    agree through a broadcast whether to stop, so all take the same number of steps).
    """
    import time

    import numpy as np
    import torch

    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    data = np.load(data_path)
    x = torch.tensor(data["x_train"][hvd.rank():: hvd.size()], dtype=torch.float32)
    y = torch.tensor(data["y_train"][hvd.rank():: hvd.size()], dtype=torch.long)
    model = build_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    per_epoch = len(x) // batch_size
    start, steps = time.monotonic(), 0
    while True:
        j = steps % per_epoch
        optimizer.zero_grad()
        loss_fn(model(x[j * batch_size:(j + 1) * batch_size]), y[j * batch_size:(j + 1) * batch_size]).backward()
        optimizer.step()
        steps += 1
        if steps % 20 == 0:
            stop = torch.tensor([1.0 if time.monotonic() - start >= seconds else 0.0])
            if hvd.broadcast(stop, root_rank=0, name="stop").item() > 0:
                break
    return {"steps": steps, "seconds": time.monotonic() - start, "size": hvd.size()}


def hvd_probe() -> dict:
    """
    Profiling job for Horovod launchers: wall-clock timestamps (``time.time()``) of this rank's process creation,
    the function's entry (Horovod is usually initialized by then), the end of ``hvd.init()`` and of one allreduce.
    """
    import time

    import psutil

    entry = time.time()
    import torch

    import horovod.torch as hvd

    imported = time.time()
    hvd.init()
    init = time.time()
    hvd.allreduce(torch.ones(1), op=hvd.Sum)
    me = psutil.Process()
    return {"parent_created": me.parent().create_time(), "created": me.create_time(), "entry": entry,
            "imported": imported, "init": init, "done": time.time()}


def torch_dist_probe() -> dict:
    """:func:`hvd_probe` for ``TorchDistributor``: process creation, entry, process group ready, all_reduce done."""
    import time

    import psutil

    entry = time.time()
    import torch
    import torch.distributed as dist

    imported = time.time()
    dist.init_process_group("gloo")
    init = time.time()
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    me = psutil.Process()
    return {"parent_created": me.parent().create_time(), "created": me.create_time(), "entry": entry,
            "imported": imported, "init": init, "done": time.time()}
