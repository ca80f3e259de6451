"""The error a failed barrier stage turns into: its first line says why (runtime/driver/outcome.py)."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime.driver.outcome import raise_for_stage_failure, spark_reason, task_exception
from airflow_provider_horovod.runtime.errors import LaunchError

# str() of the Py4JJavaError a real local[2] run raised when the executors' Python had no Horovod (abridged paths)
NO_HOROVOD = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed barrier \
ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 0) finished unsuccessfully.
org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: \
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 3622, in main
    process()
  File "/tmp/spark-2de6/userFiles-c931/airflow_provider_horovod_runtime.zip/airflow_provider_horovod/runtime/\
launch.py", line 545, in _preflight
    raise LaunchError(
airflow_provider_horovod.runtime.errors.LaunchError: horovod (horovod.runner.http.http_server) is not importable by \
the executor's Python /tmp/bare/bin/python on 127.0.0.1: install it there (Horovod built with Gloo and PyTorch), or \
point spark.pyspark.python / PYSPARK_PYTHON at an interpreter that has it
 SQLSTATE: 38000
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:3000)
\tat org.apache.spark.rdd.RDD.collect(RDD.scala:1072)
"""

NO_RUNTIME = NO_HOROVOD.replace(
    "airflow_provider_horovod.runtime.errors.LaunchError: horovod (horovod.runner.http.http_server) is not importable by \
the executor's Python /tmp/bare/bin/python on 127.0.0.1: install it there (Horovod built with Gloo and PyTorch), or \
point spark.pyspark.python / PYSPARK_PYTHON at an interpreter that has it",
    "ModuleNotFoundError: No module named 'airflow_provider_horovod'")


def _raised(text: str) -> str:
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(RuntimeError(text), [], lambda: "not enough slots")
    return str(info.value)


def test_the_runtimes_own_launch_error_is_the_first_line():
    lines = _raised(NO_HOROVOD).splitlines()
    assert lines[0].startswith("horovod (horovod.runner.http.http_server) is not importable by the executor's Python "
                               "/tmp/bare/bin/python on 127.0.0.1")
    assert lines[1].startswith("Spark's account: org.apache.spark.SparkException: Job aborted due to stage failure")
    assert "collectAndServe" not in "\n".join(lines)


def test_another_python_exception_is_named_on_the_first_line_with_the_traceback_below():
    message = _raised(NO_RUNTIME)
    first, rest = message.split("\n", 1)
    assert first == "the Horovod barrier stage failed: ModuleNotFoundError: No module named 'airflow_provider_horovod'"
    assert "Traceback (most recent call last):" in rest and "collectAndServe" not in message


def test_without_a_python_traceback_sparks_summary_comes_first():
    text = ("An error occurred while calling o42.collectAndServe.\n: org.apache.spark.SparkException: Job aborted "
            "due to stage failure: Python worker exited unexpectedly (crashed)\n\tat org.apache.spark.X(X.scala:1)")
    assert task_exception(text) is None
    assert _raised(text).splitlines()[0] == ("the Horovod barrier stage failed: org.apache.spark.SparkException: Job "
                                             "aborted due to stage failure: Python worker exited unexpectedly (crashed)")


def test_spark_reason_drops_jvm_frames_and_the_py4j_preamble():
    reason = spark_reason(NO_HOROVOD)
    assert not any(line.lstrip().startswith("at ") for line in reason.splitlines())
    assert reason.startswith("org.apache.spark.SparkException")



class Py4JNetworkError(Exception):
    """Stands for Py4J's error of that name, which carried no text when the driver JVM had run out of memory."""


def test_an_exception_without_text_is_named_by_its_type():
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(Py4JNetworkError(), [], lambda: "not enough slots")
    assert str(info.value) == (f"the Horovod barrier stage failed: {__name__}.Py4JNetworkError (with no message)")
    assert _raised("") == "the Horovod barrier stage failed: RuntimeError (with no message)"
