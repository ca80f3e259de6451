"""
The log4j2 file the hooks give the Spark driver (``SPARK_LOG4J2``), read by a real driver JVM (``spark-submit``):
Spark at the chosen level, ``org.apache.spark.deploy`` at INFO (SparkSubmitHook reads driver ids from it), and the
loggers whose output would only repeat or clutter the task log turned off: the executor's and the scheduler's copies of
a failed rank's traceback, and Jersey's stack trace for a monitoring request cut off as the driver's web UI stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_horovod.utils.spark_conf import SPARK_LOG4J2
from tests.standalone import spark_home

pytestmark = pytest.mark.spark

SCRIPT = """
import json, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
log_manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
levels = {name: log_manager.getLogger(name).getLevel().toString() for name in sys.argv[1:]}
print("LEVELS " + json.dumps(levels), flush=True)
spark.stop()
"""


def test_the_driver_log4j_file_sets_spark_s_level_keeps_deploy_and_turns_the_noisy_loggers_off(tmp_path: Path):
    config = tmp_path / "log4j2.properties"
    config.write_text(SPARK_LOG4J2.format(level="warn"))
    script = tmp_path / "levels.py"
    script.write_text(SCRIPT)
    loggers = {
        "org.apache.spark.SparkContext": "WARN",  # the root level
        "org.apache.spark.deploy.Client": "INFO",
        "org.apache.spark.executor.Executor": "OFF",
        "org.apache.spark.scheduler.TaskSetManager": "OFF",
        "org.glassfish.jersey.server.ServerRuntime$Responder": "OFF",
        "org.glassfish.jersey.server.ServerRuntime": "WARN",  # only the responder: Jersey's other errors still show
    }
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{config}",
            str(script),
            *loggers,
        ],
        env={**env, "SPARK_HOME": str(spark_home()), "PYSPARK_DRIVER_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("LEVELS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads(lines[0].removeprefix("LEVELS ")) == loggers
