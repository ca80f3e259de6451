"""
What differs between the launchers a job can use (Horovod, and PyTorch's ``torch.distributed``): the modules a
rank started ahead of its rendezvous imports meanwhile (:func:`preimports`). Standard library only: the barrier
task imports it before its checks of the executor's Python.
"""

from __future__ import annotations


FRAMEWORKS = ("horovod.torch", "horovod.tensorflow", "horovod.keras")
"""Horovod framework modules a deferred rank imports ahead when its payload names them."""


def preimports(payload: bytes) -> list[str]:
    """
    The Horovod framework modules a payload's function imports, read from the payload bytes without loading them.

    A function pickled by value carries its code's names as plain strings (``import horovod.torch as hvd`` puts
    ``horovod.torch`` there), so a byte search finds them; a false hit only costs an import. Functions pickled by
    reference (an installed module) name no imports: nothing is imported ahead for them.

    :param payload: the payload (:mod:`~airflow_provider_horovod.runtime.wire.payload` format).
    :return: module names from :data:`FRAMEWORKS`, in that order.
    """
    return [name for name in FRAMEWORKS if name.encode() in payload]
