"""Provider metadata for Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Return this provider's registration: integrations, operators, hooks and extra links."""
    return {
        "package-name": "airflow-provider-horovod",
        "name": "Horovod",
        "description": "Run Horovod or PyTorch torch.distributed (DDP, FSDP) training as Spark barrier stages "
        "from Airflow (HorovodRunner semantics, Gloo rendezvous / the torchrun environment, model artifact paths in "
        "XCom).",
        "integrations": [
            {
                "integration-name": "Horovod",
                "external-doc-url": "https://horovod.ai",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Horovod",
                "python-modules": [
                    "airflow_provider_horovod.operators.horovod",
                    "airflow_provider_horovod.operators.torch_distributed",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Horovod",
                "python-modules": [
                    "airflow_provider_horovod.hooks.horovod",
                    "airflow_provider_horovod.standalone.hook",
                    "airflow_provider_horovod.hooks.connect",
                    "airflow_provider_horovod.hooks.mlflow",
                ],
            }
        ],
        "triggers": [{"integration-name": "Horovod", "python-modules": ["airflow_provider_horovod.triggers.horovod"]}],
        "extra-links": ["airflow_provider_horovod.links.SparkUILink", "airflow_provider_horovod.links.MlflowRunLink"],
        "task-decorators": [
            {"class-name": "airflow_provider_horovod.decorators.horovod.horovod_task", "name": "horovod"},
            {
                "class-name": "airflow_provider_horovod.decorators.torch_distributed.torch_distributed_task",
                "name": "torch_distributed",
            },
        ],
        "config": {
            "horovod": {
                "description": "Defaults of HorovodRunnerOperator, TorchDistributedOperator, @task.horovod and "
                "@task.torch_distributed.",
                "options": {
                    "artifact_root": {
                        "description": "Where each try's artifact directory goes "
                        "(<root>/<dag_id>/<run_id>/<task_id>[/map-<i>]/try-<n>) and, in cluster deploy mode, its "
                        "staging directory (<root>/.staging/...): a path the Spark workers share, or an fsspec URI "
                        "(s3://bucket/prefix; s3://conn_id@bucket/prefix names an aws connection for the "
                        "credentials). Unset: $AIRFLOW_HOME/horovod-artifacts.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "s3://aws_default@models/horovod",
                        "default": None,
                    },
                    "history_server_url": {
                        "description": "A Spark History Server; once the application has ended the task's "
                        "Spark UI link points at <url>/history/<app-id>/ (a connection's "
                        "spark.airflowProviderHorovod.historyServerUrl extra wins).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "http://spark-history:18080",
                        "default": None,
                    },
                },
            }
        },
    }
