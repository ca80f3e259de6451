"""
OpenLineage for a training task: the model's artifact directory as the output dataset, the data it read as inputs.

Used by the training operators' ``get_openlineage_facets_on_complete`` (:func:`completed_lineage`) and at the
start of a try (:class:`LineageObserver`); every OpenLineage import is lazy, so
the provider works without ``apache-airflow-providers-openlineage`` installed (the method is then never called).
Dataset naming follows OpenLineage's conventions (https://openlineage.io/docs/spec/naming): a local path is
namespace ``file``, name the absolute path; an object-store URI ``s3://bucket/key`` is namespace ``s3://bucket``,
name ``key`` (likewise ``gs``, ``abfss``, ``hdfs``...). The run gets a custom run facet, ``horovod_training``
(:func:`training_run_facet`): how many ranks trained, with which launcher, and rank 0's last ``report()`` metrics,
since OpenLineage has no standard facet for a training's metrics.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow_provider_horovod.operators.observers import JobObserver

if TYPE_CHECKING:
    from airflow_provider_horovod.job import TrainingJob

URI_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "hdfs", "file"})
"""Schemes of string arguments taken as input datasets (besides absolute local paths)."""


def dataset_name(location: str) -> tuple[str, str]:
    """
    ``(namespace, name)`` of a path or URI.

    :param location: ``/abs/path``, ``file:///abs/path`` or ``scheme://authority/path``.
    """
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return "file", os.path.abspath(parsed.path if parsed.scheme else location)
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/")


def _looks_like_data(value: Any) -> bool:
    if not isinstance(value, str) or not value or "\n" in value:
        return False
    scheme = urlparse(value).scheme
    return scheme in URI_SCHEMES or (scheme == "" and os.path.isabs(value))


def input_locations(inlets: Iterable[Any], op_args: Iterable[Any], op_kwargs: Mapping[str, Any]) -> list[str]:
    """
    The task's inputs: the URIs of its ``inlets`` (assets with a path-like URI), else the arguments of the training
    function that are absolute paths or data URIs (``s3://...``), in order, without repeats.

    :param inlets: the task's ``inlets`` (assets; others are skipped).
    :param op_args: the training function's positional arguments (rendered).
    :param op_kwargs: its keyword arguments (rendered).
    :return: locations, e.g. ``["/data/digits.npz", "s3://bucket/features"]``.
    """
    found: list[str] = []
    for inlet in inlets:
        uri = getattr(inlet, "uri", None)
        if isinstance(uri, str) and _looks_like_data(uri):
            found.append(uri)
    if not found:
        found = [v for v in (*op_args, *op_kwargs.values()) if _looks_like_data(v)]
    return list(dict.fromkeys(found))


TRAINING_FACET = "horovod_training"
"""The key of the custom run facet :func:`training_run_facet` makes."""


def training_run_facet(
    *, np: int, launcher: str, metrics: Mapping[str, Any] | None, restarts: Sequence[Mapping[str, Any]] | None = None
) -> Any:
    """
    The ``horovod_training`` run facet: ``{"np": 2, "launcher": "horovod", "metrics": {"loss": 0.02}, "restarts": 0,
    "restarted_at_steps": []}``.

    A custom facet (a ``RunFacet`` subclass, so the OpenLineage client adds its ``_producer`` and ``_schemaURL``).

    :param np: the job's ``np`` (negative: local processes on the Spark driver).
    :param launcher: ``"horovod"`` or ``"torch"``.
    :param metrics: rank 0's last reported metric values (XCom ``metrics``; ``None`` or empty when it reported none).
    :param restarts: the job's restarts within the try (XCom ``restarts``, ``max_restarts``): their number, and the
        step each failed attempt reached.
    """
    restarts = list(restarts or [])
    return _training_facet_class()(
        np=np,
        launcher=launcher,
        metrics=dict(metrics or {}),
        restarts=len(restarts),
        restarted_at_steps=[r.get("step") for r in restarts],
    )


@functools.cache
def _training_facet_class() -> type:
    """The facet's class, made once on first use (OpenLineage is imported only then)."""
    import attr
    from airflow.providers.common.compat.openlineage.facet import RunFacet

    @attr.define
    class HorovodTrainingRunFacet(RunFacet):
        np: int
        launcher: str
        metrics: dict[str, Any] = attr.field(factory=dict)
        restarts: int = 0
        restarted_at_steps: list[int | None] = attr.field(factory=list)

    return HorovodTrainingRunFacet


def operator_lineage(
    artifact_dir: str | None, inputs: Iterable[str], run_facets: Mapping[str, Any] | None = None
) -> Any:
    """
    An ``OperatorLineage`` with ``inputs`` as input datasets and ``artifact_dir`` as the output dataset.

    :param artifact_dir: where the ranks wrote the model (``None``: no output, the job did not get that far).
    :param inputs: locations from :func:`input_locations`.
    :param run_facets: run facets by key, e.g. ``{TRAINING_FACET: training_run_facet(...)}``.
    """
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    outputs = [Dataset(*dataset_name(artifact_dir))] if artifact_dir else []
    return OperatorLineage(
        inputs=[Dataset(*dataset_name(loc)) for loc in inputs], outputs=outputs, run_facets=dict(run_facets or {})
    )


def default_inject_flag(option: str) -> bool:
    """
    ``[openlineage] <option>`` from the Airflow config (default ``False``), as ``SparkSubmitOperator`` reads it.

    :param option: e.g. ``"spark_inject_parent_job_info"``.
    """
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("openlineage", option, fallback=False)


class LineageObserver(JobObserver):
    """
    OpenLineage at the start of a try: the ``spark.openlineage.*`` properties that let Spark's own OpenLineage
    listener (when the application has it) link its events to this task, added to the job's Spark properties when
    enabled (properties the user already set are kept: the OpenLineage provider's helpers skip them). The facets on
    completion are :func:`completed_lineage`'s, which the operator's ``get_openlineage_facets_on_complete`` returns.

    :param inject_parent_job_info: add the parent-job properties (``spark.openlineage.parentJob*``).
    :param inject_transport_info: add the transport properties (``spark.openlineage.transport.*``).
    """

    def __init__(self, *, inject_parent_job_info: bool, inject_transport_info: bool) -> None:
        self.inject_parent_job_info = inject_parent_job_info
        self.inject_transport_info = inject_transport_info

    def created(self, context: Any, job: TrainingJob) -> TrainingJob:
        """The job with the enabled ``spark.openlineage.*`` properties in its Spark conf."""
        if not (self.inject_parent_job_info or self.inject_transport_info):
            return job
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
            inject_transport_information_into_spark_properties,
        )

        conf = dict(job.conf)
        if self.inject_parent_job_info:
            conf = inject_parent_job_information_into_spark_properties(conf, context)
        if self.inject_transport_info:
            conf = inject_transport_information_into_spark_properties(conf, context)
        return job.with_conf(conf)


