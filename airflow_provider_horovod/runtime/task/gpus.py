"""
Which GPUs each rank sees: pure functions from Spark's per-task GPU addresses to ``CUDA_VISIBLE_DEVICES``.

Spark's resource scheduling (``spark.task.resource.gpu.amount``) gives every barrier task a list of GPU
addresses (``BarrierTaskContext.resources()["gpu"].addresses``). The launcher maps them to device IDs
(:func:`owned_gpus`), the tasks exchange them with ``allGather``, and each rank's process gets the
``CUDA_VISIBLE_DEVICES`` chosen by the job's ``gpu_visibility`` (:func:`device_env`):

``"host"`` (default)
    Every rank on a host sees the GPUs of all the host's ranks, ordered so that device index
    ``hvd.local_rank()`` is the rank's own (first) GPU: ``torch.cuda.set_device(hvd.local_rank())``, Horovod's
    documented idiom, picks the GPU Spark gave that rank's task, and NCCL sees its peers' devices.
``"rank"``
    Every rank sees only its own GPU(s): ``torch.cuda.set_device(0)`` is right (and
    ``set_device(hvd.local_rank())`` fails for ``local_rank > 0``). Needed when tasks share a GPU
    (fractional ``spark.task.resource.gpu.amount``) or a task's process cannot open the other tasks' GPUs.

Without ``use_gpu`` every rank gets ``CUDA_VISIBLE_DEVICES=""`` (no GPU), as TorchDistributor does: a CPU job
must not take a GPU that Spark scheduled for someone else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.settings import DEFAULT_GPU_VISIBILITY, validate_gpu_visibility
from airflow_provider_horovod.runtime.task.plan import Slot

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
GPU_RESOURCE = "gpu"
"""Spark's resource name for GPUs."""
TASK_GPU_CONF = "spark.task.resource.gpu.amount"

_INDEX = re.compile(r"0|[1-9][0-9]*")
_HOW_TO_SCHEDULE = (
    f"set {TASK_GPU_CONF} (GPUs per task, e.g. 1) and spark.executor.resource.gpu.amount for the application, "
    "and give executors a discovery script (spark.executor.resource.gpu.discoveryScript, or "
    "spark.worker.resource.gpu.amount / spark.worker.resource.gpu.discoveryScript on a standalone cluster)"
)


def check_gpu_conf(conf: Mapping[str, str]) -> float:
    """
    Check, before any task starts, that a Spark application asking for ``use_gpu`` schedules GPUs.

    :param conf: the application's Spark properties (``dict(sc.getConf().getAll())``).
    :return: GPUs per task (``spark.task.resource.gpu.amount``).
    :raises LaunchError: the property is missing, not a number, or not positive; the message says what to set.
    """
    raw = conf.get(TASK_GPU_CONF)
    try:
        amount = float(raw) if raw is not None else 0.0
    except ValueError:
        amount = 0.0
    if amount <= 0:
        found = "is not set" if raw is None else f"is {raw!r}"
        raise LaunchError(
            f"use_gpu=True but this Spark application does not give tasks GPUs ({TASK_GPU_CONF} "
            f"{found}): {_HOW_TO_SCHEDULE}"
        )
    return amount


def owned_gpus(addresses: Sequence[str], executor_visible: str | None, *, where: str = "this task") -> list[str]:
    """
    The device IDs of a task's GPUs, valid in a process whose ``CUDA_VISIBLE_DEVICES`` the launcher sets.

    Spark hands out the addresses its discovery script reported. When the executor itself runs with a
    ``CUDA_VISIBLE_DEVICES`` (a container runtime or resource manager set it), those addresses are indices
    into that list, as TorchDistributor's ``_get_gpus_owned`` reads them; otherwise they are used as they are.

    :param addresses: the task's GPU addresses (``BarrierTaskContext.resources()["gpu"].addresses``).
    :param executor_visible: the executor's own ``CUDA_VISIBLE_DEVICES``, or ``None`` when it has none.
    :param where: names the task in error messages (e.g. ``"task 3 on 10.0.0.5"``).
    :return: device IDs (indices or GPU UUIDs), in Spark's order.
    :raises LaunchError: no addresses, or an address is not a valid index into ``executor_visible``.
    """
    if not addresses:
        raise LaunchError(f"use_gpu=True but Spark gave {where} no GPU addresses: {_HOW_TO_SCHEDULE}")
    if executor_visible is None:
        return [str(a) for a in addresses]
    visible = [d.strip() for d in executor_visible.split(",") if d.strip()]
    devices = []
    for address in addresses:
        if not _INDEX.fullmatch(str(address)) or int(address) >= len(visible):
            raise LaunchError(
                f"Spark gave {where} GPU address {address!r}, which is not an index into the "
                f"executor's {CUDA_VISIBLE_DEVICES}={executor_visible!r}; make the discovery script "
                f"report indices 0..{max(len(visible) - 1, 0)} of that list"
            )
        devices.append(visible[int(address)])
    return devices


