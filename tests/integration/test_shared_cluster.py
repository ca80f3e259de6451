"""
Horovod jobs sharing one busy Spark standalone cluster of 2 workers x 2 cores (4 task slots, 127.0.0.1), submitted
through the hooks exactly as the operator submits them (issue #11):

* two np=4 jobs: the second waits while the first holds every core, says so, and succeeds after it; a third one
  with a short ``slot_wait_timeout_s`` gives up with the counts; an np=2 ``torch.distributed`` job
  (``launcher="torch"``) waits beside them and runs once cores are free;
* jobs that can never fit fail before anything is submitted, with the counts: np=5 in client deploy mode, and
  np=4 in cluster deploy mode (the driver's own core leaves 3 slots);
* six jobs, np=2 and np=4 mixed, submitted at once: all succeed, each ran exactly once, artifacts are separate,
  and no driver, executor or rank is left running.

Each application uses one-core executors capped at ``np`` cores (``spark.cores.max``), so two np=2 jobs run side
by side and the rest queue; the master hands freed cores to the earliest waiting application.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.utils.spark_conf import JVM_STARTUP_OPTIONS, PYTHON_DAEMON_MODULE
from tests.integration.shared_cluster_jobs import RECORD, job_conf, run_client_job, starts, wait_until
from tests.standalone import MARKER_ENV, standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

CONN_ID = "spark_shared"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with (
        standalone_cluster(workers=2, cores_per_worker=2, work_dir=tmp_path_factory.mktemp("shared")) as c,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", c.airflow_connection(deploy_mode="client"))
        yield c


def _marker(cluster) -> dict[str, str]:
    """The cluster's marker in the drivers' environment too, so the fixture's leftover check covers them."""
    return {MARKER_ENV: cluster.marker}


def _job_processes(cluster) -> list[psutil.Process]:
    """The cluster's processes that belong to jobs: drivers, executors, Spark's Python workers, ranks."""
    daemons = {p.pid for p in cluster.processes.values()}
    return [p for p in cluster.leftover_processes() if p.pid not in daemons]


def test_second_job_waits_for_the_first_and_succeeds(cluster, tmp_path):
    gate = tmp_path / "gate"
    first_lines: list[str] = []
    second_lines: list[str] = []
    third_lines: list[str] = []
    ddp_lines: list[str] = []

    def context() -> str:
        sections = ("first", first_lines), ("second", second_lines), ("third", third_lines), ("ddp", ddp_lines)
        return "\n".join(
            [line for name, lines in sections for line in (f"-- {name} --", *lines[-30:])] + [cluster.log_tail(10)]
        )

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(
            run_client_job, CONN_ID, 4, "first", tmp_path, lines=first_lines, gate=gate, marker=_marker(cluster)
        )
        wait_until(lambda: len(starts(tmp_path)) == 4 or first.done(), "the first job's 4 ranks", context=context)
        assert not first.done(), context()
        second = pool.submit(
            run_client_job, CONN_ID, 4, "second", tmp_path, lines=second_lines, marker=_marker(cluster)
        )
        third = pool.submit(
            run_client_job,
            CONN_ID,
            4,
            "third",
            tmp_path,
            lines=third_lines,
            marker=_marker(cluster),
            slot_wait_timeout_s=5,
        )
        wait_until(
            lambda: any("waiting for 4 task slots" in line for line in second_lines) or second.done(),
            "the second job to wait",
            context=context,
        )
        ddp = pool.submit(
            run_client_job, CONN_ID, 2, "ddp", tmp_path, lines=ddp_lines, marker=_marker(cluster), launcher="torch"
        )
        wait_until(
            lambda: any("waiting for 2 task slots" in line for line in ddp_lines) or ddp.done(),
            "the torch.distributed job to wait",
            context=context,
        )
        with pytest.raises(HorovodJobError) as gave_up:
            third.result(timeout=240)
        gate.touch()  # the first job may finish now
        done_first = first.result(timeout=240)
        done_second = second.result(timeout=300)
        done_ddp = ddp.result(timeout=300)

    assert done_first.value["size"] == done_second.value["size"] == 4
    assert done_second.value["entered"] > done_first.value["done"]  # its ranks started after the first's ended
    waiting = next(line for line in second_lines if "waiting for 4 task slots" in line)
    assert "this application has no executors: other applications hold every core it could use" in waiting
    assert "2 workers alive, 4 cores (0 free), at most 4 task slots for this job, 0 free" in waiting
    assert f"{done_first.app_id} 'shared-first' (4 cores)" in waiting
    assert any("4 task slots available after waiting" in line for line in second_lines)
    message = str(gave_up.value)
    assert "np=4 needs 4 task slots at the same time, and they did not come within slot_wait_timeout_s=5 s" in message
    assert "other applications hold every core" in message and f"{done_first.app_id} 'shared-first'" in message
    # the torch.distributed job waited the same way, then its two ranks ran after the first job had ended
    assert (done_ddp.value["size"], done_ddp.value["total"]) == (2, 2.0)
    assert done_ddp.value["entered"] > done_first.value["done"]
    ddp_waiting = next(line for line in ddp_lines if "waiting for 2 task slots" in line)
    assert "other applications hold every core" in ddp_waiting, ddp_waiting
    assert any("2 task slots available after waiting" in line for line in ddp_lines), context()
    assert sorted(starts(tmp_path)) == sorted(
        [(tag, r) for tag in ("first", "second") for r in range(4)] + [("ddp", 0), ("ddp", 1)]
    )
    # the executors started with the hook's JVM options (the first line of an executor's stderr is its command)
    stderrs = [
        path.read_text(errors="replace") for path in cluster.work_dir.glob(f"worker-*/{done_second.app_id}/*/stderr")
    ]
    commands = [text.split("\n", 1)[0] for text in stderrs]
    assert commands and all(
        f'"{option}"' in command
        for command in commands  # Spark quotes each argument
        for option in JVM_STARTUP_OPTIONS.split()
    ), commands
    # ... and their Python daemon put Spark's source-only pyspark.zip behind the installed, compiled PySpark
    assert ".zip" not in done_second.value["pyspark"] and "site-packages" in done_second.value["pyspark"]
    daemon = f"set to [{PYTHON_DAEMON_MODULE}] in 'spark.python.daemon.module'"
    assert all(daemon in text for text in stderrs)


