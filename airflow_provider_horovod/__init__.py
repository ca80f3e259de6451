"""Run Horovod distributed training on Apache Spark barrier stages from Apache Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
