"""
Keras retraining: prepare data -> train a ``horovod.tensorflow.keras`` model on Spark (2 ranks) -> check the metric.

The training function (``keras_digits_training.train_keras``, next to this file) runs in a Python with TensorFlow
2.15 and Horovod built with TensorFlow: ``make setup-keras`` makes ``.venv-keras`` (Airflow stays in ``.venv``), and
the task points Spark's Python at it (``spark.pyspark.python`` for the executors, ``spark.pyspark.driver.python``
for the driver). Set ``HOROVOD_KERAS_PYTHON`` to use another interpreter. Data: scikit-learn's bundled
``load_digits``, prepared on the Airflow worker, so nothing is downloaded. See docs/keras.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task
from keras_digits_training import train_keras

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

ACCURACY_THRESHOLD = 0.9
KERAS_PYTHON = os.environ.get(
    "HOROVOD_KERAS_PYTHON", str(Path(__file__).resolve().parent.parent / ".venv-keras" / "bin" / "python")
)

with DAG(
    dag_id="horovod_keras_digits",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["horovod", "spark", "keras", "example"],
    doc_md=__doc__,
):

    @task
    def prepare_digits(**context) -> str:
        """Split load_digits 80/20 (stratified) into an .npz every rank can read."""
        import numpy as np
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        from airflow_provider_horovod.paths import data_dir

        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.2, stratify=y, random_state=0)
        out_dir = data_dir(context["run_id"], "keras")
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "digits.npz")
        np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        return path

    train = HorovodRunnerOperator(
        task_id="train",
        python_callable=train_keras,
        op_kwargs={"data_path": prepare_digits()},
        np=2,
        conf={"spark.pyspark.python": KERAS_PYTHON, "spark.pyspark.driver.python": KERAS_PYTHON},
    )

    @task
    def check_accuracy(metrics: dict) -> float:
        """Fail the run when the held-out accuracy rank 0 measured is below the threshold."""
        accuracy = metrics["test_accuracy"]
        print(f"held-out accuracy of {metrics['model_path']}: {accuracy:.4f}")
        if accuracy < ACCURACY_THRESHOLD:
            raise ValueError(f"accuracy {accuracy:.4f} is below the {ACCURACY_THRESHOLD} threshold")
        return accuracy

    check_accuracy(train.output)
