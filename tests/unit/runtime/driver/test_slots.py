"""
Task slots on a shared cluster: the counts, the messages and the arguments (issue #11). The live behaviour (jobs
waiting for each other on a real standalone cluster) is in tests/integration/test_shared_cluster*.py.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_provider_horovod.runtime.cluster.resources import AppResources, memory_mib
from airflow_provider_horovod.runtime.cluster.view import cluster_view, never_fits_message, waiting_message
from airflow_provider_horovod.runtime.driver.slots import master_ui_urls, read_master_state

DATA = Path(__file__).resolve().parents[2] / "data" / "spark_rest"
MASTER = "spark://127.0.0.1:7077"


def worker(i: int, cores: int = 2, used: int = 0, memory: int = 1024, mem_used: int = 0, state: str = "ALIVE"):
    return {
        "id": f"worker-{i}",
        "host": "127.0.0.1",
        "cores": cores,
        "coresused": used,
        "memory": memory,
        "memoryused": mem_used,
        "state": state,
    }


def master_state(workers, apps=(), drivers=()):
    """A standalone master's /json/ page with Spark's keys (the shape tests/unit/data/spark_rest records)."""
    return {
        "url": MASTER,
        "status": "ALIVE",
        "workers": list(workers),
        "activeapps": list(apps),
        "activedrivers": list(drivers),
    }


def app(app_id: str, cores: int, name: str = "job", state: str = "RUNNING"):
    return {"id": app_id, "name": name, "cores": cores, "state": state}


def res(cluster_mode: bool = False, **conf: str) -> AppResources:
    return AppResources.from_conf(
        {"spark.master": MASTER, **{k.replace("_", "."): v for k, v in conf.items()}}, cluster_mode=cluster_mode
    )


BUSY = master_state(
    [worker(0, used=2, mem_used=1024), worker(1, used=2, mem_used=1024)],
    apps=[app("app-1", 4, "first"), app("app-2", 0, "second", "WAITING")],
)
"""2 workers x 2 cores, every core held by app-1 (np=4); app-2 waits."""


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("512m", 512),
        ("2g", 2048),
        ("1024", 1024),
        ("1536MB", 1536),
        ("1t", 1024 * 1024),
        ("100k", 1),
        (None, 7),
        ("lots", 7),
    ],
)
def test_memory_sizes_in_mib(value, mib):
    assert memory_mib(value, 7) == mib


def test_resources_from_conf_and_defaults():
    r = AppResources.from_conf(
        {
            "spark.master": MASTER,
            "spark.executor.cores": "2",
            "spark.task.cpus": "2",
            "spark.cores.max": "6",
            "spark.submit.deployMode": "cluster",
        }
    )
    assert (r.executor_cores, r.task_cpus, r.cores_max, r.cluster_mode) == (2, 2, 6, True)
    assert (r.executor_memory_mb, r.driver_memory_mb, r.driver_cores) == (1024, 1024, 1)  # Spark's defaults
    unknown = AppResources.from_conf({}, assume_defaults=False)  # the Airflow side: no spark-defaults.conf here
    assert (unknown.executor_memory_mb, unknown.driver_memory_mb, unknown.task_cpus) == (None, None, 1)
    assert r.cores_for(3) == 6 and res().cores_for(3) == 3  # whole executors when their size is set


def test_caps_apply_to_the_masters_they_belong_to():
    assert res(spark_cores_max="2").cap() == (
        2,
        "spark.cores.max=2 (spark.executor.cores=unset, spark.executor.memory=1024 MiB, spark.task.cpus=1)",
    )
    assert res(spark_cores_max="5", spark_executor_cores="2").cap()[0] == 4  # two whole 2-core executors
    yarn = AppResources.from_conf(
        {"spark.master": "yarn", "spark.executor.instances": "3", "spark.executor.cores": "2", "spark.cores.max": "1"}
    )
    assert yarn.cap() == (6, "spark.executor.instances=3 x spark.executor.cores=2 (spark.task.cpus=1)")
    assert AppResources.from_conf({"spark.master": "local[4]", "spark.cores.max": "1"}).cap() is None
    message = never_fits_message(3, res(spark_cores_max="2"))
    assert message.startswith(
        "np=3 needs 3 task slots at the same time (one barrier task per rank), but this job "
        "can never have them: spark.cores.max=2"
    )
    assert "allows at most 2 task slots. Lower np to 2 or raise the cap" in message


def test_a_busy_cluster_that_could_fit_the_job():
    view = cluster_view(BUSY, res(spark_executor_memory="512m"), app_id="app-2")
    assert (view.workers_alive, view.cores, view.cores_free, view.max_slots, view.free_slots) == (2, 4, 0, 4, 0)
    assert view.holders == ("app-1 'first' (4 cores)",) and view.app_cores == 0
    assert never_fits_message(4, res(), view) is None
    line = waiting_message(4, 0, 0, view, res())
    assert line == (
        "waiting for 4 task slots (np=4, spark.task.cpus=1): this application has no executors: other "
        "applications hold every core it could use; cluster spark://127.0.0.1:7077: 2 workers alive, "
        "4 cores (0 free), at most 4 task slots for this job, 0 free; held by app-1 'first' (4 cores)"
    )


def test_never_fits_names_the_counts():
    message = never_fits_message(5, res(), cluster_view(BUSY, res()))
    assert message == (
        "np=5 needs 5 task slots at the same time (one barrier task per rank), but this job can never "
        "have them: the cluster spark://127.0.0.1:7077 has 2 workers alive with 4 cores in all; that "
        "leaves at most 4 task slots for this job's executors (spark.executor.cores=unset, "
        "spark.executor.memory=1024 MiB, spark.task.cpus=1). Lower np to 4 or add workers"
    )


def test_cluster_mode_counts_the_drivers_core():
    r = res(cluster_mode=True, spark_executor_cores="1", spark_executor_memory="512m", spark_driver_memory="512m")
    view = cluster_view(master_state([worker(0), worker(1)]), r)  # before submission: best placement
    assert view.max_slots == 3
    message = never_fits_message(4, r, view)
    assert (
        "2 workers alive with 4 cores in all; in cluster deploy mode the driver takes spark.driver.cores=1 and "
        "512 MiB on a worker; that leaves at most 3 task slots"
    ) in message
    assert "Lower np to 3, use client deploy mode (the driver then runs outside the cluster) or add workers" in message
    # the driver's memory counts too: a 1 GiB driver leaves its 1 GiB worker no room for an executor
    assert cluster_view(master_state([worker(0), worker(1)]), res(cluster_mode=True)).max_slots == 2
    # once placed, its own worker is the one that gives less
    placed = master_state(
        [worker(0, cores=4, memory=4096), worker(1)],
        drivers=[{"id": "driver-1", "state": "RUNNING", "worker": "worker-1", "cores": 1, "memory": 512}],
    )
    mine = cluster_view(placed, r, driver_id="driver-1")
    assert mine.max_slots == 5 and mine.driver_note.endswith("on worker worker-1") and mine.holders == ()
    other = cluster_view(placed, r, driver_id="driver-2")  # someone else's driver is a holder, not a reservation
    assert other.holders == ("driver driver-1 (1 core)",) and other.max_slots == 5
    nowhere = cluster_view(master_state([worker(0, cores=1)]), res(cluster_mode=True, spark_driver_cores="2"))
    assert nowhere.max_slots == 0 and nowhere.driver_note.endswith("(no alive worker has that much)")
    assert "Change the executor or driver sizes" in never_fits_message(1, res(cluster_mode=True), nowhere)


def test_executor_size_memory_and_dead_workers_limit_the_slots():
    state = master_state([worker(0, cores=4, memory=1024), worker(1, state="DEAD"), worker(2, cores=3)])
    # worker-0: 4 cores, 1 GiB; worker-2: 3 cores, 1 GiB; worker-1 is dead
    assert cluster_view(state, res(spark_executor_cores="2", spark_executor_memory="512m")).max_slots == 4 + 2
    assert cluster_view(state, res(spark_executor_cores="2", spark_executor_memory="1g")).max_slots == 2 + 2
    assert cluster_view(state, res(spark_executor_cores="1", spark_executor_memory="512m")).max_slots == 2 + 2
    assert cluster_view(state, res(spark_executor_cores="2", spark_task_cpus="2")).max_slots == 1 + 1
    assert cluster_view(state, res()).max_slots == 4 + 3  # one executor per worker with all its cores
    assert cluster_view(state, res(spark_executor_memory="2g")).max_slots == 0
    assert cluster_view(state, res(spark_cores_max="5")).max_slots == 5


def test_waiting_lines_change_only_with_the_situation():
    r = res(spark_executor_cores="2")
    starting = cluster_view(
        master_state([worker(0, used=2), worker(1, used=2)], apps=[app("app-2", 4)]), r, app_id="app-2"
    )
    assert waiting_message(4, 2, 1, starting, r) == (
        "waiting for 4 task slots (np=4, spark.task.cpus=1): the master "
        "granted this application 4 cores; its executors are starting"
    )
    partial = cluster_view(
        master_state([worker(0, used=2), worker(1, used=2)], apps=[app("app-1", 2, "np2"), app("app-2", 2)]),
        r,
        app_id="app-2",
    )
    assert waiting_message(4, 2, 1, partial, r).startswith(
        "waiting for 4 task slots (np=4, spark.task.cpus=1): this application has 2 task slots on 1 executor (2 of "
        "the 4 cores it needs granted); cluster"
    )
    assert waiting_message(4, 0, 0, None, r) == (
        "waiting for 4 task slots (np=4, spark.task.cpus=1): this application has no executors yet"
    )
    free = cluster_view(master_state([worker(0), worker(1)]), r, app_id="app-9")
    assert "no executors yet; the master is starting them" in waiting_message(4, 0, 0, free, r)


def test_many_holders_are_counted_not_listed():
    apps = [app(f"app-{i}", 1) for i in range(9)]
    view = cluster_view(master_state([worker(0, cores=9, used=9)], apps=apps), res())
    assert view.describe().endswith("app-5 'job' (1 core), 3 more")


def test_master_ui_urls():
    assert master_ui_urls("spark://m1:7077,m2:7078", {"spark.master.ui.port": "8081"}) == [
        "http://m1:8081",
        "http://m2:8081",
    ]
    assert master_ui_urls("spark://m1:7077", {}) == ["http://m1:8080"]
    assert master_ui_urls("yarn", {}) == [] and master_ui_urls("local[2]", {}) == []


class _Pages(BaseHTTPRequestHandler):
    pages: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        body = self.pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


def test_read_master_state_accepts_only_this_masters_page():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    recorded = json.loads((DATA / "master_state_running.json").read_text())
    try:
        _Pages.pages = {"/json/": json.dumps(recorded).encode()}
        assert read_master_state([url], recorded["url"])["workers"] == recorded["workers"]
        assert read_master_state([url], "spark://127.0.0.1:1") is None  # another master's page
        assert read_master_state(["http://127.0.0.1:9", url], recorded["url"]) is not None  # the first is down
        _Pages.pages = {"/json/": json.dumps({**recorded, "status": "STANDBY"}).encode()}
        assert read_master_state([url], recorded["url"]) is None
        _Pages.pages = {"/json/": b"<html>not a master</html>"}
        assert read_master_state([url], recorded["url"]) is None
    finally:
        server.shutdown()
        server.server_close()


def test_cluster_mode_watcher_lines():
    from airflow_provider_horovod.standalone.slots import cluster_wait_message

    r = AppResources.from_conf(
        {"spark.master": MASTER, "spark.executor.cores": "1", "spark.cores.max": "4", "spark.driver.memory": "512m"},
        assume_defaults=False,
        cluster_mode=True,
    )
    drivers = [
        {"id": "driver-1", "state": "RUNNING", "worker": "worker-0", "cores": 1},
        {"id": "driver-2", "state": "SUBMITTED", "cores": 1},
    ]
    full = master_state([worker(0, used=2), worker(1, used=2)], apps=[app("app-1", 3, "first")], drivers=drivers)
    assert cluster_wait_message(full, r, 4, submission_id="driver-2", app_id=None) == (
        "driver driver-2 is waiting for a worker with 1 free core and 512 MiB; cluster spark://127.0.0.1:7077: 2 "
        "workers alive, 4 cores (0 free), at most 3 task slots for this job, 0 free; held by app-1 'first' (3 "
        "cores), driver driver-1 (1 core)"
    )
    drivers[1].update(state="RUNNING", worker="worker-1")
    waiting = master_state(
        [worker(0, used=2), worker(1, used=1)],
        apps=[app("app-1", 2, "first"), app("app-2", 0, "second", "WAITING")],
        drivers=drivers,
    )
    assert cluster_wait_message(waiting, r, 4, submission_id="driver-2", app_id="app-2").startswith(
        "application app-2 is waiting for 4 task slots (np=4): the master has granted it 0 of the 4 cores it needs; "
        "cluster"
    )
    busy = master_state(
        [worker(0, used=2), worker(1, used=2)],
        apps=[app("app-1", 3, "first"), app("app-2", 0, "second", "WAITING")],
        drivers=drivers,
    )
    assert "it has no executors: other applications hold every core it could use" in cluster_wait_message(
        busy, r, 4, submission_id="driver-2", app_id="app-2"
    )
    running = master_state(
        [worker(0, cores=4, used=4), worker(1, used=1)], apps=[app("app-2", 4, "second")], drivers=drivers
    )
    assert cluster_wait_message(running, r, 4, submission_id="driver-2", app_id="app-2") is None


def test_slot_wait_timeout_arguments():
    from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
    from airflow_provider_horovod.runtime import HorovodRunner
    from airflow_provider_horovod.runtime.driver.program import _parse, _settings

    assert HorovodRunner(np=2).settings.slot_wait_timeout_s == 3600.0
    assert HorovodRunner(np=2, slot_wait_timeout_s=None).settings.slot_wait_timeout_s is None
    with pytest.raises(ValueError, match="slot_wait_timeout_s must be a positive number of seconds or None"):
        HorovodRunner(np=2, slot_wait_timeout_s=0)
    with pytest.raises(ValueError, match="slot_wait_timeout_s must be a positive number of seconds or None"):
        HorovodRunnerOperator(task_id="t", python_callable=len, slot_wait_timeout_s=-1)
    op = HorovodRunnerOperator(task_id="t", python_callable=len, slot_wait_timeout_s="{{ params.wait }}")
    assert "slot_wait_timeout_s" in op.template_fields
    for rendered, seconds in (("120", 120.0), (" none ", None), (None, None), (30, 30.0)):
        op.slot_wait_timeout_s = rendered
        assert op.job_settings().slot_wait_timeout_s == seconds
        args = op.job_settings().to_args()
        assert args[args.index("--slot-wait-timeout-s") + 1] == ("none" if seconds is None else str(seconds))
        assert _settings(args).slot_wait_timeout_s == seconds  # what the driver program reads back
    op.slot_wait_timeout_s = "soon"
    with pytest.raises(ValueError, match=r"got 'soon' after rendering"):
        op.job_settings()
    base = ["--payload", "p", "--result-dir", "d", "--np", "2"]
    assert _settings(_parse(base)[1]).slot_wait_timeout_s == 3600.0  # the runtime's default then
    assert _settings(_parse([*base, "--slot-wait-timeout-s", "none"])[1]).slot_wait_timeout_s is None
    assert _settings(_parse([*base, "--slot-wait-timeout-s", "90"])[1]).slot_wait_timeout_s == 90.0


def test_a_shrunk_attempt_is_asked_to_stop_once_np_slots_stay_for_two_looks(monkeypatch):
    """stop_at_checkpoint_when's growing rule (the real registration of a new worker's executor:
    tests/e2e/test_durable.py): slots that show once and go (an executor that registers and dies) do not stop the
    attempt; np slots at two looks in a row do, once a task listens (tell() reached one), and then it stops looking."""
    from airflow_provider_horovod.runtime.driver import slots

    counts = iter([1, 2, 1, 2, 2, 2, 7, 8, 9])  # own_slots at each look
    monkeypatch.setattr(slots, "own_slots", lambda sc: (next(counts), 0))
    reached = iter([0, 1])  # nobody listened at the first try
    told: list[str] = []
    lines: list[str] = []

    def tell(message: str) -> int:
        told.append(message)
        return next(reached)

    with slots.stop_at_checkpoint_when(
        object(), tell, ranks=1, grows_to=2, decommission=None, log=lines.append, interval_s=0.01
    ) as asked:
        assert asked.wait(10)
    assert told == ["stop all np=2 task slots are free again"] * 2  # the 5th look reached nobody; the 6th was heard
    assert lines == [
        "all np=2 task slots are free again (2 in this application): rank 0 stops after its next save_checkpoint() "
        "and the job starts again from there with 2 ranks"
    ]
    assert next(counts) == 7  # it stopped looking after the 6th look


def test_an_attempt_is_asked_to_stop_when_one_of_its_executors_is_being_decommissioned(monkeypatch):
    """The decommissioning rule (Spark's own decommissioning on a real cluster: tests/integration/
    test_decommission.py): an executor with a task being decommissioned stops the attempt at its next checkpoint as
    soon as the application has the attempt's ranks' slots without it (a spare); until then it is said once and the
    attempt trains on."""
    from airflow_provider_horovod.runtime.driver import slots

    found = iter([[], [("3", "10.0.0.9")], [("3", "10.0.0.9")], [("3", "10.0.0.9")]])
    asked_about: list[dict] = []

    def decommissioning(sc, executors):
        asked_about.append(dict(executors))
        return next(found)

    monkeypatch.setattr(slots, "decommissioning_executors", decommissioning)
    free = iter([1, 1, 2])  # own_slots without the decommissioning executor: a spare executor registers at last
    monkeypatch.setattr(slots, "own_slots", lambda sc: (next(free), 0))
    told: list[str] = []
    lines: list[str] = []
    with slots.stop_at_checkpoint_when(
        object(), lambda m: told.append(m) or 1, ranks=2, grows_to=None, log=lines.append, interval_s=0.01,
        decommission=lambda: {"3": "10.0.0.9", "4": "10.0.0.8"},  # the attempt's own executors
    ) as asked:  # fmt: skip
        assert asked.wait(10)
    assert told == ["stop executor 3 on 10.0.0.9 is being decommissioned"]
    assert lines == [
        "executor 3 on 10.0.0.9 is being decommissioned (its machine is going), but this application has 1 other task "
        "slot(s) for 2 ranks: the attempt trains on until it goes (a spare executor lets the job move at a checkpoint "
        "instead: on a standalone cluster, spark.cores.max at least np plus one executor's cores)",
        "executor 3 on 10.0.0.9 is being decommissioned (its machine is going): rank 0 stops after its next "
        "save_checkpoint() and the job starts again from there on the other executors (2 task slots)",
    ]
    assert asked_about[0] == {"3": "10.0.0.9", "4": "10.0.0.8"}  # only the attempt's executors are looked at
