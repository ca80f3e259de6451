"""
``HorovodHook``: submit a Horovod training payload to Spark with the Spark provider's ``SparkSubmitHook``.

The hook spark-submits the runtime's driver program (:mod:`airflow_provider_horovod.runtime.driver.program`)
with the payload beside it, and reads back what the driver wrote: the Spark application id, the
artifact paths, and rank 0's return value (or the failing rank's error).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from airflow_provider_horovod._compat import AirflowNotFoundException
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.driver import program as driver_program
from airflow_provider_horovod.runtime.driver.shipping import RUNTIME_ZIP_NAME, runtime_zip
from airflow_provider_horovod.runtime.wire.protocol import RANK_ENV_NAMES
from airflow_provider_horovod.standalone.master import standalone_master
from airflow_provider_horovod.standalone.slots import check_standalone_fits, standalone_defaults, submit_kwargs_conf
from airflow_provider_horovod.utils.job_result import JobResult, read_job_result
from airflow_provider_horovod.utils.process_tree import die_with_parent, terminate_tree
from airflow_provider_horovod.utils.program_output import app_started_line, is_app_started_line, wait_for_driver_result
from airflow_provider_horovod.utils.spark_auth import AUTH_PROPERTIES_FILE, auth_submit_kwargs
from airflow_provider_horovod.utils.spark_conf import (
    BASE_SPARK_CONF,
    JVM_STARTUP_OPTIONS,
    SPARK_LOG4J2,
    check_reachable,
    executor_jvm_conf,
    local_spark_conf,
    master_addresses,
    python_daemon_conf,
    spark_defaults_keys,
)
from airflow_provider_horovod.utils.spark_connection import rest_access

__all__ = ["HorovodHook"]


class _SparkSubmit(SparkSubmitHook):
    """
    ``SparkSubmitHook`` with three additions: an embedded ``local[np]`` master when no connection is configured
    (the stock hook falls back to YARN), a watcher that reports the application id as soon as the driver prints
    it, and ``--load-spark-defaults`` after ``--properties-file`` when asked (Spark 4.0+: spark-submit then reads
    ``spark-defaults.conf`` too, which a properties file alone hides).
    """

    def __init__(
        self,
        *,
        local_master: str | None,
        on_line: Callable[[str], None],
        load_spark_defaults: bool = False,
        **kwargs: Any,
    ) -> None:
        self._local_master = local_master
        self._on_line = on_line
        self._load_spark_defaults = load_spark_defaults
        super().__init__(**kwargs)

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        if self._load_spark_defaults and "--properties-file" in command:
            command.insert(command.index("--properties-file") + 2, "--load-spark-defaults")
        return command

    def _resolve_connection(self) -> dict[str, Any]:
        if self._local_master is None:
            return super()._resolve_connection()
        return {
            "master": self._local_master,
            "queue": None,
            "deploy_mode": "client",
            "spark_binary": self.spark_binary or "spark-submit",
            "namespace": None,
            "principal": self._principal,
            "keytab": self._keytab,
            "rest_scheme": "http",
            "rest_port": 6066,
            "rest_endpoint": None,
        }

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def watched() -> Iterator[Any]:
            for line in itr:
                self._on_line(line.rstrip("\n"))
                if not is_app_started_line(line):  # the operator logs the start, with the UI link, once
                    yield line

        super()._process_spark_submit_log(watched())


class HorovodHook(BaseHook):
    """
    Submits a training job to Spark (client deploy mode) and brings back the result. The hook keeps the connection
    and how spark-submit is run; the job (:class:`~airflow_provider_horovod.job.TrainingJob`: payload, settings,
    environment, Spark properties, application name) comes with each :meth:`run_job` call.

    Construction does no I/O; the connection is read when :meth:`run_job` runs.

    :param conn_id: a connection of the Spark provider's ``spark`` type (master URL in host/port, extras such
        as ``deploy-mode``, ``spark-binary``). ``None``, or the default ``spark_default`` when it is not
        defined, runs on an embedded ``local[np]`` master bound to 127.0.0.1, with executors on this
        interpreter; any other id must name an existing connection (else :class:`HorovodJobError`).
    :param spark_submit_kwargs: further keyword arguments for ``SparkSubmitHook`` (``executor_memory``,
        ``num_executors``, ``jars``, ...).
    :param spark_log_level: log4j level of the Spark driver's own logging (``"WARN"`` keeps the task log to
        training output and problems; ``None`` keeps Spark's default INFO). Ignored when the job's Spark properties
        set ``spark.driver.extraJavaOptions``.

    The driver's and (on a cluster) the executors' JVMs start with
    :data:`~airflow_provider_horovod.utils.spark_conf.JVM_STARTUP_OPTIONS` unless the job's properties (or, for
    executors, the local ``spark-defaults.conf``) set their ``extraJavaOptions``.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    hook_name = "Horovod on Spark"

    def __init__(
        self,
        *,
        conn_id: str | None = default_conn_name,
        spark_submit_kwargs: dict[str, Any] | None = None,
        spark_log_level: str | None = "WARN",
    ) -> None:
        super().__init__()
        self.spark_log_level = spark_log_level
        self.conn_id = conn_id
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.app_id: str | None = None
        self.ui_url: str | None = None
        self._submit: _SparkSubmit | None = None
        self._killed = False

    @cached_property
    def uses_local_master(self) -> bool:
        """True when no Spark connection is configured and the embedded ``local[np]`` master is used."""
        if self.conn_id is None:
            return True
        try:
            self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            if self.conn_id != self.default_conn_name:
                raise HorovodJobError(
                    f"conn_id={self.conn_id!r}: no such Airflow connection. Define it (a Spark provider 'spark' "
                    f"connection, e.g. AIRFLOW_CONN_{self.conn_id.upper()}='spark://master:7077'), or use "
                    f"conn_id=None (or leave the default {self.default_conn_name!r} undefined) for an embedded "
                    "local[np] master"
                ) from None
            self.log.info("No connection %r: running on an embedded local Spark master", self.conn_id)
            return True
        return False

    def _watch(
        self,
        on_app_started: Callable[[str, str | None], None] | None,
        on_output: Callable[[str], None] | None = None,
    ) -> Callable[[str], None]:
        def on_line(line: str) -> None:
            if on_output is not None:
                on_output(line)
            if self.app_id is None and (started := app_started_line(line)) is not None:
                self.app_id, self.ui_url = started
                if on_app_started is not None:
                    on_app_started(self.app_id, self.ui_url)

        return on_line

    def run_job(
        self,
        job: TrainingJob,
        *,
        payload_path: str,
        staging_dir: str,
        on_app_started: Callable[[str, str | None], None] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> JobResult:
        """
        spark-submit the driver program for one payload and wait for it (client deploy mode).

        :param job: the job: its settings go to the driver program as its flags, its HMAC key through the driver's
            environment only, its environment to the driver and every rank, its Spark properties over the
            provider's defaults, its name to the application; ``np`` ranks (``local[np]`` on the embedded master).
        :param payload_path: the payload file (owner-only permissions), signed with the job's key (read by the
            driver: a payload changed after it was written is refused).
        :param staging_dir: a private directory for the runtime zip and the driver's result files.
        :param on_app_started: called with ``(app_id, ui_url)`` as soon as the driver reports them.
        :param on_output: called with every line spark-submit prints (driver output, forwarded rank lines).
        :return: the job's result.
        :raises HorovodJobError: the job failed; the message carries the failing rank's traceback. On a standalone
            master, also before anything is submitted when ``np`` task slots can never be had at the same time.
        """
        settings, np, user_conf, user_env = job.settings, abs(job.np), dict(job.conf), dict(job.env)
        local = self.uses_local_master
        conn = None if local or self.conn_id is None else self.get_connection(self.conn_id)
        if conn is not None:  # a wrong address fails here, not after Spark's own retries (over a minute)
            master = f"{conn.host}:{conn.port}" if conn.port else (conn.host or "")
            check_reachable(
                master,
                master_addresses(master),
                hint=f"Check the host and port of the Airflow connection {self.conn_id!r} and that the "
                "master is running (its log says 'Starting Spark master at spark://...')",
            )
        staging = Path(staging_dir)
        zip_path = staging / RUNTIME_ZIP_NAME
        zip_path.write_bytes(runtime_zip())
        conf = {**BASE_SPARK_CONF, **(local_spark_conf(job.np) if local else {}), **user_conf}
        if "spark.driver.extraJavaOptions" not in user_conf:  # the driver JVM is this provider's: its options too
            options = [JVM_STARTUP_OPTIONS]
            if self.spark_log_level:
                log4j = staging / "log4j2.properties"
                log4j.write_text(SPARK_LOG4J2.format(level=self.spark_log_level.lower()))
                options.insert(0, f"-Dlog4j2.configurationFile=file:{log4j}")
            conf["spark.driver.extraJavaOptions"] = " ".join(options)
        preset = spark_defaults_keys()
        if not local:  # local[np] has no executor JVMs
            conf = {**executor_jvm_conf(conf, preset), **conf}
        conf.update(python_daemon_conf(conf, str(zip_path) if local else RUNTIME_ZIP_NAME, preset))
        if conn is not None and (standalone := standalone_master(conn)) is not None:
            sized = {**submit_kwargs_conf(self.spark_submit_kwargs), **conf}
            conf = {**standalone_defaults(job.np, standalone[1], sized), **conf}
            check_standalone_fits(
                master_url=standalone[0],
                master_ui_url=standalone[1],
                np=job.np,
                conf={**sized, **conf},
                cluster_mode=False,
                log=self.log,
                access=rest_access(conn, require_token_shape=False),
            )
        env = {**user_env, driver_program.KEY_ENV: job.key.hex()}
        if user_env:
            env[RANK_ENV_NAMES] = ",".join(sorted(user_env))
        # spark-submit ships with PySpark in this interpreter's bin/ even when that is not on PATH.
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        if local and "SPARK_LOCAL_IP" not in {**os.environ, **user_env}:
            env["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark would bind to the machine's outside address
        args = [
            "--payload",
            payload_path,
            "--result-dir",
            str(staging),
            "--artifact-dir",
            job.artifact_dir,
            *settings.to_args(),
        ]
        submit_kwargs, load_defaults = auth_submit_kwargs(conn, staging, self.spark_submit_kwargs)
        self._submit = _SparkSubmit(
            local_master=f"local[{np}]" if local else None,
            on_line=self._watch(on_app_started, on_output),
            load_spark_defaults=load_defaults,
            conn_id=self.conn_id or self.default_conn_name,
            conf=conf,
            py_files=str(zip_path),
            name=job.app_name,
            application_args=args,
            env_vars=env,
            deploy_mode="client",  # this hook's driver runs here; cluster mode is HorovodStandaloneHook
            **submit_kwargs,
        )
        submit_error: AirflowException | None = None
        try:
            self._submit.submit(application=driver_program.__file__, preexec_fn=die_with_parent)
        except AirflowException as err:
            submit_error = err
        finally:
            (staging / AUTH_PROPERTIES_FILE).unlink(missing_ok=True)  # spark-submit read it when it started
        return self._read_result(staging, submit_error)

    def _read_result(self, staging: Path, submit_error: AirflowException | None) -> JobResult:
        if self._killed:
            raise HorovodJobError(
                "the Spark job was stopped because the Airflow task was killed (on_kill: a user action, "
                "execution_timeout, or SIGTERM); no training process of this try is left running",
                app_id=self.app_id,
            ) from submit_error
        if submit_error is not None:  # the driver's JVM ended: its Python program may still be writing the result
            wait_for_driver_result(staging)
        result = read_job_result(staging, app_id=self.app_id, ui_url=self.ui_url, submit_error=submit_error)
        self.app_id, self.ui_url = result.app_id, result.ui_url
        return result

    def on_kill(self) -> None:
        """Stop the Spark job: terminate the driver's process tree, then let ``SparkSubmitHook`` clean up."""
        if self._submit is None:
            return
        self._killed = True
        self.log.info(
            "Stopping the Spark job%s: terminating the spark-submit process tree",
            f" (application {self.app_id})" if self.app_id else "",
        )
        proc = getattr(self._submit, "_submit_sp", None)
        if proc is not None and proc.poll() is None:
            terminate_tree(proc.pid, timeout_s=15)
        self._submit.on_kill()

    def get_conn(self) -> Any:
        """Not used: the hook talks to Spark through ``spark-submit``."""
        return None
