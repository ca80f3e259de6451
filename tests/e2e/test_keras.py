"""
Keras / TensorFlow training (issue #14): the example's ``horovod.tensorflow.keras`` function through ``HorovodRunner``
(np=2 on a local Spark, np=-2 on the driver) in the Keras environment (``.venv-keras``: TensorFlow 2.15 and Horovod
built with TensorFlow), and the example DAG through ``airflow dags test``, where Airflow runs in ``.venv`` and
Spark's driver and executors in ``.venv-keras``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.client_script import run_client_script
from tests.conftest import REPO, VENV_BIN, airflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]

KERAS_PYTHON = REPO / ".venv-keras" / "bin" / "python"
EXAMPLES = REPO / "example_dags"

RUNNER_SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession

data_path, artifacts, np_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false").getOrCreate())
from airflow_provider_horovod.runtime import HorovodRunner
from keras_digits_training import train_keras

value = HorovodRunner(np=np_, artifact_dir=artifacts).run(train_keras, data_path=data_path, epochs=25)
spark.stop()
print("RESULT " + json.dumps(value), flush=True)
"""


@pytest.fixture(scope="module")
def keras_python() -> str:
    if not KERAS_PYTHON.exists():
        pytest.fail(f"{KERAS_PYTHON} is missing: make setup-keras (make test runs it) makes the Keras environment")
    return str(KERAS_PYTHON)


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> str:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.2, stratify=y, random_state=0)
    path = tmp_path_factory.mktemp("digits") / "digits.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return str(path)


def _keras_env(keras_python: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")},
        "PYSPARK_PYTHON": keras_python,
        "PYSPARK_DRIVER_PYTHON": keras_python,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(EXAMPLES)]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


@pytest.mark.parametrize("np_", [2, -2])
def test_keras_function_through_horovod_runner(keras_python, digits, tmp_path, np_):
    artifacts = tmp_path / "artifacts"
    value, stdout = run_client_script(
        RUNNER_SCRIPT,
        tmp_path / "run_keras.py",
        [digits, str(artifacts), str(np_)],
        timeout_s=600,
        env=_keras_env(keras_python),
        python=keras_python,
    )

    assert value["ranks"] == 2 and value["model_path"] == str(artifacts / "model.keras")
    assert value["test_accuracy"] >= 0.9, value
    assert value["train_accuracy"] >= 0.9, value  # averaged over both ranks' shards by MetricAverageCallback
    assert (artifacts / "model.keras").is_file() and (artifacts / "checkpoint.h5").is_file()  # rank 0 only
    assert list((artifacts / "tensorboard").glob("train/events.out.tfevents.*")), sorted(artifacts.rglob("*"))
    # model.fit(verbose=2) on rank 0: an epoch line per epoch reaches the driver's output
    assert "Epoch 25/25" in stdout and "[rank 0]" in stdout and "[rank 1]" not in stdout
    # ProgressCallback: every batch and epoch reported; the history has Keras' averaged metrics, the last step is all
    history = [json.loads(line) for line in (artifacts / "metrics.jsonl").read_text().splitlines()]
    steps = history[-1]["total_steps"]
    assert steps and history[-1]["step"] == steps and history[-1]["epoch"] == 24
    assert history[-1]["metrics"]["accuracy"] >= 0.9 and "loss" in history[-1]["metrics"]
    assert "airflow-provider-horovod: progress: step" in stdout


def test_keras_example_dag(keras_python, airflow_home, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in ("horovod_keras_digits.py", "keras_digits_training.py"):  # the DAG imports its training module
        shutil.copy(EXAMPLES / name, dags)
    env = {**airflow_env(airflow_home, dags), "HOROVOD_KERAS_PYTHON": keras_python, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "dags", "test", "horovod_keras_digits"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    shown = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "show_run.py"), "--json", "horovod_keras_digits"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    run = json.loads(shown.stdout.strip().splitlines()[-1])

    assert run["states"] == {"prepare_digits": "success", "train": "success", "check_accuracy": "success"}, log[-6000:]
    xcom = run["xcom"]
    artifact_dir = xcom["train.artifact_dir"]
    assert xcom["train.return_value"]["model_path"] == f"{artifact_dir}/model.keras"
    assert xcom["check_accuracy.return_value"] >= 0.9
    paths = xcom["train.artifact_paths"]
    assert {f"{artifact_dir}/model.keras", f"{artifact_dir}/checkpoint.h5"} <= set(paths)
    assert xcom["train.tensorboard_dir"] == f"{artifact_dir}/tensorboard"
    assert any(p.startswith(f"{artifact_dir}/tensorboard/train/events.out.tfevents.") for p in paths)
    assert "[rank 0] Epoch 25/25" in log
    assert xcom["train.metrics"]["accuracy"] >= 0.9  # ProgressCallback's last epoch, rank 0's
