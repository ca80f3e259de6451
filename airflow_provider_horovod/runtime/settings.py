"""
:class:`JobSettings`: every knob of one training job, validated once, whichever entry point it came through.

``HorovodRunner``, ``HorovodRunnerOperator``, ``@task.horovod``, the hooks (client, standalone cluster, Spark
Connect) and the Spark driver program all build a :class:`JobSettings` from what they were given, so a value one of
them refuses, every one of them refuses with the same message (``tests/unit/runtime/test_settings.py`` checks every
entry point against one table). The settings travel to the driver program as its command-line flags
(:meth:`JobSettings.to_args`, read back by :meth:`JobSettings.from_args`), which hand them as they are to the
runner (:class:`~airflow_provider_horovod.runtime.driver.runner.BarrierRunner`) and on to every rank's launcher
(:class:`~airflow_provider_horovod.runtime.wire.jobspec.JobSpec`).

This module imports nothing but the standard library, the launchers' table and the runtime errors' type naming
(stdlib only too): a DAG file that uses the operator imports it when it is parsed, and the driver program reads its
flags with it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from airflow_provider_horovod.runtime.errors import type_name
from airflow_provider_horovod.runtime.launchers import HOROVOD, LAUNCHERS

DRIVER_LOG_VERBOSITIES = ("log_callback_only", "all")
"""``driver_log_verbosity``: rank 0's output only, or every rank's, in the driver's (the task's) log."""
GPU_VISIBILITIES = ("host", "rank")
"""``gpu_visibility``: see :mod:`airflow_provider_horovod.runtime.task.gpus`."""
DEFAULT_GPU_VISIBILITY = "host"
LAUNCHER_NAMES = tuple(LAUNCHERS)
"""``launcher``: Horovod's Gloo rendezvous (``hvd.init()``), or the torchrun environment for ``torch.distributed``
(the function calls ``init_process_group()``); see :mod:`airflow_provider_horovod.runtime.launchers`."""
DEFAULT_LAUNCHER = HOROVOD
DEFAULT_GLOO_TIMEOUT_S = 300
"""Default ``gloo_timeout_s``: Horovod's 30 s is too short for ranks that start on busy executors."""
DEFAULT_START_TIMEOUT_S = 600.0
"""Default ``start_timeout_s`` (Horovod's own ``start_timeout`` default)."""
DEFAULT_SLOT_WAIT_TIMEOUT_S = 3600.0
"""Default ``slot_wait_timeout_s``: how long a barrier job waits for its task slots on a busy cluster."""
DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0
"""Default ``heartbeat_timeout_s``: a barrier task silent this long is lost (Spark's own ``spark.network.timeout`` is
120 s); 15 of the tasks' 2-second heartbeats missed in a row."""
DEFAULT_ELASTIC_WAIT_S = 30.0
"""Default ``elastic_wait_s``: how long a restart waits for all ``np`` slots before it starts with fewer (``min_np``);
torchrun's rendezvous waits 30 s (``last_call_timeout``) for more nodes once it has its minimum."""
MIN_HEARTBEAT_TIMEOUT_S = 6.0
"""The smallest ``heartbeat_timeout_s``: three heartbeat intervals
(:data:`~airflow_provider_horovod.runtime.wire.logs.HEARTBEAT_INTERVAL_S` is 2 s)."""
DEFAULT_MAX_RETURN_VALUE_BYTES = 64 * 1024 * 1024
"""``HorovodRunner``'s default ``max_return_value_bytes`` (the operator's is the XCom limit, 1 MiB)."""


def validate_np(np: object) -> int:
    """
    Check the ``np`` argument.

    :param np: number of processes: ``> 0`` runs a Spark barrier stage of ``np`` tasks; ``< 0`` runs ``-np``
        processes on the driver.
    :return: ``np`` as given.
    :raises ValueError: ``np`` is 0 or not an ``int`` (``bool`` included).
    """
    if isinstance(np, bool) or not isinstance(np, int):
        raise ValueError(
            f"np must be a non-zero int (> 0: that many Spark barrier tasks; < 0: -np processes on the "
            f"driver), got {np!r} of type {type(np).__name__}"
        )
    if np == 0:
        raise ValueError(
            "np must be a non-zero int (> 0: that many Spark barrier tasks; < 0: -np processes on the "
            "driver); np=0 ('all task slots') is not supported because Spark's slot count is unreliable"
        )
    return np


