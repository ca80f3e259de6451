"""Each launcher's behaviour where its ranks start: the rendezvous it opens, the environment it gives a rank, what a
finished task reports, and what it releases."""

from __future__ import annotations

import socket

import pytest

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.launchers import LAUNCHERS
from airflow_provider_horovod.runtime.task.backends import (
    BACKENDS,
    HorovodBackend,
    RendezvousPoint,
    TorchBackend,
    backend_for,
)
from airflow_provider_horovod.runtime.task.plan import build_plan, local_plan


def _bindable(port: int) -> bool:
    with socket.socket() as other:
        try:
            other.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def test_every_launcher_has_a_backend_of_its_own_and_an_unknown_one_is_refused_naming_the_allowed():
    assert set(BACKENDS) == set(LAUNCHERS)
    assert isinstance(backend_for("horovod"), HorovodBackend) and isinstance(backend_for("torch"), TorchBackend)
    assert all(backend.launcher is LAUNCHERS[name] for name, backend in BACKENDS.items())
    with pytest.raises(ValueError, match=r"launcher must be one of \('horovod', 'torch'\), got 'mpi'"):
        backend_for("mpi")


def test_horovods_rendezvous_is_a_store_served_here_that_waits_for_every_rank_then_stops():
    pytest.importorskip("horovod.runner.http.http_server")
    backend, plan = backend_for("horovod"), local_plan(3)
    rendezvous = backend.open_rendezvous(plan, bind="127.0.0.1")
    try:
        assert rendezvous.run_id is None and rendezvous.reserved is None and _accepts(rendezvous.port)
        point = RendezvousPoint(addr="127.0.0.1", iface="lo", gloo_timeout_s=45, port=rendezvous.port, run_id=None)
        env = backend.rank_env(plan[1], plan, point)
        assert env["HOROVOD_RANK"] == "1" and env["HOROVOD_SIZE"] == "3"
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == str(rendezvous.port)
        assert env["HOROVOD_GLOO_IFACE"] == "lo" and env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45"
        assert "MASTER_ADDR" not in env
        unjoined = []
        rendezvous.on_uninitialized(unjoined.append)
        backend.rank_done("127.0.0.1", rendezvous.port, 1, initialized=True)
        backend.rank_done("127.0.0.1", rendezvous.port, 2, initialized=False)
        rendezvous.wait_for_ranks([1, 2])  # returns: both reported through the store
        assert unjoined == [2]
    finally:
        rendezvous.close()
    assert rendezvous.server is None and not _accepts(rendezvous.port)


def test_horovods_task_check_refuses_a_host_name_its_unpatched_gloo_would_bind_to_loopback(monkeypatch):
    from airflow_provider_horovod.runtime.task import checks

    plan = build_plan(["10.0.0.1", "10.0.0.2"])
    monkeypatch.setattr(checks, "horovod_honours_gloo_iface", lambda: False)
    monkeypatch.setattr(socket, "gethostname", lambda: "node7")
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: "10.0.0.2")
    backend_for("horovod").check_task(plan, "10.0.0.2")  # the name resolves to an address the others reach
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: "127.0.1.1")
    with pytest.raises(LaunchError, match="the host name 'node7' resolves to 127.0.1.1"):
        backend_for("horovod").check_task(plan, "10.0.0.2")
    backend_for("torch").check_task(plan, "10.0.0.2")  # torch.distributed binds to MASTER_ADDR's route: no check


def test_torchs_rendezvous_holds_the_port_for_rank_0s_store_and_gives_the_torchrun_environment():
    backend, plan = backend_for("torch"), local_plan(2)
    rendezvous = backend.open_rendezvous(plan, bind="127.0.0.1")
    port = rendezvous.port
    try:
        assert rendezvous.server is None and len(rendezvous.run_id) == 32
        assert not _bindable(port)  # held for rank 0's store: no other socket is given it
        point = RendezvousPoint(addr="127.0.0.1", iface="lo", gloo_timeout_s=45, port=port, run_id=rendezvous.run_id)
        env = backend.rank_env(plan[1], plan, point)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", str(port))
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "1")
        assert env["TORCHELASTIC_RUN_ID"] == rendezvous.run_id and env["GLOO_SOCKET_IFNAME"] == "lo"
        assert not any(k.startswith("HOROVOD_") for k in env)
        backend.rank_done("127.0.0.1", port, 1, initialized=True)  # the store is rank 0's: nothing to tell
        rendezvous.on_uninitialized(lambda rank: pytest.fail(f"told of rank {rank}"))
        rendezvous.wait_for_ranks([1])  # nothing served here to outlive the ranks: returns at once
        rendezvous.release_port()
        assert rendezvous.reserved is None and _bindable(port)
    finally:
        rendezvous.close()
