"""
Read a try's progress files for the UI: ``progress.json`` (the latest snapshot) and ``metrics.jsonl`` (rank 0's
reports, one JSON object a line, appended while the job trains), from a local directory or object storage.

Both files are written by the running job (``airflow_provider_horovod.runtime.report``) while this reads them: a
last line still being appended, or a snapshot half rewritten, is skipped rather than failing the request. Either
file may be missing (the job has not reported yet, or ran before the provider wrote them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_horovod.runtime.wire.progress_format import METRICS_FILE, PROGRESS_FILE, json_records
from airflow_provider_horovod.utils.storage import credentials_env, storage_location

DEFAULT_MAX_POINTS = 2000
"""Points per metric the endpoint returns by default; longer histories are thinned evenly, the last point kept."""


def storage_options(conn_id: str | None) -> dict[str, Any]:
    """
    fsspec (s3fs) options carrying an ``aws`` connection's credentials, as the ranks get them as ``AWS_*``.

    :param conn_id: the connection named in the artifact location (``s3://conn_id@bucket/...``), or ``None``.
    :return: keyword arguments for ``fsspec.url_to_fs``; empty without a connection (the environment's credentials).
    :raises ValueError: the connection is of a type that cannot supply credentials.
    """
    if not conn_id:
        return {}
    env = credentials_env(conn_id)
    names = {
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "token",
        "AWS_ENDPOINT_URL": "endpoint_url",
    }
    options: dict[str, Any] = {names[k]: v for k, v in env.items() if k in names}
    if env.get("AWS_DEFAULT_REGION"):
        options["client_kwargs"] = {"region_name": env["AWS_DEFAULT_REGION"]}
    return options


def read_text(location: Any, name: str) -> str | None:
    """
    The text of ``<location>/<name>``, or ``None`` when it does not exist.

    :param location: the artifact directory: a local path, an fsspec URI, or ``scheme://conn_id@bucket/path``.
    :param name: the file name inside it.
    :raises OSError: the storage could not be read (other than the file being missing).
    """
    import fsspec

    uri, conn_id = storage_location(location)
    fs, root = fsspec.core.url_to_fs(uri, **storage_options(conn_id))
    path = f"{root.rstrip('/')}/{name}"
    try:
        with fs.open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def parse_snapshot(text: str | None) -> dict[str, Any] | None:
    """``progress.json`` decoded, or ``None`` when missing or not (yet) a JSON object."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_records(text: str | None) -> list[dict[str, Any]]:
    """The JSON objects of ``metrics.jsonl``, in file order; lines that do not decode (a partial last one) skipped."""
    return list(json_records((text or "").splitlines()))


def _thin(points: list[list[float]], max_points: int) -> list[list[float]]:
    if max_points <= 0 or len(points) <= max_points:
        return points
    stride = len(points) / max_points
    kept = [points[int(i * stride)] for i in range(max_points - 1)]
    kept.append(points[-1])
    return kept


def history(records: Iterable[Mapping[str, Any]], *, max_points: int = DEFAULT_MAX_POINTS) -> dict[str, Any]:
    """
    Each metric's points over steps, for the chart.

    The x axis is the step when every record has one, else the seconds since the first record.

    :param records: ``metrics.jsonl``'s records (:func:`parse_records`).
    :param max_points: at most this many points per metric (evenly thinned, first and last kept); ``0``: all.
    :return: ``{"x": "step" | "time_s", "count": <records>, "metrics": {name: [[x, value], ...]}}``; values that
        are not numbers are left out.
    """
    records = list(records)
    by_step = all(isinstance(r.get("step"), int) for r in records)
    start = next((r["time"] for r in records if isinstance(r.get("time"), (int, float))), 0.0)
    series: dict[str, list[list[float]]] = {}
    for record in records:
        if by_step:
            x: float = record["step"]
        elif isinstance(record.get("time"), (int, float)):
            x = round(record["time"] - start, 3)
        else:
            continue
        for name, value in (record.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:  # not NaN
                series.setdefault(str(name), []).append([x, value])
    return {
        "x": "step" if by_step else "time_s",
        "count": len(records),
        "metrics": {name: _thin(points, max_points) for name, points in series.items()},
    }


def read_progress(location: Any, *, max_points: int = DEFAULT_MAX_POINTS) -> dict[str, Any]:
    """
    The progress of one try, from its artifact directory.

    :param location: the try's artifact directory (see :func:`read_text`).
    :param max_points: passed to :func:`history`.
    :return: ``{"progress": <progress.json or None>, "history": <history()>}``.
    :raises OSError: the storage could not be read.
    """
    snapshot = parse_snapshot(read_text(location, PROGRESS_FILE))
    return {
        "progress": snapshot,
        "history": history(parse_records(read_text(location, METRICS_FILE)), max_points=max_points),
    }
