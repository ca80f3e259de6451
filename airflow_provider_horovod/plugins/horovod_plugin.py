"""
The plugin Airflow loads through the ``airflow.plugins`` entry point (``pyproject.toml``).

Airflow 3.3 loads a provider-info ``plugins`` entry only with ``[core] lazy_discover_providers = False`` (not the
default), and the same plugin registered both ways is refused the second time with an import error on the Plugins
page; so the entry point alone registers it.

Every Airflow process loads plugins (the scheduler, the dag-processor, each task process); only the api-server mounts
``fastapi_apps``. The app is therefore built on first access to that attribute, so the other processes never import
FastAPI or the api-server's security modules because of this plugin.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlparse

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_horovod._compat import conf

URL_PREFIX = "/horovod"
"""Where the api-server mounts the plugin's app."""
PAGE_ROUTE = "horovod-progress"
"""The tab's route on the task instance page: ``.../tasks/<task>/plugin/horovod-progress``."""


def base_path() -> str:
    """The path part of ``[api] base_url`` without its trailing slash (``""`` when Airflow is served at ``/``)."""
    base_url = conf.get("api", "base_url", fallback="/") or "/"
    path = urlparse(base_url).path if base_url.startswith(("http://", "https://")) else base_url
    return path.rstrip("/")


@functools.cache
def fastapi_app_entries() -> list[dict[str, Any]]:
    """The ``fastapi_apps`` entries: the app (:func:`~airflow_provider_horovod.plugins.api.create_app`), built once."""
    from airflow_provider_horovod.plugins.api import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Horovod training progress"}]


class _BuiltOnAccess:
    """A class attribute whose value :func:`fastapi_app_entries` builds when first read."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        return fastapi_app_entries()


class HorovodProgressPlugin(AirflowPlugin):
    """
    The "Training progress" tab of a task instance, and the ``/horovod`` FastAPI app that serves it.

    The tab is an external view rendered in an iframe (``url_route``) whose ``href`` names the task instance; the
    page polls ``/horovod/progress`` every 3 s while the task is active (queued, running, deferred, up for retry)
    and keeps the finished history on screen afterwards.
    """

    name = "horovod"
    fastapi_apps = _BuiltOnAccess()
    external_views = [
        {
            "name": "Training progress",
            "href": f"{base_path()}{URL_PREFIX}/page?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
            "&map_index={MAP_INDEX}",
            "destination": "task_instance",
            "url_route": PAGE_ROUTE,
        }
    ]
