"""
``MlflowHook``: an MLflow tracking server from an Airflow connection, through MLflow's own ``MlflowClient``: the
training's run (create, end), its outputs, and the model registry (a version and an alias).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_horovod.runtime.artifacts import is_remote
from airflow_provider_horovod.runtime.mlflow_sink import ENV_EXPERIMENT_ID, ENV_RUN_ID, ENV_TRACKING_URI

MAX_PARAM_CHARS = 500
"""A parameter's value is cut to this many characters (MLflow limits them; a repr of a large argument is noise)."""


def _flag(value: Any) -> bool:
    """A connection extra's boolean: ``true``/``1``/``yes`` (any case) or a JSON ``true``; anything else is false."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _verify(env: dict[str, str]) -> bool | str:
    """httpx's ``verify=`` for :meth:`MlflowHook.tracking_env`'s variables: off, a CA bundle, or the system's CAs."""
    if "MLFLOW_TRACKING_INSECURE_TLS" in env:
        return False
    return env.get("MLFLOW_TRACKING_SERVER_CERT_PATH", True)


class MlflowHook(BaseHook):
    """
    An MLflow tracking server named by a connection (type ``http`` or ``generic``): ``host`` is the tracking URI
    (``http://mlflow:5000``, or the host with ``schema`` and ``port``); ``login``/``password`` become
    ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` (basic auth); a password without a login, or the extra ``token``, is
    ``MLFLOW_TRACKING_TOKEN`` (bearer); the extra ``ca_bundle`` (a PEM file's path, on the Airflow workers and the
    Spark driver alike) is ``MLFLOW_TRACKING_SERVER_CERT_PATH``, the CA that verifies an ``https`` server; the extra
    ``insecure_tls`` (``true``/``false``) skips TLS verification. Nothing is read before first use.

    :param mlflow_conn_id: the connection id.
    """

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = "http"
    hook_name = "MLflow"

    def __init__(self, mlflow_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.mlflow_conn_id = mlflow_conn_id
        self._client: Any = None
        self._env: dict[str, str] | None = None

    def tracking_env(self) -> dict[str, str]:
        """
        ``MLFLOW_TRACKING_URI`` and the credential variables of the connection (for the ranks' environment only).

        :raises ValueError: the connection has no host.
        """
        if self._env is None:
            conn = self.get_connection(self.mlflow_conn_id)
            if not conn.host:
                raise ValueError(
                    f"mlflow_conn_id={self.mlflow_conn_id!r}: the connection's host must be the "
                    "tracking URI, e.g. http://mlflow:5000"
                )
            # an ``https`` connection (``AIRFLOW_CONN_X='https://host'`` parses so) keeps its scheme
            scheme = conn.schema or ("https" if conn.conn_type == "https" else "http")
            uri = conn.host if "://" in conn.host else f"{scheme}://{conn.host}"
            if conn.port and uri.count(":") < 2:
                uri = f"{uri.rstrip('/')}:{conn.port}"
            extra = conn.extra_dejson or {}
            env = {ENV_TRACKING_URI: uri.rstrip("/")}
            if conn.login:
                env.update(MLFLOW_TRACKING_USERNAME=conn.login, MLFLOW_TRACKING_PASSWORD=conn.password or "")
            token = extra.get("token") or (None if conn.login else conn.password)
            if token:
                env["MLFLOW_TRACKING_TOKEN"] = str(token)
            if _flag(extra.get("insecure_tls")):
                env["MLFLOW_TRACKING_INSECURE_TLS"] = "true"
            if extra.get("ca_bundle"):  # MLflow's own variable; a path that must exist where the client runs
                env["MLFLOW_TRACKING_SERVER_CERT_PATH"] = str(extra["ca_bundle"])
            self._env = env
        return dict(self._env)

    def get_conn(self) -> Any:
        """The ``MlflowClient`` (its REST client reads the credentials from this process's environment)."""
        if self._client is None:
            env = self.tracking_env()
            os.environ.update({k: v for k, v in env.items() if k != ENV_TRACKING_URI})
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=env[ENV_TRACKING_URI])
        return self._client

    def start_run(
        self, experiment: str, *, tags: dict[str, Any], params: dict[str, Any], run_name: str | None = None
    ) -> dict[str, str]:
        """
        Create a run (and the experiment, when it does not exist yet).

        :param experiment: the experiment's name.
        :param tags: the run's tags (values become strings).
        :param params: the run's parameters (values become strings of at most :data:`MAX_PARAM_CHARS`).
        :param run_name: the run's name.
        :return: the ranks' environment for it: :meth:`tracking_env` plus ``MLFLOW_RUN_ID`` and
            ``MLFLOW_EXPERIMENT_ID``.
        """
        from mlflow.entities import Param

        client = self.get_conn()
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(experiment)
        run = client.create_run(experiment_id, tags={k: str(v) for k, v in tags.items()}, run_name=run_name)
        client.log_batch(run.info.run_id, params=[Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()])
        return {**self.tracking_env(), ENV_RUN_ID: run.info.run_id, ENV_EXPERIMENT_ID: str(experiment_id)}

    def run_status(self, run_id: str) -> str | None:
        """
        The run's status (``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED``), or ``None`` when the server has no
        such run.

        :param run_id: the run.
        """
        from mlflow.exceptions import MlflowException

        try:
            return self.get_conn().get_run(run_id).info.status
        except MlflowException:
            return None

    def end_run(self, run_id: str, status: str, tags: dict[str, Any] | None = None) -> None:
        """
        Set ``tags`` and end the run.

        :param run_id: the run.
        :param status: ``FINISHED``, ``FAILED`` or ``KILLED``.
        :param tags: tags to set first (e.g. the failure's headline).
        """
        client = self.get_conn()
        for key, value in (tags or {}).items():
            client.set_tag(run_id, key, str(value))
        client.set_terminated(run_id, status)

    async def end_run_async(
        self, run_id: str, status: str, tags: dict[str, Any] | None = None, *, timeout_s: float = 20.0
    ) -> None:
        """
        :meth:`end_run` for an event loop (the triggerer): the tracking server's REST API (``runs/set-tag``,
        ``runs/update``) through httpx, with the connection's credentials as the request's auth, not
        ``MlflowClient``, which reads them from the process environment that every trigger of a triggerer shares.
        Call :meth:`tracking_env` first, off the event loop (it reads the connection).

        :param run_id: the run.
        :param status: ``FINISHED``, ``FAILED`` or ``KILLED``.
        :param tags: tags to set first.
        :param timeout_s: timeout of each request, seconds.
        :raises ValueError: the tracking URI is not ``http(s)://`` (a ``databricks`` or file store has no such API).
        :raises httpx.HTTPError: the server did not answer, or refused a request.
        """
        import httpx

        if self._env is None:
            from asgiref.sync import sync_to_async

            await sync_to_async(self.tracking_env)()
        env = self._env or {}
        uri = env[ENV_TRACKING_URI]
        if not uri.startswith(("http://", "https://")):
            raise ValueError(
                f"mlflow_conn_id={self.mlflow_conn_id!r}: tracking URI {uri!r} is not http(s)://; "
                "cannot end the run from the triggerer"
            )
        auth, headers = None, {}
        if "MLFLOW_TRACKING_USERNAME" in env:  # as MLflow's own REST client: basic auth first, else the token
            auth = httpx.BasicAuth(env["MLFLOW_TRACKING_USERNAME"], env.get("MLFLOW_TRACKING_PASSWORD", ""))
        elif "MLFLOW_TRACKING_TOKEN" in env:
            headers["Authorization"] = f"Bearer {env['MLFLOW_TRACKING_TOKEN']}"
        async with httpx.AsyncClient(
            base_url=f"{uri}/api/2.0/mlflow", auth=auth, headers=headers, verify=_verify(env), timeout=timeout_s
        ) as client:
            for key, value in (tags or {}).items():
                (
                    await client.post("/runs/set-tag", json={"run_id": run_id, "key": key, "value": str(value)})
                ).raise_for_status()
            (
                await client.post(
                    "/runs/update", json={"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)}
                )
            ).raise_for_status()

    def log_outputs(self, run_id: str, artifact_dir: str | None, artifact_paths: list[str]) -> None:
        """
        Reference the job's files in the run: the tag ``horovod.artifact_dir`` and the artifact
        ``horovod/artifact_paths.json`` (the files stay where the ranks wrote them).

        :param run_id: the run.
        :param artifact_dir: the job's artifact directory.
        :param artifact_paths: the files the job wrote.
        """
        client = self.get_conn()
        if artifact_dir:
            client.set_tag(run_id, "horovod.artifact_dir", artifact_dir)
        client.log_dict(
            run_id, {"artifact_dir": artifact_dir, "artifact_paths": artifact_paths}, "horovod/artifact_paths.json"
        )

    def register_model(
        self, run_id: str, name: str, *, alias: str | None, model_file: str | None = None, model_uri: str | None = None
    ) -> str:
        """
        Register a new version of the model ``name`` (created when new) and point ``alias`` at it.

        :param run_id: the run the version comes from.
        :param name: the registered model's name.
        :param alias: the alias to set (e.g. ``candidate``), or ``None``.
        :param model_file: a file the job wrote (a path or an fsspec URI): uploaded to the run's artifacts under
            ``model/`` and registered as ``runs:/<run_id>/model``.
        :param model_uri: a model rank 0 logged itself (``runs:/...``, ``models:/...``), registered as is.
        :return: the new version's number.
        :raises ValueError: neither ``model_file`` nor ``model_uri`` is given.
        """
        from mlflow.exceptions import MlflowException

        client = self.get_conn()
        if model_uri is None:
            if model_file is None:
                raise ValueError(f"mlflow_register_model={name!r}: no model to register")
            self._upload(client, run_id, model_file)
            model_uri = f"runs:/{run_id}/model"
        try:
            client.create_registered_model(name)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        version = str(client.create_model_version(name, model_uri, run_id=run_id).version)
        if alias:
            client.set_registered_model_alias(name, alias, version)
        return version

    @staticmethod
    def _upload(client: Any, run_id: str, location: str) -> None:
        if not is_remote(location):
            client.log_artifact(run_id, location, "model")
            return
        import fsspec

        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, location.rstrip("/").rsplit("/", 1)[-1])
            with fsspec.open(location, "rb") as src, open(local, "wb") as dst:
                dst.write(src.read())
            client.log_artifact(run_id, local, "model")

    def run_url(self, experiment_id: str, run_id: str) -> str | None:
        """
        The run's page in the MLflow UI, or ``None`` for a tracking URI with no UI (a local path, ``databricks``).

        :param experiment_id: the run's experiment.
        :param run_id: the run.
        """
        uri = self.tracking_env()[ENV_TRACKING_URI]
        if not uri.startswith(("http://", "https://")):
            return None
        return f"{uri}/#/experiments/{experiment_id}/runs/{run_id}"
