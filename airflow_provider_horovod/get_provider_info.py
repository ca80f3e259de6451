"""Provider metadata for Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Return this provider's registration: integrations, operators, hooks and extra links."""
    return {
        "package-name": "airflow-provider-horovod",
        "name": "Horovod",
        "description": "Run Horovod distributed training as Spark barrier stages from Airflow "
        "(HorovodRunner semantics, Gloo rendezvous, model artifact paths in XCom).",
        "integrations": [
            {
                "integration-name": "Horovod",
                "external-doc-url": "https://horovod.ai",
                "tags": ["software"],
            }
        ],
        "operators": [
            {"integration-name": "Horovod", "python-modules": ["airflow_provider_horovod.operators.horovod"]}
        ],
        "hooks": [
            {
                "integration-name": "Horovod",
                "python-modules": [
                    "airflow_provider_horovod.hooks.horovod",
                    "airflow_provider_horovod.hooks.progress",
                    "airflow_provider_horovod.hooks.standalone",
                    "airflow_provider_horovod.hooks.connect",
                ],
            }
        ],
        "triggers": [
            {"integration-name": "Horovod", "python-modules": ["airflow_provider_horovod.triggers.horovod"]}
        ],
        "extra-links": ["airflow_provider_horovod.links.SparkUILink"],
        "task-decorators": [
            {"class-name": "airflow_provider_horovod.decorators.horovod.horovod_task", "name": "horovod"}
        ],
    }
