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
key for the master's UI port); the Airflow hooks set ``spark.master.ui.port`` from the connection's
``spark.airflowProviderHorovod.uiPort``.

Why wait here rather than let Spark's own check retry for longer (raising
``spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures`` to cover the wait): measured in benchmark B5
(``docs/benchmarks.md``), both hand the slots over at the speed of executor start-up, but Spark's retry runs at
a granularity of whole seconds (its interval is read in seconds) and logs a WARN line per retry (3600 lines for
an hour at 1 s), says nothing about who holds the cores, and cannot tell "busy" from "never". Spark's own check
(kept at the provider's 5 s x 6) then only covers an executor lost between this wait and the stage's start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from airflow_provider_horovod.runtime.cluster.resources import AppResources
from airflow_provider_horovod.runtime.cluster.view import (
    ClusterView,
    cluster_view,
    never_fits_message,
    waiting_message,
)
from airflow_provider_horovod.runtime.errors import LaunchError

POLL_INTERVAL_S = 0.1
"""Seconds between two reads of the application's own slot count (a local call into the driver's JVM)."""
MASTER_POLL_INTERVAL_S = 2.0
"""Seconds between two reads of the standalone master's state page while waiting."""
MASTER_TIMEOUT_S = 2.0
"""Timeout of one read of the master's state page, seconds."""
LOG_PREFIX = "airflow-provider-horovod: "

_DRIVER_DIR = re.compile(r"driver-\d+-\d+")


def master_ui_urls(master: str, conf: Mapping[str, str]) -> list[str]:
    """
    The web UI URLs of a ``spark://`` master (several for a standby list), from ``spark.master.ui.port``.

    :return: ``["http://host:8080", ...]``; empty for any other master.
    """
    if not master.startswith("spark://"):
        return []
    port = str(conf.get("spark.master.ui.port") or "8080").strip()
    urls = []
    for host_port in master[len("spark://") :].split(","):
        host = host_port.rsplit(":", 1)[0] if ":" in host_port else host_port
        if host:
            urls.append(f"http://{host}:{port}")
    return urls


def _same_master(state_url: object, master: str) -> bool:
    wanted = {hp.strip() for hp in master[len("spark://") :].split(",")}
    return isinstance(state_url, str) and state_url.startswith("spark://") and state_url[len("spark://") :] in wanted


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
        if (
            isinstance(state, dict)
            and state.get("status", "ALIVE") == "ALIVE"
            and _same_master(state.get("url"), master)
            and isinstance(state.get("workers"), list)
        ):
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


def wait_for_slots(
    sc: Any,
    np_: int,
    timeout_s: float | None,
    *,
    log: Callable[[str], None] | None = None,
    poll_s: float = POLL_INTERVAL_S,
    master_poll_s: float = MASTER_POLL_INTERVAL_S,
) -> float:
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
            log(
                line
                + (
                    ""
                    if urls and view is not None or not urls
                    else f" (the standalone master's state page at {urls[0]}/json/ did not answer: set "
                    "spark.master.ui.port for a view of the cluster)"
                )
            )
            last = line
        if timeout_s is not None and now - started >= timeout_s:
            raise LaunchError(
                f"np={np_} needs {np_} task slots at the same time, and they did not come within "
                f"slot_wait_timeout_s={timeout_s:g} s; {line.split(': ', 1)[1]}"
            )
        wait = poll_s if timeout_s is None else min(poll_s, max(started + timeout_s - now, 0.0))
        tick.wait(wait)  # the poll interval (a JVM call per poll; Spark offers no executor-added callback here)
        slots, executors = own_slots(sc)
        if slots >= np_:
            waited = time.monotonic() - started
            log(f"{np_} task slots available after waiting {waited:.1f} s; starting the barrier stage")
            return waited


OFFER_RENEWAL_BOUND_S = 30.0
"""How long :func:`offers_renewed` asks for offer rounds at most, seconds: a stage not launched by then waits for
Spark's own periodic rounds."""


@dataclasses.dataclass
class OfferRounds:
    """What :func:`offers_renewed` did: the offer rounds it asked for, and whether it saw a task of the stage start."""

    asked: int = 0
    launched: bool = False


@contextlib.contextmanager
def offers_renewed(sc: Any, started: Callable[[], bool], poll_s: float = POLL_INTERVAL_S) -> Iterator[OfferRounds]:
    """
    While the body submits a barrier stage, ask Spark's scheduler to offer every free slot again
    (``SchedulerBackend.reviveOffers``) every ``poll_s`` seconds until ``started()`` says a task of the stage runs, the
    body returns, or :data:`OFFER_RENEWAL_BOUND_S` passes.

    Why: an executor counts in :func:`own_slots` once it has registered with the driver, but its cores are offered
    only once it has also started (Spark's ``LaunchedExecutor`` message, about 0.3 s later), and then alone. A barrier
    stage is launched all at once or not at all, so a stage submitted in between is skipped ("Skip current round of
    resource offers for barrier stage ...") until Spark's periodic offer round, ``spark.scheduler.revive.interval``
    (1 s by default). That is the case at a restart, whose slots come from the replacement executor, and on a busy
    cluster whose executors start just before the stage. Measured on a standalone cluster (B10's restart): the
    stage's tasks launched 0.84 s after its submission without this, 0.19 s with it. Spark's status tracker cannot
    say when the tasks run (its counts lag by seconds), hence ``started``: the runner's is "a task has connected to
    the job's log channel" (with its first heartbeat, as it starts).

    :param sc: the ``SparkContext`` (classic, on the driver).
    :param started: whether a task of the stage has started (called from a thread of this context's own). A wrong
        ``True`` only ends the renewal early (Spark's periodic rounds remain); a late one costs a few cheap rounds.
    :param poll_s: seconds between two offer rounds.
    :return: a context whose value counts the rounds (:class:`OfferRounds`), complete once it has exited.
    """
    rounds = OfferRounds()

    def renew(done: threading.Event) -> None:
        deadline = time.monotonic() + OFFER_RENEWAL_BOUND_S
        backend = sc._jsc.sc().schedulerBackend()
        while not done.wait(poll_s) and time.monotonic() < deadline:
            if started():
                rounds.launched = True
                return
            backend.reviveOffers()
            rounds.asked += 1

    with _while_the_body_runs(renew, "horovod-offers-renewed"):
        yield rounds


@contextlib.contextmanager
def _while_the_body_runs(loop: Callable[[threading.Event], None], name: str) -> Iterator[None]:
    """
    Run ``loop(done)`` in a daemon thread ``name`` while the body runs; ``done`` is set when the body ends, and the
    thread is joined (5 s at most). An exception ends the loop quietly: the SparkContext stopped meanwhile (py4j
    errors), and the job's own outcome tells.
    """
    done = threading.Event()

    def run() -> None:
        try:
            loop(done)
        except Exception:  # noqa: BLE001 - see above
            return

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5.0)


