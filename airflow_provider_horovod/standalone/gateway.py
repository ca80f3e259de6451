"""
Cluster deploy mode through ``spark-submit``'s legacy RPC gateway: for a standalone master with Spark RPC
authentication (``spark.authenticate`` and a shared secret), which runs no REST submission server (SPARK-25088).

``spark-submit --master spark://... --deploy-mode cluster`` with ``spark.master.rest.enabled=false`` runs
``org.apache.spark.deploy.ClientApp``, which sends the driver to the master over Spark's authenticated (and, with
``spark.network.crypto.enabled``, encrypted) RPC, logs ``Driver successfully submitted as driver-...`` and exits after
its first look at the driver's state. What it sends is the REST path's driver
(:func:`~airflow_provider_horovod.standalone.submission.driver_submission`: the same program, arguments,
properties and staging), with three differences Spark imposes:

- the secret and every property go in one owner-only properties file in a private temporary directory
  (:func:`~airflow_provider_horovod.utils.spark_auth.write_auth_properties`), removed once spark-submit ended. The
  master hands the secret to the driver's worker, which keeps it off the driver's command line (it passes
  ``_SPARK_AUTH_SECRET`` in the environment; the driver program puts it back into its ``SparkConf``);
- the driver's environment is spark-submit's own (``ClientApp`` sends ``sys.env``), so spark-submit runs with only
  :func:`gateway_env`: what the REST request's ``environmentVariables`` hold (the payload's HMAC key, ``env_vars``,
  the store's credentials) and what spark-submit needs to start (``PATH``, ``JAVA_HOME``, ``SPARK_HOME``);
- ``spark-submit`` refuses a Python application in standalone cluster mode and ``ClientApp`` wants a ``.jar``: the
  application resource is :data:`GATEWAY_JAR`, a zip of the driver program as ``__main__.py`` (the main class is
  ``PythonRunner``, as over REST; from object storage the worker downloads it and Python runs it as a zip).

Status and kill go through the master's web UI (``/json/``, ``/driver/kill/``); see
:class:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook`. No I/O at import.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.runtime.driver import program as driver_program
from airflow_provider_horovod.standalone.submission import PYTHON_RUNNER, DriverSubmission
from airflow_provider_horovod.utils.process_tree import die_with_parent
from airflow_provider_horovod.utils.spark_auth import AUTH_PROPERTIES_FILE, write_auth_properties
from airflow_provider_horovod.utils.staging import Staging

__all__ = [
    "GATEWAY_JAR",
    "SUBMITTED",
    "gateway_command",
    "gateway_env",
    "parse_driver_id",
    "stage_gateway_jar",
    "submit_through_gateway",
]

GATEWAY_JAR = "horovod_driver.jar"
"""The application resource spark-submit sends: the driver program as the ``__main__.py`` of a zip."""
SUBMITTED = re.compile(r"Driver successfully submitted as (driver-[\w-]+)")
"""What ``ClientApp`` logs once the master accepted the driver (Spark 3.x and 4.x)."""
PASSED_ENV = ("PATH", "JAVA_HOME", "SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR")
"""The variables of this process that spark-submit gets (it needs them to start; the driver inherits them)."""


def stage_gateway_jar(staging: Staging) -> str:
    """
    Write :data:`GATEWAY_JAR` into the staging directory (after
    :func:`~airflow_provider_horovod.standalone.submission.stage_job`).

    :param staging: the try's staging directory.
    :return: the jar's URL for the worker: a ``file:`` URI, or a presigned URL on object storage.
    :raises OSError: it cannot be written.
    :raises HorovodJobError: an object-store location cannot presign its URL.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("__main__.py", Path(driver_program.__file__).read_bytes())
    staging.write_bytes(GATEWAY_JAR, buffer.getvalue())
    return Path(staging.path(GATEWAY_JAR)).as_uri() if staging.is_local else staging.signed_url(GATEWAY_JAR)


