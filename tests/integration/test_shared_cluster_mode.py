"""
Issue #11's scenario in cluster deploy mode: two np=4 jobs, the second waiting for the first's task slots.

In cluster deploy mode each driver takes a core on a worker (``spark.driver.cores=1``), so "4 slots" needs a
cluster of 6 cores: 3 workers x 2 cores hold both drivers and leave exactly 4 task slots for executors, as the
2 x 2 cluster does in client mode. (On the 2 x 2 cluster np=4 cannot run in cluster mode at all: 3 slots are left
next to a driver; ``test_shared_cluster.py`` checks that this is refused before submission.) Executors are one
core each, since drivers leave single cores free on their workers.

The jobs go through ``HorovodStandaloneHook`` (the REST submission server) as the operator submits them; the task
log's account of the wait comes from :class:`~airflow_provider_horovod.standalone.slots.ClusterSlotsWatcher` (the
operator's, reading the master), the driver's own from its stdout on the worker.
"""

from __future__ import annotations

import pytest

from tests.integration.shared_cluster_jobs import job_conf, payload_file, starts, wait_until
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

CONN_ID = "spark_shared_cluster_mode"
CONF = {**job_conf(4, executor_cores=1), "spark.driver.cores": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with (
        standalone_cluster(
            workers=3,
            cores_per_worker=2,
            memory_per_worker="2g",
            work_dir=tmp_path_factory.mktemp("shared-cluster-mode"),
        ) as c,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", c.airflow_connection(deploy_mode="cluster"))
        yield c


def _terminal(hook, submission_id: str) -> object:
    status = hook.status(submission_id)
    return status if status.is_terminal else None


def test_second_job_waits_for_the_first_in_cluster_mode(cluster, tmp_path):
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
    from airflow_provider_horovod.standalone.poll import read_app, read_result
    from airflow_provider_horovod.standalone.slots import ClusterSlotsWatcher

    gate = tmp_path / "gate"
    hook = HorovodStandaloneHook(conn_id=CONN_ID)
    staging = {tag: tmp_path / "staging" / tag for tag in ("first", "second")}

    def submit(tag: str, with_gate: bool) -> str:
        path, key = payload_file(staging[tag], tag, tmp_path, gate if with_gate else None)
        return hook.submit(
            TrainingJob(
                key=key,
                payload=path.read_bytes(),
                artifact_dir=str(tmp_path / "artifacts" / tag),
                settings=JobSettings(np=4, slot_wait_timeout_s=600),
                conf=CONF,
                app_name="shared-cluster-mode",
            ),
            staging=staging[tag],
        )

    lines: list[str] = []
    context = lambda: "\n".join(lines[-20:]) + "\n" + cluster.log_tail(20)  # noqa: E731
    first = submit("first", with_gate=True)
    wait_until(
        lambda: len(starts(tmp_path)) == 4 or _terminal(hook, first),
        "the first job's 4 ranks",
        timeout_s=300,
        context=context,
    )
    assert not _terminal(hook, first), context()
    second = submit("second", with_gate=False)
    watcher = ClusterSlotsWatcher(
        master_ui_url=hook.endpoints.master_ui_url,
        submission_id=second,
        app_id=lambda: read_app(staging["second"])[0],
        np=4,
        conf=CONF,
        log=lines.append,
        poll_interval_s=0.5,
    ).start()
    try:
        wait_until(
            lambda: any("has no executors: other applications hold every core" in ln for ln in lines),
            "the second job to wait for slots",
            timeout_s=300,
            context=context,
        )
        gate.touch()  # the first job may finish now
        ends = {
            sub: wait_until(
                lambda sub=sub: _terminal(hook, sub), f"driver {sub} to end", timeout_s=300, context=context
            )
            for sub in (first, second)
        }
        wait_until(
            lambda: any("has the cores for its 4 task slots" in ln for ln in lines),
            "the watcher to see the wait end",
            timeout_s=30,
            context=context,
        )
    finally:
        watcher.stop()

    results = {tag: read_result(staging[tag], ends[sub]) for tag, sub in (("first", first), ("second", second))}
    import cloudpickle

    values = {tag: cloudpickle.loads(r.return_value) for tag, r in results.items()}
    assert values["first"]["size"] == values["second"]["size"] == 4
    assert values["second"]["entered"] > values["first"]["done"]
    first_app = results["first"].app_id
    waiting = next(ln for ln in lines if "has no executors" in ln)
    assert waiting.startswith(
        f"application {results['second'].app_id} is waiting for 4 task slots (np=4): it has "
        "no executors: other applications hold every core it could use; cluster spark://"
    )
    assert "3 workers alive, 6 cores (0 free), at most 4 task slots for this job, 0 free" in waiting
    assert f"{first_app} 'shared-cluster-mode' (4 cores)" in waiting and f"driver {first} (1 core)" in waiting
    # the second driver's own account, in its stdout on the worker
    (stdout,) = cluster.work_dir.glob(f"worker-*/{second}/stdout")
    driver_log = stdout.read_text()
    assert "airflow-provider-horovod: waiting for 4 task slots" in driver_log
    assert "4 task slots available after waiting" in driver_log
    assert sorted(starts(tmp_path)) == [(tag, r) for tag in ("first", "second") for r in range(4)]
    # the executors' Python daemon (from the runtime zip in spark.files) put pyspark.zip behind the installed PySpark
    assert ".zip" not in values["second"]["pyspark"] and "site-packages" in values["second"]["pyspark"]
