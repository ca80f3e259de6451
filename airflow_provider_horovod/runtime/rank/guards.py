"""
What the worker wraps around the call that joins a rank to the others, to report entering and leaving it to the
launcher (its ``start_timeout_s`` clock) and to check the world size: Horovod's ``hvd.init()``
(:func:`guard_init`) and ``torch.distributed.init_process_group()`` (:func:`guard_process_group_init`). Arguments
pass through untouched; the function initializes its framework itself, as under ``horovodrun`` or ``torchrun``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from airflow_provider_horovod.runtime.wire.protocol import ENV_PROGRESS, PROGRESS_INIT, PROGRESS_READY

_MARK = "__wrapped_by_airflow_provider_horovod__"

_HOROVOD: dict[str, Any] = {"expected": None, "progress": None}
_TORCH: dict[str, Any] = {"expected": None, "progress": None}
"""What the wrappers report to and check against: set by each guard call, also when the wrapper is in place already
(a rank forked from a fork server that installed it: :mod:`~airflow_provider_horovod.runtime.rank.fork_server`)."""


class Progress:
    """
    Milestones for the launcher, which enforces ``start_timeout_s`` with them (one byte each, on the pipe
    ``HOROVOD_AIRFLOW_PROGRESS_FD`` names; without it nothing is reported).
    """

    def __init__(self) -> None:
        fd = os.environ.get(ENV_PROGRESS)
        self._fd = int(fd) if fd else None
        if self._fd is not None:
            os.set_inheritable(self._fd, False)  # not into the function's own subprocesses

    def report(self, milestone: bytes) -> None:
        """Send ``milestone`` (``PROGRESS_LOADED``, ``PROGRESS_INIT`` or ``PROGRESS_READY``); errors are ignored."""
        if self._fd is None:
            return
        try:
            os.write(self._fd, milestone)
        except OSError:
            pass


def guard_init(expected_size: int | None, progress: Progress) -> None:
    """
    Wrap ``horovod.common.basics.HorovodBasics.init`` so every ``hvd.init(...)`` the function makes reports its
    start and end to the launcher and, when it asks for the whole world (no ``comm`` subset), checks that Horovod
    sees ``expected_size`` ranks. Arguments are passed through untouched. Without Horovod importable, nothing is
    wrapped (the function's own ``import horovod...`` then fails with its usual error).

    :param expected_size: the job's ``np``; ``None`` skips the size check.
    :param progress: where milestones go.
    """
    _HOROVOD.update(expected=expected_size, progress=progress)
    try:
        from horovod.common.basics import HorovodBasics
    except ImportError:
        return
    original = HorovodBasics.init
    if getattr(original, _MARK, False):
        return

    def init(self: Any, *args: Any, **kwargs: Any) -> Any:
        progress, expected_size = _HOROVOD["progress"], _HOROVOD["expected"]
        progress.report(PROGRESS_INIT)
        value = original(self, *args, **kwargs)
        comm = args[0] if args else kwargs.get("comm")
        if expected_size is not None and not comm and self.size() != expected_size:
            raise RuntimeError(
                f"Horovod initialized with size {self.size()} but the job has np={expected_size}: the rank "
                "environment (HOROVOD_RANK/SIZE/...) did not reach this process, so it would train alone."
            )
        progress.report(PROGRESS_READY)
        return value

    setattr(init, _MARK, True)
    init.__doc__ = original.__doc__
    HorovodBasics.init = init


def guard_process_group_init(expected_size: int | None, progress: Progress) -> None:
    """
    Wrap ``torch.distributed.init_process_group`` (where ``torch.distributed`` and its ``distributed_c10d``
    module name it) so every call the function makes reports its start and end to the launcher and checks that
    the default process group has ``expected_size`` ranks. Imports ``torch.distributed``.

    :param expected_size: the job's ``np``; ``None`` skips the size check.
    :param progress: where milestones go.
    :raises ImportError: ``torch.distributed`` is not importable.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    _TORCH.update(expected=expected_size, progress=progress)
    original = distributed_c10d.init_process_group
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        progress, expected_size = _TORCH["progress"], _TORCH["expected"]
        progress.report(PROGRESS_INIT)
        value = original(*args, **kwargs)
        size = dist.get_world_size()
        if expected_size is not None and size != expected_size:
            raise RuntimeError(
                f"torch.distributed initialized with world size {size} but the job has np={expected_size}: pass no "
                "world_size/rank to init_process_group() (the launcher sets WORLD_SIZE, RANK, MASTER_ADDR, ...), "
                "or it would train apart from the other ranks"
            )
        progress.report(PROGRESS_READY)
        return value

    setattr(init_process_group, _MARK, True)
    distributed_c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group
