"""
The shared setup: environment variables, the local Spark session, the example model and the digits data.

Every contender runs on the same ``local[2]`` Spark bound to 127.0.0.1 and the same interpreter.
"""

from __future__ import annotations

import os
import tempfile

from benchmarks.paths import EXAMPLE_DAG, PYTHON, REPO  # noqa: F401 - EXAMPLE_DAG: for users of env


def bench_environ() -> dict[str, str]:
    """This interpreter for PySpark workers, loopback only, and the repository on every worker's path."""
    path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": PYTHON,
        "PYSPARK_DRIVER_PYTHON": PYTHON,
        "PYTHONPATH": path,
        "PYTHONUNBUFFERED": "1",
        "PATH": os.pathsep.join([os.path.dirname(PYTHON), os.environ.get("PATH", "")]),
    }


def setup_environ() -> None:
    """Apply :func:`bench_environ` to this process (before Spark starts)."""
    os.environ.update(bench_environ())


def spark_session(cores: int = 2):
    """Start (or return) the shared ``local[cores]`` SparkSession bound to 127.0.0.1, logging at WARN."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("airflow-provider-horovod-benchmarks")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", PYTHON)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "5s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def load_example_model():
    """``build_model`` from the example DAG file, without importing the DAG (and Airflow): see
    :mod:`benchmarks.example_model` (compiled from the DAG's source, travels to the ranks by value)."""
    from benchmarks.example_model import build_model

    return build_model


def prepare_digits(workdir: str | None = None) -> str:
    """The example DAG's split of ``load_digits`` (80/20, stratified, seed 0) as an ``.npz``; returns its path."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.2, stratify=y, random_state=0)
    path = os.path.join(workdir or tempfile.mkdtemp(prefix="horovod-bench-"), "digits.npz")
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path
