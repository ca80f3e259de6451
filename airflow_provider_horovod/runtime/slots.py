"""
Task slots on a shared cluster: wait for them before the barrier stage, and fail fast when they can never come.

A barrier stage of ``np`` tasks needs ``np`` task slots **at the same time, on this application's own
executors**: Spark's barrier check (SPARK-24819) counts only those, so an application whose executors have not
started yet, or that got none because other applications hold every core, fails that check however large the
cluster. :func:`wait_for_slots` therefore runs on the driver **before** the stage is submitted:

* it polls the application's own slot count (``SparkContext.maxNumConcurrentTasks``, the number Spark's check
  uses) every :data:`POLL_INTERVAL_S` until it reaches ``np``, or ``slot_wait_timeout_s`` passes
  (:class:`~airflow_provider_horovod.runtime.errors.LaunchError` with the numbers);
* on a Spark standalone master it also reads the master's state page (``/json/``, plain ``urllib``: the
  runtime never imports Airflow) every :data:`MASTER_POLL_INTERVAL_S`: how many workers are alive, how many
  cores are free, which applications and drivers hold the others. The task log gets a line whenever that
  picture changes, and a job that can **never** fit (``np`` above what the alive workers could ever give this
  application's executors) fails at once instead of waiting;
* without the master's view (YARN, Kubernetes, a master UI it cannot reach) it still fails fast where the
  application's own configuration caps its slots (``spark.cores.max``, ``spark.executor.instances``).

The master's web UI is ``http://<host of spark.master>:<spark.master.ui.port>`` (8080 by default, Spark's own
key for the master's UI port); the Airflow hooks set ``spark.master.ui.port`` from the connection's ``ui-port``.

Why wait here rather than let Spark's own check retry for longer (raising
``spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures`` to cover the wait): measured in benchmark B5
(``docs/benchmarks.md``), both hand the slots over at the speed of executor start-up, but Spark's retry runs at
a granularity of whole seconds (its interval is read in seconds) and logs a WARN line per retry (3600 lines for
an hour at 1 s), says nothing about who holds the cores, and cannot tell "busy" from "never". Spark's own check
(kept at the provider's 5 s x 6) then only covers an executor lost between this wait and the stage's start.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.runtime.errors import LaunchError

DEFAULT_SLOT_WAIT_TIMEOUT_S = 3600.0
"""How long a barrier job waits for its task slots by default, seconds (``None``: forever)."""
POLL_INTERVAL_S = 0.25
"""Seconds between two reads of the application's own slot count (a local call into the driver's JVM)."""
MASTER_POLL_INTERVAL_S = 2.0
"""Seconds between two reads of the standalone master's state page while waiting."""
MASTER_TIMEOUT_S = 2.0
"""Timeout of one read of the master's state page, seconds."""
LOG_PREFIX = "airflow-provider-horovod: "
MAX_HOLDERS = 6
"""At most this many holders of cores are named in a message; the rest are counted."""

_MEMORY_UNITS = {"b": 1 / 2**20, "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1, "g": 1024, "gb": 1024,
                 "t": 1024**2, "tb": 1024**2, "p": 1024**3, "pb": 1024**3}
_DRIVER_DIR = re.compile(r"driver-\d+-\d+")


def memory_mib(value: str | None, default: int | None) -> int | None:
    """
    A Spark memory size (``"512m"``, ``"2g"``, ``"1024"``: MiB without a unit) in MiB, rounded up.

    :param value: the property's value, or ``None`` when unset.
    :param default: what an unset or unreadable value means.
    :return: MiB, or ``default``.
    """
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
    if match is None or match.group(2).lower() not in ("", *_MEMORY_UNITS):
        return default
    factor = _MEMORY_UNITS.get(match.group(2).lower(), 1)
    return math.ceil(int(match.group(1)) * factor)


def _int(conf: Mapping[str, str], key: str) -> int | None:
    try:
        return int(str(conf[key]).strip()) if conf.get(key) not in (None, "") else None
    except ValueError:
        return None


