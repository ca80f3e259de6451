"""
FSDP on the CPU through this provider's ``TorchDistributor`` (issue #24, item 6): np=2 barrier tasks on the shared
``local[2]`` SparkSession, Gloo.

The installed torch (2.13) supports FSDP2 (``torch.distributed.fsdp.fully_shard``) on a CPU device mesh with Gloo:
parameters are sharded (each rank holds about half of them as ``DTensor`` shards), the all-gathers and
reduce-scatters run over Gloo. The test trains a small MLP for a few steps, each rank on its own batch, and checks
that the loss went down, that the parameters really were sharded, that both ranks' full state dicts (gathered with
``get_model_state_dict(full_state_dict=True)``) are identical, and that they equal plain single-process SGD on the
two ranks' batches together (FSDP averages the gradients over the ranks, so the two must agree to float rounding).
"""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime import TorchDistributor

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]

STEPS = 8
LR = 0.1


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _batch(rank: int):
    """Rank ``rank``'s batch: 64 samples, 4 classes (a learnable rule), different on each rank."""
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 16, generator=g)
    return x, x[:, :4].argmax(1)


def fsdp_train(steps: int, lr: float) -> dict:
    """Every rank: FSDP2 over a CPU mesh of all ranks, ``steps`` SGD steps on its own batch, full state gathered."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.set_num_threads(1)
        model = _model()
        full_numel = sum(p.numel() for p in model.parameters())
        mesh = init_device_mesh("cpu", (world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        local_numel = sum(p.to_local().numel() for p in model.parameters())
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        x, y = _batch(rank)
        losses = []
        for _ in range(steps):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        state = {k: v.detach().clone() for k, v in state.items()}
        flat = torch.cat([v.flatten() for v in state.values()])
        every = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(every, flat)  # each rank's gathered full state, to compare on rank 0
        return {
            "rank": rank,
            "world": world,
            "losses": losses,
            "local_numel": local_numel,
            "full_numel": full_numel,
            "state": state,
            "max_rank_diff": max(float((t - every[0]).abs().max()) for t in every),
        }
    finally:
        dist.destroy_process_group()


def _reference(steps: int, lr: float) -> dict:
    """Single-process SGD on both ranks' batches at once (mean loss over 128 samples): what FSDP must compute."""
    import torch

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    batches = [_batch(r) for r in range(2)]
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_fsdp2_trains_on_cpu_with_gloo_in_barrier_tasks(spark):
    import torch

    out = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(fsdp_train, STEPS, LR)

    assert out["rank"] == 0 and out["world"] == 2
    losses = out["losses"]
    assert len(losses) == STEPS and losses[-1] < losses[0] - 0.05, losses
    # really sharded: rank 0 holds about half of the parameters, not a replica
    assert out["local_numel"] <= out["full_numel"] // 2 + 32, (out["local_numel"], out["full_numel"])
    # the two ranks' gathered full states are identical
    assert out["max_rank_diff"] == 0.0
    # and equal to plain SGD on both ranks' data: the gradients were averaged over the ranks
    reference = _reference(STEPS, LR)
    assert set(out["state"]) == set(reference)
    for name, value in reference.items():
        torch.testing.assert_close(out["state"][name], value, rtol=1e-4, atol=1e-5, msg=name)