def validate_choice(name: str, value: object, allowed: Sequence[str]) -> str:
    """
    Check a parameter that takes one of a few strings.

    :param name: the parameter's name, for the message.
    :param value: the argument as given.
    :param allowed: the values it may take.
    :return: it, as a string.
    :raises ValueError: not one of ``allowed``; the message names ``name`` and ``allowed``.
    """
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def validate_gpu_visibility(value: object) -> str:
    """
    Check ``gpu_visibility``.

    :param value: the argument as given.
    :return: ``"host"`` or ``"rank"``.
    :raises ValueError: any other value.
    """
    return validate_choice("gpu_visibility", value, GPU_VISIBILITIES)


def validate_timeout(name: str, value: object) -> float | None:
    """
    Check an optional timeout in seconds.

    :param name: the parameter's name, for the message (e.g. ``"start_timeout_s"``).
    :param value: the argument as given.
    :return: the seconds as a float, or ``None``.
    :raises ValueError: not ``None`` and not a positive number (``bool`` included); the message names ``name``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def validate_positive_int(name: str, value: object, unit: str) -> int:
    """
    Check a parameter that is a positive whole number.

    :param name: the parameter's name, for the message.
    :param value: the argument as given.
    :param unit: what it counts, for the message (``"seconds"``, ``"bytes"``).
    :return: it.
    :raises ValueError: not an ``int`` above 0 (``bool`` included).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int ({unit}), got {value!r}")
    return value


def validate_flag(name: str, value: object) -> bool:
    """
    Check a parameter that is ``True`` or ``False``.

    :param name: the parameter's name, for the message.
    :param value: the argument as given.
    :return: it.
    :raises ValueError: not a ``bool``.
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def spark_flag(conf: Any, key: str) -> bool:
    """
    A boolean Spark property read as Spark reads it: ``true`` in any case is true; unset, or anything else, false.

    :param conf: Spark properties: a mapping (the operator's ``conf``) or a ``SparkConf`` (both have ``get``), or
        ``None``.
    :param key: the property, e.g. ``spark.decommission.enabled``.
    """
    return bool(conf) and str(conf.get(key, None) or "").strip().lower() == "true"


def check_barrier_conf(conf: Mapping[str, Any] | None, *, source: str = "conf") -> None:
    """
    Refuse Spark properties under which no barrier stage can run.

    :param conf: Spark properties (the operator's ``conf``, or an application's whole conf), or ``None``.
    :param source: where they came from, for the message.
    :raises ValueError: ``spark.dynamicAllocation.enabled`` is true: Spark refuses barrier stages with dynamic
        allocation (SPARK-24942).
    """
    if spark_flag(conf, "spark.dynamicAllocation.enabled"):
        raise ValueError(
            f"{source}: spark.dynamicAllocation.enabled=true cannot be used; Spark refuses barrier "
            "stages with dynamic allocation (SPARK-24942). Allowed: false or unset"
        )


def validate_location(name: str, value: object) -> str | None:
    """
    Check an optional directory (a path or an fsspec URI).

    :param name: the parameter's name, for the message.
    :param value: the argument as given.
    :return: it, or ``None``.
    :raises ValueError: not ``None`` and not a non-empty string.
    """
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{name} must be a path or URI (a non-empty str) or None, got {value!r}")
    return value


def validate_max_restarts(value: object) -> int:
    """
    Check ``max_restarts``.

    :raises ValueError: not an ``int`` from 0 (``bool`` included).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"max_restarts must be an int from 0 (how many times a failed attempt starts again within the "
            f"try; 0: never), got {value!r}"
        )
    return value


