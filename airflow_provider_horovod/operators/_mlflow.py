"""
MLflow tracking for ``HorovodRunnerOperator`` (and ``TorchDistributedOperator``, ``@task.horovod``,
``@task.torch_distributed``): one run per try, created right before the job is submitted, ended when the try ends,
the model registered. Mixed into the operator before the deploy-mode delegation, whose job methods it wraps.
See ``docs/mlflow.md``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from airflow.sdk.bases.operator import BaseOperatorMeta

from airflow_provider_horovod.hooks.mlflow import MlflowHook
from airflow_provider_horovod.runtime.mlflow_sink import ENV_EXPERIMENT_ID, ENV_RUN_ID, check_mlflow_installed
from airflow_provider_horovod.standalone.durable import ABANDONED
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.xcom_keys import (
    XCOM_ARTIFACT_DIR,
    XCOM_ARTIFACT_PATHS,
    XCOM_MLFLOW_RUN_ID,
    XCOM_MLFLOW_RUN_URL,
    XCOM_MODEL_VERSION,
    XCOM_SPARK_APP_ID,
)

RUN_ID_RECORD_KEY = "mlflow_run_id"
"""Where the durable job record keeps the run (a reattached try keeps its run)."""


def _headline(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"[:500]


class MlflowTracking:
    """
    The operator's MLflow arguments and steps.

    :param mlflow_conn_id: an MLflow connection (:class:`~airflow_provider_horovod.hooks.mlflow.MlflowHook`);
        ``None`` (default): no tracking. Each try gets one run (tags ``airflow.dag_id``, ``airflow.run_id``,
        ``airflow.task_id``, ``airflow.try_number``, ``airflow.map_index``, at the end ``spark.app_id``; params ``np``,
        ``launcher`` and the callable's arguments); every rank gets ``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID``,
        ``MLFLOW_EXPERIMENT_ID`` and the credentials in its environment; ``report()``'s metrics are logged into it.
    :param mlflow_experiment: the experiment's name (default: the DAG id). (templated)
    :param mlflow_register_model: register a version of this model from the run (default ``None``: none).
    :param mlflow_model_alias: the alias the new version gets (default ``"candidate"``; ``None``: none).
    :param mlflow_model_path: which file is the model: a glob matched against the artifact paths relative to the
        artifact directory (``"*.pt"``); ``None`` (default): the return value's ``model_uri`` (a model rank 0 logged
        itself), else its ``model_path``.
    :raises ValueError: an MLflow argument without ``mlflow_conn_id``, a bad value, or the client not installed.
    """

    mlflow_conn_id: str | None
    _mlflow_env: dict[str, str]

    @BaseOperatorMeta._apply_defaults  # type: ignore[type-var]
    def __init__(self, *, mlflow_conn_id: str | None = None, mlflow_experiment: str | None = None,
                 mlflow_register_model: str | None = None, mlflow_model_alias: str | None = "candidate",
                 mlflow_model_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if mlflow_conn_id is None and (mlflow_experiment or mlflow_register_model or mlflow_model_path):
            raise ValueError("mlflow_experiment, mlflow_register_model and mlflow_model_path need mlflow_conn_id")
        for name, value in (("mlflow_conn_id", mlflow_conn_id), ("mlflow_register_model", mlflow_register_model),
                            ("mlflow_model_alias", mlflow_model_alias), ("mlflow_model_path", mlflow_model_path)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
        if mlflow_conn_id is not None:
            check_mlflow_installed("mlflow_conn_id")
        self.mlflow_conn_id = mlflow_conn_id
        self.mlflow_experiment = mlflow_experiment
        self.mlflow_register_model = mlflow_register_model
        self.mlflow_model_alias = mlflow_model_alias
        self.mlflow_model_path = mlflow_model_path
        self._mlflow_env = {}
        self._mlflow_killed = False
        self.mlflow_run_url: str | None = None
        """What the "MLflow run" link shows for the try this instance runs."""

    @property
    def mlflow_hook(self) -> MlflowHook:
        """The tracking server's hook (made on first use)."""
        if getattr(self, "_mlflow_hook", None) is None:
            self._mlflow_hook = MlflowHook(self.mlflow_conn_id)
        return self._mlflow_hook

    # -- the job methods (ResumableJobMixin's) ---------------------------------------------------------------------
    def submit_job(self, context: Any) -> Any:
        """Create this try's run, give the job its environment, submit; the durable record keeps the run id."""
        if self.mlflow_conn_id:
            self._start_run(context)
            mode = self._mode
            mode.job.env.update(self._mlflow_env)
            if isinstance(getattr(mode.hook, "env_vars", None), dict):
                mode.hook.env_vars.update(self._mlflow_env)
        record = super().submit_job(context)
        if self._mlflow_env and isinstance(record, dict):
            record[RUN_ID_RECORD_KEY] = self._mlflow_env[ENV_RUN_ID]
        return record

    def get_job_status(self, external_id: Any, context: Any) -> str:
        """
        The stored job's state; when it ended without success (the try that watched it died), its run, still
        ``RUNNING``, is ended ``FAILED`` (``KILLED`` for a job an earlier try killed), as a new job and run replace it.
        """
        status = super().get_job_status(external_id, context)  # type: ignore[misc]
        run_id = external_id.get(RUN_ID_RECORD_KEY) if isinstance(external_id, dict) else None
        if self.mlflow_conn_id and run_id and not self.is_job_active(status) \
                and not self.is_job_succeeded(status):  # type: ignore[attr-defined]
            self._end_left_run(run_id, status)
        return status

    def _end_left_run(self, run_id: str, job_status: str) -> None:
        try:
            if self.mlflow_hook.run_status(run_id) != "RUNNING":
                return
            status = "KILLED" if job_status == ABANDONED else "FAILED"
            self.mlflow_hook.end_run(run_id, status, {"horovod.error": (
                f"the job ended {job_status} with no try watching it (its task process was gone); a retry submits a "
                "new job with a new run")})
            self.log.info("MLflow run %s of an earlier try ended %s: its job is %s", run_id, status, job_status)
        except Exception as err:  # noqa: BLE001 - the retry goes on
            self.log.warning("Could not end MLflow run %s of an earlier try: %s", run_id, err)

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        """Wait for the job; a job submitted by an earlier try (reattached) keeps that try's run."""
        self._adopt_run(external_id, context)
        return super().poll_until_complete(external_id, context)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        """Read the job's result (a job an earlier try submitted keeps that try's run)."""
        self._adopt_run(external_id, context)
        return super().get_job_result(external_id, context)

    def defer(self, *, trigger: Any, **kwargs: Any) -> Any:
        """
        Defer to ``trigger``; a cluster-mode trigger gets the try's run, which it ends ``KILLED`` when the deferred
        task is killed (marked failed or success, or cleared), as the task itself never resumes to end it.

        :param trigger: the trigger.
        :param kwargs: ``method_name``, ``kwargs``, ``timeout``, as ``BaseOperator.defer`` takes them.
        :raises TaskDeferred: always.
        """
        if self.mlflow_conn_id and self._mlflow_env and isinstance(trigger, HorovodSparkJobTrigger):
            trigger = trigger.with_mlflow_run(self.mlflow_conn_id, self._mlflow_env[ENV_RUN_ID])
        return super().defer(trigger=trigger, **kwargs)  # type: ignore[misc]

    def on_kill(self) -> None:
        """
        The task is being killed (marked failed or success, cleared, stopped): with ``cancel_on_kill`` the job is
        killed too, and the run ends ``KILLED`` (without, the job goes on and a durable retry may keep the run).
        """
        self._mlflow_killed = bool(getattr(self, "cancel_on_kill", True))
        super().on_kill()  # type: ignore[misc]

    def _start_run(self, context: Any) -> None:
        ti = context["ti"]
        tags = {"airflow.dag_id": ti.dag_id, "airflow.run_id": ti.run_id, "airflow.task_id": ti.task_id,
                "airflow.try_number": ti.try_number, "airflow.map_index": ti.map_index,
                "mlflow.source.name": f"airflow:{ti.dag_id}.{ti.task_id}", "mlflow.source.type": "JOB"}
        params = {"np": self.np, "launcher": self.launcher,
                  **{f"arg{i}": v for i, v in enumerate(self.op_args)}, **self.op_kwargs}
        run_name = f"{ti.task_id}{'' if ti.map_index < 0 else f'-{ti.map_index}'}-try{ti.try_number}"
        self._mlflow_env = self.mlflow_hook.start_run(self.mlflow_experiment or ti.dag_id, tags=tags, params=params,
                                                      run_name=run_name)
        self._publish_run(ti, "created")

    def _adopt_run(self, external_id: Any, context: Any) -> None:
        if not self.mlflow_conn_id or self._mlflow_env or not isinstance(external_id, dict):
            return
        run_id = external_id.get(RUN_ID_RECORD_KEY)
        if run_id:
            client, ti = self.mlflow_hook.get_conn(), context["ti"]
            run = client.get_run(run_id)
            self._mlflow_env = {ENV_RUN_ID: run_id, ENV_EXPERIMENT_ID: run.info.experiment_id}
            if str(run.data.tags.get("airflow.try_number")) != str(ti.try_number):
                client.set_tag(run_id, "airflow.reattached_try_number", str(ti.try_number))
                self._publish_run(ti, "kept from the try that submitted the job")
            else:
                self._publish_run(ti, "resumed")

    def _publish_run(self, ti: Any, how: str) -> None:
        run_id, experiment_id = self._mlflow_env[ENV_RUN_ID], self._mlflow_env[ENV_EXPERIMENT_ID]
        self.mlflow_run_url = self.mlflow_hook.run_url(experiment_id, run_id)
        ti.xcom_push(key=XCOM_MLFLOW_RUN_ID, value=run_id)
        if self.mlflow_run_url:
            ti.xcom_push(key=XCOM_MLFLOW_RUN_URL, value=self.mlflow_run_url)
        self.log.info("MLflow run %s %s: %s", run_id, how, self.mlflow_run_url or run_id)

    # -- the end of the try ----------------------------------------------------------------------------------------
    def mlflow_tracked(self, context: Any, run: Callable[[Any], Any], *, resumed: bool = False) -> Any:
        """
        ``run(context)``, then end the try's run: FINISHED (model registered) or FAILED with the error's headline.
        A deferral leaves the run open; ``resumed`` (``execute_complete``) finds it in XCom.

        :param context: the task's context.
        :param run: the try's work; returns rank 0's value.
        :param resumed: the try comes back from its trigger.
        """
        from airflow.providers.common.compat.sdk import TaskDeferred

        if not self.mlflow_conn_id:
            return run(context)
        ti = context["ti"]
        if resumed:
            self._adopt_run({RUN_ID_RECORD_KEY: ti.xcom_pull(task_ids=ti.task_id, key=XCOM_MLFLOW_RUN_ID,
                                                             map_indexes=ti.map_index)}, context)
        try:
            value = run(context)
            if self._mlflow_env:
                self._finish(context, value)
        except TaskDeferred:
            raise
        except BaseException as err:
            self.mlflow_failed(err)
            raise
        return value

    def mlflow_failed(self, err: BaseException) -> None:
        """
        End the try's run FAILED with the error's headline (tag ``horovod.error``), or KILLED when the task was
        killed (:meth:`on_kill`: marked failed or success, cleared, stopped); never raises.

        :param err: why the try failed.
        """
        if not self._mlflow_env:
            return
        status = "KILLED" if getattr(self, "_mlflow_killed", False) else "FAILED"
        try:
            self.mlflow_hook.end_run(self._mlflow_env[ENV_RUN_ID], status, {"horovod.error": _headline(err)})
        except Exception as end_err:  # noqa: BLE001 - the task's own error is the one to report
            self.log.warning("Could not end MLflow run %s: %s", self._mlflow_env[ENV_RUN_ID], end_err)

    def _finish(self, context: Any, value: Any) -> None:
        ti, hook, run_id = context["ti"], self.mlflow_hook, self._mlflow_env[ENV_RUN_ID]

        def pulled(key: str) -> Any:
            return ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)

        artifact_dir, paths = pulled(XCOM_ARTIFACT_DIR), list(pulled(XCOM_ARTIFACT_PATHS) or [])
        hook.log_outputs(run_id, artifact_dir, paths)
        extra = {XCOM_MLFLOW_RUN_ID: run_id, XCOM_MLFLOW_RUN_URL: self.mlflow_run_url}
        if self.mlflow_register_model:
            model_uri, model_file = self._model_source(value, artifact_dir, paths)
            version = hook.register_model(run_id, self.mlflow_register_model, alias=self.mlflow_model_alias,
                                          model_file=model_file, model_uri=model_uri)
            ti.xcom_push(key=XCOM_MODEL_VERSION, value=version)
            extra.update(model_name=self.mlflow_register_model, model_version=version)
            self.log.info("Registered %s version %s%s", self.mlflow_register_model, version,
                          f" (alias {self.mlflow_model_alias})" if self.mlflow_model_alias else "")
        hook.end_run(run_id, "FINISHED", {"spark.app_id": pulled(XCOM_SPARK_APP_ID) or ""})
        self._extend_model_events(context, extra)

    def _model_source(self, value: Any, artifact_dir: str | None, paths: list[str]) -> tuple[str | None, str | None]:
        """``(model_uri, model_file)`` of the model to register (see ``mlflow_model_path``)."""
        if self.mlflow_model_path:
            prefix = (artifact_dir or "").rstrip("/") + "/"
            for path in paths:
                if fnmatch.fnmatch(path[len(prefix):] if path.startswith(prefix) else path, self.mlflow_model_path):
                    return None, path
            raise ValueError(f"mlflow_model_path={self.mlflow_model_path!r} matches none of the job's files: {paths}")
        if isinstance(value, dict) and isinstance(value.get("model_uri"), str):
            return value["model_uri"], None
        if isinstance(value, dict) and isinstance(value.get("model_path"), str):
            return None, value["model_path"]
        raise ValueError(f"mlflow_register_model={self.mlflow_register_model!r}: set mlflow_model_path, or return "
                         "{'model_path': ...} or {'model_uri': ...} from rank 0")

    def _extend_model_events(self, context: Any, extra: dict[str, Any]) -> None:
        from airflow.sdk import Asset

        events = context.get("outlet_events")
        for outlet in getattr(self, "outlets", None) or []:
            if events is not None and isinstance(outlet, Asset):
                events[outlet].extra.update(extra)
