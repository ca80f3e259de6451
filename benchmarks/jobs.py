"""
The functions the contenders run on their ranks. Imports live inside them: they travel by value to the ranks.

Each returns a plain value so rank 0's result can be compared across launchers. The training jobs use the example
DAG's own :func:`horovod_trainer` (see :mod:`benchmarks.example_model`, which travels by value too).
"""

from __future__ import annotations

from benchmarks.example_model import horovod_trainer


def hvd_trivial() -> float:
    """B1 job for Horovod launchers: ``hvd.init()``, one allreduce, return the sum (== world size)."""
    import horovod.torch as hvd
    import torch

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


EPOCH_STEPS = 50
"""B3's ``report()`` contender reports ``epoch_loss`` once every this many steps (the digits' epoch at batch 32 is
about 45 steps per rank)."""


def hvd_train_throughput(
    data_path: str,
    build_model,
    batch_size: int,
    warmup_steps: int,
    steps: int,
    lr: float = 0.05,
    report_steps: bool = False,
) -> dict:
    """
    B3 job: the example DAG's training step (``build_model`` and :func:`horovod_trainer`, one thread per rank) on
    the digits data, ``warmup_steps`` untimed then ``steps`` timed steps of ``batch_size`` per rank.

    :param data_path: the example DAG's split of the digits (:func:`benchmarks.env.prepare_digits`).
    :param build_model: the example DAG's ``build_model``.
    :param batch_size: samples per step on each rank.
    :param warmup_steps: untimed steps first.
    :param steps: timed steps, between two barriers.
    :param lr: learning rate of a single rank.
    :param report_steps: call ``runtime.report(step, total_steps, loss)`` after every timed step and, every
        :data:`EPOCH_STEPS` steps, ``report(step, epoch, epoch_loss)`` in a call of its own (two metrics at
        different rates, as the example DAG reports them: B3's ``report()`` contender, what reporting costs the
        example model). Either way each step's loss is read (``.item()``), as the example DAG's loop does.
    :return: on rank 0: ``samples_per_s`` (global: steps x batch_size x size / timed seconds), ``size``, ``seconds``.
    """
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import report

    hvd.init()
    torch.manual_seed(1234)
    trainer = horovod_trainer(build_model(), data_path, batch_size, lr)
    for _ in range(warmup_steps):
        trainer.step()
    hvd.allreduce(torch.zeros(1), name="warmup_done")
    start = time.perf_counter()
    epoch_total = 0.0
    for step in range(1, steps + 1):
        loss = trainer.step().item()
        if report_steps:
            report(step=step, total_steps=steps, loss=loss)
            epoch_total += loss
            if step % EPOCH_STEPS == 0:  # a slower metric, in its own call
                report(step=step, epoch=step // EPOCH_STEPS, epoch_loss=epoch_total / EPOCH_STEPS)
                epoch_total = 0.0
    hvd.allreduce(torch.zeros(1), name="timed_done")
    seconds = time.perf_counter() - start
    return {"samples_per_s": steps * batch_size * hvd.size() / seconds, "size": hvd.size(), "seconds": seconds}


def hvd_train_for(data_path: str, build_model, seconds: float, batch_size: int = 32) -> dict:
    """
    B4 job: train the example model (``build_model`` and :func:`horovod_trainer`) for about ``seconds`` (rank 0's
    clock decides; every 20 steps the ranks agree through a broadcast whether to stop, so all take the same number
    of steps).

    :param data_path: the example DAG's split of the digits (:func:`benchmarks.env.prepare_digits`).
    :param build_model: the example DAG's ``build_model``.
    :param seconds: how long to train.
    :param batch_size: samples per step on each rank.
    :return: ``steps``, ``seconds`` (this rank's training time) and ``size``.
    """
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    trainer = horovod_trainer(build_model(), data_path, batch_size)
    start, steps = time.monotonic(), 0
    while True:
        trainer.step()
        steps += 1
        if steps % 20 == 0:
            stop = torch.tensor([1.0 if time.monotonic() - start >= seconds else 0.0])
            if hvd.broadcast(stop, root_rank=0, name="stop").item() > 0:
                break
    return {"steps": steps, "seconds": time.monotonic() - start, "size": hvd.size()}


def process_created(pid: int | str = "self") -> float:
    """
    Wall-clock creation time (``time.time()`` scale) of a process, to the clock tick (10 ms).

    Not ``psutil.Process.create_time()``: it adds the start tick to the boot time from ``/proc/stat``, which is
    whole seconds, so it reads up to 1 s early (0.29 s on the machine that found it). Here the process's age,
    ``CLOCK_BOOTTIME`` now minus its start tick (both since boot), is taken from the wall clock instead.
    """
    import os
    import time

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 is fields[0]; starttime is 22
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def hvd_probe() -> dict:
    """
    Profiling job for Horovod launchers: wall-clock timestamps (``time.time()``) of this rank's process creation,
    the function's entry (Horovod is usually initialized by then), the end of ``hvd.init()`` and of one allreduce.
    """
    import os
    import time

    entry = time.time()
    import horovod.torch as hvd
    import torch

    imported = time.time()
    hvd.init()
    init = time.time()
    hvd.allreduce(torch.ones(1), op=hvd.Sum)
    return {
        "parent_created": process_created(os.getppid()),
        "created": process_created(),
        "entry": entry,
        "imported": imported,
        "init": init,
        "done": time.time(),
    }


def torch_dist_probe() -> dict:
    """:func:`hvd_probe` for ``TorchDistributor``: process creation, entry, process group ready, all_reduce done."""
    import os
    import time

    entry = time.time()
    import torch
    import torch.distributed as dist

    imported = time.time()
    dist.init_process_group("gloo")
    init = time.time()
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {
        "parent_created": process_created(os.getppid()),
        "created": process_created(),
        "entry": entry,
        "imported": imported,
        "init": init,
        "done": time.time(),
    }


def ddp_trainer(model, data_path: str, batch_size: int, lr: float = 0.05, cuda: bool = False):
    """
    :func:`horovod_trainer` with ``torch.distributed`` DDP instead of Horovod (B8), call it after
    ``init_process_group``: the same shard (every ``world_size``-th sample from ``rank``), SGD (momentum 0.9,
    learning rate ``lr * world_size``), loss, batches and step; gradients averaged by
    ``DistributedDataParallel`` (which broadcasts rank 0's parameters when it wraps the model). On the CPU with
    one torch thread per rank, or with ``cuda`` on GPU ``LOCAL_RANK`` of the visible ones (the torchrun contract;
    the GPU check's DDP/NCCL case).

    :return: a namespace like :func:`horovod_trainer`'s: ``step()``, ``steps_per_epoch``, ``x``, ``y``,
        ``device``, ``model`` (the DDP-wrapped module).
    """
    import os
    from types import SimpleNamespace

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    rank, size = dist.get_rank(), dist.get_world_size()
    data = np.load(data_path)
    x = torch.tensor(data["x_train"][rank::size], dtype=torch.float32, device=device)
    y = torch.tensor(data["y_train"][rank::size], dtype=torch.long, device=device)
    steps_per_epoch = (len(data["x_train"]) // size) // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{len(data['x_train'])} samples make no batch of {batch_size} on each of {size} ranks")
    model.to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr * size, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    order, done = None, 0

    def step() -> torch.Tensor:
        nonlocal order, done
        j = done % steps_per_epoch
        if j == 0:  # a new epoch, a new order
            order = torch.randperm(len(x), device=device)
        idx = order[j * batch_size : (j + 1) * batch_size]
        optimizer.zero_grad()
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        done += 1
        return loss.detach()

    return SimpleNamespace(step=step, steps_per_epoch=steps_per_epoch, x=x, y=y, device=device, model=ddp)


def ddp_train_throughput(
    data_path: str, build_model, batch_size: int, warmup_steps: int, steps: int, lr: float = 0.05
) -> dict:
    """
    B8 job: :func:`hvd_train_throughput` with DDP (:func:`ddp_trainer`): ``init_process_group("gloo")`` from the
    torchrun environment, ``warmup_steps`` untimed, then ``steps`` timed between two all_reduces.

    Positional arguments only where PySpark's ``TorchDistributor.run`` passes them (it takes ``*args``).

    :return: on every rank: ``samples_per_s`` (global), ``size``, ``seconds``, ``rank``, ``final_loss``.
    """
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(1234)
        trainer = ddp_trainer(build_model(), data_path, batch_size, lr)
        for _ in range(warmup_steps):
            trainer.step()
        dist.all_reduce(torch.zeros(1))
        start = time.perf_counter()
        loss = None
        for _ in range(steps):
            loss = trainer.step()
        dist.all_reduce(torch.zeros(1))
        seconds = time.perf_counter() - start
        size = dist.get_world_size()
        return {
            "samples_per_s": steps * batch_size * size / seconds,
            "size": size,
            "seconds": seconds,
            "rank": dist.get_rank(),
            "final_loss": float(loss) if loss is not None else None,
        }
    finally:
        dist.destroy_process_group()


def steps_per_epoch(data_path: str, batch_size: int, size: int) -> int:
    """The trainers' steps per epoch on ``size`` ranks (each rank's shard // ``batch_size``)."""
    import numpy as np

    return (len(np.load(data_path)["x_train"]) // size) // batch_size