def validate_heartbeat_timeout(value: object) -> float | None:
    """
    Check ``heartbeat_timeout_s``.

    :raises ValueError: neither ``None`` nor a number of seconds from :data:`MIN_HEARTBEAT_TIMEOUT_S`.
    """
    checked = validate_timeout("heartbeat_timeout_s", value)
    if checked is not None and checked < MIN_HEARTBEAT_TIMEOUT_S:
        raise ValueError(
            f"heartbeat_timeout_s must be at least {MIN_HEARTBEAT_TIMEOUT_S:g} seconds (three of the tasks' 2-second "
            f"heartbeats) or None (Spark's own detection only), got {value!r}"
        )
    return checked


def validate_min_np(value: object, np: int) -> int | None:
    """
    Check ``min_np`` against ``np``.

    :param value: the argument as given.
    :param np: the job's (checked) ``np``.
    :raises ValueError: not ``None`` nor an ``int`` from 1 to ``np``, or given for ranks on the driver (``np < 0``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= abs(np):
        raise ValueError(
            f"min_np must be an int from 1 to np={np} (the fewest ranks a restart may run with) or None (always "
            f"np), got {value!r}"
        )
    if np < 0:
        raise ValueError(
            f"min_np applies to barrier tasks (np > 0), whose slots a lost host takes away; np={np} runs the ranks "
            "on the driver"
        )
    return value


def validate_elastic_wait(value: object) -> float:
    """
    Check ``elastic_wait_s``.

    :raises ValueError: not a positive number of seconds.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(
            f"elastic_wait_s must be a positive number of seconds (how long a restart waits for all np slots), "
            f"got {value!r}"
        )
    return float(value)


def validate_restart_on(value: object) -> tuple[str, ...]:
    """
    Check ``restart_on``: the exception types of the training code that restart the attempt too, as classes or
    names (``ValueError``, ``"torch.OutOfMemoryError"``, ``"*"`` for every one), one or a sequence.

    :return: their names, dotted as the rank reports them (builtins bare: ``ValueError``).
    :raises ValueError: an entry is neither an exception class nor a (dotted) name, nor ``"*"``.
    """
    items = [value] if isinstance(value, str | type) else value
    if not isinstance(items, Sequence | set | frozenset):
        raise ValueError(f"restart_on must be exception types or their names (a sequence), got {value!r}")
    names: list[str] = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            names.append(type_name(item))  # as the rank names the exception it raised
        elif isinstance(item, str) and (item == "*" or all(part.isidentifier() for part in item.split("."))):
            names.append(item)
        else:
            raise ValueError(
                "restart_on must be exception classes or their (dotted) names, such as ValueError or "
                f"'torch.OutOfMemoryError', or '*' for every exception; got {item!r}"
            )
    return tuple(names)


def _names(value: str) -> tuple[str, ...]:
    return tuple(name for name in value.split(",") if name)


def _seconds_or_none(value: str) -> float | None:
    return None if value.strip().lower() == "none" else float(value)


