"""
Runs in each rank process: ``python -m airflow_provider_horovod.runtime.rank.worker`` loads the training function,
calls it, and reports its result or error.
"""