WATCH_INTERVAL_S = 2.0
"""How often :func:`stop_at_checkpoint_when` looks at the application's executors, seconds (a few JVM calls)."""


def job_group_executors(sc: Any, group: str, tasks: int) -> dict[str, str | None]:
    """
    The executors running a task of job group ``group`` (one attempt's barrier job), from the driver's status store
    (the monitoring REST API's source): executor id -> host.

    :param sc: the ``SparkContext`` (classic, on the driver).
    :param group: the attempt's job group.
    :param tasks: how many tasks its stage has (``np``).
    """
    tracker, store = sc.statusTracker(), sc._jsc.sc().statusStore()
    found: dict[str, str | None] = {}
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            listed = store.taskList(stage, 0, tasks + 64)
            for i in range(listed.size()):
                data = listed.apply(i)
                if str(data.status()) == "RUNNING":
                    found[str(data.executorId())] = str(data.host()) or None
    return found


def decommissioning_executors(sc: Any, executors: Mapping[str, str | None]) -> list[tuple[str, str | None]]:
    """
    Those of ``executors`` that Spark is decommissioning (``spark.decommission.enabled``: a spot node's termination
    notice, a worker told to leave): ``(executor id, host)``.

    :param sc: the ``SparkContext`` (classic, on the driver).
    :param executors: executor id -> host (:func:`job_group_executors`).
    """
    scheduler = sc._jsc.sc().taskScheduler()
    return [(e, host) for e, host in executors.items() if scheduler.getExecutorDecommissionState(e).isDefined()]


