"""
What every submission path shares about the Spark master and the Spark properties.

The reachability check of a ``spark://`` master (fail in seconds, not after Spark's retries), the embedded
``local[np]`` master's properties, the properties set on every submission, and the Spark driver's log4j2 file.
Used by the client-mode hook (:mod:`airflow_provider_horovod.hooks.horovod`) and the standalone cluster-mode hook
(:mod:`airflow_provider_horovod.standalone.hook`). No I/O at import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from airflow_provider_horovod.exceptions import HorovodJobError

MASTER_CONNECT_TIMEOUT_S = 5.0
"""Seconds a TCP connect to the Spark master may take before the submission is refused as unreachable."""


def master_addresses(master: str) -> list[tuple[str, int]]:
    """
    The ``(host, port)`` pairs of a ``spark://`` master URL (several for a standby-master list).

    :param master: e.g. ``spark://master:7077`` or ``spark://m1:7077,m2:7077``.
    :return: the addresses (port 7077 where none is given); ``[]`` for other masters (``local``, ``yarn``,
        ``k8s://...``), which are not checked.
    """
    if not master.startswith("spark://"):
        return []
    found = []
    for part in master.removeprefix("spark://").strip("/").split(","):
        host, _, port = part.strip().rpartition(":") if ":" in part else (part.strip(), "", "7077")
        found.append((host.strip("[]"), int(port) if port.isdigit() else 7077))
    return found


def check_reachable(
    url: str,
    addresses: list[tuple[str, int]],
    *,
    what: str = "Spark master",
    timeout_s: float = MASTER_CONNECT_TIMEOUT_S,
    hint: str = "",
) -> None:
    """
    Fail at once when no address of ``url`` accepts a TCP connection (rather than after Spark's own retries).

    :param url: the URL as the user configured it (named in the message).
    :param addresses: its ``(host, port)`` pairs; one that answers is enough.
    :param what: what ``url`` is, for the message.
    :param timeout_s: seconds each connect may take.
    :param hint: appended to the message.
    :raises HorovodJobError: ``cannot reach <what> <url> (host:port: reason)``.
    """
    import socket

    errors = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as err:
            errors.append(f"{host}:{port}: {err.strerror or type(err).__name__}")
    if errors:
        raise HorovodJobError(f"cannot reach {what} {url} ({'; '.join(errors)}). {hint}".rstrip())


def local_spark_conf(np: int) -> dict[str, str]:
    """
    Spark properties for the embedded ``local[np]`` master: executors use this interpreter and Spark binds to
    127.0.0.1 (user ``conf`` overrides any of them).

    :param np: the number of ranks (``local[np]``).
    """
    return {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


BASE_SPARK_CONF: dict[str, str] = {
    # The driver waits for the barrier stage's slots before submitting it (slot_wait_timeout_s,
    # runtime/driver/slots.py); Spark's own check then only covers executors lost in between: it gives up after
    # interval x maxFailures.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "5s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "6",
    "spark.ui.showConsoleProgress": "false",
    # The progress lines read the live UI's REST API. By default Spark writes a stage's live counts at most every
    # 100 ms and otherwise only at the next executor heartbeat (10 s): two barrier tasks starting within 100 ms
    # showed as "1/2 tasks launched" for up to 10 s. A barrier job has a handful of task events: write each.
    "spark.ui.liveUpdate.period": "0ms",
    "spark.executorEnv.PYTHONUNBUFFERED": "1",
}
"""Properties set on every submission unless the user's ``conf`` sets them."""

JVM_STARTUP_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+ExitOnOutOfMemoryError"
"""
JVM options for the Spark driver and executors of the provider's own applications.

``-XX:TieredStopAtLevel=1``: compile with the client (C1) JIT only. Those JVMs only schedule one barrier stage and
relay Python output (the training runs in the rank processes), so the optimizing JIT never pays back its compile
threads, which compete with the ranks for cores while the JVMs start. Measured ad hoc on a 2-core machine, with and
without it: a waiting job's executors registered 4.6 -> 2.8 s after the holding job returned (B5's set-up; its ranks
7.1 -> 5.0 s), and a small client-mode spark-submit ended in 10.6 -> 9.0 s.

``-XX:+ExitOnOutOfMemoryError``: a JVM out of memory exits instead of living on with the thread that died: a driver
whose result thread ran out of memory kept the job, and the Airflow task, waiting for minutes with every rank done.

``docs/how-it-works.md`` says where each option is set and how to turn it off.
"""


def spark_defaults_keys() -> set[str]:
    """
    The properties the ``spark-defaults.conf`` of this machine's ``spark-submit`` sets (``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, else PySpark's own ``conf``); empty when there is none.
    """
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        if not home:
            import importlib.util

            spec = importlib.util.find_spec("pyspark")
            home = os.path.dirname(spec.origin) if spec and spec.origin else ""
        conf_dir = os.path.join(home, "conf") if home else ""
    path = os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else ""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    keys = set()
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            keys.add(line.replace("=", " ", 1).split(None, 1)[0])
    return keys


def executor_jvm_conf(conf: Mapping[str, Any], preset: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """
    ``spark.executor.extraJavaOptions`` = :data:`JVM_STARTUP_OPTIONS`, unless the application's ``conf`` or the
    cluster's defaults (``preset``, e.g. :func:`spark_defaults_keys`) already set executor JVM options, which it
    would replace. A user turns it off with ``conf={"spark.executor.extraJavaOptions": ""}``.

    :param conf: the application's properties.
    :param preset: properties set elsewhere that a submitted ``--conf`` would override.
    :return: the property to add, or ``{}``.
    """
    key = "spark.executor.extraJavaOptions"
    return {} if key in conf or key in preset else {key: JVM_STARTUP_OPTIONS}


PYTHON_DAEMON_MODULE = "airflow_provider_horovod.runtime.task.pyspark_daemon"
"""
The Python daemon module the provider's applications start
(:mod:`airflow_provider_horovod.runtime.task.pyspark_daemon`).
"""


def python_daemon_conf(
    conf: Mapping[str, Any], runtime_path: str, preset: set[str] | frozenset[str] = frozenset()
) -> dict[str, str]:
    """
    Start the application's Python daemons through :data:`PYTHON_DAEMON_MODULE`, which imports PySpark compiled
    (from the interpreter's site-packages, same version) rather than from Spark's source-only ``pyspark.zip``: about
    0.6 s less before the ranks of a job on fresh executors start (``docs/how-it-works.md``).

    The module comes in the runtime zip, so the daemon's ``PYTHONPATH`` (``spark.executorEnv.PYTHONPATH``) gets the
    zip's path appended. Left alone when ``conf`` sets ``spark.python.daemon.module`` itself or turns the daemon off
    (``spark.python.use.daemon=false``), or when ``preset`` has either property or ``spark.executorEnv.PYTHONPATH``
    (a submitted ``--conf`` would replace the cluster's value); a user turns it off with
    ``conf={"spark.python.daemon.module": "pyspark.daemon"}``.

    :param conf: the application's properties.
    :param runtime_path: where the daemon finds the runtime zip: its absolute path for a ``local`` master (the
        daemon runs beside the driver), else its file name
        (:data:`~airflow_provider_horovod.runtime.driver.shipping.RUNTIME_ZIP_NAME`): Spark fetches
        ``--py-files`` and ``spark.files`` into each executor's working directory, where the daemon starts.
    :param preset: properties set elsewhere that a submitted ``--conf`` would override (:func:`spark_defaults_keys`).
    :return: the properties to set over ``conf``'s (``spark.executorEnv.PYTHONPATH`` keeps ``conf``'s entries first),
        or ``{}``.
    """
    if {"spark.python.daemon.module", "spark.python.use.daemon", "spark.executorEnv.PYTHONPATH"} & set(preset):
        return {}
    if "spark.python.daemon.module" in conf or str(conf.get("spark.python.use.daemon", "true")).lower() == "false":
        return {}
    path = [p for p in str(conf.get("spark.executorEnv.PYTHONPATH", "")).split(os.pathsep) if p]
    return {
        "spark.python.daemon.module": PYTHON_DAEMON_MODULE,
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys([*path, runtime_path])),
    }


SPARK_LOG4J2 = """\
# Written by airflow-provider-horovod for the Spark driver: Spark at {level}, training output untouched.
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# SparkSubmitHook reads driver ids from these in standalone cluster mode.
logger.deploy.name = org.apache.spark.deploy
logger.deploy.level = info
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
# A failed barrier task's Python exception would be printed here by the executor and again by the scheduler;
# the provider reports the failing rank once, in the task's error.
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasksetmanager.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksetmanager.level = off
# A monitoring request still in flight while the driver's web UI stops at the end of the job: Jersey logs the
# connection Jetty closed (EofException) as an error with a stack trace of some 80 lines. It only ever concerns
# writing an HTTP response.
logger.jerseyresponder.name = org.glassfish.jersey.server.ServerRuntime$Responder
logger.jerseyresponder.level = off
"""
