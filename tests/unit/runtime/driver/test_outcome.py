"""The error a failed barrier stage turns into: its first line says why (runtime/driver/outcome.py)."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime.driver.outcome import raise_for_stage_failure, spark_reason, task_exception
from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.rank_errors import RankFailedError

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
    "airflow_provider_horovod.runtime.errors.LaunchError: horovod (horovod.runner.http.http_server) "
    "is not importable by the executor's Python /tmp/bare/bin/python on 127.0.0.1: install it there "
    "(Horovod built with Gloo and PyTorch), or point spark.pyspark.python / PYSPARK_PYTHON "
    "at an interpreter that has it",
    "ModuleNotFoundError: No module named 'airflow_provider_horovod'",
)


def _raised(text: str) -> str:
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(RuntimeError(text), [], lambda: "not enough slots")
    return str(info.value)


def test_the_runtimes_own_launch_error_is_the_first_line():
    lines = _raised(NO_HOROVOD).splitlines()
    assert lines[0].startswith(
        "horovod (horovod.runner.http.http_server) is not importable by the executor's Python "
        "/tmp/bare/bin/python on 127.0.0.1"
    )
    assert lines[1].startswith("Spark's account: org.apache.spark.SparkException: Job aborted due to stage failure")
    assert "collectAndServe" not in "\n".join(lines)


def test_another_python_exception_is_named_on_the_first_line_with_the_traceback_below():
    message = _raised(NO_RUNTIME)
    first, rest = message.split("\n", 1)
    assert first == "the Horovod barrier stage failed: ModuleNotFoundError: No module named 'airflow_provider_horovod'"
    assert "Traceback (most recent call last):" in rest and "collectAndServe" not in message


def test_without_a_python_traceback_sparks_summary_comes_first():
    text = (
        "An error occurred while calling o42.collectAndServe.\n: org.apache.spark.SparkException: Job aborted "
        "due to stage failure: Python worker exited unexpectedly (crashed)\n\tat org.apache.spark.X(X.scala:1)"
    )
    assert task_exception(text) is None
    assert _raised(text).splitlines()[0] == (
        "the Horovod barrier stage failed: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: Python worker exited unexpectedly (crashed)"
    )


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


# str() of what a real standalone run raised when the executor JVM of rank 1 was SIGKILLed (benchmark B9's set-up)
EXECUTOR_KILLED = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed barrier \
ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully.
ExecutorLostFailure (executor 0 exited caused by one of the running tasks) Reason: Command exited with code 137
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:3000)
"""
BYSTANDER = {
    "rank": 0,
    "exit_code": 1,
    "exc_type": "horovod.common.exceptions.HorovodInternalError",
    "exc_message": "Horovod has been shut down",
    "host": "10.0.0.5",
}


def test_a_lost_executor_is_named_with_its_host_rank_and_sparks_reason():
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(
            RuntimeError(EXECUTOR_KILLED), [BYSTANDER], lambda: "unused", np=2, executor_host={"0": "10.0.0.7"}.get
        )
    first, *rest = str(info.value).splitlines()
    assert first.startswith(
        "Spark lost executor 0 on 10.0.0.7 (barrier task 1, rank 1) during the barrier stage: "
        "Command exited with code 137: SIGKILL, e.g. the kernel's OOM killer or a kill -9 (exited "
        "caused by one of the running tasks). The other ranks were stopped"
    ), first
    assert "the next try resumes from the latest one" in first
    assert rest[0].startswith("Spark's account: org.apache.spark.SparkException: Job aborted")
    assert rest[-1] == "Ranks stopped as a consequence: 0 (horovod.common.exceptions.HorovodInternalError)"


def test_a_lost_executor_wins_over_a_rank_that_failed_because_of_it():
    # a survivor whose own code raised on the broken collective still is a consequence of the loss
    primary = {**BYSTANDER, "exc_type": "RuntimeError", "exc_message": "allreduce failed"}
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(
            RuntimeError(EXECUTOR_KILLED),
            [primary],
            lambda: "unused",
            np=2,
            executor_host=lambda _id: (_ for _ in ()).throw(RuntimeError("no JVM")),
        )
    assert str(info.value).startswith(
        "Spark lost executor 0 (barrier task 1, rank 1) during the barrier stage: Command exited with code 137"
    )


