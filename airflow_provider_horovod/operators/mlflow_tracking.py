"""
MLflow tracking for a training try (``HorovodRunnerOperator``, ``TorchDistributedOperator``, ``@task.horovod``,
``@task.torch_distributed``): one run per try, created right before the job is submitted, ended when the try ends,
the model registered. An observer the operator calls (:mod:`airflow_provider_horovod.operators.observers`); the
arguments are checked when the DAG is parsed (:func:`check_mlflow_arguments`). See ``docs/mlflow.md``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.hooks.mlflow import MlflowHook
from airflow_provider_horovod.operators.observers import FinishedTry, JobObserver
from airflow_provider_horovod.runtime.mlflow_sink import ENV_EXPERIMENT_ID, ENV_RUN_ID, check_mlflow_installed
from airflow_provider_horovod.standalone.durable import ABANDONED
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.xcom_keys import (
    XCOM_ARTIFACT_PATHS,
    XCOM_MLFLOW_RUN_ID,
    XCOM_MLFLOW_RUN_URL,
    XCOM_MODEL_VERSION,
    XCOM_SPARK_APP_ID,
)

if TYPE_CHECKING:
    from airflow_provider_horovod.job import TrainingJob

RUN_ID_RECORD_KEY = "mlflow_run_id"
"""Where the durable job record keeps the run (a reattached try keeps its run)."""


def _headline(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"[:500]


def check_mlflow_arguments(
    *,
    mlflow_conn_id: str | None,
    mlflow_experiment: str | None,
    mlflow_register_model: str | None,
    mlflow_model_alias: str | None,
    mlflow_model_path: str | None,
) -> None:
    """
    Check the operator's MLflow arguments when the DAG is parsed (:class:`MlflowSettings` says what each means).

    :raises ValueError: an MLflow argument without ``mlflow_conn_id``, a value that is not a non-empty string, or
        the MLflow client not installed (the message gives the install command).
    """
    if mlflow_conn_id is None and (mlflow_experiment or mlflow_register_model or mlflow_model_path):
        raise ValueError("mlflow_experiment, mlflow_register_model and mlflow_model_path need mlflow_conn_id")
    for name, value in (
        ("mlflow_conn_id", mlflow_conn_id),
        ("mlflow_register_model", mlflow_register_model),
        ("mlflow_model_alias", mlflow_model_alias),
        ("mlflow_model_path", mlflow_model_path),
    ):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
    if mlflow_conn_id is not None:
        check_mlflow_installed("mlflow_conn_id")


@dataclass(frozen=True)
class MlflowSettings:
    """
    The operator's MLflow arguments, rendered.

    :param conn_id: an MLflow connection (:class:`~airflow_provider_horovod.hooks.mlflow.MlflowHook`). Each try
        gets one run (tags ``airflow.dag_id``, ``airflow.run_id``, ``airflow.task_id``, ``airflow.try_number``,
        ``airflow.map_index``, at the end ``spark.app_id``; params ``np``, ``launcher`` and the callable's
        arguments); every rank gets ``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID`` and the
        credentials in its environment; ``report()``'s metrics are logged into it.
    :param experiment: the experiment's name (default: the DAG id).
    :param register_model: register a version of this model from the run (``None``: none).
    :param model_alias: the alias the new version gets (``None``: none).
    :param model_path: which file is the model: a glob matched against the artifact paths relative to the artifact
        directory (``"*.pt"``); ``None``: the return value's ``model_uri`` (a model rank 0 logged itself), else its
        ``model_path``.
    :param params: the run's parameters besides ``np`` and ``launcher`` (the callable's arguments).
    """

    conn_id: str
    experiment: str | None = None
    register_model: str | None = None
    model_alias: str | None = "candidate"
    model_path: str | None = None
    params: Mapping[str, Any] | None = None


class MlflowRunObserver(JobObserver):
    """
    One MLflow run per try (``docs/mlflow.md``): created as the job is submitted (its id and URL pushed to XCom, its
    environment given to the job), kept by a retry that reattaches to the job, handed to a trigger, ended FINISHED
    with the model registered, FAILED with the error's headline, or KILLED.

    :param settings: the rendered MLflow arguments.
    :param log: the task's logger.
    :param outlets: the task's ``outlets``: their asset events get the run and the model's version.
    """

    def __init__(self, settings: MlflowSettings, log: Any, outlets: Iterable[Any] = ()) -> None:
        self.settings = settings
        self.log = log
        self.outlets = list(outlets or [])
        self.run_env: dict[str, str] = {}
        """The run's environment for the job (``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID``, the tracking URI ...)."""
        self.run_url: str | None = None
        """The page of the try's run (the "MLflow run" link)."""
        self._killed = False
        self._hook: MlflowHook | None = None

    @property
    def hook(self) -> MlflowHook:
        """The tracking server's hook (made on first use)."""
        if self._hook is None:
            self._hook = MlflowHook(self.settings.conn_id)
        return self._hook

    # -- the points of the try -------------------------------------------------------------------------------------
    def submitting(self, context: Any, job: TrainingJob) -> TrainingJob:
        """Create this try's run; the job gets its environment (which wins over ``env_vars``)."""
        self._start_run(context, job)
        return job.with_env(self.run_env)

    def submitted(self, context: Any, record: Any) -> None:
        """The durable record keeps the run id (a reattaching retry keeps the run)."""
        if self.run_env and isinstance(record, dict):
            record[RUN_ID_RECORD_KEY] = self.run_env[ENV_RUN_ID]

    def found(self, context: Any, record: Any, status: str, *, active: bool, succeeded: bool) -> None:
        """
        A stored job that ended without success (the try that watched it died): its run, still ``RUNNING``, is ended
        ``FAILED`` (``KILLED`` for a job an earlier try killed), as a new job and run replace it.
        """
        run_id = record.get(RUN_ID_RECORD_KEY) if isinstance(record, dict) else None
        if run_id and not active and not succeeded:
            self._end_left_run(run_id, status)

    def attached(self, context: Any, record: Any) -> None:
        """A job submitted by an earlier try (reattached) keeps that try's run."""
        self._adopt_run(record, context)

    def deferring(self, trigger: Any) -> Any:
        """
        A cluster-mode trigger gets the try's run, which it ends ``KILLED`` when the deferred task is killed (marked
        failed or success, or cleared), as the task itself never resumes to end it.
        """
        if self.run_env and isinstance(trigger, HorovodSparkJobTrigger):
            return trigger.with_mlflow_run(self.settings.conn_id, self.run_env[ENV_RUN_ID])
        return trigger

    def resumed(self, context: Any) -> None:
        """Back from the trigger: the run is the one this try created before deferring (its id is in XCom)."""
        ti = context["ti"]
        self._adopt_run(
            {RUN_ID_RECORD_KEY: ti.xcom_pull(task_ids=ti.task_id, key=XCOM_MLFLOW_RUN_ID, map_indexes=ti.map_index)},
            context,
        )

    def killed(self) -> None:
        """The task is being killed: the run ends ``KILLED`` when the try fails."""
        self._killed = True

    def failed(self, context: Any, error: BaseException) -> None:
        """
        End the try's run FAILED with the error's headline (tag ``horovod.error``), or KILLED when the task was
        killed (:meth:`killed`); never raises.
        """
        if not self.run_env:
            return
        status = "KILLED" if self._killed else "FAILED"
        try:
            self.hook.end_run(self.run_env[ENV_RUN_ID], status, {"horovod.error": _headline(error)})
        except Exception as end_err:  # noqa: BLE001 - the task's own error is the one to report
            self.log.warning("Could not end MLflow run %s: %s", self.run_env[ENV_RUN_ID], end_err)

    def finished(self, context: Any, outcome: FinishedTry) -> None:
        """
        Log the job's files into the run, register the model (``register_model``), end the run FINISHED, and put
        the run and the model's version on the task's asset events.

        :raises ValueError: ``model_path`` matches none of the job's files, or no model to register was named.
        """
        if not self.run_env:
            return
        ti, hook, run_id = context["ti"], self.hook, self.run_env[ENV_RUN_ID]

        def pulled(key: str) -> Any:
            return ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)

        artifact_dir, paths = outcome.artifact_dir, list(pulled(XCOM_ARTIFACT_PATHS) or [])
        hook.log_outputs(run_id, artifact_dir, paths)
        extra = {XCOM_MLFLOW_RUN_ID: run_id, XCOM_MLFLOW_RUN_URL: self.run_url}
        settings = self.settings
        if settings.register_model:
            model_uri, model_file = self._model_source(outcome.value, artifact_dir, paths)
            version = hook.register_model(
                run_id, settings.register_model, alias=settings.model_alias, model_file=model_file, model_uri=model_uri
            )
            ti.xcom_push(key=XCOM_MODEL_VERSION, value=version)
            extra.update(model_name=settings.register_model, model_version=version)
            self.log.info(
                "Registered %s version %s%s",
                settings.register_model,
                version,
                f" (alias {settings.model_alias})" if settings.model_alias else "",
            )
        hook.end_run(run_id, "FINISHED", {"spark.app_id": pulled(XCOM_SPARK_APP_ID) or ""})
        self._extend_model_events(context, extra)

    # -- the run -------------------------------------------------------------------------------------------------
    def _start_run(self, context: Any, job: TrainingJob) -> None:
        ti = context["ti"]
        tags = {
            "airflow.dag_id": ti.dag_id,
            "airflow.run_id": ti.run_id,
            "airflow.task_id": ti.task_id,
            "airflow.try_number": ti.try_number,
            "airflow.map_index": ti.map_index,
            "mlflow.source.name": f"airflow:{ti.dag_id}.{ti.task_id}",
            "mlflow.source.type": "JOB",
        }
        params = {"np": job.settings.np, "launcher": job.settings.launcher, **(self.settings.params or {})}
        run_name = f"{ti.task_id}{'' if ti.map_index < 0 else f'-{ti.map_index}'}-try{ti.try_number}"
        self.run_env = self.hook.start_run(
            self.settings.experiment or ti.dag_id, tags=tags, params=params, run_name=run_name
        )
        self._publish_run(ti, "created")

    def _end_left_run(self, run_id: str, job_status: str) -> None:
        try:
            if self.hook.run_status(run_id) != "RUNNING":
                return
            status = "KILLED" if job_status == ABANDONED else "FAILED"
            self.hook.end_run(
                run_id,
                status,
                {
                    "horovod.error": (
                        f"the job ended {job_status} with no try watching it (its task process was gone); "
                        "a retry submits a new job with a new run"
                    )
                },
            )
            self.log.info("MLflow run %s of an earlier try ended %s: its job is %s", run_id, status, job_status)
        except Exception as err:  # noqa: BLE001 - the retry goes on
            self.log.warning("Could not end MLflow run %s of an earlier try: %s", run_id, err)

    def _adopt_run(self, record: Any, context: Any) -> None:
        if self.run_env or not isinstance(record, dict):
            return
        run_id = record.get(RUN_ID_RECORD_KEY)
        if run_id:
            client, ti = self.hook.get_conn(), context["ti"]
            run = client.get_run(run_id)
            self.run_env = {ENV_RUN_ID: run_id, ENV_EXPERIMENT_ID: run.info.experiment_id}
            if str(run.data.tags.get("airflow.try_number")) != str(ti.try_number):
                client.set_tag(run_id, "airflow.reattached_try_number", str(ti.try_number))
                self._publish_run(ti, "kept from the try that submitted the job")
            else:
                self._publish_run(ti, "resumed")

    def _publish_run(self, ti: Any, how: str) -> None:
        run_id, experiment_id = self.run_env[ENV_RUN_ID], self.run_env[ENV_EXPERIMENT_ID]
        self.run_url = self.hook.run_url(experiment_id, run_id)
        ti.xcom_push(key=XCOM_MLFLOW_RUN_ID, value=run_id)
        if self.run_url:
            ti.xcom_push(key=XCOM_MLFLOW_RUN_URL, value=self.run_url)
        self.log.info("MLflow run %s %s: %s", run_id, how, self.run_url or run_id)

    def _model_source(self, value: Any, artifact_dir: str | None, paths: list[str]) -> tuple[str | None, str | None]:
        """``(model_uri, model_file)`` of the model to register (see :attr:`MlflowSettings.model_path`)."""
        settings = self.settings
        if settings.model_path:
            prefix = (artifact_dir or "").rstrip("/") + "/"
            for path in paths:
                if fnmatch.fnmatch(path[len(prefix) :] if path.startswith(prefix) else path, settings.model_path):
                    return None, path
            raise ValueError(f"mlflow_model_path={settings.model_path!r} matches none of the job's files: {paths}")
        if isinstance(value, dict) and isinstance(value.get("model_uri"), str):
            return value["model_uri"], None
        if isinstance(value, dict) and isinstance(value.get("model_path"), str):
            return None, value["model_path"]
        raise ValueError(
            f"mlflow_register_model={settings.register_model!r}: set mlflow_model_path, or return "
            "{'model_path': ...} or {'model_uri': ...} from rank 0"
        )

    def _extend_model_events(self, context: Any, extra: dict[str, Any]) -> None:
        from airflow.sdk import Asset

        events = context.get("outlet_events")
        for outlet in self.outlets:
            if events is not None and isinstance(outlet, Asset):
                events[outlet].extra.update(extra)
