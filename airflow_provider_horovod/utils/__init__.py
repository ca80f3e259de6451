"""Helpers of the Airflow side that are not hooks: Spark properties, result read-back, staging, watchers."""
