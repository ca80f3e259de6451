"""
Pure functions that turn the barrier stage's task addresses into a slot plan and a rank's environment: Horovod's
(:func:`gloo_env`, built with Horovod's own ``horovod.runner.gloo_run`` helpers, so the variables a rank sees are
exactly those ``horovodrun --gloo`` would give it) or torchrun's (:func:`torch_env`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_horovod.runtime.settings import DEFAULT_GLOO_TIMEOUT_S

IFACE_ENV = "HOROVOD_AIRFLOW_IFACE"
"""Overrides the interface choice: comma-separated names; each host uses the first one it has."""

_SCRUBBED_PREFIXES = ("HOROVOD_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_")
_SCRUBBED_NAMES = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_NAME",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
    }
)


@dataclass(frozen=True)
class Slot:
    """
    Where one Horovod process runs and who it is.

    :param partition: the Spark barrier task (partition id) that starts this process; -1 on the driver.
    :param host_key: the sanitized host key used as ``HOROVOD_HOSTNAME`` (``h0``, ``h1``, ...).
    :param address: the host's address as Spark reported it.
    :param rank: global rank, ``0 <= rank < size``.
    :param local_rank: rank among the processes on the same host.
    :param cross_rank: index of this host among the hosts that have a process with this ``local_rank``.
    :param size: total number of processes (``np``).
    :param local_size: processes on this host.
    :param cross_size: hosts that have a process with this ``local_rank``.
    """

    partition: int
    host_key: str
    address: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def build_plan(addresses: Sequence[str]) -> list[Slot]:
    """
    Assign ranks to barrier tasks.

    Tasks are grouped by host address; hosts are ordered by their lowest partition id (so partition 0, which
    runs the rendezvous, is always rank 0) and ranks are contiguous per host, laid out exactly as
    ``horovod.runner.common.util.hosts.get_host_assignments`` does (a unit test compares the two where Horovod is
    installed; this module does not need it, so a ``torch.distributed`` job runs without Horovod).

    :param addresses: ``addresses[p]`` is the host address (IP or name, no port) of partition ``p``.
    :return: one :class:`Slot` per partition, indexed by partition id.
    :raises ValueError: ``addresses`` is empty.
    """
    if not addresses:
        raise ValueError("addresses must name at least one task")
    partitions_by_host: dict[str, list[int]] = {}
    for partition, address in enumerate(addresses):
        partitions_by_host.setdefault(address, []).append(partition)  # dicts keep first-seen order
    hosts_at_local_rank: dict[int, list[str]] = {}
    for address, partitions in partitions_by_host.items():
        for local_rank in range(len(partitions)):
            hosts_at_local_rank.setdefault(local_rank, []).append(address)
    keys = {address: f"h{i}" for i, address in enumerate(partitions_by_host)}
    plan: list[Slot | None] = [None] * len(addresses)
    rank = 0
    for address, partitions in partitions_by_host.items():
        for local_rank, partition in enumerate(partitions):
            cross = hosts_at_local_rank[local_rank]
            plan[partition] = Slot(
                partition,
                keys[address],
                address,
                rank,
                local_rank,
                cross.index(address),
                len(addresses),
                len(partitions),
                len(cross),
            )
            rank += 1
    return [slot for slot in plan if slot is not None]


def to_slot_info(slot: Slot):  # -> horovod.runner.common.util.hosts.SlotInfo
    """Horovod's own ``SlotInfo`` for ``slot`` (what ``RendezvousServer.init`` and ``gloo_run`` take)."""
    from horovod.runner.common.util.hosts import SlotInfo

    return SlotInfo(
        hostname=slot.host_key,
        rank=slot.rank,
        local_rank=slot.local_rank,
        cross_rank=slot.cross_rank,
        size=slot.size,
        local_size=slot.local_size,
        cross_size=slot.cross_size,
    )


def local_plan(np_: int) -> list[Slot]:
    """The plan for ``np_`` processes on this machine (``HorovodRunner(np=-N)``), partition = -1."""
    return [Slot(-1, "h0", "127.0.0.1", r, r, 0, np_, np_, 1) for r in range(np_)]