def completed_lineage(
    task_instance: Any,
    *,
    np: int,
    launcher: str,
    inlets: Iterable[Any],
    op_args: Iterable[Any],
    op_kwargs: Mapping[str, Any],
) -> Any:
    """
    A finished training task's lineage: the model's artifact directory as the output dataset; ``inlets`` (or the
    training function's path arguments) as inputs; the ``horovod_training`` run facet (:func:`training_run_facet`).

    :param task_instance: the finished task instance (the artifact directory and metrics are read from its XCom).
    :param np: the task's ``np``.
    :param launcher: the task's ``launcher``.
    :param inlets: the task's ``inlets``.
    :param op_args: the training function's positional arguments (rendered).
    :param op_kwargs: its keyword arguments (rendered).
    :return: an ``OperatorLineage``.
    """
    from airflow_provider_horovod.xcom_keys import XCOM_ARTIFACT_DIR, XCOM_METRICS, XCOM_RESTARTS

    def pull(key: str) -> Any:
        return task_instance.xcom_pull(task_ids=task_instance.task_id, key=key, map_indexes=task_instance.map_index)

    facet = training_run_facet(np=np, launcher=launcher, metrics=pull(XCOM_METRICS), restarts=pull(XCOM_RESTARTS))
    return operator_lineage(
        pull(XCOM_ARTIFACT_DIR), input_locations(inlets, op_args, op_kwargs), run_facets={TRAINING_FACET: facet}
    )
