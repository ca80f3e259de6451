"""
The Airflow side of sharing a busy Spark standalone cluster.

* :func:`check_standalone_fits`, before anything is submitted: read the master's state page (``/json/``) and
  refuse, with the numbers, a job that could never get ``np`` task slots at the same time (in cluster deploy
  mode after the core its own driver takes on a worker). A job that fits but finds the cluster busy is
  submitted: its driver waits for the slots (:mod:`airflow_provider_horovod.runtime.driver.slots`).
* :class:`ClusterSlotsWatcher`, cluster deploy mode: the driver's own lines go to its stdout on a worker, so the
  task log learns from the master what the job waits for (a worker for its driver, cores for its executors, and
  who holds them), on change.

Client deploy mode needs no watcher: the driver runs in the task and prints its waiting lines into the task log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from airflow_provider_horovod.clients import RetryPolicy, SparkRestAccess, SparkRestClient, SparkRestError
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.runtime.cluster.resources import PROVIDER_DEFAULTS, AppResources
from airflow_provider_horovod.runtime.cluster.view import ClusterView, cluster_view, never_fits_message
from airflow_provider_horovod.utils.poller import Poller

MASTER_STATE_TIMEOUT_S = 10.0
"""Timeout of one read of the master's state page from the Airflow side, seconds."""

SUBMIT_KWARGS_CONF = {
    "executor_cores": "spark.executor.cores",
    "executor_memory": "spark.executor.memory",
    "total_executor_cores": "spark.cores.max",
    "driver_memory": "spark.driver.memory",
    "num_executors": "spark.executor.instances",
}
"""``SparkSubmitHook`` arguments that size executors, and the Spark properties they set."""


def submit_kwargs_conf(spark_submit_kwargs: Mapping[str, Any]) -> dict[str, str]:
    """The Spark properties the executor-sizing ``SparkSubmitHook`` arguments set (see :data:`SUBMIT_KWARGS_CONF`)."""
    return {
        prop: str(spark_submit_kwargs[kw])
        for kw, prop in SUBMIT_KWARGS_CONF.items()
        if spark_submit_kwargs.get(kw) is not None
    }


def read_master_state(
    master_ui_url: str, timeout_s: float = MASTER_STATE_TIMEOUT_S, access: SparkRestAccess | None = None
) -> dict:
    """
    The master's ``/json/`` page with Spark's keys (through :class:`SparkRestClient`, two attempts).

    :param master_ui_url: the master's web UI.
    :param timeout_s: timeout of each attempt, seconds.
    :param access: the connection's bearer token and CA bundle (a UI behind ``spark.ui.filters``' ``JWSFilter``).
    :raises SparkRestError: the master's web UI did not answer, or not with its state (401/403:
        :class:`~airflow_provider_horovod.clients.SparkRestAuthError`).
    """
    with SparkRestClient(
        master_ui_url=master_ui_url,
        timeout_s=timeout_s,
        access=access,
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.5),
    ) as client:
        return client.master_state().to_dict()


def check_standalone_fits(
    *,
    master_url: str,
    master_ui_url: str,
    np: int,
    conf: Mapping[str, Any],
    cluster_mode: bool,
    log: Any,
    access: SparkRestAccess | None = None,
) -> ClusterView | None:
    """
    Before submitting: refuse a job the standalone cluster could never run, with the numbers.

    Only sizes ``conf`` sets are used (``spark-defaults.conf`` is not visible here), so the bound is never
    tighter than what the master would do; the driver checks again with its complete configuration.

    :param master_url: ``spark://host:port``.
    :param master_ui_url: the master's web UI, ``http://host:8080``.
    :param np: barrier tasks (ranks).
    :param conf: the application's Spark properties as they will be submitted.
    :param cluster_mode: the driver will run on a worker (and take ``spark.driver.cores`` there).
    :param log: a logger (``.info``, ``.warning``).
    :param access: the connection's bearer token and CA bundle for the master's web UI.
    :return: the cluster's view, or ``None`` when the state page could not be read (a warning is logged, naming an
        HTTP 403 and the connection when the UI refused the token, and the job is submitted unchecked).
    :raises HorovodJobError: ``np`` task slots can never be had at the same time.
    """
    res = AppResources.from_conf(
        {**{k: str(v) for k, v in conf.items()}, "spark.master": master_url},
        assume_defaults=False,
        cluster_mode=cluster_mode,
    )
    try:
        state = read_master_state(master_ui_url, access=access)
    except (SparkRestError, OSError) as err:
        log.warning(
            "Cannot read the Spark master's state at %s/json/ (%s): submitting without checking that "
            "np=%d task slots can fit; set the connection's spark.airflowProviderHorovod.uiPort extra to "
            "the master's web UI port",
            master_ui_url,
            err,
            np,
        )
        return None
    view = cluster_view(state, res)
    message = never_fits_message(np, res, view)
    if message is not None:
        raise HorovodJobError(f"{message} (checked before submitting, from {master_ui_url}/json/)")
    busy = "" if view.free_slots >= np else f"; the job will wait for {np} free task slots"
    log.info("Spark %s: np=%d fits%s", view.describe(), np, busy)
    return view