def test_a_worker_lost_without_a_reason_still_names_the_executor():
    text = EXECUTOR_KILLED.replace(
        "exited caused by one of the running tasks) Reason: Command exited with code 137",
        "exited unrelated to the running tasks)",
    )
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(RuntimeError(text), [], lambda: "unused", np=3)
    assert str(info.value).startswith(
        "Spark lost executor 0 (barrier task 1) during the barrier stage: no reason "
        "given (exited unrelated to the running tasks)."
    )


def test_a_lost_executor_is_an_executor_lost_error_with_its_facts():
    from airflow_provider_horovod.runtime.errors import ExecutorLostError

    with pytest.raises(ExecutorLostError) as info:
        raise_for_stage_failure(
            RuntimeError(EXECUTOR_KILLED), [BYSTANDER], lambda: "unused", np=2, executor_host={"0": "10.0.0.7"}.get
        )
    assert isinstance(info.value, LaunchError)  # what caught a lost executor before still catches it
    assert info.value.facts() == {
        "executor": "0",
        "host": "10.0.0.7",
        "rank": 1,
        "partition": 1,
        "reason": "Command exited with code 137",
        "exit_code": 137,
    }
    worker = EXECUTOR_KILLED.replace(
        "exited caused by one of the running tasks) Reason: Command exited with code 137",
        "exited unrelated to the running tasks) Reason: worker lost: 10.0.0.7:4211 got disassociated",
    )
    with pytest.raises(ExecutorLostError) as info:
        raise_for_stage_failure(RuntimeError(worker), [], lambda: "unused", np=3)
    assert info.value.facts() == {
        "executor": "0",
        "host": None,
        "rank": None,
        "partition": 1,
        "reason": "worker lost: 10.0.0.7:4211 got disassociated",
        "exit_code": None,
    }
    assert "SIGKILL" not in str(info.value)


def test_a_stage_failure_other_than_a_lost_executor_or_a_cancellation_stays_a_plain_launch_error():
    with pytest.raises(LaunchError) as info:
        raise_for_stage_failure(
            RuntimeError("Job aborted due to stage failure: Python worker exited unexpectedly (crashed)"),
            [],
            lambda: "unused",
        )
    assert type(info.value) is LaunchError


@pytest.mark.parametrize(
    "spark_says, job_id, reason",
    [
        (
            "org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 3 cancelled because killed via Web UI "
            "SQLSTATE: XXKDA",
            3,
            "because killed via Web UI",
        ),
        (
            "[SPARK_JOB_CANCELLED] Job 0 cancelled part of cancelled job group g SQLSTATE: XXKDA",
            0,
            "part of cancelled job group g",
        ),
        (
            "org.apache.spark.SparkException: Job 7 cancelled because SparkContext was shut down",
            7,
            "because SparkContext was shut down",
        ),
    ],
)
def test_a_job_cancelled_from_outside_is_its_own_type_and_blames_no_rank(spark_says, job_id, reason):
    from airflow_provider_horovod.runtime.errors import JobCancelledError

    stopped = RankFailedError(rank=1, exit_code=-9, failed_at=2.0).to_dict()  # a rank the cancellation killed
    with pytest.raises(JobCancelledError) as info:
        raise_for_stage_failure(
            RuntimeError(
                f"An error occurred while calling o1.collectAndServe.\n: {spark_says}\n"
                "\tat org.apache.spark.scheduler.DAGScheduler.failJob"
            ),
            [stopped],
            lambda: "unused",
        )
    err = info.value
    assert isinstance(err, LaunchError) and err.facts() == {"job_id": job_id, "reason": reason}
    assert str(err).startswith(f"Spark cancelled the barrier job (job {job_id}) from outside this run: {reason}.")
    assert "Ranks stopped as a consequence: 1 (None)" in str(err)
