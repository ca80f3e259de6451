"""
Model asset events: what a training task tells the DAGs scheduled on its model asset.

With ``outlets=[Asset("model://digits")]`` (or an ``AssetAlias`` for per-run URIs) on
:class:`~airflow_provider_horovod.operators.horovod.HorovodRunnerOperator` or ``@task.horovod``, the asset event
Airflow emits when the task succeeds carries an ``extra`` with ``artifact_dir``, ``artifact_paths``,
``spark_app_id`` and, when it is JSON-serializable and small, ``return_value`` (rank 0's value). A downstream DAG
with ``schedule=[that asset]`` reads it from ``triggering_asset_events``::

    @task
    def evaluate(triggering_asset_events=None):
        event = triggering_asset_events[Asset("model://digits")][-1]
        model = event.extra["artifact_paths"][0]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

MAX_EVENT_RETURN_VALUE_BYTES = 16 * 1024
"""Largest JSON form of rank 0's return value put into an asset event's ``extra`` (16 KiB); larger is left out."""


def artifact_uri(location: str) -> str:
    """
    A URI for an artifact location: ``s3://...`` as given, a local path as ``file:///abs/path``.

    :param location: a path or URI.
    """
    if len(urlparse(location).scheme) > 1:
        return location
    return "file://" + os.path.abspath(location)


def model_event_extra(
    *,
    artifact_dir: str,
    artifact_paths: Sequence[str],
    app_id: str | None,
    return_value: Any,
    metrics: dict[str, Any] | None = None,
    restarts: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """
    The ``extra`` of a model asset event.

    :param artifact_dir: the job's artifact directory (path or URI).
    :param artifact_paths: every file the job wrote there.
    :param app_id: the Spark application id.
    :param return_value: rank 0's return value; kept when ``json.dumps`` takes it and it is at most
        :data:`MAX_EVENT_RETURN_VALUE_BYTES` long, else left out (it is always in the ``return_value`` XCom).
    :param metrics: rank 0's last ``report()`` metrics, kept under ``metrics`` when there are any.
    :param restarts: the job's restarts within the try (``max_restarts``): their number under ``restarts`` and, for
        each, the step the failed attempt had reached under ``restarted_at_steps``, when there were any.
    """
    extra: dict[str, Any] = {
        "artifact_dir": artifact_dir,
        "artifact_paths": list(artifact_paths),
        "spark_app_id": app_id,
    }
    if metrics:
        extra["metrics"] = dict(metrics)
    if restarts:
        extra["restarts"] = len(restarts)
        extra["restarted_at_steps"] = [r.get("step") for r in restarts]
    try:
        encoded = json.dumps(return_value)
    except (TypeError, ValueError):
        return extra
    if len(encoded) <= MAX_EVENT_RETURN_VALUE_BYTES:
        extra["return_value"] = json.loads(encoded)
    return extra


def attach_model_events(
    outlet_events: Mapping[Any, Any] | None,
    outlets: Iterable[Any],
    extra: dict[str, Any],
) -> list[str]:
    """
    Put ``extra`` on the asset events this task emits.

    For each outlet ``Asset`` the event's ``extra`` is updated; for each ``AssetAlias`` an event for
    ``Asset(artifact_uri(extra["artifact_dir"]))`` is added through the alias, so every run's model is its own asset.

    :param outlet_events: ``context["outlet_events"]`` (``None`` outside a task: nothing is attached).
    :param outlets: the task's ``outlets``.
    :param extra: from :func:`model_event_extra`.
    :return: the names of the outlets that got the extra (for the task log).
    """
    from airflow.sdk import Asset, AssetAlias

    if outlet_events is None:
        return []
    attached = []
    for outlet in outlets:
        if isinstance(outlet, AssetAlias):
            outlet_events[outlet].add(Asset(artifact_uri(extra["artifact_dir"])), extra=extra)
            attached.append(f"alias {outlet.name}")
        elif isinstance(outlet, Asset):
            outlet_events[outlet].extra.update(extra)
            attached.append(outlet.name)
    return attached