def visible_devices(owned: Sequence[Sequence[str]], plan: Sequence[Slot], index: int, visibility: str) -> str:
    """
    ``CUDA_VISIBLE_DEVICES`` for ``plan[index]`` under ``visibility`` (see the module docstring).

    For ``"host"`` the list is the first GPU of each rank on the host in ``local_rank`` order, then the other
    GPUs of each rank in the same order: with one GPU per rank device ``i`` is local rank ``i``'s GPU; with
    ``k`` GPUs per rank device ``local_rank`` is still the rank's first GPU.

    :param owned: ``owned[i]`` is the device IDs (from :func:`owned_gpus`) of the rank at ``plan[i]``.
    :param plan: the slot plan, aligned with ``owned``.
    :param index: which rank.
    :param visibility: ``"host"`` or ``"rank"``.
    :return: a comma-separated device list.
    :raises LaunchError: for ``"host"``, ranks on the host share a device (use ``"rank"``) or one has none.
    :raises ValueError: ``visibility`` is unknown or ``owned`` and ``plan`` differ in length.
    """
    validate_gpu_visibility(visibility)
    if len(owned) != len(plan):
        raise ValueError(f"{len(owned)} GPU lists for {len(plan)} ranks")
    slot = plan[index]
    if visibility == "rank":
        return ",".join(owned[index])
    mates = sorted((i for i, s in enumerate(plan) if s.host_key == slot.host_key), key=lambda i: plan[i].local_rank)
    lists = [list(owned[i]) for i in mates]
    if any(not devices for devices in lists):
        raise LaunchError(f"a rank on host {slot.address} has no GPU; every task needs at least one with use_gpu=True")
    flat = [d for devices in lists for d in devices]
    if len(set(flat)) != len(flat):
        shared = sorted({d for d in flat if flat.count(d) > 1})
        raise LaunchError(
            f"ranks on host {slot.address} share GPU(s) {shared} (fractional {TASK_GPU_CONF}?), so "
            "gpu_visibility='host' cannot give each local rank its own device index; use "
            "gpu_visibility='rank' and torch.cuda.set_device(0)"
        )
    return ",".join([devices[0] for devices in lists] + [d for devices in lists for d in devices[1:]])


def device_env(
    use_gpu: bool,
    owned: Sequence[Sequence[str]],
    plan: Sequence[Slot],
    index: int,
    visibility: str = DEFAULT_GPU_VISIBILITY,
) -> dict[str, str]:
    """
    The device variables of rank ``plan[index]``: ``CUDA_VISIBLE_DEVICES`` only.

    ``NCCL_SOCKET_IFNAME`` comes with the Gloo variables (:func:`~.plan.gloo_env`), from the same interface.

    :param use_gpu: whether the job uses GPUs; ``False`` hides every GPU (``CUDA_VISIBLE_DEVICES=""``).
    :param owned: per-rank device IDs, aligned with ``plan`` (ignored without ``use_gpu``).
    :param plan: the slot plan.
    :param index: which rank.
    :param visibility: ``"host"`` or ``"rank"``.
    :raises LaunchError: see :func:`visible_devices`.
    """
    if not use_gpu:
        return {CUDA_VISIBLE_DEVICES: ""}
    return {CUDA_VISIBLE_DEVICES: visible_devices(owned, plan, index, visibility)}


NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
"""One entry per GPU while NVIDIA's kernel driver is loaded (what ``nvidia-smi`` lists, without running it)."""


def driver_gpu_count(gpus_dir: str = NVIDIA_GPUS_DIR) -> int:
    """
    How many NVIDIA GPUs this machine has: the entries of :data:`NVIDIA_GPUS_DIR` (none without the driver).

    :param gpus_dir: the directory to count (tests).
    """
    import os

    try:
        return len(os.listdir(gpus_dir))
    except OSError:
        return 0


def driver_owned_gpus(np_: int, driver_visible: str | None, gpu_count: int | None = None) -> list[list[str]]:
    """
    GPUs of ``np_`` ranks on the driver (``HorovodRunner(np=-N, use_gpu=True)``, ``TorchDistributor(local_mode=True,
    use_gpu=True)``): one each, in order.

    Rank ``r`` gets device ``r`` of the driver, mapped through the driver's own ``CUDA_VISIBLE_DEVICES``
    when it has one (then ``np_`` must not exceed its length); without one, the machine must have ``np_`` GPUs
    (:func:`driver_gpu_count`), as barrier tasks must have been given theirs.

    :param np_: the ranks on the driver.
    :param driver_visible: the driver's ``CUDA_VISIBLE_DEVICES`` (``None``: unset).
    :param gpu_count: the machine's GPUs (default: :func:`driver_gpu_count`).
    :raises LaunchError: the driver has fewer GPUs than ranks (none at all on a CPU machine), or its
        ``CUDA_VISIBLE_DEVICES`` lists fewer than ``np_`` devices; the message says what was found.
    """
    if driver_visible is None:
        found = driver_gpu_count() if gpu_count is None else gpu_count
        if found < np_:
            raise LaunchError(
                f"use_gpu=True but the driver has {found or 'no'} GPU{'' if found == 1 else 's'} ({NVIDIA_GPUS_DIR} "
                f"lists {found} and CUDA_VISIBLE_DEVICES is not set) for {np_} rank{'' if np_ == 1 else 's'} on the "
                "driver, one GPU each; run on a machine with that many GPUs, or pass use_gpu=False to train on the "
                "CPU"
            )
    elif not driver_visible.strip():
        raise LaunchError(
            "use_gpu=True but the driver's CUDA_VISIBLE_DEVICES is empty (no GPU visible) for "
            f"{np_} rank{'' if np_ == 1 else 's'} on the driver; pass use_gpu=False to train on the CPU"
        )
    return [owned_gpus([str(r)], driver_visible, where=f"rank {r} on the driver") for r in range(np_)]