@contextlib.contextmanager
def stop_at_checkpoint_when(
    sc: Any,
    tell: Callable[[str], int],
    *,
    ranks: int,
    grows_to: int | None,
    decommission: Callable[[], Mapping[str, str | None]] | None,
    log: Callable[[str], None],
    interval_s: float = WATCH_INTERVAL_S,
) -> Iterator[threading.Event]:
    """
    While the body runs an attempt, look every ``interval_s`` seconds for a reason to end it at its next checkpoint
    and start again from there; on the first, ``tell()`` the attempt (:func:`~..wire.logs.stop_message`: rank 0 stops
    right after its next ``save_checkpoint()``), log it, and stop looking. The reasons:

    - ``grows_to``: this application has that many task slots again (:func:`own_slots`: a new worker's executor has
      registered) for an attempt with fewer ranks (elastic ``min_np``), at two looks in a row (an executor that
      registers and dies at once does not make the job stop and start again). Ray Train looks every 60 s and
      restarts from the latest checkpoint at once; torchrun restarts its workers as soon as a new node waits at the
      rendezvous; here no step is trained twice;
    - ``decommission``: an executor running one of the attempt's tasks is being decommissioned
      (:func:`decommissioning_executors`): its machine is going, and the steps trained after the latest checkpoint
      would be lost with it; acted on only while the application has ``ranks`` task slots without it (a spare
      executor; Spark stops counting a decommissioning executor's slot), so that the next attempt starts at once.
      Without one (a standalone master starts no executor in place of a decommissioned one before its machine goes)
      the attempt trains on, and the line says so once.

    A look that fails (a py4j error, the status store still filling) is skipped, said once; the watch goes on.

    :param sc: the ``SparkContext`` (classic, on the driver).
    :param tell: sends a message to the attempt; returns how many of its tasks it reached (0: none listens yet: it
        tries again at the next look).
    :param ranks: how many ranks the attempt runs.
    :param grows_to: the job's ``np`` for an attempt with fewer ranks; ``None``: no growing back.
    :param decommission: the attempt's executors, id -> host (:func:`job_group_executors`), to look for
        decommissioning ones among (the application's ``spark.decommission.enabled``); ``None``: not looked for.
    :param log: called with the line that says why the attempt ends at its next checkpoint.
    :param interval_s: seconds between two looks.
    :return: a context whose value is set once the attempt was told.
    """
    from airflow_provider_horovod.runtime.wire.logs import stop_message

    told = threading.Event()
    after = "rank 0 stops after its next save_checkpoint() and the job starts again from there"

    def reason(seen: list[int], said: set[str]) -> tuple[str, str] | None:
        """(the reason the rank gets, the driver's line), or ``None``."""
        if decommission is not None:
            for executor, host in decommissioning_executors(sc, decommission()):
                where = f" on {host}" if host else ""
                why = f"executor {executor}{where} is being decommissioned"
                slots = own_slots(sc)[0]  # without the decommissioning executors'
                if slots >= ranks:
                    return why, f"{why} (its machine is going): {after} on the other executors ({slots} task slots)"
                if executor not in said:
                    said.add(executor)
                    log(
                        f"{why} (its machine is going), but this application has {slots} other task slot(s) for "
                        f"{ranks} ranks: the attempt trains on until it goes (a spare executor lets the job move at "
                        "a checkpoint instead: on a standalone cluster, spark.cores.max at least np plus one "
                        "executor's cores)"
                    )
        if grows_to is not None:
            slots = own_slots(sc)[0]
            seen[0] = seen[0] + 1 if slots >= grows_to else 0
            if seen[0] >= 2:
                why = f"all np={grows_to} task slots are free again"
                return why, f"{why} ({slots} in this application): {after} with {grows_to} ranks"
        return None

    def watch(done: threading.Event) -> None:
        seen: list[int] = [0]  # looks in a row that found grows_to slots
        said: set[str] = set()  # decommissioning executors already told of without a slot to move to
        while not done.wait(interval_s):
            try:
                found = reason(seen, said)
            except Exception as err:  # noqa: BLE001 - a look that failed (py4j, a status store still filling): skip it
                if "error" not in said:
                    said.add("error")
                    log(f"could not look at this attempt's executors ({type(err).__name__}); looking again")
                continue
            if found is not None and tell(stop_message(found[0])) > 0:
                told.set()
                log(found[1])
                return

    with _while_the_body_runs(watch, "horovod-stop-at-checkpoint"):
        yield told


def local_master_slots(master: str) -> int | None:
    """Task slots of a ``local``/``local[N]``/``local[*]``/``local[N,F]`` master; ``None`` for other masters."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master.strip())
    if match is None:
        return None
    if match.group(1) is None:
        return 1
    if match.group(1) == "*":
        return os.cpu_count() or 1
    return int(match.group(1))


def not_enough_slots(sc: Any, np_: int) -> str:
    """
    Explain Spark's barrier slot check failure (SPARK-24819) with the numbers it leaves out.

    :param sc: the ``SparkContext``.
    :param np_: the job's barrier tasks.

    :func:`wait_for_slots` saw the slots before the stage was submitted, so the application lost executors
    in between (or the stage ran through another path).
    """
    conf = sc.getConf()
    detail = ""
    try:  # the JVM's own count of concurrent task slots for the default resource profile
        slots, executors = own_slots(sc)
        detail = (
            ", but this application has no executors"
            if executors == 0
            else f", but this application has {slots} task slot{'s' if slots != 1 else ''} on {executors} "
            f"executor{'s' if executors != 1 else ''}"
        )
    except Exception:  # noqa: BLE001 - a private API: the message is still useful without the count
        pass
    return (
        f"np={np_} needs {np_} task slots at the same time (one barrier task per rank){detail} "
        f"(spark.task.cpus={conf.get('spark.task.cpus', '1')}); it had them when the stage was submitted, and "
        f"Spark's barrier check gave up after spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures="
        f"{conf.get('spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures', '40')} checks: executors were "
        "lost meanwhile. Look at the executors' logs in the Spark UI, add executors or cores, or lower np"
    )
