"""
What an application of this job asks the cluster for (:class:`AppResources`, from its Spark properties) and
Spark memory sizes (:func:`memory_mib`): the numbers :mod:`~airflow_provider_horovod.runtime.driver.slots` counts with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_MEMORY_UNITS = {
    "b": 1 / 2**20,
    "k": 1 / 1024,
    "kb": 1 / 1024,
    "m": 1,
    "mb": 1,
    "g": 1024,
    "gb": 1024,
    "t": 1024**2,
    "tb": 1024**2,
    "p": 1024**3,
    "pb": 1024**3,
}


def memory_mib(value: str | None, default: int | None) -> int | None:
    """
    A Spark memory size (``"512m"``, ``"2g"``, ``"1024"``: MiB without a unit) in MiB, rounded up.

    :param value: the property's value, or ``None`` when unset.
    :param default: what an unset or unreadable value means.
    :return: MiB, or ``default``.
    """
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
    if match is None or match.group(2).lower() not in ("", *_MEMORY_UNITS):
        return default
    factor = _MEMORY_UNITS.get(match.group(2).lower(), 1)
    return math.ceil(int(match.group(1)) * factor)


def _int(conf: Mapping[str, str], key: str) -> int | None:
    try:
        return int(str(conf[key]).strip()) if conf.get(key) not in (None, "") else None
    except ValueError:
        return None


PROVIDER_DEFAULTS = "spark.airflowProviderHorovod.defaults"
"""Spark property naming (comma-separated) the properties the provider's hooks set themselves (``spark.cores.max``
from ``np``), so messages about the application's limits do not quote them as if the user had set them."""


@dataclass(frozen=True)
class AppResources:
    """
    What one application of this job asks the cluster for, from its Spark properties.

    Memory is in MiB; ``None`` where the properties do not say and no default may be assumed (the Airflow side
    does not see ``spark-defaults.conf``, so it leaves unset sizes out of its bounds rather than guess).

    :param task_cpus: ``spark.task.cpus``.
    :param executor_cores: ``spark.executor.cores``; ``None``: one executor per worker taking its free cores
        (standalone's behaviour when unset).
    :param executor_memory_mb: ``spark.executor.memory``.
    :param cores_max: ``spark.cores.max`` (the application's cap on a standalone cluster).
    :param executor_instances: ``spark.executor.instances`` (a fixed executor count: YARN, Kubernetes).
    :param driver_cores: ``spark.driver.cores`` (what the driver takes on a worker in cluster deploy mode).
    :param driver_memory_mb: ``spark.driver.memory``.
    :param cluster_mode: ``spark.submit.deployMode`` is ``cluster``: the driver runs on a worker.
    :param master: ``spark.master``; ``spark.cores.max`` caps only ``spark://`` masters, and
        ``spark.executor.instances`` only YARN and Kubernetes ones.
    :param provider_set: the properties the provider set itself (:data:`PROVIDER_DEFAULTS`), not the user.
    """

    task_cpus: int = 1
    executor_cores: int | None = None
    executor_memory_mb: int | None = None
    cores_max: int | None = None
    executor_instances: int | None = None
    driver_cores: int = 1
    driver_memory_mb: int | None = None
    cluster_mode: bool = False
    master: str = ""
    provider_set: frozenset[str] = frozenset()

    @classmethod
    def from_conf(
        cls, conf: Mapping[str, str], *, assume_defaults: bool = True, cluster_mode: bool | None = None
    ) -> AppResources:
        """
        Read the properties that decide where executors fit.

        :param conf: Spark properties (keys as strings).
        :param assume_defaults: ``True`` (the driver: its conf is complete): an unset memory is Spark's default
            of 1 GiB. ``False`` (before submission): unset memory sizes stay ``None`` and are not used.
        :param cluster_mode: override ``spark.submit.deployMode``.
        """
        default_mb = 1024 if assume_defaults else None
        if cluster_mode is None:
            cluster_mode = str(conf.get("spark.submit.deployMode", "client")).strip() == "cluster"
        return cls(
            task_cpus=max(_int(conf, "spark.task.cpus") or 1, 1),
            executor_cores=_int(conf, "spark.executor.cores"),
            executor_memory_mb=memory_mib(conf.get("spark.executor.memory"), default_mb),
            cores_max=_int(conf, "spark.cores.max"),
            executor_instances=_int(conf, "spark.executor.instances"),
            driver_cores=max(_int(conf, "spark.driver.cores") or 1, 1),
            driver_memory_mb=memory_mib(conf.get("spark.driver.memory"), default_mb),
            cluster_mode=cluster_mode,
            master=str(conf.get("spark.master") or ""),
            provider_set=frozenset(n.strip() for n in str(conf.get(PROVIDER_DEFAULTS) or "").split(",") if n.strip()),
        )

    @property
    def settings(self) -> str:
        """The properties the slot counts depend on, for messages."""
        return self._settings(with_cap=True)

    def _settings(self, *, with_cap: bool) -> str:
        parts = [f"spark.executor.cores={self.executor_cores if self.executor_cores is not None else 'unset'}"]
        if self.executor_memory_mb is not None:
            parts.append(f"spark.executor.memory={self.executor_memory_mb} MiB")
        if with_cap and self.cores_max is not None:
            parts.append(self._cores_max())
        parts.append(f"spark.task.cpus={self.task_cpus}")
        return ", ".join(parts)

    def _cores_max(self) -> str:
        if "spark.cores.max" in self.provider_set:
            return f"spark.cores.max={self.cores_max} (the provider's default: the cores np task slots need)"
        return f"spark.cores.max={self.cores_max}"

    def cores_for(self, np_: int) -> int:
        """
        Cores this application needs for ``np_`` task slots (whole executors when their size is set).

        :param np_: task slots wanted.
        """
        if self.executor_cores:
            per_executor = max(self.executor_cores // self.task_cpus, 1)
            return math.ceil(np_ / per_executor) * self.executor_cores
        return np_ * self.task_cpus

    def slots_on(self, cores: int, memory_mb: int | None) -> int:
        """
        Task slots this application's executors could get from ``cores`` cores and ``memory_mb`` MiB of a worker.

        :param cores: the worker's free cores.
        :param memory_mb: the worker's free memory in MiB; ``None``: unknown (not limiting).
        """
        if cores <= 0:
            return 0
        executor_mb = self.executor_memory_mb
        if self.executor_cores:
            executors = cores // self.executor_cores
            if executor_mb is not None and memory_mb is not None:
                executors = min(executors, memory_mb // max(executor_mb, 1))
            return executors * (self.executor_cores // self.task_cpus)
        if executor_mb is not None and memory_mb is not None and memory_mb < executor_mb:
            return 0
        return cores // self.task_cpus  # one executor taking every free core

    def cap(self) -> tuple[int, str] | None:
        """The most task slots this application's own properties allow, and why; ``None``: no such cap."""
        executor_cores = self.executor_cores
        if self.cores_max is not None and self.master.startswith("spark://"):
            slots = (
                (self.cores_max // executor_cores) * (executor_cores // self.task_cpus)
                if executor_cores
                else self.cores_max // self.task_cpus
            )
            return slots, f"{self._cores_max()} ({self._settings(with_cap=False)})"
        if self.executor_instances is not None and executor_cores and self.master.startswith(("yarn", "k8s://")):
            return (
                self.executor_instances * (executor_cores // self.task_cpus),
                f"spark.executor.instances={self.executor_instances} x spark.executor.cores="
                f"{self.executor_cores} (spark.task.cpus={self.task_cpus})",
            )
        return None