def torch_env(
    slot: Slot, plan: Sequence[Slot], *, master_addr: str, master_port: int | None, iface: str, run_id: str | None
) -> dict[str, str]:
    """
    The torchrun environment of one rank, all as strings: what ``torchrun`` gives each worker it starts, so
    ``torch.distributed.init_process_group(backend, init_method="env://")`` (the default) joins the job.

    ``MASTER_ADDR``/``MASTER_PORT`` (rank 0's ``TCPStore``, which rank 0's ``init_process_group`` starts),
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` and ``NODE_RANK`` (this host's
    index), ``GROUP_WORLD_SIZE`` (hosts), ``ROLE_RANK``/``ROLE_WORLD_SIZE``/``ROLE_NAME``,
    ``TORCHELASTIC_RUN_ID`` (a new one each attempt), ``TORCHELASTIC_USE_AGENT_STORE=False`` (rank 0's
    ``init_process_group`` serves the store, no agent does) and torchrun's ``TORCHELASTIC_SIGNALS_TO_HANDLE``;
    ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` name the interface that routes to rank 0, as :func:`gloo_env` does
    for Horovod. The rest of torchrun's set comes with the launcher (``TORCH_NCCL_ASYNC_ERROR_HANDLING``, a per-rank
    ``TORCHELASTIC_ERROR_FILE``, the attempt's ``TORCHELASTIC_RESTART_COUNT`` and ``TORCHELASTIC_MAX_RESTARTS``:
    :data:`~airflow_provider_horovod.runtime.launchers.LAUNCHERS`, set by
    :func:`~airflow_provider_horovod.runtime.task.rank_env.worker_environ`).

    :param slot: the rank's place in the plan.
    :param plan: the whole plan (hosts are counted from it).
    :param master_addr: rank 0's host address.
    :param master_port: the port rank 0's store listens on; ``None`` while it is not known yet (a rank started
        ahead of the rendezvous gets it with the release).
    :param iface: the interface this rank uses to reach ``master_addr``.
    :param run_id: the job's id (``TORCHELASTIC_RUN_ID``), ``None`` while not known.
    """
    hosts = list(dict.fromkeys(s.host_key for s in plan))
    env = {
        "MASTER_ADDR": master_addr,
        "RANK": slot.rank,
        "WORLD_SIZE": slot.size,
        "LOCAL_RANK": slot.local_rank,
        "LOCAL_WORLD_SIZE": slot.local_size,
        "GROUP_RANK": hosts.index(slot.host_key),
        "NODE_RANK": hosts.index(slot.host_key),
        "GROUP_WORLD_SIZE": len(hosts),
        "ROLE_NAME": "default",
        "ROLE_RANK": slot.rank,
        "ROLE_WORLD_SIZE": slot.size,
        "TORCHELASTIC_USE_AGENT_STORE": False,
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "GLOO_SOCKET_IFNAME": iface,
        "NCCL_SOCKET_IFNAME": iface,
    }
    if master_port is not None:
        env["MASTER_PORT"] = master_port
    if run_id is not None:
        env["TORCHELASTIC_RUN_ID"] = run_id
    return {k: str(v) for k, v in env.items()}


def interface_for(destination: str) -> str:
    """
    Name of the local network interface that routes to ``destination``.

    A UDP ``connect`` asks the kernel for the route without sending a packet; the source address it picks
    is then looked up in ``psutil.net_if_addrs()``. Each task computes this for itself, so hosts whose
    interfaces have different names (``eth0`` here, ``ens5`` there) still agree on the route.

    :param destination: an IPv4 address or a resolvable host name.
    :return: the interface name, e.g. ``"lo"`` or ``"eth0"``.
    :raises OSError: no route to ``destination`` or no interface carries the chosen source address.
    """
    import psutil

    ip = socket.gethostbyname(destination)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((ip, 9))
        source = probe.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == source for a in addrs):
            return name
    raise OSError(f"no network interface carries {source}, the source address for {destination}")


GLOO_IFACE_PATCH_LABEL = "gloo.iface"
"""The local version label of a Horovod built by ``scripts/build_horovod.sh``: ``0.28.1+gloo.iface``."""