@dataclass(frozen=True)
class JobSettings:
    """
    The knobs of one training job, checked when the object is made (see the module docstring).

    :param np: number of processes (non-zero int): ``> 0`` Spark barrier tasks, ``< 0`` processes on the driver.
    :param driver_log_verbosity: ``"log_callback_only"`` (rank 0's output) or ``"all"`` (every rank's).
    :param gloo_timeout_s: seconds Gloo waits at rendezvous and in a collective (positive int).
    :param start_timeout_s: seconds each rank may take to load the function and finish ``hvd.init()``, or ``None``.
    :param training_timeout_s: seconds each rank may run in all, or ``None``.
    :param slot_wait_timeout_s: seconds a barrier job waits for ``np`` task slots, or ``None`` for no limit.
    :param use_gpu: give each rank the GPUs Spark scheduled for its task.
    :param gpu_visibility: with ``use_gpu``: ``"host"`` or ``"rank"``.
    :param timeline: record the Horovod Timeline into the artifact directory.
    :param max_return_value_bytes: the largest pickled return value rank 0 sends back, bytes (positive int).
    :param launcher: ``"horovod"`` (Horovod's Gloo rendezvous) or ``"torch"`` (the torchrun environment; the
        function calls ``torch.distributed.init_process_group()``). ``timeline`` needs ``"horovod"``.
    :param checkpoint_dir: path or URI the ranks see through
        :func:`~airflow_provider_horovod.runtime.checkpoints.checkpoint_dir`, the same for every try; or ``None``.
    :param try_number: the Airflow try the job runs in (positive int), for the ranks'
        :func:`~airflow_provider_horovod.runtime.checkpoints.try_number`; or ``None``.
    :param max_restarts: how many times the driver starts the barrier job again, within the same try, after an
        attempt fails with a restartable failure (int from 0; default 0: never, as torchrun's ``--max-restarts``
        and Ray Train's ``max_failures``). See :mod:`~airflow_provider_horovod.runtime.driver.restarts`.
    :param restart_on: exception types of the training code that restart an attempt too (names, ``"*"``: all);
        default none: the training code's own exception fails at once.
    :param heartbeat_timeout_s: seconds without a barrier task's heartbeat after which the driver treats it as lost
        (its host frozen, cut off or gone) and fails the attempt, which ``max_restarts`` restarts, instead of waiting
        for Spark's ``spark.network.timeout``; at least 6; ``None``: Spark's detection only. See
        :mod:`~airflow_provider_horovod.runtime.driver.heartbeats`.
    :param min_np: elastic ranks: a restart (``max_restarts``) whose ``np`` slots do not come back within
        ``elastic_wait_s`` runs with as many ranks as there are slots, never fewer than ``min_np``, and grows back to
        ``np`` after a checkpoint once all ``np`` slots are free again (not counted in ``max_restarts``); the function
        sees its attempt's world size. ``None`` (default): always ``np``. Below
        ``np`` it needs ``max_restarts`` >= 1 (``ValueError`` otherwise: it would never act).
    :param elastic_wait_s: seconds a restart waits for all ``np`` slots before it starts with fewer (with
        ``min_np``; default 30, torchrun's ``last_call_timeout``).
    :raises ValueError: a value is invalid; the message names the parameter and what it allows.
    """

    np: int
    driver_log_verbosity: str = "log_callback_only"
    gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S
    start_timeout_s: float | None = DEFAULT_START_TIMEOUT_S
    training_timeout_s: float | None = None
    slot_wait_timeout_s: float | None = DEFAULT_SLOT_WAIT_TIMEOUT_S
    use_gpu: bool = False
    gpu_visibility: str = DEFAULT_GPU_VISIBILITY
    timeline: bool = False
    max_return_value_bytes: int = DEFAULT_MAX_RETURN_VALUE_BYTES
    launcher: str = DEFAULT_LAUNCHER
    checkpoint_dir: str | None = None
    try_number: int | None = None
    max_restarts: int = 0
    restart_on: tuple[str, ...] = ()
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S
    min_np: int | None = None
    elastic_wait_s: float = DEFAULT_ELASTIC_WAIT_S

    def __post_init__(self) -> None:
        checked = {
            "np": validate_np(self.np),
            "driver_log_verbosity": validate_choice(
                "driver_log_verbosity", self.driver_log_verbosity, DRIVER_LOG_VERBOSITIES
            ),
            "gloo_timeout_s": validate_positive_int("gloo_timeout_s", self.gloo_timeout_s, "seconds"),
            "start_timeout_s": validate_timeout("start_timeout_s", self.start_timeout_s),
            "training_timeout_s": validate_timeout("training_timeout_s", self.training_timeout_s),
            "slot_wait_timeout_s": validate_timeout("slot_wait_timeout_s", self.slot_wait_timeout_s),
            "use_gpu": validate_flag("use_gpu", self.use_gpu),
            "gpu_visibility": validate_gpu_visibility(self.gpu_visibility),
            "timeline": validate_flag("timeline", self.timeline),
            "max_return_value_bytes": validate_positive_int(
                "max_return_value_bytes", self.max_return_value_bytes, "bytes"
            ),
            "launcher": validate_choice("launcher", self.launcher, LAUNCHER_NAMES),
            "checkpoint_dir": validate_location("checkpoint_dir", self.checkpoint_dir),
            "try_number": None
            if self.try_number is None
            else validate_positive_int("try_number", self.try_number, "the Airflow try, from 1"),
            "max_restarts": validate_max_restarts(self.max_restarts),
            "restart_on": validate_restart_on(self.restart_on),
            "heartbeat_timeout_s": validate_heartbeat_timeout(self.heartbeat_timeout_s),
            "min_np": validate_min_np(self.min_np, validate_np(self.np)),
            "elastic_wait_s": validate_elastic_wait(self.elastic_wait_s),
        }
        min_np, np_, max_restarts = checked["min_np"], checked["np"], checked["max_restarts"]
        if isinstance(min_np, int) and isinstance(np_, int) and min_np < abs(np_) and not max_restarts:
            raise ValueError(
                f"min_np={min_np} only acts when the job restarts within the try (a restart runs with the "
                f"ranks that fit, at least min_np): set max_restarts to 1 or more, got max_restarts="
                f"{max_restarts}"
            )
        if checked["timeline"] and not LAUNCHERS[str(checked["launcher"])].timeline:
            raise ValueError(
                "timeline=True records the Horovod Timeline and needs launcher='horovod', got "
                f"launcher={self.launcher!r}; with torch.distributed use torch.profiler"
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> JobSettings:
        """
        The settings among a function's arguments: the entries of ``arguments`` named as a field (the others are
        left out; a field not among them keeps its default). Made for ``JobSettings.from_arguments(locals())`` in a
        constructor whose parameters include the settings under their own names.

        :param arguments: argument names and values, e.g. the caller's ``locals()``.
        :raises ValueError: a value is invalid.
        """
        return cls(**{f.name: arguments[f.name] for f in fields(cls) if f.name in arguments})

    def replace(self, **changes: Any) -> JobSettings:
        """
        A copy with ``changes`` (checked again).

        :param changes: field names and their new values.
        """
        return JobSettings(**{**asdict(self), **changes})

    def to_args(self) -> list[str]:
        """
        The driver program's flags for these settings (``runtime/driver/program.py``; read back with :meth:`from_args`).

        :return: e.g. ``["--np", "2", "--driver-log-verbosity", "all", ...]``; ``None`` is written ``none``, or left
            out where it is the default (so a directory named ``none`` stays one).
        """
        args: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if value is None and f.default is None:
                continue
            if isinstance(value, tuple):
                args += [flag, ",".join(value)] if value else []
            elif isinstance(value, bool):
                args += [flag] if value else []
            else:
                args += [flag, "none" if value is None else str(value)]
        return args

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """
        Add the flags of :meth:`to_args` to a parser.

        :param parser: the driver program's parser.
        """
        kinds: dict[str, Callable[[str], Any]] = {
            "np": int,
            "gloo_timeout_s": int,
            "max_return_value_bytes": int,
            "driver_log_verbosity": str,
            "gpu_visibility": str,
            "launcher": str,
            "checkpoint_dir": str,
            "try_number": int,
            "max_restarts": int,
            "restart_on": _names,
            "min_np": int,
            "elastic_wait_s": float,
        }
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            if f.type in ("bool", bool):
                parser.add_argument(flag, dest=f.name, action="store_true")
            else:
                parser.add_argument(
                    flag,
                    dest=f.name,
                    type=kinds.get(f.name, _seconds_or_none),
                    default=None if f.name == "np" else f.default,
                )  # a missing --np: refused

    @classmethod
    def from_args(cls, namespace: argparse.Namespace) -> JobSettings:
        """
        The settings a parser with :meth:`add_arguments` read.

        :param namespace: what ``parse_args`` returned.
        :raises ValueError: a value is invalid.
        """
        return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})
