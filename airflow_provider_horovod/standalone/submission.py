"""
What a cluster-mode job is on a Spark standalone master's REST submission server: the files staged for it (payload,
runtime zip, driver program) and the ``create`` request that starts its driver on a worker (application resource,
arguments, Spark properties, environment). :class:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook`
stages, then submits what :func:`driver_submission` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_horovod.runtime.driver import program as driver_program
from airflow_provider_horovod.runtime.driver.shipping import RUNTIME_ZIP_NAME, runtime_zip
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.wire.protocol import RANK_ENV_NAMES
from airflow_provider_horovod.standalone.slots import standalone_defaults
from airflow_provider_horovod.utils.spark_conf import (
    BASE_SPARK_CONF,
    JVM_STARTUP_OPTIONS,
    executor_jvm_conf,
    python_daemon_conf,
)
from airflow_provider_horovod.utils.staging import Staging

__all__ = ["DRIVER_FILE", "PYTHON_RUNNER", "DriverSubmission", "driver_submission", "stage_job"]

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
DRIVER_FILE = "horovod_driver.py"


@dataclass(frozen=True)
class DriverSubmission:
    """
    The REST ``create`` request of one staged job (``main_class`` is :data:`PYTHON_RUNNER`).

    :param app_resource: the driver program, as a URL the worker reads (``file:`` or a presigned URL).
    :param app_args: the Python runner's arguments: the driver program, its py-files, its own flags.
    :param properties: the application's Spark properties.
    :param env: the driver's environment (the payload key, ``env_vars``, the store's credentials).
    """

    app_resource: str
    app_args: list[str]
    properties: dict[str, str]
    env: dict[str, str]


def stage_job(staging: Staging, payload: bytes) -> None:
    """
    Write what the driver needs into the staging directory: the payload, the runtime zip, the driver program.

    :param staging: the try's staging directory (created).
    :param payload: the signed payload.
    :raises OSError: a file cannot be written there.
    """
    staging.write_bytes(driver_program.PAYLOAD_FILE, payload)
    staging.write_bytes(RUNTIME_ZIP_NAME, runtime_zip())
    staging.write_bytes(DRIVER_FILE, Path(driver_program.__file__).read_bytes())


def driver_submission(
    staging: Staging,
    *,
    master_url: str,
    master_ui_url: str,
    name: str,
    np: int,
    conf: Mapping[str, str],
    env_vars: Mapping[str, str],
    key: bytes,
    artifact_dir: str,
    settings: JobSettings,
) -> DriverSubmission:
    """
    The ``create`` request of the job staged in ``staging`` (:func:`stage_job`).

    The runtime zip (and the user's ``spark.submit.pyFiles``) go in ``spark.files`` too: a REST submission, unlike
    spark-submit, does not ship py-files to the executors. From object storage, the worker downloads the driver
    program by a presigned URL and the driver fetches the runtime itself.

    :param staging: the try's staging directory.
    :param master_url: the master, ``spark://host:port``.
    :param master_ui_url: its web UI (where the driver reads the cluster's state).
    :param name: the Spark application name.
    :param np: number of Horovod processes.
    :param conf: the user's Spark properties; each wins over the provider's default.
    :param env_vars: environment variables for the driver and every rank.
    :param key: the payload's HMAC key, sent in the driver's environment only.
    :param artifact_dir: path/URI the ranks write model files under.
    :param settings: the job's knobs, sent to the driver program as its flags.
    :return: the request.
    :raises HorovodJobError: an object-store staging location cannot presign the driver program's URL.
    """
    args = [
        "--payload",
        staging.path(driver_program.PAYLOAD_FILE),
        "--result-dir",
        staging.uri,
        "--artifact-dir",
        artifact_dir,
        *settings.to_args(),
    ]
    properties = {
        **BASE_SPARK_CONF,
        "spark.master": master_url,
        "spark.app.name": name,
        "spark.submit.deployMode": "cluster",
        "spark.driver.supervise": "false",  # a relaunched driver would run a second copy of the training
        **conf,
    }
    # spark-submit turns --py-files into files the executors fetch; a REST submission does not, and the driver's
    # PySpark only puts spark.submit.pyFiles on the executors' path: the runtime (and the user's py-files) go in
    # spark.files too
    py_files = [p for p in properties.get("spark.submit.pyFiles", "").split(",") if p]
    if staging.is_local:
        py_files.append(staging.path(RUNTIME_ZIP_NAME))
        app_resource, driver_args = (
            Path(staging.path(DRIVER_FILE)).as_uri(),
            [staging.path(DRIVER_FILE), staging.path(RUNTIME_ZIP_NAME)],
        )
    else:
        # the worker downloads the driver program over HTTP(S) and substitutes its local copy for {{USER_JAR}};
        # the driver fetches the runtime itself (with the credentials below) and ships it to its executors
        app_resource = staging.signed_url(DRIVER_FILE)
        driver_args = ["{{USER_JAR}}", "", "--runtime", staging.path(RUNTIME_ZIP_NAME)]
    files = [p for p in properties.get("spark.files", "").split(",") if p]
    if py_files:
        properties["spark.submit.pyFiles"] = ",".join(dict.fromkeys(py_files))
        properties["spark.files"] = ",".join(dict.fromkeys(files + py_files))
    rank_env = {**staging.credentials, **env_vars}  # the store's credentials travel like env_vars
    env = {**rank_env, driver_program.KEY_ENV: key.hex()}
    if rank_env:
        env[RANK_ENV_NAMES] = ",".join(sorted(rank_env))
    properties = {
        **standalone_defaults(np, master_ui_url, properties),
        "spark.driver.extraJavaOptions": JVM_STARTUP_OPTIONS,
        **executor_jvm_conf(properties),
        **properties,
    }  # the user's conf wins over each default
    # the executors find the runtime zip in their working directory: from spark.files, or from the driver's
    # addPyFile when it fetched the zip from object storage itself (runner.py _ship_runtime)
    properties.update(python_daemon_conf(properties, RUNTIME_ZIP_NAME))
    return DriverSubmission(app_resource=app_resource, app_args=[*driver_args, *args], properties=properties, env=env)
