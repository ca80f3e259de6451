"""HorovodHook through a real spark-submit: a refused payload, and a kill that leaves nothing running."""

from __future__ import annotations

import os
import secrets
import threading

import psutil
import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.runtime.payload import dumps_payload

pytestmark = pytest.mark.spark


def long_training():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    print("training started", flush=True)
    for _ in range(600):  # ten minutes of "epochs", far longer than the test waits
        hvd.allreduce(torch.ones(1))
        time.sleep(1)


def quick(x):
    import horovod.torch as hvd

    hvd.init()
    return x * hvd.size()


def _write(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _ours(staging) -> list[psutil.Process]:
    """Every process of this job: spark-submit JVM, Python driver, executors' Python, rank processes."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = " ".join(proc.info.get("cmdline") or [])
            environ = proc.info.get("environ") or {}
        except psutil.Error:
            continue
        if str(staging) in cmdline or "airflow_provider_horovod.runtime.worker" in cmdline or \
                str(staging) in environ.get("HOROVOD_AIRFLOW_PAYLOAD", "") or \
                str(staging) in environ.get("PYTHONPATH", ""):
            found.append(proc)
    return found


def test_payload_signed_with_another_key_is_refused(spark_env, tmp_path):
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(quick, (2,), key=secrets.token_bytes(32)))
    hook = HorovodHook(conn_id=None, np=-1)
    with pytest.raises(HorovodJobError, match="HMAC mismatch"):
        hook.run_job(payload_path=str(payload), staging_dir=str(tmp_path), key=secrets.token_bytes(32),
                     artifact_dir=str(tmp_path / "art"))


def test_negative_np_through_spark_submit(spark_env, tmp_path):
    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(quick, (21,), key=key))
    result = HorovodHook(conn_id=None, np=-2).run_job(payload_path=str(payload), staging_dir=str(tmp_path), key=key,
                                                      artifact_dir=str(tmp_path / "art"))
    import cloudpickle

    assert cloudpickle.loads(result.return_value) == 42
    assert result.app_id is None and result.artifact_paths == []


def test_kill_leaves_no_driver_executor_or_rank_behind(spark_env, tmp_path):
    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(long_training, key=key))
    hook = HorovodHook(conn_id=None, np=2)
    started = threading.Event()
    outcome: dict = {}

    def on_output(line: str) -> None:
        if "[rank 0] training started" in line:
            started.set()

    def run() -> None:
        try:
            hook.run_job(payload_path=str(payload), staging_dir=str(tmp_path), key=key,
                         artifact_dir=str(tmp_path / "art"), on_output=on_output)
        except Exception as err:  # noqa: BLE001 - the test inspects it
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(timeout=240), "training never started"
    assert len([p for p in _ours(tmp_path) if "runtime.worker" in " ".join(p.cmdline())]) == 2
    hook.on_kill()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), HorovodJobError)
    _gone, alive = psutil.wait_procs(_ours(tmp_path), timeout=20)
    assert not alive, [" ".join(p.cmdline()) for p in alive]
