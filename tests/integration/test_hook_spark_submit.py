"""HorovodHook through a real spark-submit: a refused payload, and a kill that leaves nothing running."""

from __future__ import annotations

import os
import secrets
import threading

import psutil
import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.wire.payload import dumps_payload

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


def _job(key: bytes, np: int, artifact_dir, *, conf: dict | None = None, **settings) -> TrainingJob:
    """The job the hook runs: its key, np ranks and artifact directory (the payload is read from its file)."""
    return TrainingJob(
        key=key, payload=b"", settings=JobSettings(np=np, **settings), artifact_dir=str(artifact_dir), conf=conf or {}
    )


def _write(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _ours(key: bytes, artifact_dir: str) -> list[psutil.Process]:
    """Every process of one job: spark-submit JVM, Python driver, executors' Python workers, rank processes."""
    found = []
    for proc in psutil.process_iter(["environ", "cmdline"]):
        try:
            environ = proc.info.get("environ") or {}
        except psutil.Error:
            continue
        # the key is in the spark-submit environment, which everything below it inherits; ranks get the
        # rest of it but never the key, so they are found by their artifact directory
        if (
            environ.get("HOROVOD_AIRFLOW_PAYLOAD_KEY") == key.hex()
            or environ.get("HOROVOD_AIRFLOW_ARTIFACT_DIR") == artifact_dir
        ):
            found.append(proc)
    return found


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("other-key", "HMAC mismatch"),
        ("truncate", "truncated or padded"),
        ("flip-byte", "digest mismatch"),
    ],
)
def test_payload_changed_between_submit_and_run_is_refused(spark_env, tmp_path, tamper, message):
    key = secrets.token_bytes(32)
    data = dumps_payload(quick, (2,), key=secrets.token_bytes(32) if tamper == "other-key" else key)
    if tamper == "truncate":
        data = data[:-7]
    elif tamper == "flip-byte":
        data = data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]
    payload = tmp_path / "payload.bin"
    _write(payload, data)
    hook = HorovodHook(conn_id=None)
    with pytest.raises(HorovodJobError, match=message):
        hook.run_job(_job(key, -1, tmp_path / "a"), payload_path=str(payload), staging_dir=str(tmp_path))


def test_the_payload_key_appears_in_no_log_result_or_spark_ui(spark_env, tmp_path, caplog):
    import httpx

    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(quick, (1,), key=key))
    seen: list[str] = []
    environment: dict = {}

    def on_app_started(app_id, ui_url):
        response = httpx.get(f"{ui_url}/api/v1/applications/{app_id}/environment", timeout=30)
        response.raise_for_status()
        environment["text"] = response.text

    with caplog.at_level("DEBUG"):
        HorovodHook(conn_id=None).run_job(
            _job(key, 2, tmp_path / "a"),
            payload_path=str(payload),
            staging_dir=str(tmp_path),
            on_app_started=on_app_started,
            on_output=seen.append,
        )
    assert "sparkProperties" in environment["text"]  # the page was really read
    for where, text in [
        ("Spark UI environment", environment["text"]),
        ("driver output", "\n".join(seen)),
        ("logs", caplog.text),
        ("result.json", (tmp_path / "result.json").read_text()),
    ]:
        assert key.hex() not in text, where


def test_negative_np_through_spark_submit(spark_env, tmp_path):
    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(quick, (21,), key=key))
    result = HorovodHook(conn_id=None).run_job(
        _job(key, -2, tmp_path / "art"), payload_path=str(payload), staging_dir=str(tmp_path)
    )
    import cloudpickle

    assert cloudpickle.loads(result.return_value) == 42
    assert result.app_id is None and result.artifact_paths == []


def return_bytes(nbytes):
    import horovod.torch as hvd

    hvd.init()
    return b"x" * nbytes if hvd.rank() == 0 else None


def test_a_driver_jvm_out_of_memory_ends_the_job_with_a_reason(spark_env, tmp_path):
    """A value the limit lets through but the driver's JVM cannot hold: the JVM exits, the job fails, no hang."""
    import time

    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(return_bytes, (400 * 10**6,), key=key))
    started = time.monotonic()
    with pytest.raises(HorovodJobError) as info:
        HorovodHook(conn_id=None).run_job(
            _job(key, 2, tmp_path / "art", conf={"spark.driver.memory": "512m"}, max_return_value_bytes=2**31 - 1),
            payload_path=str(payload),
            staging_dir=str(tmp_path),
        )
    assert time.monotonic() - started < 150
    assert str(info.value).startswith("the Spark driver's JVM ended while the job ran (")
    assert "java.lang.OutOfMemoryError" in str(info.value)


def where_pyspark_loads_from():
    import importlib.util

    import horovod.torch as hvd

    hvd.init()
    # the rank inherits the import path of the Spark Python worker that started it
    return importlib.util.find_spec("pyspark").origin


def test_the_local_masters_python_workers_load_pyspark_compiled(spark_env, tmp_path):
    """The daemon module comes from the runtime zip's absolute path (local[np]: the daemon runs beside the driver)."""
    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(where_pyspark_loads_from, key=key))
    result = HorovodHook(conn_id=None).run_job(
        _job(key, 2, tmp_path / "art"), payload_path=str(payload), staging_dir=str(tmp_path)
    )
    import cloudpickle
    import pyspark

    assert cloudpickle.loads(result.return_value) == pyspark.__file__  # site-packages, not python/lib/pyspark.zip


def test_kill_leaves_no_driver_executor_or_rank_behind(spark_env, tmp_path):
    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(long_training, key=key))
    hook = HorovodHook(conn_id=None)
    started = threading.Event()
    outcome: dict = {}

    def on_output(line: str) -> None:
        if "[rank 0] training started" in line:
            started.set()

    def run() -> None:
        try:
            hook.run_job(
                _job(key, 2, tmp_path / "art"),
                payload_path=str(payload),
                staging_dir=str(tmp_path),
                on_output=on_output,
            )
        except Exception as err:  # noqa: BLE001 - the test inspects it
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(timeout=240), "training never started"
    assert len([p for p in _ours(key, str(tmp_path / "art")) if "runtime.rank.worker" in " ".join(p.cmdline())]) == 2
    hook.on_kill()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), HorovodJobError)
    _gone, alive = psutil.wait_procs(_ours(key, str(tmp_path / "art")), timeout=20)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


def train_for_a_few_seconds():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    for _ in range(40):  # ~20 s of "training": long enough for a poll to see it on a loaded machine
        hvd.allreduce(torch.ones(1))
        time.sleep(0.5)
    return hvd.size()


def test_progress_is_read_from_the_real_rest_api(spark_env, tmp_path):
    from airflow_provider_horovod.utils.stage_progress import ProgressWatcher

    key = secrets.token_bytes(32)
    payload = tmp_path / "payload.bin"
    _write(payload, dumps_payload(train_for_a_few_seconds, key=key))
    messages: list[str] = []
    watchers: list[ProgressWatcher] = []

    def on_app_started(app_id, ui_url):
        watchers.append(ProgressWatcher(ui_url, app_id, messages.append, poll_interval_s=0.5).start())

    try:
        HorovodHook(conn_id=None).run_job(
            _job(key, 2, tmp_path / "a"),
            payload_path=str(payload),
            staging_dir=str(tmp_path),
            on_app_started=on_app_started,
        )
    finally:
        for watcher in watchers:
            watcher.stop()
    assert any(m.startswith("2/2 ranks running on executor driver (127.0.0.1:") for m in messages), messages
    assert len(messages) == len(set(messages))  # state changes, not one line per poll
