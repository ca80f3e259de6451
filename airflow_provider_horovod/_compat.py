"""
Imports that moved between the Airflow versions this provider supports (``apache-airflow>=3.1``).

Later Airflow 3 releases have the configuration, serde and these exceptions under ``airflow.sdk``; Airflow 3.1 has
them in ``airflow.configuration``, ``airflow.serialization.serde`` and ``airflow.exceptions``. Import them from
here. (The Spark-side runtime never imports Airflow and so never this module.)
"""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import AirflowNotFoundException
except ImportError:  # Airflow 3.1
    from airflow.exceptions import AirflowNotFoundException  # type: ignore[no-redef,unused-ignore]

try:
    from airflow.sdk.configuration import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef,unused-ignore]

try:
    from airflow.sdk.serde import serialize
except ImportError:  # Airflow 3.1
    from airflow.serialization.serde import serialize  # type: ignore[no-redef,unused-ignore]

__all__ = ["AirflowNotFoundException", "conf", "serialize"]
