"""The plugin is registered by the entry point Airflow 3 loads, cheaply for processes that are not the api-server."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from airflow_provider_horovod.plugins.horovod_plugin import PAGE_ROUTE, URL_PREFIX, HorovodProgressPlugin
from tests.package_imports import PACKAGE_DIR

PLUGIN = "airflow_provider_horovod.plugins.horovod_plugin:HorovodProgressPlugin"


def test_the_airflow_plugins_entry_point_names_the_plugin_and_the_provider_info_does_not():
    project = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["airflow.plugins"] == {"horovod": PLUGIN}
    from airflow_provider_horovod.get_provider_info import get_provider_info

    assert "plugins" not in get_provider_info()  # registered twice, Airflow would refuse the second with an error
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel == {"packages": ["airflow_provider_horovod"]}  # the whole package, static/ included


def test_airflow_accepts_it_and_sees_a_task_instance_view_and_an_app():
    from airflow._shared.plugins_manager import is_valid_plugin

    assert is_valid_plugin(HorovodProgressPlugin)
    plugin = HorovodProgressPlugin()
    [view] = plugin.external_views
    assert view["destination"] == "task_instance" and view["url_route"] == PAGE_ROUTE
    assert view["href"].startswith(f"{URL_PREFIX}/page?")
    assert all(f"{{{name}}}" in view["href"] for name in ("DAG_ID", "RUN_ID", "TASK_ID", "MAP_INDEX"))
    [app] = plugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX and {r.path for r in app["app"].routes} >= {"/progress", "/page", "/static"}
    assert HorovodProgressPlugin.fastapi_apps[0]["app"] is app["app"]  # built once


def test_loading_the_plugin_does_not_import_the_api_server():
    code = (
        "import sys; import airflow_provider_horovod.plugins.horovod_plugin as p; p.HorovodProgressPlugin(); "
        "print(sorted(m for m in sys.modules if m.startswith(('fastapi', 'airflow.api_fastapi.core_api'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_href_follows_a_base_url_with_a_path(monkeypatch):
    from airflow_provider_horovod.plugins import horovod_plugin

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://example.test:8080/airflow/")
    assert horovod_plugin.base_path() == "/airflow"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:8080")
    assert horovod_plugin.base_path() == ""
