"""
The Spark driver program that the Airflow hook submits with ``spark-submit``.

``spark-submit [...] driver.py --payload FILE --result-dir DIR [--artifact-dir LOC] [--runtime ZIP] SETTINGS``,
where ``SETTINGS`` are the job's knobs as :meth:`~airflow_provider_horovod.runtime.settings.JobSettings.to_args`
writes them (``--np N --driver-log-verbosity V --gloo-timeout-s S ... [--use-gpu] [--timeline]``); the payload's
HMAC key comes in the environment variable ``HOROVOD_AIRFLOW_PAYLOAD_KEY`` (hex), never on the command line or in
Spark properties.

``--payload``, ``--result-dir`` and ``--runtime`` may be paths or fsspec URIs (object-store staging in cluster deploy
mode: the store's credentials come in the environment, e.g. ``AWS_*``). ``--runtime`` names the runtime zip when
nothing put it on this program's path: it is fetched and put on ``sys.path`` (the runner ships it to the executors).

It verifies the payload, runs it through :class:`~airflow_provider_horovod.runtime.driver.runner.BarrierRunner`, and
writes into ``--result-dir``:

- ``status.json`` as soon as the Spark application exists: ``{"app_id", "ui_url"}``;
- ``progress.json`` while the ranks ``report()``: the job's progress snapshot (the one in the artifact directory,
  :mod:`~airflow_provider_horovod.runtime.wire.progress_format`), which the Airflow side logs in cluster deploy mode;
- ``result.pkl``: rank 0's cloudpickled return value (on success); a pickled
  :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` when its pickle was larger than
  ``--max-return-value-bytes`` (rank 0 did not send it; the reader refuses it);
- ``result.json``: ``{"status": "success"|"failed", "app_id", "ui_url", "artifact_paths", "error", "message",
  "metrics"}`` (``metrics``: rank 0's last ``report()`` values), and for a lost executor or a job cancelled from
  outside ``"kind"`` (``"ExecutorLostError"``, ``"JobCancelledError"``) with its ``"facts"`` (the error's
  ``facts()``).

Exit status 0 on success, 1 when the job failed (``result.json`` says why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

STATUS_FILE = "status.json"
"""In the result directory: the application's id and UI URL, written once its SparkContext runs."""
RESULT_FILE = "result.json"
"""In the result directory: how the job ended (see above), written last."""
VALUE_FILE = "result.pkl"
"""In the result directory: rank 0's cloudpickled return value, on success."""
PAYLOAD_FILE = "payload.bin"
"""In the staging directory: the signed training payload the driver reads (``--payload``)."""
KEY_ENV = "HOROVOD_AIRFLOW_PAYLOAD_KEY"
APP_MARKER = "airflow-provider-horovod: Spark application"
AUTH_SECRET_ENV, AUTH_SECRET_CONF = "_SPARK_AUTH_SECRET", "spark.authenticate.secret"


def _with_auth_secret(builder: Any) -> Any:
    """
    ``builder`` with ``spark.authenticate.secret`` from ``_SPARK_AUTH_SECRET``, where a standalone worker put it: it
    keeps the secret off a cluster-mode driver's command line, but the driver's SparkContext wants it in its conf.
    """
    secret = os.environ.get(AUTH_SECRET_ENV)  # the secret Spark's SecurityManager itself prefers to the conf's
    return builder.config(AUTH_SECRET_CONF, secret) if secret else builder


def _is_uri(location: str) -> bool:
    """
    An fsspec URI other than ``file://`` (object storage), as opposed to a local or shared-filesystem path.

    The same test as ``runtime.artifacts.is_remote`` (and :func:`_join` as its ``join_location``), written out
    here: it runs before the runtime is importable.
    """
    scheme = location.split("://", 1)[0] if "://" in location else ""
    return len(scheme) > 1 and scheme != "file"


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}" if _is_uri(location) else os.path.join(location, name)


def _read_bytes(location: str) -> bytes:
    if _is_uri(location):
        import fsspec

        with fsspec.open(location, "rb") as f:
            return f.read()
    return Path(location).read_bytes()


def _write_bytes(location: str, data: bytes) -> None:
    if _is_uri(location):  # one PUT: readers see the whole object or none
        import fsspec

        with fsspec.open(location, "wb") as f:
            f.write(data)
        return
    tmp = f"{location}.tmp"
    Path(tmp).write_bytes(data)
    os.replace(tmp, location)


def _write_json(location: str, data: dict) -> None:
    _write_bytes(location, json.dumps(data).encode())


