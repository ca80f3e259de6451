"""The driver program's own errors say which Python Spark started and where that choice comes from."""

from __future__ import annotations

import json

from airflow_provider_horovod.runtime import driver
from airflow_provider_horovod.runtime.payload import MAGIC, dumps_payload


def _train():
    return 1


def test_a_payload_from_another_python_names_where_spark_takes_the_interpreter_from(tmp_path, monkeypatch):
    monkeypatch.delenv(driver.KEY_ENV, raising=False)
    payload = dumps_payload(_train)
    header_line, body = payload[len(MAGIC):].split(b"\n", 1)
    header = json.loads(header_line)
    header["python"] = "3.10"  # as made by an Airflow worker on another Python
    (tmp_path / "payload.bin").write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + body)
    assert driver.main(["--payload", str(tmp_path / "payload.bin"), "--result-dir", str(tmp_path), "--np", "2"]) == 1
    message = json.loads((tmp_path / "result.json").read_text())["message"]
    assert message.startswith("PayloadError: payload was written with python 3.10 but this interpreter")
    assert "a Spark worker in cluster deploy mode, which a PYSPARK_PYTHON set on the Airflow side does not reach" \
        in message
    assert "conf={'spark.pyspark.python': '/path/to/python'}" in message
