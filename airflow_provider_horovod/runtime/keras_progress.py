"""
:class:`ProgressCallback`: Keras reports its training's progress through
:func:`~airflow_provider_horovod.runtime.report` (one report per batch, throttled there, and one per epoch with the
epoch's metrics, validation included). Import it only where TensorFlow is installed (the ranks of a Keras job).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from airflow_provider_horovod.runtime.library_progress import numeric
from airflow_provider_horovod.runtime.reports import report


class ProgressCallback(tf.keras.callbacks.Callback):
    """
    Report a Keras ``fit`` as it goes: ``step`` (batches done in all), ``total_steps`` (``steps_per_epoch *
    epochs``, when Keras knows them), ``epoch`` (0-based, as Keras counts) and the batch's and the epoch's logs as
    metrics (``loss``, ``accuracy``, ``val_*``). Put it in every rank's callbacks: rank 0's metrics make the history,
    the others' steps show a straggler.
    """

    def __init__(self) -> None:
        super().__init__()
        self._step = 0
        self._epoch = 0
        self._total: int | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102 - Keras' hook
        steps, epochs = (self.params or {}).get("steps"), (self.params or {}).get("epochs")
        self._total = steps * epochs if steps and epochs else None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._step += 1
        report(step=self._step, total_steps=self._total, epoch=self._epoch, **numeric(logs))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        report(step=self._step, total_steps=self._total, epoch=epoch, **numeric(logs))
