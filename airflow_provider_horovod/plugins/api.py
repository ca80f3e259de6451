"""
The "Training progress" page's FastAPI app, which the api-server mounts under ``/horovod`` (:mod:`.horovod_plugin`).

``GET /progress`` answers one task instance's progress as JSON: the try's ``progress.json`` snapshot, each metric's
history from ``metrics.jsonl``, the task instance's state, and the XComs the page links to (``spark_ui_url``,
``tensorboard_dir``). It reads the try's XCom ``artifact_dir`` from the metadata database as the api-server's own XCom
route does (the raw stored value, not through a custom XCom backend unless the stored value is a backend's
reference), then the two files. Access is checked by the api-server's own security dependencies: no session cookie
or bearer token gives 401 (403 for an invalid token), and a user who may not read the DAG's task instances and
XComs gets 403.

``GET /page`` is the page itself (``static/progress.html``: plain JS and inline SVG, no external script) that the
task instance's "Training progress" tab shows in an iframe; it polls ``/progress``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Query, status
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select

from airflow_provider_horovod.links import SparkUILink
from airflow_provider_horovod.paths import try_artifact_dir
from airflow_provider_horovod.plugins.progress_reader import DEFAULT_MAX_POINTS, read_progress
from airflow_provider_horovod.runtime.artifacts import is_remote
from airflow_provider_horovod.runtime.observability import TENSORBOARD_DIR_NAME
from airflow_provider_horovod.xcom_keys import XCOM_ARTIFACT_DIR, XCOM_SPARK_UI_URL, XCOM_TENSORBOARD_DIR

STATIC_DIR = Path(__file__).parent / "static"
RUNNING_STATES = frozenset(
    {"queued", "scheduled", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
)
"""Task instance states in which the page keeps polling (the try may still write progress)."""


def _xcom_values(session: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    """The XComs the page needs, decoded; a value a custom backend stored as a reference is resolved by it."""
    keys = [XCOM_ARTIFACT_DIR, XCOM_TENSORBOARD_DIR, XCOM_SPARK_UI_URL, SparkUILink().xcom_key]
    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == task_id,
            XComModel.map_index == map_index,
            XComModel.key.in_(keys),
        )
    )
    values = {}
    for row in rows:
        value = XComModel.deserialize_value(row)
        if not isinstance(value, str):
            from airflow.sdk.execution_time.xcom import XCom  # the configured backend

            value = XCom.deserialize_value(row)
        values[row.key] = value if isinstance(value, str) else None
    values[XCOM_SPARK_UI_URL] = values.pop(SparkUILink().xcom_key, None) or values.get(XCOM_SPARK_UI_URL)
    return values


def progress(
    session: SessionDep,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: Annotated[int, Query(ge=-1)] = -1,
    try_number: Annotated[int | None, Query(ge=1)] = None,
    max_points: Annotated[int, Query(ge=0, le=100_000)] = DEFAULT_MAX_POINTS,
) -> dict[str, Any]:
    """
    One task instance's training progress.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the task.
    :param map_index: the mapped task's index (``-1``: not mapped).
    :param try_number: which try (default: the latest).
    :param max_points: at most this many points per metric in ``history`` (``0``: all).
    :return: ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``, ``tries`` (every try number, for
        the page's try picker), ``state`` (of the task instance; ``running`` is only the latest try's), ``active``
        (the page should keep polling), ``artifact_dir``, ``spark_ui_url`` (only an http/https URL),
        ``tensorboard_dir`` (the XCom, or the directory once it exists), ``progress`` (``progress.json`` or
        ``None``), ``history``, and ``error`` (why the files could not be read, or ``None``).
    :raises HTTPException: 404 when there is no such task instance or try.
    """
    return progress_of(
        session,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        try_number=try_number,
        max_points=max_points,
    )


def progress_of(
    session: Any, *, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None, max_points: int
) -> dict[str, Any]:
    """:func:`progress`'s answer, read with ``session`` (the route's work, behind its access checks)."""
    ti = session.execute(
        select(TaskInstance.state, TaskInstance.try_number).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    ).first()
    if ti is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"task instance {dag_id}.{task_id}[{map_index}] of run {run_id!r} not found"
        )
    state = ti.state.value if hasattr(ti.state, "value") else ti.state
    current_try = ti.try_number or 0
    if (try_number or current_try) > max(current_try, 1):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"try {try_number} not found (latest: {current_try})")
    xcoms = _xcom_values(session, dag_id, run_id, task_id, map_index)
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        **build_answer(state, current_try, try_number or current_try, xcoms, max_points=max_points),
    }


def build_answer(
    state: str | None, current_try: int, wanted_try: int, xcoms: dict[str, Any], *, max_points: int = DEFAULT_MAX_POINTS
) -> dict[str, Any]:
    """
    The endpoint's answer for one try, from what the database says (state, try, XComs) and the try's files.

    :param state: the task instance's state (of its latest try), or ``None``.
    :param current_try: the task instance's try number.
    :param wanted_try: the try asked for (``current_try`` or an earlier one).
    :param xcoms: the task instance's XComs ``artifact_dir``, ``spark_ui_url``, ``tensorboard_dir`` (those there are).
    :param max_points: passed to :func:`~airflow_provider_horovod.plugins.progress_reader.history`.
    :return: see :func:`progress`.
    """
    latest = wanted_try == current_try
    artifact_dir = xcoms.get(XCOM_ARTIFACT_DIR)
    if artifact_dir and not latest:
        artifact_dir = try_artifact_dir(artifact_dir, current_try, wanted_try)
    answer: dict[str, Any] = {
        "try_number": wanted_try,
        "tries": list(range(1, max(current_try, 1) + 1)),
        "state": state if latest else None,
        "active": latest and state in RUNNING_STATES,
        "artifact_dir": artifact_dir,
        "spark_ui_url": http_url(xcoms.get(XCOM_SPARK_UI_URL)) if latest else None,
        "tensorboard_dir": xcoms.get(XCOM_TENSORBOARD_DIR) if latest else None,
        "progress": None,
        "history": {"x": "step", "count": 0, "metrics": {}},
        "error": None,
    }
    if artifact_dir:
        if answer["tensorboard_dir"] is None:  # the XCom comes at the end; the directory exists from the start
            answer["tensorboard_dir"] = local_tensorboard_dir(artifact_dir)
        try:
            answer.update(read_progress(artifact_dir, max_points=max_points))
        except (OSError, ValueError) as err:  # storage unreachable, or a connection that gives no credentials
            answer["error"] = f"cannot read {artifact_dir}: {type(err).__name__}: {err}"
    return answer


def http_url(url: Any) -> str | None:
    """
    ``url`` when it is an absolute ``http``/``https`` URL, else ``None``: the page puts it into a link's ``href``,
    and a ``javascript:`` or ``data:`` URL set through the REST API must not become a clickable link (Airflow's own
    Details tab drops those too).

    :param url: an XCom's value.
    """
    if not isinstance(url, str):
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def local_tensorboard_dir(artifact_dir: str) -> str | None:
    """
    ``<artifact_dir>/tensorboard`` when it is a local directory that exists (a training that writes events with
    ``tensorboard_dir()`` makes it at once), else ``None``; object storage is left to the XCom.

    :param artifact_dir: the try's artifact directory.
    """
    if is_remote(artifact_dir):
        return None
    path = os.path.join(artifact_dir.removeprefix("file://"), TENSORBOARD_DIR_NAME)
    return path if os.path.isdir(path) else None


def page() -> FileResponse:
    """The page (``static/progress.html``); it reads its task instance from the query string."""
    return FileResponse(STATIC_DIR / "progress.html", media_type="text/html")


def create_app() -> FastAPI:
    """
    The plugin's FastAPI app: ``/progress`` (JSON, access-checked), ``/page`` and ``/static/*`` (the page's files).
    """
    app = FastAPI(title="Horovod training progress", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_api_route(
        "/progress",
        progress,
        methods=["GET"],
        dependencies=[
            Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE)),
            Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM)),
        ],
    )
    app.add_api_route("/page", page, methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
