"""Airflow discovers the provider through its entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from airflow_provider_horovod.get_provider_info import get_provider_info


def test_provider_info_modules_import():
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-horovod"
    for group in ("operators", "hooks", "triggers"):
        for entry in info[group]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_airflow_providers_list_shows_it(tmp_path):
    airflow = Path(sys.executable).parent / "airflow"
    proc = subprocess.run(
        [str(airflow), "providers", "list", "-o", "plain"],
        capture_output=True,
        text=True,
        timeout=180,
        env={"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "airflow-provider-horovod" in proc.stdout


def test_config_options_are_registered_without_defaults():
    """``[horovod]`` shows in ``airflow config list``; unset options keep the documented fallbacks."""
    from airflow.providers_manager import ProvidersManager

    configs = dict(ProvidersManager().provider_configs)
    options = configs["airflow-provider-horovod"]["horovod"]["options"]
    assert set(options) == {"artifact_root", "history_server_url"}
    assert all(o["default"] is None and o["description"] for o in options.values())

    from airflow_provider_horovod.operators.common import history_server_url
    from airflow_provider_horovod.paths import default_artifact_root

    assert history_server_url(None) is None
    assert default_artifact_root().endswith("horovod-artifacts")


def test_task_decorators_are_registered():
    """``@task.horovod`` and ``@task.torch_distributed`` resolve through the task SDK's providers manager."""
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from airflow_provider_horovod.decorators.horovod import horovod_task
    from airflow_provider_horovod.decorators.torch_distributed import torch_distributed_task

    decorators = ProvidersManagerTaskRuntime().taskflow_decorators
    assert decorators["horovod"] is horovod_task
    assert decorators["torch_distributed"] is torch_distributed_task
