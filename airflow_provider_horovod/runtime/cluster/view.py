"""
A standalone master's state as this job sees it (:class:`ClusterView`, :func:`cluster_view`) and the messages
built from it: why a job can never fit (:func:`never_fits_message`), why it still waits (:func:`waiting_message`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.runtime.cluster.resources import AppResources

MAX_HOLDERS = 6
"""At most this many holders of cores are named in a message; the rest are counted."""


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
        text = (
            f"cluster {self.master_url}: {_plural(self.workers_alive, 'worker')} alive, "
            f"{_plural(self.cores, 'core')} ({self.cores_free} free), at most "
            f"{_plural(self.max_slots, 'task slot')} for this job, {self.free_slots} free"
        )
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


def _free_mem(worker: Mapping[str, Any]) -> int | None:
    """A worker's free memory in MiB, ``None`` when it does not say."""
    total = _mem(worker, "memory")
    return None if total is None else total - (_mem(worker, "memoryused") or 0)


def cluster_view(
    state: Mapping[str, Any], res: AppResources, *, app_id: str | None = None, driver_id: str | None = None
) -> ClusterView:
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
            note = (
                f"in cluster deploy mode the driver takes {_plural(dcores, 'core')}{mem_text} on worker "
                f"{own_driver.get('worker')}"
            )
            candidates = [i for i, (wid, _, _) in enumerate(capacity) if wid == own_driver.get("worker")]
        else:
            note = f"in cluster deploy mode the driver takes spark.driver.cores={dcores}{mem_text} on a worker"
            candidates = [
                i for i, (_, c, m) in enumerate(capacity) if c >= dcores and (dmem is None or m is None or m >= dmem)
            ]
        best = 0
        for i in candidates:
            total = sum(
                res.slots_on(c - (dcores if j == i else 0), None if m is None else m - ((dmem or 0) if j == i else 0))
                for j, (_, c, m) in enumerate(capacity)
            )
            best = max(best, total)
        if not candidates:
            note += " (no alive worker has that much)"
        max_slots = best
    else:
        max_slots = sum(res.slots_on(c, m) for _, c, m in capacity)
    cap = res.cap()
    if cap is not None:
        max_slots = min(max_slots, cap[0])
    free_slots = sum(
        res.slots_on(int(w.get("cores") or 0) - int(w.get("coresused") or 0), _free_mem(w)) for w in workers
    )
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
    return ClusterView(
        master_url=str(state.get("url") or "?"),
        workers_alive=len(workers),
        cores=sum(c for _, c, _ in capacity),
        cores_free=sum(max(int(w.get("cores") or 0) - int(w.get("coresused") or 0), 0) for w in workers),
        max_slots=max_slots,
        free_slots=free_slots,
        holders=tuple(h for _, h in holders),
        driver_note=note,
        app_cores=app_cores,
    )


def never_fits_message(np_: int, res: AppResources, view: ClusterView | None = None) -> str | None:
    """
    Why ``np_`` task slots can never be had at the same time, or ``None`` if they could be.

    :param np_: the number of barrier tasks (ranks).
    :param res: the application's resources.
    :param view: the standalone master's view, if known.
    """
    head = (
        f"np={np_} needs {np_} task slots at the same time (one barrier task per rank), but this job can never "
        "have them: "
    )
    cap = res.cap()
    if cap is not None and np_ > cap[0]:
        return head + f"{cap[1]} allows at most {_plural(cap[0], 'task slot')}. Lower np to {cap[0]} or raise the cap"
    if view is None or np_ <= view.max_slots:
        return None
    reason = (
        f"the cluster {view.master_url} has {_plural(view.workers_alive, 'worker')} alive with "
        f"{_plural(view.cores, 'core')} in all"
    )
    if view.driver_note:
        reason += f"; {view.driver_note}"
    reason += f"; that leaves at most {_plural(view.max_slots, 'task slot')} for this job's executors ({res.settings})"
    fix = f"Lower np to {view.max_slots}" if view.max_slots > 0 else "Change the executor or driver sizes"
    if res.cluster_mode:
        fix += ", use client deploy mode (the driver then runs outside the cluster)"
    return head + reason + f". {fix} or add workers"


def waiting_message(np_: int, own_slots: int, own_executors: int, view: ClusterView | None, res: AppResources) -> str:
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
        own = f"this application has {_plural(own_slots, 'task slot')} on {_plural(own_executors, 'executor')}"
        if view is not None and view.app_cores is not None:
            own += f" ({view.app_cores} of the {res.cores_for(np_)} cores it needs granted)"
    return f"{head}: {own}; {view.describe()}" if view is not None else f"{head}: {own}"
