"""
``make up`` / ``make down``: a local deployment to watch the example DAGs in Airflow's UI, all on 127.0.0.1.

``up`` starts, in one background supervisor process (``serve``), a Spark standalone master with one worker, a Spark
History Server, and Airflow's api-server, scheduler, dag-processor and triggerer (LocalExecutor, SQLite) serving
``example_dags/``, with the connection ``spark_default`` on that master (client deploy mode) and event logs on, then
prints the UI's URL and login. ``down`` stops the supervisor, which stops everything it started, and then kills
whatever still carries this deployment's mark in its environment. The pieces are the test harness's
(``tests/airflow_deployment.py``, ``tests/standalone.py``, ``tests/history_server.py``).

Ports (environment variables, defaults): ``HOROVOD_UP_API_PORT`` 8080 (the UI, the REST and the Execution API),
``HOROVOD_UP_SPARK_MASTER_PORT`` 7077, ``HOROVOD_UP_SPARK_MASTER_UI_PORT`` 8081, ``HOROVOD_UP_SPARK_REST_PORT``
6066, ``HOROVOD_UP_HISTORY_PORT`` 18080, ``HOROVOD_UP_SPARK_UI_PORT`` 4040 (the first driver's live UI; Spark
takes the next free port for a second one). State, logs and the Airflow home: ``HOROVOD_UP_HOME`` (``.airflow-up``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
HOME = Path(os.environ.get("HOROVOD_UP_HOME", REPO / ".airflow-up")).resolve()
MARK = "HOROVOD_UP_MARK"
PORTS = {
    "HOROVOD_UP_API_PORT": 8080,
    "HOROVOD_UP_SPARK_MASTER_PORT": 7077,
    "HOROVOD_UP_SPARK_MASTER_UI_PORT": 8081,
    "HOROVOD_UP_SPARK_REST_PORT": 6066,
    "HOROVOD_UP_HISTORY_PORT": 18080,
    "HOROVOD_UP_SPARK_UI_PORT": 4040,
}
PID_FILE, READY_FILE, LOG_FILE = HOME / "up.pid", HOME / "ready.json", HOME / "up.log"


def port(name: str) -> int:
    return int(os.environ.get(name, PORTS[name]))


def _busy(number: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", number)) == 0


def serve() -> None:
    """Start everything, write ``ready.json``, and hold it all until SIGTERM; the context managers stop it."""
    from tests.airflow_deployment import airflow_deployment
    from tests.history_server import history_server
    from tests.standalone import standalone_cluster

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    events, spark_conf = HOME / "spark-events", HOME / "spark-conf"
    spark_conf.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            standalone_cluster(
                workers=1,
                cores_per_worker=3,
                memory_per_worker="3g",
                work_dir=HOME / "spark",
                start_timeout_s=180,
                ports=(
                    port("HOROVOD_UP_SPARK_MASTER_PORT"),
                    port("HOROVOD_UP_SPARK_MASTER_UI_PORT"),
                    port("HOROVOD_UP_SPARK_REST_PORT"),
                ),
            )
        )
        history = stack.enter_context(history_server(events, port=port("HOROVOD_UP_HISTORY_PORT")))
        # what spark-submit on the Airflow side reads: event logs for the history server, the drivers' UI port
        (spark_conf / "spark-defaults.conf").write_text(
            f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
            f"spark.ui.port {port('HOROVOD_UP_SPARK_UI_PORT')}\n"
        )
        connection = json.loads(cluster.airflow_connection(deploy_mode="client"))
        connection["extra"]["spark.airflowProviderHorovod.historyServerUrl"] = history.url
        airflow = stack.enter_context(
            airflow_deployment(
                REPO / "example_dags",
                home=HOME / "airflow",
                port=port("HOROVOD_UP_API_PORT"),
                start_timeout_s=300,
                extra_env={
                    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(connection),
                    "SPARK_CONF_DIR": str(spark_conf),
                    "AIRFLOW__HOROVOD__HISTORY_SERVER_URL": history.url,
                    "AIRFLOW__API_AUTH__JWT_EXPIRATION_TIME": "86400",
                },
            )
        )
        username, password = next(
            iter(json.loads((airflow.home / "simple_auth_manager_passwords.json.generated").read_text()).items())
        )
        READY_FILE.write_text(
            json.dumps(
                {
                    "url": airflow.url,
                    "username": username,
                    "password": password,
                    "spark_master": cluster.master_url,
                    "spark_master_ui": cluster.web_ui_url,
                    "history_server": history.url,
                    "spark_ui_port": port("HOROVOD_UP_SPARK_UI_PORT"),
                    "airflow_home": str(airflow.home),
                }
            )
        )
        while not stop.wait(2):
            airflow._check_alive()
    READY_FILE.unlink(missing_ok=True)


def up(timeout_s: float = 420) -> int:
    """Start the supervisor in the background; wait until it is ready or has failed; print what to open."""
    if PID_FILE.exists() and psutil.pid_exists(int(PID_FILE.read_text())):
        print(f"up: already running (pid {PID_FILE.read_text().strip()}); `make down` stops it", file=sys.stderr)
        return 1
    busy = [f"{name}={port(name)}" for name in PORTS if _busy(port(name))]
    if busy:
        print(f"up: ports in use on 127.0.0.1: {', '.join(busy)}; set those variables to free ports", file=sys.stderr)
        return 1
    HOME.mkdir(parents=True, exist_ok=True)
    READY_FILE.unlink(missing_ok=True)
    # the Airflow task's interpreter for the driver and (client mode: through the driver) the executors
    env = {
        **os.environ,
        MARK: uuid.uuid4().hex,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with open(LOG_FILE, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, __file__, "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
    PID_FILE.write_text(str(proc.pid))
    (HOME / "mark").write_text(env[MARK])
    started, deadline = time.monotonic(), time.monotonic() + timeout_s
    print(f"up: starting Spark (master + 1 worker), a history server and Airflow (log: {LOG_FILE}) ...")
    while not READY_FILE.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print(
                f"up: failed to start; the end of {LOG_FILE}:\n" + LOG_FILE.read_text(errors="replace")[-4000:],
                file=sys.stderr,
            )
            down()
            return 1
        time.sleep(1)  # waiting for the supervisor's ready file, bounded by the deadline
    ready = json.loads(READY_FILE.read_text())
    print(f"""up: ready in {time.monotonic() - started:.0f} s
  Airflow UI        {ready["url"]}   login {ready["username"]} / {ready["password"]}
  Spark master      {ready["spark_master"]} (web UI {ready["spark_master_ui"]}); connection spark_default
  History Server    {ready["history_server"]}; a running driver's Spark UI: http://127.0.0.1:{ready["spark_ui_port"]}
  Example DAGs      {REPO / "example_dags"}: unpause and trigger one; the train task's "Training progress" tab
  AIRFLOW_HOME      {ready["airflow_home"]}
`make down` stops everything.""")
    return 0


def down(timeout_s: float = 90) -> int:
    """Stop the supervisor (it stops what it started), then kill any process still carrying the mark."""
    mark = (HOME / "mark").read_text().strip() if (HOME / "mark").exists() else None
    if PID_FILE.exists():
        with contextlib.suppress(psutil.NoSuchProcess, ValueError):
            supervisor = psutil.Process(int(PID_FILE.read_text()))
            supervisor.terminate()
            try:
                supervisor.wait(timeout=timeout_s)
            except psutil.TimeoutExpired:
                supervisor.kill()
    left = []
    for proc in psutil.process_iter(["environ"]):
        with contextlib.suppress(psutil.Error):
            if mark and (proc.info.get("environ") or {}).get(MARK) == mark and proc.pid != os.getpid():
                left.append(proc)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=10)
    for path in (PID_FILE, READY_FILE, HOME / "mark"):
        path.unlink(missing_ok=True)
    print("down: stopped" + (f"; killed {len(left)} process(es) the supervisor left" if left else ""))
    return 0


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    if command == "serve":
        serve()
        sys.exit(0)
    sys.exit({"up": up, "down": down}[command]())
