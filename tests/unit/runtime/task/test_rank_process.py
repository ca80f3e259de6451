"""
A rank started before its rendezvous port is known (``RankProcess.start(deferred=True)``, used by the barrier
task so the rank's imports overlap the tasks' ``allGather``): it waits for ``release()``, then runs with the
released variables; ``spec.env`` still wins over devices; it imports ahead only what its payload names.

Real rank processes (``python -m airflow_provider_horovod.runtime.rank.worker``), no Horovod collectives.
"""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from airflow_provider_horovod.runtime.launchers import preimports
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.plan import local_plan
from airflow_provider_horovod.runtime.task.rank_process import RankProcess
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.payload import dumps_payload


def report_environment():
    import os
    import sys

    names = ("HOROVOD_GLOO_RENDEZVOUS_PORT", "CUDA_VISIBLE_DEVICES", "HOROVOD_RANK")
    torch_module = ".".join(("horovod", "torch"))  # built at run time: this payload must not name it
    return {**{name: os.environ.get(name) for name in names}, "preimported": torch_module in sys.modules}


def uses_horovod_torch():
    import sys

    imported_ahead = ".".join(("horovod", "torch")) in sys.modules
    import horovod.torch  # noqa: F401

    return imported_ahead


def rank(tmp_path, fn, **spec_kwargs) -> RankProcess:
    spec = JobSpec(payload=dumps_payload(fn), settings=JobSettings(np=1, start_timeout_s=60), **spec_kwargs)
    gloo = {"HOROVOD_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_PORT": "0"}
    return RankProcess(
        local_plan(1)[0],
        spec,
        gloo,
        str(tmp_path),
        lambda slot, line: sys.stderr.write(line + "\n"),
        devices={"CUDA_VISIBLE_DEVICES": ""},
    )


def test_a_deferred_rank_runs_with_what_release_sends(tmp_path):
    proc = rank(tmp_path, report_environment)
    proc.start(deferred=True)
    try:
        proc.release({"HOROVOD_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_PORT": "41234"}, {"CUDA_VISIBLE_DEVICES": "3"})
        assert proc.run_to_end() is None
        value = cloudpickle.loads(proc.result())
    finally:
        proc.kill()
    # the function names no framework, so nothing was imported ahead
    assert value == {
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "41234",
        "CUDA_VISIBLE_DEVICES": "3",
        "HOROVOD_RANK": "0",
        "preimported": False,
    }


def test_spec_env_still_overrides_released_devices(tmp_path):
    proc = rank(tmp_path, report_environment, env={"CUDA_VISIBLE_DEVICES": "7"})
    proc.start(deferred=True)
    try:
        proc.release({"HOROVOD_GLOO_RENDEZVOUS_PORT": "5"}, {"CUDA_VISIBLE_DEVICES": "3"})
        assert proc.run_to_end() is None
        assert cloudpickle.loads(proc.result())["CUDA_VISIBLE_DEVICES"] == "7"
    finally:
        proc.kill()


def test_a_deferred_rank_imports_its_framework_ahead(tmp_path):
    assert preimports(dumps_payload(uses_horovod_torch)) == ["horovod.torch"]
    assert preimports(dumps_payload(report_environment)) == []
    proc = rank(tmp_path, uses_horovod_torch)
    proc.start(deferred=True)
    try:
        proc.release({}, {})
        assert proc.run_to_end() is None
        assert cloudpickle.loads(proc.result()) is True  # horovod.torch was imported before the function ran
    finally:
        proc.kill()


def test_without_deferral_nothing_is_imported_ahead(tmp_path):
    proc = rank(tmp_path, uses_horovod_torch)
    proc.start()
    try:
        assert proc.run_to_end() is None
        assert cloudpickle.loads(proc.result()) is False
    finally:
        proc.kill()


def test_a_deferred_rank_never_released_ends_with_its_launcher(tmp_path):
    proc = rank(tmp_path, report_environment)
    proc.start(deferred=True)
    pid = proc._proc.pid
    proc.kill()  # what the barrier task's finally does when the allGather fails
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def trains_and_checkpoints(raise_in_finally: bool):
    from airflow_provider_horovod.runtime import save_checkpoint

    saved = []
    try:
        for step in (5, 10, 15):
            saved.append(step)
            save_checkpoint({"step": step}, step=step)
    finally:
        if raise_in_finally:
            raise RuntimeError("a cleanup that failed while the stop went through it")
    return saved


@pytest.mark.parametrize("raise_in_finally", [False, True])
def test_a_rank_asked_to_stop_stops_after_its_next_checkpoint_and_says_so(tmp_path, raise_in_finally):
    """The real worker: the task's request_stop() before the first save_checkpoint() makes that save the last; the
    rank reports the stop (not a failure of the code), also when a finally block raised on the way out."""
    from functools import partial

    from airflow_provider_horovod.runtime import load_checkpoint
    from airflow_provider_horovod.runtime.rank_errors import STOPPED_AT_CHECKPOINT

    ckpt = tmp_path / "ckpt"
    spec = JobSpec(
        payload=dumps_payload(partial(trains_and_checkpoints, raise_in_finally)),
        settings=JobSettings(np=1, start_timeout_s=60, checkpoint_dir=str(ckpt)),
        stoppable=True,  # the driver may ask it to stop (the test holds the task's part)
    )
    proc = RankProcess(
        local_plan(1)[0], spec, {"HOROVOD_RANK": "0"}, str(tmp_path / "work"), lambda slot, line: None,
        devices={"CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    proc.start(deferred=True)
    try:
        proc.request_stop("executor 1 on 10.0.0.7 is being decommissioned")  # came while the rank was starting
        proc.release({"HOROVOD_RANK": "0"}, {"CUDA_VISIBLE_DEVICES": ""})
        err = proc.run_to_end()
    finally:
        proc.kill()
    assert err is not None and err.exc_type == STOPPED_AT_CHECKPOINT, err
    assert err.exc_message == "stopped after saving checkpoint step 5: executor 1 on 10.0.0.7 is being decommissioned"
    assert err.headline() == f"Horovod rank 0 {err.exc_message}"
    assert load_checkpoint(directory=str(ckpt))[1] == 5  # saved whole; steps 10 and 15 were never reached
