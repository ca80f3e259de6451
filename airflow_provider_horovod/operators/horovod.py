"""
``HorovodRunnerOperator``: run a Horovod training function as a Spark barrier job from a DAG, the way Databricks'
``HorovodRunner`` does in a notebook.
"""

from __future__ import annotations

from airflow_provider_horovod.operators.base import DistributedTrainingOperator

__all__ = ["HorovodRunnerOperator"]


class HorovodRunnerOperator(DistributedTrainingOperator):
    """
    Run a Horovod training function on Spark, the way Databricks' ``HorovodRunner`` does in a notebook.

    The callable and its arguments are serialized with cloudpickle and spark-submitted (through the Spark
    provider's ``SparkSubmitHook``) as one barrier stage of ``np`` tasks; each task starts one Horovod
    process with Gloo. Rank 0's return value becomes the task's ``return_value`` XCom; the files the job
    wrote under its artifact directory are pushed as ``artifact_paths``, the Spark application id as
    ``spark_app_id``, the directory itself as ``artifact_dir``, and the task instance's checkpoint directory (the
    same for every try) as ``checkpoint_dir``.

    Every argument is :class:`~airflow_provider_horovod.operators.base.DistributedTrainingOperator`'s (``np``,
    ``conn_id``, ``conf``, ``deploy_mode``, ``deferrable``, ``use_gpu``, ``timeline``, ``mlflow_conn_id``, ...);
    ``launcher`` defaults to ``"horovod"`` (the function calls ``hvd.init()``), and ``"torch"`` gives each rank the
    torchrun environment instead (:class:`~airflow_provider_horovod.operators.torch_distributed.
    TorchDistributedOperator` is the operator made for it).

    .. seealso:: ``docs/getting-started.md`` and ``docs/how-it-works.md``

    :raises ValueError: an argument is invalid (raised when the DAG is parsed).
    :raises TypeError: ``python_callable`` is not callable.
    """

    ui_color = "#f6e3c5"
