"""
The Keras training function of ``horovod_keras_digits`` (a module of its own, without Airflow: the Keras tests
run it through ``HorovodRunner`` in the Keras environment, where Airflow is not installed).

It has the shape of the HorovodRunner announcement's Keras example: ``hvd.init()``, the data split by
``hvd.rank()`` / ``hvd.size()``, ``hvd.DistributedOptimizer`` around a Keras optimizer, rank 0's variables
broadcast (``BroadcastGlobalVariablesCallback(0)``), metrics averaged over the ranks (``MetricAverageCallback``),
``model.fit(..., verbose=2)`` on rank 0, and a checkpoint written by rank 0 only under ``artifact_dir()``. Rank 0
also logs to TensorBoard under ``tensorboard_dir()``; every rank reports its progress (``ProgressCallback``: the task
log's progress line, ``metrics.jsonl``, XCom ``metrics``).
"""

from __future__ import annotations


def train_keras(data_path: str, epochs: int = 25, batch_size: int = 32, lr: float = 0.02) -> dict:
    """
    Train a small Keras MLP on this rank's shard of the digits; rank 0 saves it and measures held-out accuracy.

    :param data_path: ``.npz`` with ``x_train``, ``y_train``, ``x_test``, ``y_test`` (64 features, 10 classes),
        readable by every rank.
    :param epochs: passes over each rank's shard.
    :param batch_size: samples per step on each rank.
    :param lr: learning rate of a single rank (scaled by the number of ranks).
    :return: on rank 0: ``model_path``, ``test_accuracy`` (held-out), ``train_accuracy`` (last epoch, averaged
        over the ranks), ``ranks``; ``{}`` on the other ranks.
    """
    import os

    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    from airflow_provider_horovod.runtime import artifact_dir, tensorboard_dir
    from airflow_provider_horovod.runtime.keras_progress import ProgressCallback

    hvd.init()
    tf.random.set_seed(1234)
    data = np.load(data_path)
    x = data["x_train"][hvd.rank() :: hvd.size()].astype("float32")
    y = data["y_train"][hvd.rank() :: hvd.size()]
    # the same number of steps on every rank, so their allreduces match
    steps_per_epoch = (len(data["x_train"]) // hvd.size()) // batch_size

    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=lr * hvd.size(), momentum=0.9))
    model.compile(
        optimizer=optimizer, metrics=["accuracy"], loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        ProgressCallback(),
    ]  # after the averaging: the task log and the UI show the ranks' mean
    if hvd.rank() == 0:  # one writer: rank 0's checkpoint and TensorBoard logs
        callbacks += [
            tf.keras.callbacks.ModelCheckpoint(os.path.join(artifact_dir(), "checkpoint.h5")),
            tf.keras.callbacks.TensorBoard(log_dir=tensorboard_dir(), update_freq="epoch"),
        ]
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=hvd.rank()).batch(batch_size).repeat()
    history = model.fit(
        dataset,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        callbacks=callbacks,
        verbose=2 if hvd.rank() == 0 else 0,
    )
    if hvd.rank() != 0:
        return {}
    path = os.path.join(artifact_dir(), "model.keras")
    model.save(path)
    _loss, test_accuracy = model.evaluate(data["x_test"].astype("float32"), data["y_test"], verbose=0)
    print(f"saved model to {path}; held-out accuracy {test_accuracy:.4f}", flush=True)
    return {
        "model_path": path,
        "test_accuracy": round(float(test_accuracy), 4),
        "train_accuracy": round(float(history.history["accuracy"][-1]), 4),
        "ranks": hvd.size(),
    }