def _fetch_runtime(location: str) -> None:
    """Copy the runtime zip into this driver's working directory and put it on ``sys.path``."""
    local = os.path.abspath(os.path.basename(location.rstrip("/")) or "runtime.zip")
    Path(local).write_bytes(_read_bytes(location))
    sys.path.insert(0, local)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """
    The flags this program needs before the runtime is importable; the rest are the job's settings, read by
    :meth:`~airflow_provider_horovod.runtime.settings.JobSettings.from_args` once it is.
    """
    p = argparse.ArgumentParser(prog="airflow-provider-horovod-driver", allow_abbrev=False)
    p.add_argument("--payload", required=True)
    p.add_argument("--result-dir", required=True)
    p.add_argument("--artifact-dir")
    p.add_argument("--runtime", help="the runtime zip to fetch and ship to the executors (path or URI)")
    return p.parse_known_args(argv)


def _settings(rest: list[str]):  # -> JobSettings
    """
    The job's settings from the remaining flags.

    :raises ValueError: a flag this program does not know, a value it cannot read, or a setting out of range.
    """
    from airflow_provider_horovod.runtime.settings import JobSettings

    p = argparse.ArgumentParser(prog="airflow-provider-horovod-driver", allow_abbrev=False, exit_on_error=False)
    JobSettings.add_arguments(p)
    try:
        namespace, unknown = p.parse_known_args(rest)
    except argparse.ArgumentError as err:
        raise ValueError(f"driver program flags: {err}") from None
    if unknown:
        raise ValueError(f"driver program flags: unrecognized {unknown}")
    return JobSettings.from_args(namespace)


WHICH_PYTHON = (
    "Spark starts the driver's Python from spark.pyspark.driver.python, else spark.pyspark.python, else "
    "PYSPARK_DRIVER_PYTHON / PYSPARK_PYTHON in the environment of what launches the driver: the Airflow task in "
    "client deploy mode, but a Spark worker in cluster deploy mode, which a PYSPARK_PYTHON set on the Airflow side "
    "does not reach. Set conf={'spark.pyspark.python': '/path/to/python'} on the operator: an interpreter with the "
    "Airflow worker's Python major.minor and cloudpickle version (and Horovod, for the executors) on every machine"
)
"""Where the driver's (and executors') interpreter comes from; appended to version and import errors here."""


JVM_GONE_HINT = (
    "The JVM ends on a java.lang.OutOfMemoryError (the provider's JVMs start with -XX:+ExitOnOutOfMemoryError) or "
    "when the driver is killed; after an OutOfMemoryError raise spark.driver.memory, or return less from rank 0 "
    "(its value crosses the driver's JVM memory; max_return_value_bytes)"
)
"""What a job whose driver JVM went away is told, after the error its Python driver program saw."""


