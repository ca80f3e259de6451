"""
Every XCom key the operators and decorators push, for users and downstream tasks
(``ti.xcom_pull(task_ids="train", key=XCOM_METRICS)``), the UI plugin and the provider's own modules. Extra links keep
keys of their own (Airflow's ``_link_<Name>``), beside these.
"""

from __future__ import annotations

XCOM_RETURN_VALUE = "return_value"
"""XCom key of rank 0's return value."""
XCOM_ARTIFACT_PATHS = "artifact_paths"
"""XCom key of the list of full paths/URIs of the files the job wrote under its artifact directory."""
XCOM_ARTIFACT_DIR = "artifact_dir"
"""XCom key of the artifact directory (path or URI) the ranks wrote to."""
XCOM_CHECKPOINT_DIR = "checkpoint_dir"
"""XCom key of the checkpoint directory (path or URI), the same for every try of the task instance."""
XCOM_TENSORBOARD_DIR = "tensorboard_dir"
"""XCom key of the TensorBoard log directory, pushed when the job wrote logs there (``runtime.tensorboard_dir``)."""
XCOM_METRICS = "metrics"
"""XCom key of rank 0's last ``runtime.report()`` metrics (``{"loss": 0.12, ...}``), pushed when it reported some."""
XCOM_RESTARTS = "restarts"
"""XCom key of the job's restarts within the try (``max_restarts``), pushed when it made some: a list of ``{"number",
"cause", "error", "at", "backoff_s", "step"}`` (``step``: the last step rank 0 reported before the failure)."""
XCOM_SPARK_APP_ID = "spark_app_id"
"""XCom key of the Spark application id (pushed as soon as the driver reports it)."""
XCOM_SPARK_UI_URL = "spark_ui_url"
"""XCom key of the Spark UI URL, the operator's data (users and downstream tasks read it); the link has its own key."""
XCOM_SUBMISSION_ID = "spark_submission_id"
"""XCom key of the standalone driver (submission) id in cluster mode, pushed before waiting."""
XCOM_MLFLOW_RUN_ID = "mlflow_run_id"
"""XCom key of the try's MLflow run id (with ``mlflow_conn_id``)."""
XCOM_MLFLOW_RUN_URL = "mlflow_run_url"
"""XCom key of the try's MLflow run page (the operator's data; the link has its own key)."""
XCOM_MODEL_VERSION = "model_version"
"""XCom key of the model version registered from the run (with ``mlflow_register_model=``)."""
