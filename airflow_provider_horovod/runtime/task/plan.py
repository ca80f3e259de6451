"""
Pure functions that turn the barrier stage's task addresses into a Horovod slot plan and a Gloo environment.

Uses Horovod's own helpers (``horovod.runner.common.util.hosts`` and ``horovod.runner.gloo_run``) so the
variables a rank sees are exactly those ``horovodrun --gloo`` would give it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_horovod.runtime.settings import DEFAULT_GLOO_TIMEOUT_S

IFACE_ENV = "HOROVOD_AIRFLOW_IFACE"
"""Overrides the interface choice: comma-separated names; each host uses the first one it has."""

_SCRUBBED_PREFIXES = ("HOROVOD_", "OMPI_", "PMI_", "PMIX_")


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
    Assign Horovod ranks to barrier tasks.

    Tasks are grouped by host address; hosts are ordered by their lowest partition id (so partition 0, which
    runs the rendezvous server, is always rank 0) and ranks are contiguous per host, as
    ``horovod.runner.common.util.hosts.get_host_assignments`` lays them out.

    :param addresses: ``addresses[p]`` is the host address (IP or name, no port) of partition ``p``.
    :return: one :class:`Slot` per partition, indexed by partition id.
    :raises ValueError: ``addresses`` is empty.
    """
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    if not addresses:
        raise ValueError("addresses must name at least one task")
    host_order: list[str] = []
    partitions_by_host: dict[str, list[int]] = {}
    for partition, address in enumerate(addresses):
        if address not in partitions_by_host:
            host_order.append(address)
            partitions_by_host[address] = []
        partitions_by_host[address].append(partition)
    keys = {address: f"h{i}" for i, address in enumerate(host_order)}
    hosts = [HostInfo(keys[a], len(partitions_by_host[a])) for a in host_order]
    np_ = len(addresses)
    slots_by_host: dict[str, list] = {}
    for info in get_host_assignments(hosts, np_, np_):
        slots_by_host.setdefault(info.hostname, []).append(info)
    plan: list[Slot | None] = [None] * np_
    for address in host_order:
        infos = sorted(slots_by_host[keys[address]], key=lambda s: s.local_rank)
        for partition, info in zip(sorted(partitions_by_host[address]), infos):
            plan[partition] = Slot(partition, info.hostname, address, info.rank, info.local_rank,
                                   info.cross_rank, info.size, info.local_size, info.cross_size)
    return [slot for slot in plan if slot is not None]


def to_slot_info(slot: Slot):  # -> horovod.runner.common.util.hosts.SlotInfo
    """Horovod's own ``SlotInfo`` for ``slot`` (what ``RendezvousServer.init`` and ``gloo_run`` take)."""
    from horovod.runner.common.util.hosts import SlotInfo

    return SlotInfo(hostname=slot.host_key, rank=slot.rank, local_rank=slot.local_rank,
                    cross_rank=slot.cross_rank, size=slot.size, local_size=slot.local_size,
                    cross_size=slot.cross_size)


def local_plan(np_: int) -> list[Slot]:
    """The plan for ``np_`` processes on this machine (``HorovodRunner(np=-N)``), partition = -1."""
    return [Slot(-1, "h0", "127.0.0.1", r, r, 0, np_, np_, 1) for r in range(np_)]


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
            return sockaddr[0]
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
    raise ValueError(f"{IFACE_ENV}={override!r} names no interface of {socket.gethostname()}, which has "
                     f"{sorted(present)}")


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

    Inherited ``HOROVOD_*``, ``OMPI_*``, ``PMI_*`` variables are dropped (a stale ``HOROVOD_RANK`` would give
    the wrong identity), then ``extra`` is applied, and ``pythonpath`` is put in front of ``PYTHONPATH`` so the
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
    env = {k: v for k, v in base.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    env.update(extra)
    paths = list(pythonpath)
    if env.get("PYTHONPATH"):
        paths.extend(env["PYTHONPATH"].split(os.pathsep))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.path.abspath(p) for p in paths if p))
    env["PYTHONUNBUFFERED"] = "1"
    return env
