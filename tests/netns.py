"""
Several "hosts" on one machine for tests: Linux network namespaces joined by a bridge.

::

    root namespace                 hub namespace (bridge br0)            host namespaces
    <root_if> 10.200.0.1/24 <--veth--> up0 ─┐
                                           br0 ──── p0 <--veth--> ethA 10.200.0.11/24   (namespace hosts[0].ns)
                                              └──── p1 <--veth--> ethB 10.200.0.12/24   (namespace hosts[1].ns)

The addresses exist only on these links (a route for the /24 is added to the root namespace on its veth end, and
creation is refused when the root namespace already has an address or route in that range), so no traffic leaves
the machine. The bridge lives in its own namespace, whose netfilter tables are empty, so the root namespace's
firewall (e.g. a ``FORWARD DROP`` policy) cannot drop traffic between hosts. Each host namespace gets its
loopback up (PySpark's workers talk to their JVM over 127.0.0.1) and a differently named interface.

Like real machines, each host also has its own name, which resolves to its own address on that host only:
:attr:`NetnsHost.prefix` starts programs in a private UTS namespace with that host name, and
``/etc/netns/<ns>/hosts`` (which ``ip netns exec`` mounts over ``/etc/hosts``) maps it. An unpatched Horovod
0.28's Gloo binds some of its connections to the address of ``gethostname()``, so without this every "host" would
share the machine's name (which resolves nowhere there); :attr:`NetnsHost.netns_prefix` keeps that name.

Needs root (``CAP_NET_ADMIN``); :func:`netns_hosts` raises :class:`NetnsUnavailable` when ``ip netns add`` is
refused, so tests can skip with the reason. Everything created is deleted on exit, also after a failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


class NetnsUnavailable(RuntimeError):
    """This machine (or this user) cannot create network namespaces and links."""


@dataclass(frozen=True)
class NetnsHost:
    ns: str
    """The network namespace's name."""
    iface: str
    """Its interface toward the other hosts (named differently in each namespace on purpose)."""
    ip: str
    """Its address on that interface."""
    hostname: str
    """Its host name (resolves to :attr:`ip` inside this namespace only)."""

    @property
    def netns_prefix(self) -> list[str]:
        """Command prefix that runs a program inside this namespace, keeping the machine's host name."""
        return ["ip", "netns", "exec", self.ns]

    @property
    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside this namespace, under this host's name."""
        return [*self.netns_prefix, "unshare", "--uts", "sh", "-c", f'hostname {self.hostname} && exec "$@"', "sh"]


@dataclass(frozen=True)
class NetnsTopology:
    root_ip: str
    """The root namespace's address on the link (where the test's master and driver bind)."""
    root_iface: str
    hosts: list[NetnsHost]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _subnet_in_use(subnet: ipaddress.IPv4Network) -> str | None:
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines() + _ip("-4", "route", "show").stdout.splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(word, strict=False)
                if net.version == 4 and net.overlaps(subnet) and word != "default":
                    return line
    return None


@contextlib.contextmanager
def netns_hosts(ifaces: Sequence[str] = ("ethA", "ethB"), subnet: str = "10.200.0.0/24") -> Iterator[NetnsTopology]:
    """
    Create one namespace per name in ``ifaces`` (the interface name used in it), bridged to the root namespace.

    :param ifaces: interface names, one per host namespace (at most 15 characters each).
    :param subnet: a private IPv4 /24 not used on this machine; the root gets ``.1``, host ``i`` gets ``.(11+i)``.
    :raises NetnsUnavailable: ``ip`` is missing, namespaces cannot be created, or ``subnet`` is already in use.
    :raises subprocess.CalledProcessError: a later ``ip`` command failed (everything created is removed first).
    """
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"the {tool} command is not installed")
    net = ipaddress.ip_network(subnet)
    in_use = _subnet_in_use(net)
    if in_use:
        raise NetnsUnavailable(f"{subnet} is already in use on this machine ({in_use.strip()})")
    tag = f"aph{os.getpid() % 100000:05d}"
    hub = f"{tag}hub"
    root_if = f"{tag}r"
    hosts = [NetnsHost(f"{tag}h{i}", name, str(net[11 + i]), f"{tag}-host{i}") for i, name in enumerate(ifaces)]
    created: list[str] = []
    root_link = False
    etc_netns_existed = os.path.isdir("/etc/netns")
    try:
        probe = _ip("netns", "add", hub, check=False)
        if probe.returncode != 0:
            raise NetnsUnavailable(f"cannot create a network namespace: ip netns add: {probe.stderr.strip()}")
        created.append(hub)
        _ip("-n", hub, "link", "set", "lo", "up")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        _ip("link", "add", root_if, "type", "veth", "peer", "name", "up0", "netns", hub)
        root_link = True
        _ip("addr", "add", f"{net[1]}/{net.prefixlen}", "dev", root_if)
        _ip("link", "set", root_if, "up")
        _ip("-n", hub, "link", "set", "up0", "master", "br0")
        _ip("-n", hub, "link", "set", "up0", "up")
        for i, host in enumerate(hosts):
            _ip("netns", "add", host.ns)
            created.append(host.ns)
            etc = f"/etc/netns/{host.ns}"
            os.makedirs(etc, exist_ok=True)
            with open(f"{etc}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n{host.ip} {host.hostname}\n")
            _ip("-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", host.iface, "netns", host.ns)
            _ip("-n", hub, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", hub, "link", "set", f"p{i}", "up")
            _ip("-n", host.ns, "addr", "add", f"{host.ip}/{net.prefixlen}", "dev", host.iface)
            _ip("-n", host.ns, "link", "set", host.iface, "up")
            _ip("-n", host.ns, "link", "set", "lo", "up")
        yield NetnsTopology(root_ip=str(net[1]), root_iface=root_if, hosts=hosts)
    finally:
        if root_link:
            _ip("link", "del", root_if, check=False)
        for ns in reversed(created):
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        if not etc_netns_existed:
            with contextlib.suppress(OSError):
                os.rmdir("/etc/netns")
