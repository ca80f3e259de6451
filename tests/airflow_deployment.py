"""
A real Airflow deployment for tests: api-server, scheduler, dag-processor and triggerer on 127.0.0.1.

``airflow dags test`` runs a whole DAG in one process. A real deployment differs in ways that matter to this
provider: the LocalExecutor's worker supervises a separate task process that parses the DAG file under a module
name like ``unusual_prefix_<sha1>_<file>`` and talks to the api-server's Execution API; failures reach the task
log through the supervisor; retries, heartbeats and triggers run as in production. Use this harness for
behaviour that ``dags test`` could mask::

    with airflow_deployment(dags_folder) as airflow:     # ~30-45 s on 2 cores: once per test module
        run_id = airflow.trigger("my_dag")
        assert airflow.wait_for_run("my_dag", run_id, timeout_s=300) == "success"
        airflow.task_states("my_dag", run_id)            # {"train": "success", ...}
        airflow.xcom("my_dag", run_id, "train")          # the return_value XCom
        airflow.task_log("my_dag", run_id, "train")      # the task log as text

The components run from this interpreter's virtualenv (``bin`` on ``PATH``) with LocalExecutor and SQLite in a
fresh ``AIRFLOW_HOME``; the api-server listens on 127.0.0.1 on a free port, the log servers are off (the
api-server reads task logs from the local files), and Spark binds to 127.0.0.1. The REST API is used with a
bearer token from ``POST /auth/token`` and the simple auth manager's generated admin password. On exit every
process of the deployment (task processes run in their own process group, Spark JVMs and Horovod ranks below
them) is stopped and checked gone.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.conftest import VENV_BIN, airflow_env

DEPLOYMENT_MARK = "APH_AIRFLOW_DEPLOYMENT"
"""Environment variable carrying the deployment's id; every process it starts inherits it."""

COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
"""The four components of ``airflow standalone``, started one by one so nothing listens beyond 127.0.0.1
(``airflow standalone`` starts the scheduler's and triggerer's log servers on every interface)."""

FINISHED_RUN_STATES = {"success", "failed"}
FINISHED_TASK_STATES = {"success", "failed", "skipped", "upstream_failed", "removed"}


class DeploymentError(RuntimeError):
    """The deployment did not start or did not answer as expected; the message carries the components' logs."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def copy_dags(folder: Path, *files: Path) -> Path:
    """Copy DAG files (and helper modules) into ``folder`` (created); return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, folder / Path(path).name)
    return folder


