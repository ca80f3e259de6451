"""The driver program's own errors say which Python Spark started and where that choice comes from."""

from __future__ import annotations

import json

from airflow_provider_horovod.runtime.driver import program as driver
from airflow_provider_horovod.runtime.wire.payload import MAGIC, dumps_payload


def _train():
    return 1


def test_a_payload_from_another_python_names_where_spark_takes_the_interpreter_from(tmp_path, monkeypatch):
    monkeypatch.delenv(driver.KEY_ENV, raising=False)
    payload = dumps_payload(_train)
    header_line, body = payload[len(MAGIC) :].split(b"\n", 1)
    header = json.loads(header_line)
    header["python"] = "3.10"  # as made by an Airflow worker on another Python
    (tmp_path / "payload.bin").write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + body)
    assert driver.main(["--payload", str(tmp_path / "payload.bin"), "--result-dir", str(tmp_path), "--np", "2"]) == 1
    message = json.loads((tmp_path / "result.json").read_text())["message"]
    assert message.startswith("PayloadError: payload was written with python 3.10 but this interpreter")
    assert (
        "a Spark worker in cluster deploy mode, which a PYSPARK_PYTHON set on the Airflow side does not reach"
        in message
    )
    assert "conf={'spark.pyspark.python': '/path/to/python'}" in message


def test_a_driver_whose_jvm_is_gone_says_so(tmp_path):
    """The JVM exits when out of memory; its Python program sees a refused connection, and writes its result late."""
    import time

    from airflow_provider_horovod.utils.program_output import wait_for_driver_result

    class Py4JNetworkError(Exception):
        pass

    try:
        try:
            raise Py4JNetworkError("Answer from Java side is empty")
        except Py4JNetworkError:
            raise RuntimeError("cleanup failed")  # noqa: B904 - raised during the handling, as Py4J's are
    except RuntimeError as err:
        assert driver._jvm_gone(err)
    assert driver._jvm_gone(ConnectionRefusedError(111, "Connection refused"))
    assert not driver._jvm_gone(ValueError("a plain error"))
    started = time.monotonic()
    wait_for_driver_result(tmp_path, timeout_s=5)  # no status.json: the driver never started the job
    (tmp_path / "status.json").write_text("{}")
    (tmp_path / "result.json").write_text("{}")
    wait_for_driver_result(tmp_path, timeout_s=5)  # already written
    assert time.monotonic() - started < 1
    (tmp_path / "result.json").unlink()
    wait_for_driver_result(tmp_path, timeout_s=0.3)  # started, never wrote it: bounded
    assert time.monotonic() - started < 2
