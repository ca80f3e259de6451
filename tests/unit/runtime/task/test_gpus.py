"""GPU visibility rules (exact CUDA_VISIBLE_DEVICES per rank), the up-front conf check, the interface override."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime.driver.program import _parse, _settings
from airflow_provider_horovod.runtime.driver.runner import HorovodRunner
from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.settings import validate_gpu_visibility
from airflow_provider_horovod.runtime.task.gpus import (
    check_gpu_conf,
    device_env,
    driver_owned_gpus,
    owned_gpus,
    visible_devices,
)
from airflow_provider_horovod.runtime.task.plan import build_plan, choose_interface, local_plan

# partitions 0 and 2 on host A, 1 and 3 on host B (ranks: p0=0, p2=1 on A; p1=2, p3=3 on B)
PLAN = build_plan(["A", "B", "A", "B"])


def _all(owned, visibility, plan=PLAN):
    return [device_env(True, owned, plan, i, visibility) for i in range(len(plan))]


def test_host_visibility_one_gpu_per_task_orders_by_local_rank():
    # Spark gave partition 2 (local rank 1 on A) GPU 2, partition 0 (local rank 0) GPU 3
    owned = [["3"], ["0"], ["2"], ["1"]]
    assert _all(owned, "host") == [
        {"CUDA_VISIBLE_DEVICES": "3,2"},  # p0, local rank 0: device 0 = GPU 3 (its own)
        {"CUDA_VISIBLE_DEVICES": "0,1"},  # p1, local rank 0 on B
        {"CUDA_VISIBLE_DEVICES": "3,2"},  # p2, local rank 1: device 1 = GPU 2 (its own)
        {"CUDA_VISIBLE_DEVICES": "0,1"},
    ]
    for i, slot in enumerate(PLAN):
        assert _all(owned, "host")[i]["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == owned[i][0]


def test_host_visibility_two_gpus_per_task_puts_each_ranks_first_gpu_at_its_local_rank():
    owned = [["2", "3"], ["0", "1"], ["4", "5"], ["6", "7"]]
    assert _all(owned, "host") == [
        {"CUDA_VISIBLE_DEVICES": "2,4,3,5"},
        {"CUDA_VISIBLE_DEVICES": "0,6,1,7"},
        {"CUDA_VISIBLE_DEVICES": "2,4,3,5"},
        {"CUDA_VISIBLE_DEVICES": "0,6,1,7"},
    ]


def test_rank_visibility_is_own_gpus_only():
    owned = [["2", "3"], ["0", "1"], ["4", "5"], ["6", "7"]]
    assert _all(owned, "rank") == [
        {"CUDA_VISIBLE_DEVICES": "2,3"},
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"CUDA_VISIBLE_DEVICES": "4,5"},
        {"CUDA_VISIBLE_DEVICES": "6,7"},
    ]


def test_single_rank_single_gpu():
    assert device_env(True, [["2"]], build_plan(["A"]), 0) == {"CUDA_VISIBLE_DEVICES": "2"}


def test_without_use_gpu_ranks_see_no_gpu():
    assert [device_env(False, [], PLAN, i) for i in range(4)] == [{"CUDA_VISIBLE_DEVICES": ""}] * 4


def test_host_visibility_refuses_shared_gpus_and_points_to_rank():
    owned = [["0"], ["0"], ["0"], ["1"]]  # fractional amounts: p0 and p2 share GPU 0 on host A
    with pytest.raises(LaunchError, match=r"share GPU\(s\) \['0'\].*gpu_visibility='rank'"):
        visible_devices(owned, PLAN, 0, "host")
    assert visible_devices(owned, PLAN, 2, "rank") == "0"


def test_host_visibility_refuses_a_rank_without_gpu():
    with pytest.raises(LaunchError, match="has no GPU"):
        visible_devices([["0"], ["1"], [], ["2"]], PLAN, 0, "host")


def test_owned_gpus_maps_through_the_executors_cuda_visible_devices():
    assert owned_gpus(["2", "3"], None) == ["2", "3"]
    assert owned_gpus(["0", "2"], "7,6,5") == ["7", "5"]
    assert owned_gpus(["1"], "GPU-aaaa, GPU-bbbb") == ["GPU-bbbb"]
    with pytest.raises(LaunchError, match=r"'3', which is not an index into the executor's CUDA_VISIBLE_DEVICES"):
        owned_gpus(["3"], "7,6,5")
    with pytest.raises(LaunchError, match="not an index"):
        owned_gpus(["GPU-x"], "0,1")
    with pytest.raises(LaunchError, match="not an index"):
        owned_gpus(["0"], "")


def test_owned_gpus_without_addresses_names_the_conf():
    with pytest.raises(LaunchError, match=r"gave task 3 on 10\.0\.0\.5 no GPU addresses.*spark\.task\.resource\.gpu"):
        owned_gpus([], None, where="task 3 on 10.0.0.5")


def test_driver_ranks_get_one_gpu_each():
    plan = local_plan(2)
    owned = driver_owned_gpus(2, None, gpu_count=2)
    assert owned == [["0"], ["1"]]
    assert [device_env(True, owned, plan, i, "host") for i in range(2)] == [{"CUDA_VISIBLE_DEVICES": "0,1"}] * 2
    assert [device_env(True, driver_owned_gpus(2, "5,4,3"), plan, i, "rank") for i in range(2)] == [
        {"CUDA_VISIBLE_DEVICES": "5"},
        {"CUDA_VISIBLE_DEVICES": "4"},
    ]
    with pytest.raises(LaunchError, match="rank 1 on the driver"):
        driver_owned_gpus(2, "5")


def test_ranks_on_a_driver_without_gpus_are_refused_naming_what_was_found(tmp_path):
    from airflow_provider_horovod.runtime.task.gpus import driver_gpu_count

    assert driver_gpu_count(str(tmp_path / "no-driver")) == 0
    (tmp_path / "gpus" / "0000:3b:00.0").mkdir(parents=True)
    assert driver_gpu_count(str(tmp_path / "gpus")) == 1
    with pytest.raises(
        LaunchError,
        match=r"use_gpu=True but the driver has no GPUs .* for 2 ranks on the driver.*"
        r"use_gpu=False",
    ):
        driver_owned_gpus(2, None, gpu_count=0)
    with pytest.raises(LaunchError, match=r"the driver has 1 GPU \(.*lists 1"):
        driver_owned_gpus(2, None, gpu_count=1)
    with pytest.raises(LaunchError, match="CUDA_VISIBLE_DEVICES is empty"):
        driver_owned_gpus(1, "")


@pytest.mark.parametrize(
    "conf, found",
    [
        ({}, "is not set"),
        ({"spark.task.resource.gpu.amount": "0"}, "is '0'"),
        ({"spark.task.resource.gpu.amount": "x"}, "is 'x'"),
    ],
)
def test_check_gpu_conf_names_what_to_set(conf, found):
    with pytest.raises(LaunchError) as info:
        check_gpu_conf(conf)
    message = str(info.value)
    assert f"spark.task.resource.gpu.amount {found}" in message
    assert "spark.executor.resource.gpu.amount" in message and "discoveryScript" in message


def test_check_gpu_conf_accepts_fractions():
    assert check_gpu_conf({"spark.task.resource.gpu.amount": "0.5"}) == 0.5


def test_visibility_and_use_gpu_validation():
    assert validate_gpu_visibility("rank") == "rank"
    with pytest.raises(ValueError, match="gpu_visibility must be one of"):
        HorovodRunner(np=2, gpu_visibility="all")
    with pytest.raises(ValueError, match="use_gpu must be True or False"):
        HorovodRunner(np=2, use_gpu="yes")
    settings = HorovodRunner(np=2, use_gpu=True, gpu_visibility="rank").settings
    assert (settings.use_gpu, settings.gpu_visibility) == (True, "rank")
    assert (HorovodRunner(np=2).settings.use_gpu, HorovodRunner(np=2).settings.gpu_visibility) == (False, "host")


def test_driver_cli_flags():
    base = ["--payload", "p", "--result-dir", "d", "--np", "2"]
    args = _settings(_parse(base)[1])
    assert (args.use_gpu, args.gpu_visibility) == (False, "host")
    args = _settings(_parse([*base, "--use-gpu", "--gpu-visibility", "rank"])[1])
    assert (args.use_gpu, args.gpu_visibility) == (True, "rank")
    with pytest.raises(ValueError, match="gpu_visibility must be one of"):
        _settings(_parse([*base, "--gpu-visibility", "all"])[1])


def test_choose_interface_override_takes_the_first_name_this_host_has():
    assert choose_interface("127.0.0.1", None) == "lo"
    assert choose_interface("127.0.0.1", "") == "lo"
    assert choose_interface("127.0.0.1", "no-such-if0, lo") == "lo"
    with pytest.raises(ValueError, match=r"HOROVOD_AIRFLOW_IFACE='ethZ,ethY' names no interface of .*'lo'"):
        choose_interface("127.0.0.1", "ethZ,ethY")


def test_rank_interface_takes_the_jobs_override_then_the_executors(monkeypatch):
    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.runtime.task.checks import _rank_interface
    from airflow_provider_horovod.runtime.wire.jobspec import JobSpec

    monkeypatch.setenv("HOROVOD_AIRFLOW_IFACE", "nope0")
    with pytest.raises(LaunchError, match=r"^on 10\.0\.0\.5: HOROVOD_AIRFLOW_IFACE='nope0' names no interface"):
        _rank_interface(JobSpec(payload=b"", settings=JobSettings(np=1)), "127.0.0.1", "10.0.0.5")
    assert (
        _rank_interface(
            JobSpec(payload=b"", settings=JobSettings(np=1), env={"HOROVOD_AIRFLOW_IFACE": "nope1,lo"}),
            "127.0.0.1",
            "h",
        )
        == "lo"
    )
    monkeypatch.delenv("HOROVOD_AIRFLOW_IFACE")
    assert _rank_interface(JobSpec(payload=b"", settings=JobSettings(np=1)), "127.0.0.1", "h") == "lo"