def api_epoch(timestamp: str) -> float:
    """
    A date of Airflow's REST API or task log (ISO 8601, ``Z`` for UTC) as seconds since the epoch.

    :param timestamp: e.g. ``2026-12-07T13:19:02.125Z``.
    """
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _poll(
    what: str,
    check: Callable[[], Any],
    timeout_s: float,
    interval_s: float = 1.0,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    """Call ``check`` until it returns something truthy, for at most ``timeout_s``; return that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = on_timeout() if on_timeout else ""
            raise DeploymentError(f"timed out after {timeout_s:.0f} s waiting for {what}{detail}")
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


class AirflowDeployment:
    """
    A running deployment; create it with :func:`airflow_deployment`.

    :ivar home: the ``AIRFLOW_HOME`` (SQLite database, task logs under ``logs/``, components' output under
        ``components/``).
    :ivar url: the api-server's base URL, ``http://127.0.0.1:<port>``.
    :ivar env: the environment every component runs with.
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        *,
        extra_env: Mapping[str, str] | None = None,
        components: Iterable[str] = tuple(COMPONENTS),
        port: int | None = None,
        prepare: Iterable[Iterable[str]] = (),
    ) -> None:
        self.home = Path(home)
        self.prepare = [list(args) for args in prepare]
        self.dags_folder = Path(dags_folder)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.mark = uuid.uuid4().hex
        self.components = list(components)
        self.env = {
            **airflow_env(self.home, self.dags_folder),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",  # new files are seen within 5 s
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",  # no periodic re-parse of unchanged files
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "SPARK_LOCAL_IP": "127.0.0.1",
            DEPLOYMENT_MARK: self.mark,
            **(extra_env or {}),
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self._client = httpx.Client(base_url=self.url, timeout=30)
        self._token: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 240) -> None:
        """
        Migrate the database, run the ``prepare`` commands, start the components, wait until
        ``/api/v2/monitor/health`` says all are healthy.
        """
        (self.home / "components").mkdir(parents=True, exist_ok=True)
        for args in (["db", "migrate"], *self.prepare):
            done = subprocess.run(
                [str(VENV_BIN / "airflow"), *args],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=300,
                cwd=self.home,
            )
            if done.returncode != 0:
                raise DeploymentError(f"airflow {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        for name in self.components:
            args = [a.format(port=self.port) for a in COMPONENTS[name]]
            with open(self.home / "components" / f"{name}.log", "wb") as out:
                self.procs[name] = subprocess.Popen(
                    [str(VENV_BIN / "airflow"), *args],
                    env=self.env,
                    cwd=self.home,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
        _poll("the deployment to report healthy", self._healthy, timeout_s, on_timeout=self.diagnostics)

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise DeploymentError(f"airflow {name} exited with status {proc.returncode}{self.diagnostics()}")

    def _healthy(self) -> bool:
        self._check_alive()
        try:
            response = self._client.get("/api/v2/monitor/health")
        except httpx.TransportError:
            return False
        if response.status_code != 200:
            return False
        health = response.json()
        wanted = ["metadatabase"] + [n.replace("-", "_") for n in self.components if n != "api-server"]
        return all((health.get(part) or {}).get("status") == "healthy" for part in wanted)

    def diagnostics(self, lines: int = 40) -> str:
        """The last lines of every component's output, for failure messages."""
        parts = []
        for name in self.components:
            path = self.home / "components" / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"\n--- airflow {name} (last {lines} lines) ---\n" + "\n".join(text.splitlines()[-lines:]))
        return "".join(parts)

    def processes(self) -> list[psutil.Process]:
        """Every live process of this deployment: the components, their descendants, and anything marked."""
        found: dict[int, psutil.Process] = {}
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(proc.pid)
                for p in [parent, *parent.children(recursive=True)]:
                    found[p.pid] = p
        for p in psutil.process_iter(["environ"]):
            with contextlib.suppress(psutil.Error):
                if (p.info.get("environ") or {}).get(DEPLOYMENT_MARK) == self.mark:
                    found.setdefault(p.pid, p)
        return [p for p in found.values() if p.pid != os.getpid()]

    def listening(self) -> list[tuple[str, int, int, str]]:
        """``(address, port, pid, command)`` of every listening TCP socket of the deployment's processes."""
        found = []
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                for conn in proc.net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        found.append((conn.laddr.ip, conn.laddr.port, proc.pid, " ".join(proc.cmdline())[:100]))
        return found

    def stop(self, timeout_s: float = 15) -> None:
        """Stop every process of the deployment (SIGTERM, then SIGKILL) and check none is left."""
        self._client.close()
        tree = self.processes()
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _gone, alive = psutil.wait_procs(tree, timeout=timeout_s)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        left = [p for p in self.processes() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if left:
            raise DeploymentError(
                "processes of the Airflow deployment left behind: "
                + ", ".join(f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left)
            )

    # --- REST API ------------------------------------------------------------------------------------------------

    def login(self, username: str | None = None) -> str:
        """
        A new bearer token of ``username`` (default: ``admin`` if the simple auth manager has it, else its first
        user), with the password it generated.

        :param username: a user of ``[core] simple_auth_manager_users``.
        :raises DeploymentError: no such user.
        """
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        username = username or ("admin" if "admin" in passwords else next(iter(passwords)))
        if username not in passwords:
            raise DeploymentError(f"no user {username!r} in the simple auth manager (users: {sorted(passwords)})")
        response = self._client.post("/auth/token", json={"username": username, "password": passwords[username]})
        response.raise_for_status()
        return response.json()["access_token"]

    def token(self) -> str:
        """A bearer token of the generated admin user (also good as the UI's ``_token`` session cookie)."""
        if self._token is None:
            self._token = self.login()
        return self._token

    def api(self, method: str, path: str, *, expect: Iterable[int] = (200,), **kwargs: Any) -> httpx.Response:
        """
        Call the REST API (``path`` like ``/api/v2/dags``) with a bearer token (renewed on 401); a ``GET`` that
        times out is tried up to twice more.

        :raises DeploymentError: the status is not in ``expect``; the message has the response body.
        """
        extra_headers = kwargs.pop("headers", {})
        renewed, timeouts = False, 0
        while True:
            if self._token is None:
                self._token = self.login()
            headers = {"Authorization": f"Bearer {self._token}", **extra_headers}
            try:
                response = self._client.request(method, path, headers=headers, **kwargs)
            except httpx.TimeoutException:
                # a loaded machine (2 cores shared with Spark) can stall the api-server past the client's timeout:
                # reads are retried, a write is not (it may have been applied)
                timeouts += 1
                if method.upper() != "GET" or timeouts > 2:
                    raise
                continue
            if response.status_code == 401 and not renewed:
                renewed, self._token = True, None
                continue
            break
        if response.status_code not in tuple(expect):
            raise DeploymentError(f"{method} {path} answered {response.status_code}: {response.text[:2000]}")
        return response

    def unpause(self, dag_id: str, timeout_s: float = 120) -> None:
        """Unpause ``dag_id``, retrying while the dag-processor has not parsed its file yet."""

        def attempt() -> bool:
            self._check_alive()
            response = self.api("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False}, expect=(200, 404))
            return response.status_code == 200

        _poll(f"DAG {dag_id!r} to be parsed (unpause)", attempt, timeout_s, on_timeout=self._import_errors)

    def _import_errors(self) -> str:
        try:
            errors = self.api("GET", "/api/v2/importErrors").json().get("import_errors", [])
        except Exception as err:  # noqa: BLE001 - diagnostics only
            return f"\n(import errors unavailable: {err})"
        text = "".join(f"\n--- import error in {e.get('filename')}:\n{e.get('stack_trace')}" for e in errors)
        return (text or "\n(no import errors)") + self.diagnostics(lines=20)

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None, *, timeout_s: float = 120) -> str:
        """Unpause ``dag_id`` (waiting for it to be parsed) and start a run; return its run id."""
        self.unpause(dag_id, timeout_s=timeout_s)
        response = self.api(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": dict(conf or {})}
        )
        return response.json()["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json().get("state")

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        """Wait until the run is ``success`` or ``failed``; return that state."""

        def finished() -> str | None:
            self._check_alive()
            state = self.run_state(dag_id, run_id)
            return state if state in FINISHED_RUN_STATES else None

        return _poll(
            f"run {run_id} of {dag_id!r} to finish",
            finished,
            timeout_s,
            interval_s=2,
            on_timeout=lambda: f"; task states: {self.task_states(dag_id, run_id)}{self.diagnostics(20)}",
        )

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        response = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
        return response.json()["task_instances"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``{task_id: state}`` (``task_id[map_index]`` for mapped tasks)."""
        states = {}
        for ti in self.task_instances(dag_id, run_id):
            key = ti["task_id"] if ti.get("map_index", -1) == -1 else f"{ti['task_id']}[{ti['map_index']}]"
            states[key] = ti.get("state")
        return states

    def tries(self, dag_id: str, run_id: str) -> dict[str, int]:
        """``{task_id: try_number}`` of each task's latest try."""
        return {ti["task_id"]: ti.get("try_number") for ti in self.task_instances(dag_id, run_id)}

    def xcom(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        key: str = "return_value",
        *,
        map_index: int = -1,
        default: Any = KeyError,
    ) -> Any:
        """
        The XCom's value as the task stored it: JSON types as such, other types in Airflow's serialized form.

        :raises KeyError: no such XCom and no ``default`` given.
        """
        response = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            params={"map_index": map_index},
            expect=(200, 404),
        )
        if response.status_code == 404:
            if default is KeyError:
                raise KeyError(f"no XCom {key!r} for {dag_id}.{task_id} in run {run_id}")
            return default
        return response.json()["value"]

    def xcoms(self, dag_id: str, run_id: str, task_id: str, *, map_index: int = -1) -> dict[str, Any]:
        """Every XCom of the task (``{key: value}``, each value as :meth:`xcom` reads it)."""
        response = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries",
            params={"map_index": map_index, "limit": 1000},
        )
        keys = [entry["key"] for entry in response.json()["xcom_entries"]]
        return {key: self.xcom(dag_id, run_id, task_id, key, map_index=map_index) for key in keys}

    def task_instance(self, dag_id: str, run_id: str, task_id: str, *, map_index: int = -1) -> dict[str, Any]:
        """The task instance as the API shows it (``state``, ``try_number``, ``duration``, ``rendered_fields``...)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        return self.api("GET", path if map_index == -1 else f"{path}/{map_index}").json()

    def task_log_events(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, *, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """The structured records of the task's log (``event``, ``level``, ``error_detail``, ...)."""
        response = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
        )
        content = response.json().get("content") or []
        return [c if isinstance(c, dict) else {"event": str(c)} for c in content]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, *, map_index: int = -1) -> str:
        """The task's log as text: one line per record, exceptions with their type, message and frames."""
        lines = []
        for record in self.task_log_events(dag_id, run_id, task_id, try_number, map_index=map_index):
            lines.append(
                " ".join(str(record[k]) for k in ("timestamp", "level", "logger") if record.get(k))
                + " "
                + str(record.get("event", ""))
            )
            lines.extend(_format_error_detail(record.get("error_detail")))
        return "\n".join(lines)

    def task_error(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str | None:
        """``"ExcType: message"`` of the exception that failed the task try (from its log), or ``None``."""
        found = None
        for record in self.task_log_events(dag_id, run_id, task_id, try_number):
            for detail in record.get("error_detail") or []:
                if isinstance(detail, dict) and detail.get("exc_type"):
                    found = f"{detail['exc_type']}: {detail.get('exc_value', '')}"
                    break
        return found

    def asset_events(self, **params: Any) -> list[dict[str, Any]]:
        """``GET /api/v2/assets/events`` (params e.g. ``source_dag_id=...``, ``asset_id=...``).

        Airflow 3.3.2 answers 500 while a run that one of the events created is still queued (its ``start_date`` is
        null, which the response model does not allow: apache/airflow#71360, fixed by #71379 after 3.3.2); read the
        events of an asset some DAG is scheduled on once the run it triggers has started.
        """
        return self.api("GET", "/api/v2/assets/events", params={"limit": 1000, **params}).json()["asset_events"]


def _format_error_detail(detail: Any) -> list[str]:
    lines = []
    for exc in detail or []:
        if not isinstance(exc, dict):
            lines.append(str(exc))
            continue
        lines.append("Traceback (most recent call last):")
        for frame in exc.get("frames") or []:
            lines.append(f'  File "{frame.get("filename")}", line {frame.get("lineno")}, in {frame.get("name")}')
        lines.append(f"{exc.get('exc_type')}: {exc.get('exc_value')}")
    return lines


@contextlib.contextmanager
def airflow_deployment(
    dags_folder: Path,
    *,
    home: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    components: Iterable[str] = tuple(COMPONENTS),
    start_timeout_s: float = 240,
    port: int | None = None,
    prepare: Iterable[Iterable[str]] = (),
) -> Iterator[AirflowDeployment]:
    """
    Start a real Airflow deployment serving ``dags_folder``; stop all of it on exit.

    :param dags_folder: the DAGs folder (copy the test's DAG files there with :func:`copy_dags`).
    :param home: the ``AIRFLOW_HOME`` (default: a fresh temporary directory, removed afterwards).
    :param extra_env: more environment for every component (e.g. ``AIRFLOW__CORE__PARALLELISM``).
    :param components: which of ``api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` to run.
    :param start_timeout_s: seconds to wait for every component to report healthy.
    :param port: the api-server's port on 127.0.0.1 (default: a free one).
    :param prepare: ``airflow`` commands (arguments after ``airflow``) run after ``db migrate``, before the components
        start, e.g. ``[["teams", "sync"]]``.
    :raises DeploymentError: it did not start (with the components' logs), or a ``prepare`` command failed.
    """
    import tempfile

    owned = home is None
    home = Path(tempfile.mkdtemp(prefix="airflow-deployment-")) if owned else Path(home)
    deployment = AirflowDeployment(
        home, dags_folder, extra_env=extra_env, components=components, port=port, prepare=prepare
    )
    try:
        deployment.start(timeout_s=start_timeout_s)
        yield deployment
    finally:
        deployment.stop()
        if owned:
            shutil.rmtree(home, ignore_errors=True)