def test_jobs_that_can_never_fit_fail_before_submission(cluster, tmp_path):
    from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
    from tests.integration.shared_cluster_jobs import payload_file

    before = cluster.master_json()
    lines: list[str] = []
    with pytest.raises(HorovodJobError) as client_mode:
        run_client_job(CONN_ID, 5, "too-many", tmp_path, lines=lines, conf={"spark.cores.max": "8"})
    message = str(client_mode.value)
    assert message.startswith(
        "np=5 needs 5 task slots at the same time (one barrier task per rank), but this job "
        "can never have them: the cluster spark://127.0.0.1:"
    ), message
    assert "has 2 workers alive with 4 cores in all; that leaves at most 4 task slots" in message
    assert "Lower np to 4" in message
    assert lines == []  # spark-submit never ran
    with pytest.raises(HorovodJobError, match=r"spark.cores.max=2 \(.*\) allows at most 2 task slots. Lower np to 2"):
        run_client_job(CONN_ID, 4, "capped", tmp_path, lines=lines, conf={"spark.cores.max": "2"})

    # one-core executors, as cluster mode needs: the driver's worker keeps one core for an executor
    hook = HorovodStandaloneHook(conn_id=CONN_ID)
    path, key = payload_file(tmp_path / "cluster-staging", "cluster", tmp_path, None)
    with pytest.raises(HorovodJobError) as cluster_mode:
        hook.submit(
            TrainingJob(
                key=key,
                payload=path.read_bytes(),
                settings=JobSettings(np=4),
                artifact_dir=str(tmp_path / "art"),
                conf={**job_conf(4, executor_cores=1), "spark.driver.cores": "1"},
            ),
            staging=tmp_path / "cluster-staging",
        )
    message = str(cluster_mode.value)
    assert "np=4 needs 4 task slots at the same time" in message
    assert (
        "2 workers alive with 4 cores in all; in cluster deploy mode the driver takes spark.driver.cores=1 "
        "and 512 MiB on a worker; that leaves at most 3 task slots"
    ) in message
    assert "use client deploy mode" in message

    after = cluster.master_json()  # nothing reached the master
    for key_ in ("activeapps", "completedapps", "activedrivers", "completeddrivers"):
        assert len(after[key_]) == len(before[key_]), key_
    assert not (tmp_path / RECORD).exists()


def test_six_jobs_at_once_all_run_exactly_once(cluster, tmp_path):
    jobs = {"a4": 4, "b2": 2, "c4": 4, "d2": 2, "e2": 2, "f4": 4}
    lines: dict[str, list[str]] = {tag: [] for tag in jobs}
    context = lambda: "\n".join(f"-- {t} --\n" + "\n".join(ls[-15:]) for t, ls in lines.items())  # noqa: E731
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {
            tag: pool.submit(run_client_job, CONN_ID, np, tag, tmp_path, lines=lines[tag], marker=_marker(cluster))
            for tag, np in jobs.items()
        }
        results = {}
        for tag, future in futures.items():
            try:
                results[tag] = future.result(timeout=420)
            except Exception as err:
                raise AssertionError(f"job {tag} failed: {err}\n{context()}") from err

    for tag, np in jobs.items():
        assert results[tag].value["tag"] == tag and results[tag].value["size"] == np
        assert results[tag].value["total"] == float(np)
        artifact_dir = tmp_path / "artifacts" / tag
        assert sorted(p.name for p in artifact_dir.iterdir()) == [f"{tag}.txt"]
        assert (artifact_dir / f"{tag}.txt").read_text() == tag
        assert results[tag].artifact_paths == [str(artifact_dir / f"{tag}.txt")]
    assert len({r.app_id for r in results.values()}) == len(jobs)
    # every rank of every job started exactly once: nothing lost, nothing retried
    assert sorted(starts(tmp_path)) == sorted((tag, r) for tag, np in jobs.items() for r in range(np))
    # the jobs queued: at least one of them waited for slots and said so
    assert any("task slots available after waiting" in line for ls in lines.values() for line in ls), context()
    # every driver, executor and rank of the jobs ends (the worker stops executors asynchronously: bounded wait)
    _gone, alive = psutil.wait_procs(_job_processes(cluster), timeout=60)
    assert not alive, [" ".join(p.cmdline())[:150] for p in alive]
    state = cluster.master_json()
    assert not state["activeapps"] and state["coresused"] == 0
