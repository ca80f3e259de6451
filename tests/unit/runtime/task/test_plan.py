"""Slot plans and the exact Gloo environment each rank gets."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime.task.plan import (
    Slot,
    build_plan,
    child_environ,
    gloo_env,
    interface_for,
    local_plan,
    torch_env,
)


def test_single_host_plan():
    plan = build_plan(["10.0.0.5", "10.0.0.5"])
    assert plan == [
        Slot(0, "h0", "10.0.0.5", 0, 0, 0, 2, 2, 1),
        Slot(1, "h0", "10.0.0.5", 1, 1, 0, 2, 2, 1),
    ]


def test_interleaved_hosts_get_contiguous_ranks_and_partition_zero_is_rank_zero():
    # partitions 0 and 2 on host A, 1 and 3 on host B
    plan = build_plan(["A", "B", "A", "B"])
    by_partition = {
        s.partition: (s.host_key, s.rank, s.local_rank, s.cross_rank, s.local_size, s.cross_size) for s in plan
    }
    assert by_partition == {
        0: ("h0", 0, 0, 0, 2, 2),
        2: ("h0", 1, 1, 0, 2, 2),
        1: ("h1", 2, 0, 1, 2, 2),
        3: ("h1", 3, 1, 1, 2, 2),
    }
    assert sorted(s.rank for s in plan) == [0, 1, 2, 3]


def test_uneven_hosts_cross_sizes():
    plan = build_plan(["A", "A", "A", "B"])
    assert [(s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in plan] == [
        (0, 0, 3, 0, 2),
        (1, 1, 3, 0, 1),
        (2, 2, 3, 0, 1),
        (3, 0, 1, 1, 2),
    ]


@pytest.mark.parametrize(
    "addresses",
    [
        ["A"],
        ["A", "A"],
        ["A", "B"],
        ["A", "B", "A", "B"],
        ["A", "A", "A", "B"],
        ["B", "A", "A", "C", "B", "A"],
        ["A", "B", "C", "C", "B", "A", "A"],
        [f"h{i % 3}" for i in range(11)],
    ],
)
def test_the_plan_is_horovods_host_assignment(addresses):
    """build_plan needs no Horovod, yet lays ranks out exactly as Horovod's get_host_assignments does."""
    hosts = pytest.importorskip("horovod.runner.common.util.hosts")
    plan = build_plan(addresses)
    order = list(dict.fromkeys(addresses))
    keys = {a: f"h{i}" for i, a in enumerate(order)}
    infos = hosts.get_host_assignments(
        [hosts.HostInfo(keys[a], addresses.count(a)) for a in order], len(addresses), len(addresses)
    )
    by_host: dict[str, list] = {}
    for info in infos:
        by_host.setdefault(info.hostname, []).append(info)
    for address in order:
        mine = [s for s in plan if s.address == address]  # in partition order
        theirs = sorted(by_host[keys[address]], key=lambda i: i.local_rank)
        assert [(s.host_key, s.rank, s.local_rank, s.cross_rank, s.size, s.local_size, s.cross_size) for s in mine] == [
            (i.hostname, i.rank, i.local_rank, i.cross_rank, i.size, i.local_size, i.cross_size) for i in theirs
        ]


def test_torch_env_is_the_torchrun_contract():
    plan = build_plan(["A", "B", "A", "B"])
    assert torch_env(plan[3], plan, master_addr="10.1.2.3", master_port=29500, iface="eth1", run_id="job-7") == {
        "MASTER_ADDR": "10.1.2.3",
        "MASTER_PORT": "29500",
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "NODE_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_NAME": "default",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "job-7",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "GLOO_SOCKET_IFNAME": "eth1",
        "NCCL_SOCKET_IFNAME": "eth1",
    }  # the attempt's TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS come with the job (driver/test_restarts.py)
    # a rank started ahead of the rendezvous has all but the port and the run id; the release sends those
    early = torch_env(plan[0], plan, master_addr="10.1.2.3", master_port=None, iface="lo", run_id=None)
    assert "MASTER_PORT" not in early and "TORCHELASTIC_RUN_ID" not in early
    assert (early["RANK"], early["LOCAL_RANK"], early["GROUP_RANK"]) == ("0", "0", "0")


def test_child_environ_scrubs_a_stale_torchrun_identity():
    env = child_environ(
        {"RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "elsewhere", "TORCHELASTIC_RUN_ID": "old", "KEEP": "1"},
        {"RANK": "0"},
        [],
    )
    assert env["RANK"] == "0" and env["KEEP"] == "1"
    assert not {"WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"} & set(env)


def test_empty_plan_is_refused():
    with pytest.raises(ValueError, match="at least one task"):
        build_plan([])


def test_gloo_env_exact():
    slot = build_plan(["A", "B", "A", "B"])[3]
    assert gloo_env(slot, rendezvous_addr="10.1.2.3", rendezvous_port=4567, iface="eth1", gloo_timeout_s=120) == {
        "HOROVOD_HOSTNAME": "h1",
        "HOROVOD_RANK": "3",
        "HOROVOD_SIZE": "4",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.1.2.3",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "4567",
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": "eth1",
        "NCCL_SOCKET_IFNAME": "eth1",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "120",
    }


def test_local_plan():
    assert local_plan(3) == [Slot(-1, "h0", "127.0.0.1", r, r, 0, 3, 3, 1) for r in range(3)]


def test_child_environ_scrubs_stale_identity_and_prepends_paths():
    base = {
        "HOROVOD_RANK": "7",
        "OMPI_COMM_WORLD_RANK": "7",
        "PMI_RANK": "7",
        "HOROVOD_AIRFLOW_PAYLOAD_KEY": "s",
        "PATH": "/bin",
        "PYTHONPATH": "/old",
    }
    env = child_environ(base, {"HOROVOD_RANK": "1"}, ["/a", "", "/b", "/a"])
    assert env["HOROVOD_RANK"] == "1"
    assert "OMPI_COMM_WORLD_RANK" not in env and "PMI_RANK" not in env
    assert "HOROVOD_AIRFLOW_PAYLOAD_KEY" not in env  # the payload key never reaches user code
    assert env["PYTHONPATH"] == "/a:/b:/old"
    assert env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"


def test_child_environ_makes_relative_paths_absolute(tmp_path, monkeypatch):
    # Spark puts --py-files on a standalone executor's sys.path and PYTHONPATH relative to the executor's
    # working directory; the rank process starts elsewhere, so every entry must be absolute
    monkeypatch.chdir(tmp_path)
    env = child_environ(
        {"PYTHONPATH": "./pyspark.zip:/opt/lib:rel/dir"},
        {},
        ["./airflow_provider_horovod_runtime.zip", "/abs/site-packages"],
    )
    assert env["PYTHONPATH"].split(":") == [
        f"{tmp_path}/airflow_provider_horovod_runtime.zip",
        "/abs/site-packages",
        f"{tmp_path}/pyspark.zip",
        "/opt/lib",
        f"{tmp_path}/rel/dir",
    ]


def test_interface_for_loopback():
    assert interface_for("127.0.0.1") == "lo"
