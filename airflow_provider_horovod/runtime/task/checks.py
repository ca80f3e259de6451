"""
The checks a barrier task makes before it starts its rank: the executor's Python (:func:`_preflight`), the task's
GPUs, the Gloo/NCCL interface and, for a multi-host job with an unpatched Horovod, the host name.
"""

from __future__ import annotations

import os
import sys

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.launchers import HOROVOD, get_launcher
from airflow_provider_horovod.runtime.task.gpus import CUDA_VISIBLE_DEVICES, GPU_RESOURCE, owned_gpus
from airflow_provider_horovod.runtime.task.plan import (
    IFACE_ENV,
    Slot,
    choose_interface,
    gloo_host_address,
    horovod_honours_gloo_iface,
)
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec


def _host_of(address: str) -> str:
    import socket

    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    return socket.gethostbyname(host.strip("[]"))


def installed(module: str) -> bool:
    """
    Whether ``module`` (dotted names too) is installed for this interpreter, found on the import path without
    importing anything. ``importlib.util.find_spec("torch.distributed")`` imports ``torch`` to find its submodule:
    about 1.2 s of CPU in every barrier task's Python worker, before its rank (which imports torch itself) even
    started, and 200 MB more per worker (250 MB against 54): at np=16 on 2 cores the ranks of a job on fresh workers
    started 11 s after the call instead of 2 s (docs/scale.md).

    :param module: e.g. ``"torch.distributed"``.
    """
    import importlib.machinery
    import importlib.util

    parts = module.split(".")
    try:
        if module.rpartition(".")[0] in sys.modules:  # its package is imported already: nothing more gets imported
            return importlib.util.find_spec(module) is not None
        spec = importlib.util.find_spec(parts[0])  # a top-level name: looked up, not imported
        for depth in range(2, len(parts) + 1):
            if spec is None or spec.submodule_search_locations is None:
                return False
            spec = importlib.machinery.PathFinder.find_spec(
                ".".join(parts[:depth]), list(spec.submodule_search_locations)
            )
    except (ImportError, ValueError):
        return False
    return spec is not None


def _preflight(host: str, launcher_name: str = HOROVOD) -> None:
    """
    Fail fast, naming the interpreter and host, when the executor's Python lacks what the job's ranks need (looked
    up, not imported: :func:`installed`).

    :param host: this task's host, for the message; ``"the driver"`` for ranks on the driver (``np < 0``).
    :param launcher_name: the job's launcher (:data:`~airflow_provider_horovod.runtime.launchers.LAUNCHERS`).
    :raises LaunchError: a module the launcher needs is not installed.
    """
    launcher = get_launcher(launcher_name)
    for module in launcher.required_modules:
        if not installed(module):
            hint = "cloudpickle" if module == "cloudpickle" else launcher.install_hint
            if host == "the driver":  # ranks on the driver run with the driver's own interpreter
                whose, where, other = "the driver's", "", "or run the job from an interpreter that has it"
            else:
                whose, where = "the executor's", f" on {host}"
                other = "or point spark.pyspark.python / PYSPARK_PYTHON at an interpreter that has it"
            raise LaunchError(
                f"{module.split('.')[0]} ({module}) is not importable by {whose} Python "
                f"{sys.executable}{where}: install it there ({hint}), {other}"
            )


def _task_gpus(ctx, host: str) -> list[str]:
    """This barrier task's GPUs as device IDs (Spark's addresses mapped through the executor's own list)."""
    info = ctx.resources().get(GPU_RESOURCE)
    return owned_gpus(
        list(info.addresses) if info is not None else [],
        os.environ.get(CUDA_VISIBLE_DEVICES),
        where=f"task {ctx.partitionId()} on {host}",
    )


def _rank_interface(spec: JobSpec, rendezvous_addr: str, host: str) -> str:
    """The interface for Gloo/NCCL: :data:`~.plan.IFACE_ENV` (rank ``env``, then executor) or the route."""
    override = spec.env.get(IFACE_ENV) or os.environ.get(IFACE_ENV)
    try:
        return choose_interface(rendezvous_addr, override)
    except ValueError as err:
        raise LaunchError(f"on {host}: {err}") from None


def _check_host_name(plan: list[Slot], host: str) -> None:
    """
    Fail fast when ranks on other hosts could not reach this one's Gloo connections (a multi-host job with an
    unpatched Horovod only).

    An unpatched Horovod 0.28's process-set Gloo contexts bind to the address of this machine's host name, not to
    ``HOROVOD_GLOO_IFACE`` (see :func:`~.plan.gloo_host_address`); Gloo itself would abort later with
    ``connect [127.0.0.1]: Connection refused`` or ``Unable to find address for: <name>``. A build patched by
    ``scripts/build_horovod.sh`` (:func:`~.plan.horovod_honours_gloo_iface`) needs no check.
    """
    import ipaddress
    import socket

    if len({s.host_key for s in plan}) < 2 or horovod_honours_gloo_iface():
        return
    name = socket.gethostname()
    address = gloo_host_address(name)
    if address is not None and not ipaddress.ip_address(address.split("%")[0]).is_loopback:
        return
    found = "does not resolve to an address of this machine" if address is None else f"resolves to {address}"
    raise LaunchError(
        f"on {host}: the host name {name!r} {found}. Horovod's Gloo binds its connections to the address of the "
        f"host name (it ignores HOROVOD_GLOO_IFACE there), so ranks on the other hosts could not connect. Make "
        f"{name!r} resolve, on that machine, to an address the other hosts reach (e.g. {host} in /etc/hosts "
        "instead of a 127.x line), or install Horovod built by scripts/build_horovod.sh, patched to use "
        "HOROVOD_GLOO_IFACE there"
    )