def _jvm_gone(err: BaseException | None) -> bool:
    """
    Whether ``err`` (or an exception it was raised from or during) says the driver's JVM is gone: a refused or
    reset connection to it, or Py4J's network error.

    :param err: what the driver program caught.
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConnectionError) or type(err).__name__ == "Py4JNetworkError":
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def advertised_ui_url(ui_url: str | None, driver_host: str | None) -> str | None:
    """
    The Spark UI URL with an address instead of ``localhost``.

    Spark names the UI after the canonical name of the driver's address, which is ``localhost`` when Spark is
    bound to loopback (``SPARK_LOCAL_IP=127.0.0.1``): a name that means another machine to every other machine.
    The driver's host (``spark.driver.host``, the address executors reach the driver at) is advertised instead,
    as an address.

    :param ui_url: ``SparkContext.uiWebUrl`` (``None`` when the UI is off).
    :param driver_host: ``spark.driver.host``.
    :return: the URL, its host replaced by the driver host's address when it was ``localhost``.
    """
    import socket
    from urllib.parse import urlsplit

    if not ui_url:
        return ui_url
    parts = urlsplit(ui_url)
    if parts.hostname not in ("localhost", "localhost.localdomain"):
        return ui_url
    try:
        address = socket.gethostbyname(driver_host or "localhost")
    except OSError:
        address = "127.0.0.1"
    return parts._replace(netloc=f"{address}:{parts.port}" if parts.port else address).geturl()


def main(argv: list[str] | None = None) -> int:
    """Run the job described by the command line; see the module docstring."""
    args, rest = _parse(sys.argv[1:] if argv is None else argv)
    result_dir = args.result_dir
    outcome: dict = {
        "status": "failed",
        "app_id": None,
        "ui_url": None,
        "artifact_paths": [],
        "error": None,
        "message": None,
        "metrics": {},
    }
    runner = None
    try:
        if args.runtime:  # the runner ships it on to the executors (runtime_zip)
            _fetch_runtime(args.runtime)
        from airflow_provider_horovod.runtime.artifacts import ensure_dir, list_artifacts
        from airflow_provider_horovod.runtime.driver.restarts import told
        from airflow_provider_horovod.runtime.driver.runner import BarrierRunner
        from airflow_provider_horovod.runtime.errors import ExecutorLostError, JobCancelledError, PayloadError
        from airflow_provider_horovod.runtime.rank_errors import RankFailedError
        from airflow_provider_horovod.runtime.wire.payload import verify_payload
        from airflow_provider_horovod.runtime.wire.protocol import RANK_ENV_NAMES
    except (ImportError, OSError) as err:  # e.g. no cloudpickle, pyspark or s3fs in the driver's interpreter
        outcome["message"] = (
            f"the Spark driver's Python {sys.executable} cannot load the runtime: "
            f"{type(err).__name__}: {err}. {WHICH_PYTHON}"
        )
        _write_json(_join(result_dir, RESULT_FILE), outcome)
        print(f"airflow-provider-horovod: {outcome['message']}", file=sys.stderr, flush=True)
        return 1
    spark = None
    try:
        key_hex = os.environ.pop(KEY_ENV, None)
        payload = _read_bytes(args.payload)
        settings = _settings(rest)
        verify_payload(payload, key=bytes.fromhex(key_hex) if key_hex else None)
        print(
            f"airflow-provider-horovod: payload verified ({len(payload)} bytes"
            f"{', HMAC ok' if key_hex else ''}); np={settings.np}",
            flush=True,
        )
        names = [n for n in os.environ.get(RANK_ENV_NAMES, "").split(",") if n]
        runner = BarrierRunner(
            settings, artifact_dir=args.artifact_dir, env={n: os.environ[n] for n in names if n in os.environ}
        )
        if args.artifact_dir:
            ensure_dir(args.artifact_dir)
        if settings.np > 0:
            from pyspark.sql import SparkSession

            spark = _with_auth_secret(SparkSession.builder).getOrCreate()
            sc = spark.sparkContext
            ui_url = advertised_ui_url(sc.uiWebUrl, sc.getConf().get("spark.driver.host", None))
            outcome["app_id"], outcome["ui_url"] = sc.applicationId, ui_url
            _write_json(_join(result_dir, STATUS_FILE), {"app_id": sc.applicationId, "ui_url": ui_url})
            print(f"{APP_MARKER} {sc.applicationId} started; UI {ui_url or '-'}", flush=True)
        result = runner.run_payload(payload, progress_mirror=result_dir)
        if result is not None:
            _write_bytes(_join(result_dir, VALUE_FILE), result)
        outcome["status"] = "success"
        return 0
    except RankFailedError as err:
        outcome["error"], outcome["message"] = err.to_dict(), told(err)
        print(f"airflow-provider-horovod: the job failed: {str(err).splitlines()[0]}", file=sys.stderr, flush=True)
        return 1
    except PayloadError as err:
        outcome["message"] = f"{type(err).__name__}: {err}"
        if "was written with" in str(err):  # another Python or cloudpickle than the Airflow worker's
            outcome["message"] += f". {WHICH_PYTHON}"
        print(f"airflow-provider-horovod: {outcome['message']}", file=sys.stderr, flush=True)
        return 1
    except Exception as err:
        outcome["message"] = f"{type(err).__name__}: {told(err)}"
        if isinstance(err, ExecutorLostError | JobCancelledError):  # the Airflow side raises its twin, with the facts
            outcome["kind"], outcome["facts"], outcome["message"] = type(err).__name__, err.facts(), told(err)
        if _jvm_gone(err):
            outcome["message"] = (
                f"the Spark driver's JVM ended while the job ran ({outcome['message']}); the "
                f"lines before it say why. {JVM_GONE_HINT}"
            )
        outcome["traceback"] = traceback.format_exc()
        traceback.print_exc()
        return 1
    finally:
        if runner is not None:
            outcome["metrics"] = runner.last_metrics
            outcome["restarts"] = [r.to_dict() for r in runner.restarts]
        if args.artifact_dir:
            try:
                outcome["artifact_paths"] = list_artifacts(args.artifact_dir)
            except Exception as err:  # listing must not hide the job's own outcome
                print(f"airflow-provider-horovod: cannot list {args.artifact_dir}: {err}", file=sys.stderr)
        _write_json(_join(result_dir, RESULT_FILE), outcome)
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