def horovod_honours_gloo_iface() -> bool:
    """
    Whether the installed Horovod was built with ``scripts/build_horovod.sh``'s patch, which gives process sets
    the interface from ``HOROVOD_GLOO_IFACE`` (its version carries the local label :data:`GLOO_IFACE_PATCH_LABEL`).

    :return: ``False`` for an unpatched build (see :func:`gloo_host_address`) or when Horovod is not installed.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("horovod").partition("+")[2] == GLOO_IFACE_PATCH_LABEL
    except PackageNotFoundError:
        return False


def gloo_host_address(hostname: str | None = None) -> str | None:
    """
    The address an unpatched Horovod's Gloo binds its process-set connections to: the first address of
    ``hostname`` that can be bound, as Gloo's ``lookupAddrForHostname`` picks it.

    Horovod 0.28.1 creates the Gloo device of every process set (the global one included) without the
    interface from ``HOROVOD_GLOO_IFACE``, so Gloo falls back to resolving ``gethostname()``. A host whose
    name resolves to a loopback address (Debian's ``127.0.1.1 myhost`` line) then advertises an address the
    other hosts cannot reach. ``scripts/build_horovod.sh`` patches this (:func:`horovod_honours_gloo_iface`).

    :param hostname: the name to resolve; default: this machine's ``socket.gethostname()``.
    :return: the address, or ``None`` when the name does not resolve to a bindable address.
    """
    name = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, _type, _proto, _canon, sockaddr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                continue
            return str(sockaddr[0])
    return None


def choose_interface(destination: str, override: str | None = None) -> str:
    """
    The interface a rank uses for Gloo and NCCL: the first name in ``override`` this host has, else the route.

    :param destination: the rendezvous address (see :func:`interface_for`).
    :param override: the value of :data:`IFACE_ENV`, comma-separated interface names (``"ethA,ens5"``), so one
        setting serves hosts whose interfaces are named differently; empty or ``None``: no override.
    :return: the interface name.
    :raises ValueError: ``override`` names no interface this host has (the message lists the ones it has).
    :raises OSError: no override and no route to ``destination`` (see :func:`interface_for`).
    """
    names = [n.strip() for n in (override or "").split(",") if n.strip()]
    if not names:
        return interface_for(destination)
    import psutil

    present = psutil.net_if_addrs()
    for name in names:
        if name in present:
            return name
    raise ValueError(
        f"{IFACE_ENV}={override!r} names no interface of {socket.gethostname()}, which has {sorted(present)}"
    )


def gloo_env(
    slot: Slot,
    *,
    rendezvous_addr: str,
    rendezvous_port: int,
    iface: str,
    gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S,
) -> dict[str, str]:
    """
    The Horovod/Gloo variables of one rank, all as strings.

    Built with ``horovod.runner.gloo_run.create_slot_env_vars`` and ``create_run_env_vars`` (the same
    functions ``horovodrun --gloo`` uses), plus the Gloo timeout.

    :param slot: the rank's place in the plan.
    :param rendezvous_addr: IP address of Horovod's ``RendezvousServer``.
    :param rendezvous_port: its TCP port.
    :param iface: the interface this rank uses to reach ``rendezvous_addr`` (see :func:`interface_for`);
        also used for ``NCCL_SOCKET_IFNAME``.
    :param gloo_timeout_s: seconds Gloo waits in rendezvous and collectives before failing.
    """
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars

    env = dict(create_slot_env_vars(to_slot_info(slot)))
    env.update(create_run_env_vars(rendezvous_addr, [iface], rendezvous_port))
    env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(gloo_timeout_s)
    return {k: str(v) for k, v in env.items()}


def child_environ(base: Mapping[str, str], extra: Mapping[str, str], pythonpath: Sequence[str]) -> dict[str, str]:
    """
    The full environment of a rank's process.

    Inherited ``HOROVOD_*``, ``OMPI_*``, ``PMI_*``, ``TORCHELASTIC_*`` variables and torchrun's (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ...) are dropped (a stale ``HOROVOD_RANK`` or ``RANK`` would give the wrong
    identity), then ``extra`` is applied, and ``pythonpath`` is put in front of ``PYTHONPATH`` so the
    process imports what the Spark Python worker imports (``--py-files``, ``addPyFile``).

    Every path entry is made absolute against the current working directory: the rank process starts in
    another directory, and Spark puts files shipped with ``--py-files`` on a standalone executor's
    ``sys.path`` (and ``PYTHONPATH``) as relative entries (``./airflow_provider_horovod_runtime.zip``) that
    would no longer resolve there. Empty entries (the current directory) are dropped.

    :param base: the environment to start from (the launcher's ``os.environ``).
    :param extra: variables to set on top (the rank's Horovod, Gloo, device and payload variables).
    :param pythonpath: the launcher's import path (``sys.path``), put in front of ``base``'s ``PYTHONPATH``.
    :return: the environment, with ``PYTHONPATH`` absolute and de-duplicated, and ``PYTHONUNBUFFERED=1``.
    """
    env = {k: v for k, v in base.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED_NAMES}
    env.update(extra)
    paths = list(pythonpath)
    if env.get("PYTHONPATH"):
        paths.extend(env["PYTHONPATH"].split(os.pathsep))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.path.abspath(p) for p in paths if p))
    env["PYTHONUNBUFFERED"] = "1"
    return env
