"""
One-command GPU check: train the example DAG's model with Horovod on this machine's GPUs and report samples/s.

``scripts/gpu_check.sh`` (or ``.venv/bin/python -m benchmarks.gpu_check``) runs ``HorovodRunner(np=-N,
use_gpu=True)``: N rank processes on this machine, one per GPU, each given ``CUDA_VISIBLE_DEVICES`` by the
provider and pinning ``torch.cuda.set_device(hvd.local_rank())``. The model and its training set-up are
``build_model`` and ``horovod_trainer`` from ``example_dags/horovod_digits_retraining.py`` (compiled from that
file by ``benchmarks/example_model.py``, so Airflow is not needed), as ``train_digits`` uses them (SGD + momentum,
``hvd.DistributedOptimizer``, parameters broadcast from rank 0), on scikit-learn's bundled digits, tiled to make
epochs long enough to time.

What it measures: **global training throughput** (samples/s summed over ranks = samples processed by all ranks
/ wall time of the timed epochs), excluding a first warm-up epoch (CUDA context, NCCL communicator set-up), with
``torch.cuda.synchronize()`` before reading the clock. Gradients are averaged with NCCL when Horovod was built
with it (``horovod.torch.nccl_built()``) and the tensors are on CUDA; otherwise it says which path it took.

``--launcher ddp`` runs the same measurement with PyTorch DDP instead (issue #24): this provider's
``TorchDistributor(num_processes=N, local_mode=True, use_gpu=True)``, each rank calling
``init_process_group("nccl")`` from the torchrun environment the launcher sets and training on GPU ``LOCAL_RANK``
(``benchmarks/jobs.py: ddp_trainer``, the example's set-up with ``DistributedDataParallel``), so NCCL reduces the
gradients; it needs no Horovod at all, and without a CUDA device it falls back to Gloo on the CPU.

Fallbacks, each stated in the report: no CUDA device, or a Horovod built without CUDA (``scripts/setup.sh``
builds a CPU/Gloo Horovod), trains on the CPU with 2 ranks. Nothing is built or downloaded; rebuilding Horovod
with NCCL (``HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_WITH_PYTORCH=1 pip install --no-cache-dir horovod==0.28.1``)
takes about 3-5 minutes on 16 cores and must be done before this check. The whole run is bounded by
``--timeout-s`` (default 540 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.example_model import build_model, horovod_trainer
from benchmarks.jobs import ddp_trainer

REPO = Path(__file__).resolve().parent.parent


def bench(data_path: str, epochs: int, batch_size: int, lr: float, use_cuda: bool) -> dict:
    """
    The Horovod training function every rank runs: the example DAG's ``build_model`` and ``horovod_trainer``,
    one untimed warm-up epoch, then ``epochs`` timed epochs.

    :param data_path: ``.npz`` with ``x_train`` and ``y_train`` (:func:`_dataset`).
    :param epochs: timed epochs.
    :param batch_size: samples per step on each rank.
    :param lr: learning rate of a single rank.
    :param use_cuda: train on GPU ``hvd.local_rank()``, else on the CPU.
    :return: on rank 0, the measurements; ``{}`` on the other ranks.
    """
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.manual_seed(1234)
    model = build_model()
    trainer = horovod_trainer(model, data_path, batch_size, lr, cuda=use_cuda)

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize()

    timed_s = 0.0
    loss = torch.zeros(())
    for epoch in range(epochs + 1):  # epoch 0 is the warm-up
        sync()
        started = time.perf_counter()
        for _ in range(trainer.steps_per_epoch):
            loss = trainer.step()
        sync()
        if epoch > 0:
            timed_s += time.perf_counter() - started
    with torch.no_grad():
        correct = (model(trainer.x).argmax(dim=1) == trainer.y).sum()
    totals = hvd.allreduce(torch.tensor([float(correct), float(len(trainer.y)), float(loss)]), op=hvd.Sum)
    slowest = hvd.allreduce(torch.tensor([timed_s]), op=hvd.Max).item()
    devices = hvd.allgather_object(torch.cuda.get_device_name(trainer.device) if use_cuda else "cpu")
    visible = hvd.allgather_object(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if hvd.rank() != 0:
        return {}
    samples = trainer.steps_per_epoch * batch_size * hvd.size() * epochs
    return {
        "ranks": hvd.size(),
        "devices": devices,
        "cuda_visible_devices": visible,
        "allreduce": ("NCCL" if hvd.nccl_built() else "CUDA tensors without NCCL")
        if use_cuda
        else "Gloo (CPU tensors)",
        "timed_epochs": epochs,
        "samples": samples,
        "seconds": round(slowest, 3),
        "samples_per_s": round(samples / slowest, 1) if slowest else None,
        "train_accuracy": round(totals[0].item() / totals[1].item(), 4),
        "mean_final_loss": round(totals[2].item() / hvd.size(), 4),
    }


def ddp_bench(data_path: str, epochs: int, batch_size: int, lr: float, use_cuda: bool) -> dict:
    """
    :func:`bench` with PyTorch DDP: ``init_process_group("nccl")`` on GPUs (``"gloo"`` on the CPU) from the
    torchrun environment, the example's model and data set-up with ``DistributedDataParallel``
    (:func:`benchmarks.jobs.ddp_trainer`, GPU ``LOCAL_RANK``), one warm-up epoch, ``epochs`` timed epochs.

    :return: on rank 0, the measurements (the same keys as :func:`bench`'s); ``{}`` on the other ranks.
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl" if use_cuda else "gloo")
    try:
        torch.manual_seed(1234)
        model = build_model()
        trainer = ddp_trainer(model, data_path, batch_size, lr, cuda=use_cuda)

        def sync() -> None:
            if use_cuda:
                torch.cuda.synchronize()

        timed_s = 0.0
        loss = torch.zeros((), device=trainer.device)
        for epoch in range(epochs + 1):  # epoch 0 is the warm-up (CUDA context, NCCL communicator)
            sync()
            started = time.perf_counter()
            for _ in range(trainer.steps_per_epoch):
                loss = trainer.step()
            sync()
            if epoch > 0:
                timed_s += time.perf_counter() - started
        with torch.no_grad():
            correct = (model(trainer.x).argmax(dim=1) == trainer.y).sum()
        totals = torch.tensor([float(correct), float(len(trainer.y)), float(loss)], device=trainer.device)
        dist.all_reduce(totals)
        slowest = torch.tensor([timed_s], device=trainer.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        size = dist.get_world_size()
        devices: list = [None] * size
        visible: list = [None] * size
        dist.all_gather_object(devices, torch.cuda.get_device_name(trainer.device) if use_cuda else "cpu")
        dist.all_gather_object(visible, os.environ.get("CUDA_VISIBLE_DEVICES"))
        local_ranks: list = [None] * size
        dist.all_gather_object(local_ranks, os.environ.get("LOCAL_RANK"))
        backend = dist.get_backend()
    finally:
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) != 0:
        return {}
    slowest_s = slowest.item()
    samples = trainer.steps_per_epoch * batch_size * size * epochs
    return {
        "ranks": size,
        "devices": devices,
        "cuda_visible_devices": visible,
        "local_ranks": local_ranks,
        "allreduce": f"DDP over {backend.upper() if backend == 'nccl' else backend.capitalize()} "
        f"({'CUDA' if use_cuda else 'CPU'} tensors)",
        "timed_epochs": epochs,
        "samples": samples,
        "seconds": round(slowest_s, 3),
        "samples_per_s": round(samples / slowest_s, 1) if slowest_s else None,
        "train_accuracy": round(totals[0].item() / totals[1].item(), 4),
        "mean_final_loss": round(totals[2].item() / size, 4),
    }


def _environment() -> dict:
    import torch
    import torch.distributed as dist

    env = {
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch_nccl_available": bool(dist.is_nccl_available()),
        "torch_gloo_available": bool(dist.is_gloo_available()),
        "horovod_cuda_built": None,
        "horovod_nccl_built": None,
        "horovod_gloo_built": None,
    }
    try:
        import horovod.torch as hvd
    except ImportError as err:  # the DDP case needs no Horovod
        env["horovod"] = f"not importable: {err}"
    else:
        env.update(
            horovod_cuda_built=bool(hvd.cuda_built()),
            horovod_nccl_built=bool(hvd.nccl_built()),
            horovod_gloo_built=bool(hvd.gloo_built()),
        )
    return env


def _dataset(path: str, copies: int) -> int:
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    np.savez(path, x_train=np.tile(x / 16.0, (copies, 1)), y_train=np.tile(y, copies))
    return len(x) * copies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=0, help="ranks (default: one per GPU, or 2 on the CPU)")
    p.add_argument("--epochs", type=int, default=5, help="timed epochs (after one warm-up epoch)")
    p.add_argument("--batch-size", type=int, default=256, help="per-rank batch size")
    p.add_argument(
        "--copies",
        type=int,
        default=0,
        help="tile the 1,797 digits this many times (default: 64 on GPUs, 32 on the CPU)",
    )
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when GPUs are usable")
    p.add_argument(
        "--launcher",
        choices=("horovod", "ddp"),
        default="horovod",
        help="horovod (HorovodRunner, hvd.DistributedOptimizer) or ddp (TorchDistributor, DDP over NCCL "
        "on GPUs, Gloo on the CPU)",
    )
    p.add_argument("--timeout-s", type=float, default=540.0, help="bound on the training run")
    p.add_argument("--out", help="also write the report as JSON here")
    args = p.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from airflow_provider_horovod.runtime import HorovodRunner, TorchDistributor

    env = _environment()
    notes = []
    ddp = args.launcher == "ddp"
    if ddp:
        use_cuda = env["cuda_available"] and env["torch_nccl_available"] and not args.cpu
    else:
        use_cuda = env["cuda_available"] and bool(env["horovod_cuda_built"]) and not args.cpu
    if args.cpu:
        notes.append("--cpu given: trained on the CPU")
    elif not env["cuda_available"]:
        notes.append("no CUDA device visible to PyTorch: trained on the CPU (the fallback path)")
    elif ddp and not env["torch_nccl_available"]:
        notes.append(
            "this torch has no NCCL (torch.distributed.is_nccl_available() is False): trained on the CPU with Gloo"
        )
    elif ddp:
        pass
    elif not env["horovod_cuda_built"]:
        notes.append(
            "Horovod was built without CUDA (scripts/setup.sh builds Gloo/CPU): trained on the CPU. Rebuild "
            "with HOROVOD_GPU_OPERATIONS=NCCL to measure GPUs"
        )
    elif not env["horovod_nccl_built"]:
        notes.append("Horovod has CUDA but not NCCL: GPU gradients are reduced without NCCL")
    np_ = args.np or (env["cuda_devices"] if use_cuda else 2)
    copies = args.copies or (64 if use_cuda else 32)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        data_path = os.path.join(tmp, "digits.npz")
        n = _dataset(data_path, copies)
        started = time.monotonic()
        settings = dict(env={"OMP_NUM_THREADS": "1"}, start_timeout_s=120, training_timeout_s=args.timeout_s)
        if ddp:
            result = TorchDistributor(num_processes=np_, local_mode=True, use_gpu=use_cuda, **settings).run(
                ddp_bench, data_path, args.epochs, args.batch_size, 0.05, use_cuda
            )
        else:
            runner = HorovodRunner(np=-np_, use_gpu=use_cuda, **settings)
            result = runner.run(
                bench, data_path=data_path, epochs=args.epochs, batch_size=args.batch_size, lr=0.05, use_cuda=use_cuda
            )
        wall = time.monotonic() - started
    report = {
        "measured": "global training throughput of the example DAG's build_model() MLP (64-128-64-10), "
        "samples/s summed over ranks, timed epochs only (one warm-up epoch excluded)",
        "mode": "gpu" if use_cuda else "cpu",
        "launcher": args.launcher,
        "dataset_samples": n,
        "batch_size_per_rank": args.batch_size,
        **result,
        "wall_s_including_start": round(wall, 1),
        "environment": env,
        "notes": notes,
    }
    print("\n=== gpu_check report ===")
    print(f"measured : {report['measured']}")
    print(
        f"mode     : {report['mode'].upper()} on {result['ranks']} rank(s) {result['devices']}; "
        f"CUDA_VISIBLE_DEVICES per rank {result['cuda_visible_devices']}; allreduce {result['allreduce']}"
    )
    print(
        f"result   : {result['samples_per_s']} samples/s ({result['samples']} samples in {result['seconds']} s; "
        f"train accuracy {result['train_accuracy']}, final loss {result['mean_final_loss']})"
    )
    print(
        f"launcher : {args.launcher}; horovod cuda_built={env['horovod_cuda_built']} "
        f"nccl_built={env['horovod_nccl_built']}; torch {env['torch']} (nccl={env['torch_nccl_available']}), "
        f"{env['cuda_devices']} CUDA device(s)"
    )
    for note in notes:
        print(f"note     : {note}")
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