def gateway_env(job_env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """
    spark-submit's whole environment, which becomes the driver's: :data:`PASSED_ENV` from ``environ`` (``PATH`` with
    this interpreter's ``bin/`` first, where pip's PySpark puts ``spark-submit``), then the job's own variables.
    ``SPARK_LOCAL_IP`` and ``SPARK_LOCAL_HOSTNAME`` stay behind, as the REST server drops them: they name this
    machine, not the driver's worker.

    :param job_env: the REST request's environment (:attr:`DriverSubmission.env`).
    :param environ: this process's environment (default ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in PASSED_ENV if environ.get(k)}
    env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(sys.executable), env.get("PATH")) if p)
    return {**env, **{k: v for k, v in job_env.items() if k not in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")}}


def gateway_command(submission: DriverSubmission, *, master_url: str, jar_url: str, properties_file: str) -> list[str]:
    """
    The spark-submit command line: no property, secret or key on it (they are in ``properties_file`` and the
    environment); ``--verbose`` makes ``ClientApp`` log the driver id (its properties print redacted).

    :param submission: the driver (REST's request).
    :param master_url: ``spark://host:port``.
    :param jar_url: :func:`stage_gateway_jar`'s URL.
    :param properties_file: the owner-only properties file.
    """
    return [
        "spark-submit",
        "--master",
        master_url,
        "--deploy-mode",
        "cluster",
        "--class",
        PYTHON_RUNNER,
        "--properties-file",
        properties_file,
        "--verbose",
        jar_url,
        *submission.app_args,
    ]


def parse_driver_id(output: str) -> str | None:
    """
    The driver id ``ClientApp`` logged (``Driver successfully submitted as driver-...``), or ``None``.

    :param output: spark-submit's output (stdout and stderr).
    """
    found = SUBMITTED.search(output)
    return found.group(1) if found else None


def submit_through_gateway(
    staging: Staging, submission: DriverSubmission, *, master_url: str, secret: str, timeout_s: float = 180.0
) -> str:
    """
    Send the driver to the master through spark-submit's legacy gateway (the module docstring says how).

    :param staging: the try's staging directory (staged: :func:`~.submission.stage_job`).
    :param submission: the driver (:func:`~airflow_provider_horovod.standalone.submission.driver_submission`).
    :param master_url: ``spark://host:port``.
    :param secret: the RPC secret.
    :param timeout_s: how long spark-submit may take, seconds (it exits a few seconds after the submission).
    :return: the driver id.
    :raises HorovodJobError: spark-submit did not report a driver id (the master refused it, or could not be
        reached), or did not end within ``timeout_s``; the message holds the end of its output.
    """
    jar_url = stage_gateway_jar(staging)
    properties = {**submission.properties, "spark.master.rest.enabled": "false"}  # ClientApp, not the REST client
    with tempfile.TemporaryDirectory(prefix="horovod-gateway-") as private:  # mode 0700, removed at once after
        path = write_auth_properties(Path(private) / AUTH_PROPERTIES_FILE, secret, properties=properties)
        command = gateway_command(submission, master_url=master_url, jar_url=jar_url, properties_file=path)
        try:
            done = subprocess.run(
                command,
                env=gateway_env(submission.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
                preexec_fn=die_with_parent,
            )  # a killed task takes its spark-submit along
        except subprocess.TimeoutExpired as err:
            output = (err.output or b"").decode(errors="replace")
            if (driver_id := parse_driver_id(output)) is not None:
                return driver_id
            raise HorovodJobError(
                f"spark-submit did not submit the driver to {master_url} within {timeout_s:g} s: "
                f"{_tail(output, secret)}"
            ) from None
        except OSError as err:
            raise HorovodJobError(f"cannot run spark-submit for {master_url}: {err}") from err
    output = done.stdout.decode(errors="replace")
    if (driver_id := parse_driver_id(output)) is None:
        raise HorovodJobError(
            f"spark-submit did not submit the driver to {master_url} (exit status "
            f"{done.returncode}); the end of its output:\n{_tail(output, secret)}"
        )
    return driver_id


def _tail(output: str, secret: str, lines: int = 30) -> str:
    """The last ``lines`` lines of spark-submit's output, the secret masked (Spark redacts it; in case)."""
    return "\n".join(output.replace(secret, "***").splitlines()[-lines:])
