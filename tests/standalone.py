"""
A real Spark standalone cluster for tests: one master (with its REST submission server) and N workers, all JVMs
started from the pip pyspark's ``bin/spark-class`` and bound to 127.0.0.1 on free ports.

Usage, as a context manager or inside a pytest fixture::

    from tests.standalone import standalone_cluster

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        with standalone_cluster(workers=2, cores_per_worker=1, work_dir=tmp_path_factory.mktemp("spark")) as c:
            yield c          # c.master_url  spark://127.0.0.1:PORT
                             # c.web_ui_url  http://127.0.0.1:PORT   (GET /json/ for the master's state)
                             # c.rest_url    http://127.0.0.1:PORT   (/v1/submissions/...)

On entry it waits (bounded by ``start_timeout_s``) until the master's ``/json/`` lists every worker ALIVE and the
REST server answers. On exit it kills every process the cluster started, drivers, executors and their Python
workers included, even those re-parented after their parent died (each carries a marker in its environment), and
raises ``AssertionError`` if any survives. Logs are under ``work_dir/logs``; :meth:`StandaloneCluster.log_tail`
gives their ends for failure messages.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psutil

MARKER_ENV = "AIRFLOW_PROVIDER_HOROVOD_TEST_CLUSTER"
"""Set, with a per-cluster value, in the environment of every process of the cluster (and so of its children)."""
HOST = "127.0.0.1"


def spark_home() -> Path:
    """The pip pyspark package directory, which is a SPARK_HOME (``bin/``, ``jars/``); pyspark is not imported."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def free_port(host: str = HOST) -> int:
    """A TCP port free on ``host`` right now (the master is started with spark.port.maxRetries=0 to notice races)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _opts(conf: Mapping[str, str]) -> str:
    return " ".join(f"-D{k}={v}" for k, v in conf.items())


@dataclass
class StandaloneCluster:
    """A started cluster (see :func:`standalone_cluster`)."""

    master_url: str
    """``spark://127.0.0.1:PORT``"""
    web_ui_url: str
    """The master's web UI, ``http://127.0.0.1:PORT`` (its state as JSON at ``/json/``)."""
    rest_url: str
    """The master's REST submission server, ``http://127.0.0.1:PORT``; ``""`` when started with ``rest=False``."""
    work_dir: Path
    workers: int
    cores_per_worker: int
    marker: str
    """This cluster's value of :data:`MARKER_ENV`."""
    env: dict[str, str] = field(repr=False)
    """The environment the JVMs were started with (SPARK_HOME, SPARK_LOCAL_IP, the marker...)."""
    processes: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    http: dict = field(default_factory=dict, repr=False)
    """Keyword arguments of the fixture's own requests (``headers``, ``verify``): a master behind a JWSFilter or SSL."""
    _commands: dict[str, tuple] = field(default_factory=dict, repr=False)

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    def airflow_connection(self, deploy_mode: str = "cluster") -> str:
        """
        This cluster as an Airflow ``spark`` connection (the JSON form of ``AIRFLOW_CONN_<ID>``): the master, its
        REST submission port and web UI port, and ``deploy_mode``.
        """
        master, rest, ui = (urlparse(u) for u in (self.master_url, self.rest_url, self.web_ui_url))
        extra = {
            "deploy-mode": deploy_mode,
            "spark.airflowProviderHorovod.uiPort": ui.port,
            **({"spark.airflowProviderHorovod.restPort": rest.port} if rest.port else {}),
        }
        return json.dumps(
            {"conn_type": "spark", "host": f"spark://{master.hostname}", "port": master.port, "extra": extra}
        )

    def master_json(self, timeout_s: float = 5.0) -> dict:
        """The master's ``/json/`` page, decoded (raw httpx: the fixture does not depend on the client under test)."""
        response = httpx.get(f"{self.web_ui_url}/json/", timeout=timeout_s, **self.http)
        response.raise_for_status()
        return response.json()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of every log of the cluster: master, workers, and drivers/executors under the work dirs."""
        parts = []
        logs = sorted(self.log_dir.glob("*.log")) + sorted(
            p for p in self.work_dir.glob("worker-*/**/std*") if p.is_file()
        )
        for path in logs:
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as exc:
                text = [f"<unreadable: {exc}>"]
            parts.append(f"==> {path.relative_to(self.work_dir)} <==\n" + "\n".join(text))
        return "\n".join(parts)

    def rank_executor(self, rank: int) -> psutil.Process | None:
        """
        This cluster's executor JVM (``CoarseGrainedExecutorBackend``) whose task runs Horovod rank ``rank``
        (:func:`holds_rank`), or ``None`` while there is none.

        :param rank: the Horovod rank.
        """
        for proc in psutil.process_iter(["cmdline"]):
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in (proc.info.get("cmdline") or []):
                continue
            try:
                if proc.environ().get(MARKER_ENV) == self.marker and holds_rank(proc, rank):
                    return proc
            except psutil.Error:
                continue
        return None

    def leftover_processes(self) -> list[psutil.Process]:
        """Every live process carrying this cluster's marker, or started by it."""
        found: dict[int, psutil.Process] = {}
        for popen in self.processes.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(popen.pid)
                if popen.poll() is None:
                    found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                if proc.pid not in found and proc.environ().get(MARKER_ENV) == self.marker:
                    found[proc.pid] = proc
        return [p for p in found.values() if _alive(p)]

    def _start(
        self, name: str, main_class: str, args: list[str], env: dict[str, str], prefix: Sequence[str] = ()
    ) -> None:
        self._commands[name] = (main_class, args, env, prefix)
        with open(self.log_dir / f"{name}.log", "ab") as log:  # the JVM keeps its own copy of the descriptor
            self.processes[name] = subprocess.Popen(
                [*prefix, str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), main_class, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                start_new_session=True,
            )

    def worker_running(self, pid: int) -> str:
        """The name (``worker-<i>``) of the worker whose process tree holds process ``pid`` (an executor, a rank).

        :raises LookupError: no worker of this cluster is an ancestor of ``pid``.
        """
        workers = {popen.pid: name for name, popen in self.processes.items() if name.startswith("worker-")}
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in psutil.Process(pid).parents():
                if proc.pid in workers:
                    return workers[proc.pid]
        raise LookupError(f"process {pid} runs under no worker of this cluster")

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name`` and every process below it (its executors and their Pythons): a machine lost."""
        root = psutil.Process(self.processes[name].pid)
        procs = [root, *root.children(recursive=True)]
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)
        self.processes[name].wait(timeout=10)

    def decommission_worker(self, name: str) -> None:
        """Send worker ``name`` SIGPWR, the signal a standalone worker decommissions itself on (a spot node's
        termination notice, with ``spark.decommission.enabled``); it stays up until :meth:`kill_worker`."""
        os.kill(self.processes[name].pid, signal.SIGPWR)

    def restart_worker(self, name: str, timeout_s: float = 60.0) -> None:
        """Start worker ``name`` again (after :meth:`kill_worker`) and wait until the master has every worker ALIVE.

        :raises TimeoutError: the master does not list them all ALIVE within ``timeout_s``.
        """
        self._start(name, *self._commands[name])
        self._wait_ready(time.monotonic() + timeout_s, self.workers)

    def _check_running(self) -> None:
        for name, popen in self.processes.items():
            if popen.poll() is not None:
                raise RuntimeError(
                    f"Spark {name} exited with status {popen.returncode} while the cluster started\n{self.log_tail()}"
                )

    def _wait_ready(self, deadline: float, workers: int) -> None:
        """Poll until the master is ALIVE with ``workers`` ALIVE workers and its REST server answers."""
        last: object = "no answer yet"
        while True:
            self._check_running()
            try:
                state = self.master_json(timeout_s=2.0)
                alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
                rest = (
                    httpx.get(
                        f"{self.rest_url}/v1/submissions/status/readiness-probe", timeout=2.0, **self.http
                    ).status_code
                    if self.rest_url
                    else 200
                )  # rest=False: nothing to wait for
                if state.get("status") == "ALIVE" and alive == workers and rest == 200:
                    return
                last = f"master {state.get('status')}, {alive}/{workers} workers alive, REST {rest}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standalone cluster was not ready in time ({last})\n{self.log_tail()}")
            time.sleep(0.25)  # readiness poll of external processes, bounded by the deadline

    def stop(self, timeout_s: float = 20.0) -> None:
        """
        Kill every process of the cluster: SIGTERM, then SIGKILL what is left after ``timeout_s`` seconds.

        :raises AssertionError: if a process of the cluster still runs afterwards.
        """
        procs = self.leftover_processes()
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        for popen in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        left = self.leftover_processes()
        assert not left, "processes of the standalone cluster survived: " + ", ".join(
            f"{p.pid} {' '.join(_cmdline(p))[:120]}" for p in left
        )


def rank_of(proc: psutil.Process) -> int | None:
    """
    The rank a process runs, or ``None``: its ``HOROVOD_RANK`` (a rank started as a process of its own), else its
    rank directory (``.../horovod-rank-*/rank-N``: a rank forked from the job's fork server, whose ``/proc`` environment
    is the server's).

    :param proc: the process.
    :raises psutil.Error: it is gone or not readable.
    """
    rank = proc.environ().get("HOROVOD_RANK")
    if rank is not None:
        return int(rank)
    cwd = Path(proc.cwd())
    if cwd.name.startswith("rank-") and cwd.parent.name.startswith("horovod-rank"):
        return int(cwd.name.removeprefix("rank-"))
    return None


def _pipes(proc: psutil.Process) -> set[str]:
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{proc.pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                if target.startswith("pipe:"):
                    found.add(target)
    return found


def holds_rank(jvm: psutil.Process, rank: int) -> bool:
    """
    Whether executor ``jvm``'s task runs ``rank``: the rank is in its process tree, or (forked from the job's fork
    server, elsewhere in the tree of processes) holds a pipe whose other end a process of that tree holds (its task's
    lifeline and output pipes).

    :param jvm: an executor JVM.
    :param rank: the rank.
    """
    tree = jvm.children(recursive=True)
    for child in tree:
        with contextlib.suppress(psutil.Error):
            if rank_of(child) == rank:
                return True
    ours = set().union(*(_pipes(child) for child in tree)) if tree else set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc not in tree and rank_of(proc) == rank and _pipes(proc) & ours:
                return True
    return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 2,
    cores_per_worker: int = 1,
    *,
    memory_per_worker: str = "1g",
    work_dir: Path | None = None,
    start_timeout_s: float = 120.0,
    master_conf: Mapping[str, str] | None = None,
    worker_conf: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    host: str = HOST,
    worker_hosts: Sequence[str] | None = None,
    worker_prefixes: Sequence[Sequence[str]] | None = None,
    ports: tuple[int, int, int] | None = None,
    rest: bool = True,
    web_ui_url: str | None = None,
    http: Mapping[str, object] | None = None,
) -> Iterator[StandaloneCluster]:
    """
    Start a Spark standalone master (REST submission server enabled) and ``workers`` workers on 127.0.0.1.

    By default everything binds to 127.0.0.1; ``host``, ``worker_hosts`` and ``worker_prefixes`` place the master
    and each worker elsewhere, e.g. each worker in its own network namespace
    (``worker_prefixes=[["ip", "netns", "exec", "nsA"], ...]``, ``worker_hosts=["10.200.0.11", ...]``).

    :param workers: how many workers to start.
    :param cores_per_worker: cores each worker offers (``--cores``); accounting only, not a CPU limit.
    :param memory_per_worker: memory each worker offers (``--memory``, e.g. ``"1g"``).
    :param work_dir: where logs, worker work dirs and the conf dir go (default: a temporary dir, removed on exit).
    :param start_timeout_s: seconds to wait for the master to be ALIVE with every worker registered.
    :param master_conf: extra ``-D`` Spark properties for the master (``SPARK_MASTER_OPTS``).
    :param worker_conf: extra ``-D`` Spark properties for the workers (``SPARK_WORKER_OPTS``).
    :param extra_env: extra environment variables for every JVM (and so for drivers and executors).
    :param host: the address the master (and its web UI and REST server) binds to; must be reachable from here.
    :param worker_hosts: ``worker_hosts[i]`` is worker ``i``'s address (``--host``, ``SPARK_LOCAL_IP`` and
        ``SPARK_LOCAL_HOSTNAME``, so its executors report that IP); default: ``host`` for every worker.
    :param worker_prefixes: ``worker_prefixes[i]`` goes in front of worker ``i``'s command line (its executors
        inherit what it sets up, e.g. a network namespace); default: none.
    :param rest: start the master's REST submission server; ``False`` (``spark.master.rest.enabled=false``) for a
        master with ``spark.authenticate.secret``, which refuses to start with it (SPARK-25088). A
        ``spark-defaults.conf`` written into ``work_dir/conf`` beforehand is the master's and workers' own.
    :param web_ui_url: where the master's web UI answers, when not ``http://host:<ui port>`` (its HTTPS port with
        ``spark.ssl.standalone.enabled``).
    :param http: keyword arguments for the fixture's own requests to the master (``headers`` with a bearer token
        for a JWSFilter, ``verify`` with the CA of a self-signed certificate).
    :raises TimeoutError: when the cluster is not ready within ``start_timeout_s`` (with the logs' tails).
    :raises RuntimeError: when a JVM exits while the cluster starts.
    :raises AssertionError: on exit, when a process of the cluster survives being killed.
    """
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-standalone-")))
        work_dir = Path(work_dir)
        conf_dir = work_dir / "conf"
        for sub in (work_dir / "logs", conf_dir):
            sub.mkdir(parents=True, exist_ok=True)
        master_port, ui_port, rest_port = ports or (free_port(host), free_port(host), free_port(host))
        hosts = list(worker_hosts) if worker_hosts is not None else [host] * workers
        prefixes = [list(p) for p in worker_prefixes] if worker_prefixes is not None else [[]] * workers
        if len(hosts) != workers or len(prefixes) != workers:
            raise ValueError(f"worker_hosts and worker_prefixes need one entry per worker ({workers})")
        marker = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOCAL_IP": host,
                "SPARK_LOCAL_HOSTNAME": host,
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_DAEMON_MEMORY": "256m",
                MARKER_ENV: marker,
                **(extra_env or {}),
            }
        )
        cluster = StandaloneCluster(
            master_url=f"spark://{host}:{master_port}",
            web_ui_url=web_ui_url or f"http://{host}:{ui_port}",
            rest_url=f"http://{host}:{rest_port}" if rest else "",
            work_dir=work_dir,
            workers=workers,
            cores_per_worker=cores_per_worker,
            marker=marker,
            env=env,
            http=dict(http or {}),
        )
        stack.callback(cluster.stop)
        master_env = {
            **env,
            "SPARK_MASTER_OPTS": _opts(
                {
                    "spark.master.rest.enabled": str(rest).lower(),
                    "spark.master.rest.host": host,
                    "spark.master.rest.port": str(rest_port),
                    "spark.port.maxRetries": "0",
                    "spark.ui.showConsoleProgress": "false",
                    **(master_conf or {}),
                }
            ),
        }
        cluster._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", host, "--port", str(master_port), "--webui-port", str(ui_port)],
            master_env,
        )
        deadline = time.monotonic() + start_timeout_s
        cluster._wait_ready(deadline, 0)  # workers started earlier would wait ~10 s before registering again
        worker_env = {**env, "SPARK_WORKER_OPTS": _opts(dict(worker_conf or {}))}
        for i in range(workers):
            worker_dir = work_dir / f"worker-{i}"
            worker_dir.mkdir(exist_ok=True)
            cluster._start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                [
                    "--host",
                    hosts[i],
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(cores_per_worker),
                    "--memory",
                    memory_per_worker,
                    "--work-dir",
                    str(worker_dir),
                    cluster.master_url,
                ],
                {**worker_env, "SPARK_LOCAL_IP": hosts[i], "SPARK_LOCAL_HOSTNAME": hosts[i]},
                prefixes[i],
            )
        cluster._wait_ready(deadline, workers)
        yield cluster