def standalone_defaults(np: int, master_ui_url: str, conf: Mapping[str, Any]) -> dict[str, str]:
    """
    Spark properties the hooks add on a standalone master, unless ``conf`` sets them (merge as
    ``{**defaults, **conf}``).

    * ``spark.cores.max``: the cores ``np`` task slots need (whole executors when ``spark.executor.cores`` is
      set). Without it a standalone application takes every free core of the cluster, so two small jobs could
      not run side by side, and cores beyond ``np`` slots would sit idle in a barrier job.
    * ``spark.master.ui.port``: where the driver finds the master's state page (see the runtime's
      :mod:`~airflow_provider_horovod.runtime.driver.slots`).
    * :data:`~airflow_provider_horovod.runtime.cluster.resources.PROVIDER_DEFAULTS`: which of these the user did not
      set, so the driver's messages say ``spark.cores.max`` is the provider's default.

    :param np: barrier tasks.
    :param master_ui_url: the master's web UI.
    :param conf: the application's properties (``SparkSubmitHook``'s sizing arguments included).
    """
    res = AppResources.from_conf({k: str(v) for k, v in conf.items()}, assume_defaults=False)
    defaults = {"spark.cores.max": str(res.cores_for(np))}
    port = urlparse(master_ui_url).port
    if port:
        defaults["spark.master.ui.port"] = str(port)
    added = {k: v for k, v in defaults.items() if k not in conf}
    if "spark.cores.max" in added:
        added[PROVIDER_DEFAULTS] = "spark.cores.max"
    return added


def cluster_wait_message(
    state: Mapping[str, Any], res: AppResources, np: int, *, submission_id: str, app_id: str | None
) -> str | None:
    """
    Cluster deploy mode: what the job waits for according to the master, or ``None`` when it waits for nothing.

    :param state: the master's ``/json/`` (Spark's keys).
    :param res: the application's resources (cluster mode).
    :param np: barrier tasks.
    :param submission_id: the job's driver id.
    :param app_id: its application id once the driver wrote it.
    """
    drivers = {d.get("id"): d for d in state.get("activedrivers") or []}
    driver = drivers.get(submission_id)
    view = cluster_view(state, res, app_id=app_id, driver_id=submission_id)
    if driver is not None and driver.get("state") == "SUBMITTED" and not driver.get("worker"):
        memory = f" and {res.driver_memory_mb} MiB" if res.driver_memory_mb is not None else ""
        return (
            f"driver {submission_id} is waiting for a worker with {res.driver_cores} free "
            f"core{'s' if res.driver_cores != 1 else ''}{memory}; {view.describe()}"
        )
    if app_id is None or view.app_cores is None:
        return None
    need = res.cores_for(np)
    if view.app_cores >= need:
        return None
    if view.app_cores == 0 and view.free_slots == 0 and view.holders:
        has = "it has no executors: other applications hold every core it could use"
    else:
        has = f"the master has granted it {view.app_cores} of the {need} cores it needs"
    return f"application {app_id} is waiting for {np} task slots (np={np}): {has}; {view.describe()}"


class ClusterSlotsWatcher(Poller):
    """
    Cluster deploy mode: poll the master's state page in a background thread and log, on change, what the job
    waits for (:func:`cluster_wait_message`), and once, that the wait is over.

    Never raises into the job: a master that does not answer is skipped until the next poll.

    :param master_ui_url: the master's web UI.
    :param submission_id: the job's driver id.
    :param app_id: returns the application id once known (e.g. from the staging directory), else ``None``.
    :param np: barrier tasks.
    :param conf: the application's Spark properties (the hook's standalone defaults are added as it adds them).
    :param log: called with each message.
    :param poll_interval_s: seconds between polls.
    :param access: the connection's bearer token and CA bundle for the master's web UI.
    """

    def __init__(
        self,
        *,
        master_ui_url: str,
        submission_id: str,
        app_id: Callable[[], str | None],
        np: int,
        conf: Mapping[str, Any],
        log: Callable[[str], None],
        poll_interval_s: float = 5.0,
        access: SparkRestAccess | None = None,
    ) -> None:
        super().__init__(f"spark-slots-{submission_id}", poll_interval_s, log, access)
        self._url = master_ui_url
        self._submission_id = submission_id
        self._app_id = app_id
        self._np = np
        conf = {k: str(v) for k, v in conf.items()}
        conf = {"spark.master": "spark://", **standalone_defaults(np, master_ui_url, conf), **conf}  # as submitted
        self._res = AppResources.from_conf(conf, assume_defaults=False, cluster_mode=True)
        self._last: str | None = None

    def poll_once(self) -> None:
        """One poll: read the master's state and log what changed."""
        try:
            state = read_master_state(
                self._url, timeout_s=min(MASTER_STATE_TIMEOUT_S, self._poll_interval_s * 2), access=self._access
            )
        except (SparkRestError, OSError):
            return
        app_id = self._app_id()
        message = cluster_wait_message(state, self._res, self._np, submission_id=self._submission_id, app_id=app_id)
        if message is None:
            if self._last is not None and app_id is not None:
                self._log(
                    f"application {app_id} has the cores for its {self._np} task slots; the barrier stage can start"
                )
            self._last = None
            return
        if message != self._last:
            self._log(message)
            self._last = message

    def _run(self) -> None:
        self._every_interval(self.poll_once)