@dataclass(frozen=True)
class AppResources:
    """
    What one application of this job asks the cluster for, from its Spark properties.

    Memory is in MiB; ``None`` where the properties do not say and no default may be assumed (the Airflow side
    does not see ``spark-defaults.conf``, so it leaves unset sizes out of its bounds rather than guess).

    :param task_cpus: ``spark.task.cpus``.
    :param executor_cores: ``spark.executor.cores``; ``None``: one executor per worker taking its free cores
        (standalone's behaviour when unset).
    :param executor_memory_mb: ``spark.executor.memory``.
    :param cores_max: ``spark.cores.max`` (the application's cap on a standalone cluster).
    :param executor_instances: ``spark.executor.instances`` (a fixed executor count: YARN, Kubernetes).
    :param driver_cores: ``spark.driver.cores`` (what the driver takes on a worker in cluster deploy mode).
    :param driver_memory_mb: ``spark.driver.memory``.
    :param cluster_mode: ``spark.submit.deployMode`` is ``cluster``: the driver runs on a worker.
    :param master: ``spark.master``; ``spark.cores.max`` caps only ``spark://`` masters, and
        ``spark.executor.instances`` only YARN and Kubernetes ones.
    """

    task_cpus: int = 1
    executor_cores: int | None = None
    executor_memory_mb: int | None = None
    cores_max: int | None = None
    executor_instances: int | None = None
    driver_cores: int = 1
    driver_memory_mb: int | None = None
    cluster_mode: bool = False
    master: str = ""

    @classmethod
    def from_conf(cls, conf: Mapping[str, str], *, assume_defaults: bool = True,
                  cluster_mode: bool | None = None) -> AppResources:
        """
        Read the properties that decide where executors fit.

        :param conf: Spark properties (keys as strings).
        :param assume_defaults: ``True`` (the driver: its conf is complete): an unset memory is Spark's default
            of 1 GiB. ``False`` (before submission): unset memory sizes stay ``None`` and are not used.
        :param cluster_mode: override ``spark.submit.deployMode``.
        """
        default_mb = 1024 if assume_defaults else None
        if cluster_mode is None:
            cluster_mode = str(conf.get("spark.submit.deployMode", "client")).strip() == "cluster"
        return cls(task_cpus=max(_int(conf, "spark.task.cpus") or 1, 1),
                   executor_cores=_int(conf, "spark.executor.cores"),
                   executor_memory_mb=memory_mib(conf.get("spark.executor.memory"), default_mb),
                   cores_max=_int(conf, "spark.cores.max"),
                   executor_instances=_int(conf, "spark.executor.instances"),
                   driver_cores=max(_int(conf, "spark.driver.cores") or 1, 1),
                   driver_memory_mb=memory_mib(conf.get("spark.driver.memory"), default_mb),
                   cluster_mode=cluster_mode, master=str(conf.get("spark.master") or ""))

    @property
    def settings(self) -> str:
        """The properties the slot counts depend on, for messages."""
        return self._settings(with_cap=True)

    def _settings(self, *, with_cap: bool) -> str:
        parts = [f"spark.executor.cores={self.executor_cores if self.executor_cores is not None else 'unset'}"]
        if self.executor_memory_mb is not None:
            parts.append(f"spark.executor.memory={self.executor_memory_mb} MiB")
        if with_cap and self.cores_max is not None:
            parts.append(f"spark.cores.max={self.cores_max}")
        parts.append(f"spark.task.cpus={self.task_cpus}")
        return ", ".join(parts)

    def cores_for(self, np_: int) -> int:
        """Cores this application needs for ``np_`` task slots (whole executors when their size is set)."""
        if self.executor_cores:
            per_executor = max(self.executor_cores // self.task_cpus, 1)
            return math.ceil(np_ / per_executor) * self.executor_cores
        return np_ * self.task_cpus

    def slots_on(self, cores: int, memory_mb: int | None) -> int:
        """Task slots this application's executors could get from ``cores`` cores and ``memory_mb`` MiB of a worker."""
        if cores <= 0:
            return 0
        fits_memory = self.executor_memory_mb is None or memory_mb is None
        if self.executor_cores:
            executors = cores // self.executor_cores
            if not fits_memory:
                executors = min(executors, memory_mb // max(self.executor_memory_mb, 1))
            return executors * (self.executor_cores // self.task_cpus)
        if not fits_memory and memory_mb < self.executor_memory_mb:
            return 0
        return cores // self.task_cpus  # one executor taking every free core

    def cap(self) -> tuple[int, str] | None:
        """The most task slots this application's own properties allow, and why; ``None``: no such cap."""
        per_executor = (self.executor_cores // self.task_cpus) if self.executor_cores else None
        if self.cores_max is not None and self.master.startswith("spark://"):
            slots = ((self.cores_max // self.executor_cores) * per_executor if self.executor_cores
                     else self.cores_max // self.task_cpus)
            return slots, f"spark.cores.max={self.cores_max} ({self._settings(with_cap=False)})"
        if self.executor_instances is not None and self.executor_cores \
                and self.master.startswith(("yarn", "k8s://")):
            return (self.executor_instances * per_executor,
                    f"spark.executor.instances={self.executor_instances} x spark.executor.cores="
                    f"{self.executor_cores} (spark.task.cpus={self.task_cpus})")
        return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class ClusterView:
    """
    A standalone master's state as one application of this job sees it.

    :param master_url: the master (``spark://host:port``).
    :param workers_alive: workers in state ALIVE.
    :param cores: cores of the alive workers.
    :param cores_free: of those, cores nobody holds.
    :param max_slots: the most task slots this application's executors could ever hold on the alive workers,
        every other application gone (after its own driver's share in cluster deploy mode, and its caps).
    :param free_slots: task slots its executors could get from the free cores right now.
    :param holders: who holds cores, largest first: ``app-... 'name' (4 cores)``, ``driver driver-... (1 core)``.
    :param driver_note: cluster deploy mode: what the driver takes and where; ``None`` in client mode.
    :param app_cores: cores the master has granted this application (``None``: not known or not registered).
    """

    master_url: str
    workers_alive: int
    cores: int
    cores_free: int
    max_slots: int
    free_slots: int
    holders: tuple[str, ...]
    driver_note: str | None = None
    app_cores: int | None = None

    def describe(self) -> str:
        """
        One line: ``cluster spark://...: 2 workers alive, 4 cores (0 free), at most 4 task slots for this job, 0
        free; held by app-... 'name' (4 cores)``.
        """
        text = (f"cluster {self.master_url}: {_plural(self.workers_alive, 'worker')} alive, "
                f"{_plural(self.cores, 'core')} ({self.cores_free} free), at most "
                f"{_plural(self.max_slots, 'task slot')} for this job, {self.free_slots} free")
        if self.holders:
            shown = list(self.holders[:MAX_HOLDERS])
            if len(self.holders) > MAX_HOLDERS:
                shown.append(f"{len(self.holders) - MAX_HOLDERS} more")
            text += "; held by " + ", ".join(shown)
        return text


def _workers(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [w for w in state.get("workers") or [] if w.get("state") == "ALIVE"]


def _mem(worker: Mapping[str, Any], key: str) -> int | None:
    value = worker.get(key)
    return int(value) if isinstance(value, int | float) else None


def cluster_view(state: Mapping[str, Any], res: AppResources, *, app_id: str | None = None,
                 driver_id: str | None = None) -> ClusterView:
    """
    What a standalone master's state page (``/json/``, decoded) means for an application of this job.

    :param state: the master's ``/json/`` document.
    :param res: the application's resources (:meth:`AppResources.from_conf`).
    :param app_id: this application's id once it exists: its own cores are neither "held by" others nor free.
    :param driver_id: cluster deploy mode, this job's driver once placed: its worker gives executors that much
        less. With ``res.cluster_mode`` and no (known) driver, the driver is assumed on the worker where it
        costs the fewest slots (the master picks the worker; this gives an upper bound).
    :return: the view; ``max_slots`` is an upper bound (GPUs and other custom resources are not counted).
    """
    workers = _workers(state)
    capacity = [(str(w.get("id")), int(w.get("cores") or 0), _mem(w, "memory")) for w in workers]
    drivers = [d for d in state.get("activedrivers") or [] if d.get("state") in ("RUNNING", "SUBMITTED", None)]
    own_driver = next((d for d in drivers if driver_id is not None and d.get("id") == driver_id), None)
    note = None
    if res.cluster_mode:
        dcores, dmem = res.driver_cores, res.driver_memory_mb
        mem_text = f" and {dmem} MiB" if dmem is not None else ""
        if own_driver is not None and own_driver.get("worker"):
            dcores = int(own_driver.get("cores") or dcores)
            dmem = _mem(own_driver, "memory") if _mem(own_driver, "memory") is not None else dmem
            mem_text = f" and {dmem} MiB" if dmem is not None else ""
            note = (f"in cluster deploy mode the driver takes {_plural(dcores, 'core')}{mem_text} on worker "
                    f"{own_driver.get('worker')}")
            candidates = [i for i, (wid, _, _) in enumerate(capacity) if wid == own_driver.get("worker")]
        else:
            note = f"in cluster deploy mode the driver takes spark.driver.cores={dcores}{mem_text} on a worker"
            candidates = [i for i, (_, c, m) in enumerate(capacity)
                          if c >= dcores and (dmem is None or m is None or m >= dmem)]
        best = 0
        for i in candidates:
            total = sum(res.slots_on(c - (dcores if j == i else 0),
                                     None if m is None else m - ((dmem or 0) if j == i else 0))
                        for j, (_, c, m) in enumerate(capacity))
            best = max(best, total)
        if not candidates:
            note += " (no alive worker has that much)"
        max_slots = best
    else:
        max_slots = sum(res.slots_on(c, m) for _, c, m in capacity)
    cap = res.cap()
    if cap is not None:
        max_slots = min(max_slots, cap[0])
    free_slots = sum(res.slots_on(int(w.get("cores") or 0) - int(w.get("coresused") or 0),
                                  None if _mem(w, "memory") is None
                                  else _mem(w, "memory") - (_mem(w, "memoryused") or 0)) for w in workers)
    if cap is not None:
        free_slots = min(free_slots, cap[0])
    holders: list[tuple[int, str]] = []
    app_cores = None
    for app in state.get("activeapps") or []:
        cores = int(app.get("cores") or 0)
        if app_id is not None and app.get("id") == app_id:
            app_cores = cores
            continue
        if cores > 0:
            holders.append((cores, f"{app.get('id')} '{app.get('name')}' ({_plural(cores, 'core')})"))
    for driver in drivers:
        cores = int(driver.get("cores") or 0)
        if driver.get("id") == driver_id or not driver.get("worker") or cores <= 0:
            continue
        holders.append((cores, f"driver {driver.get('id')} ({_plural(cores, 'core')})"))
    holders.sort(key=lambda h: -h[0])
    return ClusterView(master_url=str(state.get("url") or "?"), workers_alive=len(workers),
                       cores=sum(c for _, c, _ in capacity),
                       cores_free=sum(max(int(w.get("cores") or 0) - int(w.get("coresused") or 0), 0)
                                      for w in workers),
                       max_slots=max_slots, free_slots=free_slots, holders=tuple(h for _, h in holders),
                       driver_note=note, app_cores=app_cores)


def never_fits_message(np_: int, res: AppResources, view: ClusterView | None = None) -> str | None:
    """
    Why ``np_`` task slots can never be had at the same time, or ``None`` if they could be.

    :param np_: the number of barrier tasks (ranks).
    :param res: the application's resources.
    :param view: the standalone master's view, if known.
    """
    head = (f"np={np_} needs {np_} task slots at the same time (one barrier task per rank), but this job can never "
            "have them: ")
    cap = res.cap()
    if cap is not None and np_ > cap[0]:
        return head + f"{cap[1]} allows at most {_plural(cap[0], 'task slot')}. Lower np to {cap[0]} or raise the cap"
    if view is None or np_ <= view.max_slots:
        return None
    reason = (f"the cluster {view.master_url} has {_plural(view.workers_alive, 'worker')} alive with "
              f"{_plural(view.cores, 'core')} in all")
    if view.driver_note:
        reason += f"; {view.driver_note}"
    reason += (f"; that leaves at most {_plural(view.max_slots, 'task slot')} for this job's executors "
               f"({res.settings})")
    fix = f"Lower np to {view.max_slots}" if view.max_slots > 0 else "Change the executor or driver sizes"
    if res.cluster_mode:
        fix += ", use client deploy mode (the driver then runs outside the cluster)"
    return head + reason + f". {fix} or add workers"


def waiting_message(np_: int, own_slots: int, own_executors: int, view: ClusterView | None,
                    res: AppResources) -> str:
    """
    One line saying why the job is still waiting for its slots (the same situation gives the same line).

    :param np_: slots needed.
    :param own_slots: task slots this application's executors have now.
    :param own_executors: how many executors it has.
    :param view: the standalone master's view, if known.
    :param res: the application's resources.
    """
    head = f"waiting for {np_} task slots (np={np_}, spark.task.cpus={res.task_cpus})"
    if view is not None and view.app_cores is not None and view.app_cores >= res.cores_for(np_):
        return f"{head}: the master granted this application {view.app_cores} cores; its executors are starting"
    if own_executors == 0:
        if view is not None and view.free_slots == 0 and view.holders:
            own = "this application has no executors: other applications hold every core it could use"
        elif view is not None and view.free_slots > 0:
            own = "this application has no executors yet; the master is starting them"
        else:
            own = "this application has no executors yet"
    else:
        own = (f"this application has {_plural(own_slots, 'task slot')} on "
               f"{_plural(own_executors, 'executor')}")
        if view is not None and view.app_cores is not None:
            own += f" ({view.app_cores} of the {res.cores_for(np_)} cores it needs granted)"
    return f"{head}: {own}; {view.describe()}" if view is not None else f"{head}: {own}"


def master_ui_urls(master: str, conf: Mapping[str, str]) -> list[str]:
    """
    The web UI URLs of a ``spark://`` master (several for a standby list), from ``spark.master.ui.port``.

    :return: ``["http://host:8080", ...]``; empty for any other master.
    """
    if not master.startswith("spark://"):
        return []
    port = str(conf.get("spark.master.ui.port") or "8080").strip()
    urls = []
    for host_port in master[len("spark://"):].split(","):
        host = host_port.rsplit(":", 1)[0] if ":" in host_port else host_port
        if host:
            urls.append(f"http://{host}:{port}")
    return urls


def _same_master(state_url: object, master: str) -> bool:
    wanted = {hp.strip() for hp in master[len("spark://"):].split(",")}
    return isinstance(state_url, str) and state_url.startswith("spark://") and \
        state_url[len("spark://"):] in wanted


def read_master_state(urls: Sequence[str], master: str, timeout_s: float = MASTER_TIMEOUT_S) -> dict | None:
    """
    The first ALIVE master's ``/json/`` among ``urls`` whose ``url`` is ``master``; ``None`` when none answers so.

    Proxies from the environment are not used (the master is on the cluster's network, like the driver).

    :param urls: web UI base URLs (:func:`master_ui_urls`).
    :param master: the ``spark://`` URL the application uses (a page of another master is ignored).
    :param timeout_s: timeout of each request, seconds.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for url in urls:
        try:
            with opener.open(f"{url}/json/", timeout=timeout_s) as response:
                state = json.loads(response.read())
        except (OSError, ValueError, urllib.error.URLError):
            continue
        if isinstance(state, dict) and state.get("status", "ALIVE") == "ALIVE" \
                and _same_master(state.get("url"), master) and isinstance(state.get("workers"), list):
            return state
    return None


def own_slots(sc: Any) -> tuple[int, int]:
    """
    ``(task slots, executors)`` this application has now: the count Spark's barrier check uses.

    :param sc: the ``SparkContext``.
    """
    jsc = sc._jsc.sc()
    slots = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    executors = len(jsc.statusTracker().getExecutorInfos()) - 1  # the driver is listed too
    return slots, max(executors, 0)


def own_driver_id() -> str | None:
    """In standalone cluster deploy mode, this driver's id: the worker starts it in a directory named after it."""
    name = os.path.basename(os.getcwd())
    return name if _DRIVER_DIR.fullmatch(name) else None


def wait_for_slots(sc: Any, np_: int, timeout_s: float | None, *, log: Callable[[str], None] | None = None,
                   poll_s: float = POLL_INTERVAL_S, master_poll_s: float = MASTER_POLL_INTERVAL_S) -> float:
    """
    Return once this application has ``np_`` task slots; log why it waits, on change; fail when it never can.

    See the module docstring for the design.

    :param sc: the ``SparkContext`` (classic, on the driver).
    :param np_: task slots needed at the same time (the barrier stage's tasks).
    :param timeout_s: seconds to wait at most; ``None``: no limit.
    :param log: called with each line (default: printed to stdout with the provider's prefix).
    :param poll_s: seconds between reads of the own slot count.
    :param master_poll_s: seconds between reads of the standalone master's state page.
    :return: seconds waited (0.0 when the slots were there at once).
    :raises LaunchError: the job can never have ``np_`` slots (the message has the numbers), or they did not
        come within ``timeout_s``.
    """
    log = log or (lambda line: print(LOG_PREFIX + line, flush=True))
    slots, executors = own_slots(sc)
    if slots >= np_:
        return 0.0
    conf = dict(sc.getConf().getAll())
    res = AppResources.from_conf(conf)
    message = never_fits_message(np_, res)
    if message is not None:
        raise LaunchError(message)
    started = time.monotonic()
    urls = master_ui_urls(sc.master, conf)
    app_id, driver_id = sc.applicationId, own_driver_id() if res.cluster_mode else None
    view: ClusterView | None = None
    next_master = started
    last = None
    tick = threading.Event()
    while True:
        now = time.monotonic()
        if urls and now >= next_master:
            state = read_master_state(urls, sc.master)
            view = None if state is None else cluster_view(state, res, app_id=app_id, driver_id=driver_id)
            next_master = now + master_poll_s
            message = never_fits_message(np_, res, view)
            if message is not None:
                raise LaunchError(message)
        line = waiting_message(np_, slots, executors, view, res)
        if line != last:
            log(line + ("" if urls and view is not None or not urls else
                        f" (the standalone master's state page at {urls[0]}/json/ did not answer: set "
                        "spark.master.ui.port for a view of the cluster)"))
            last = line
        if timeout_s is not None and now - started >= timeout_s:
            raise LaunchError(f"np={np_} needs {np_} task slots at the same time, and they did not come within "
                              f"slot_wait_timeout_s={timeout_s:g} s; {line.split(': ', 1)[1]}")
        wait = poll_s if timeout_s is None else min(poll_s, max(started + timeout_s - now, 0.0))
        tick.wait(wait)  # the poll interval (a JVM call per poll; Spark offers no executor-added callback here)
        slots, executors = own_slots(sc)
        if slots >= np_:
            waited = time.monotonic() - started
            log(f"{np_} task slots available after waiting {waited:.1f} s; starting the barrier stage")
            return waited
