"""
B10 through Airflow: B10's kill, training and cluster, with the tries run by a real Airflow deployment
(``tests/airflow_deployment.py``: api-server, scheduler, dag-processor; LocalExecutor) instead of client scripts. Each
round triggers ``b10_airflow_retry`` (``retries=1, retry_delay=0``: the first try fails on the lost executor and Airflow
runs the second, which resumes from the checkpoint) and ``b10_in_job`` (``max_restarts=1, retries=0``), both from
``benchmarks/dags/b10_restart.py``, and SIGKILLs rank 1's executor JVM once rank 0 has recorded step ``KILL_AT``.

This is the comparison issue #36 states (the in-job restart against the Airflow-retry path with ``retry_delay=0``) as a
DAG author gets it: the retry's time includes Airflow's own part (the failed try's end, the scheduler queueing the
retry, the LocalExecutor starting its task process, the DAG file parsed again, the operator submitting a new
application), and both paths run with the Spark settings the operator gives its applications. B10's script rounds
run the retry without Airflow's part, as soon as the first try failed, but with a plain SparkSession's settings.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.env import bench_environ
from benchmarks.lost_executor import INTERVAL, KILL_AT, _records

DAGS = Path(__file__).resolve().parent / "dags" / "b10_restart.py"
RETRY_DAG, IN_JOB_DAG, TASK = "b10_airflow_retry", "b10_in_job", "train"
RUN_TIMEOUT_S = 300.0


def kill_round(airflow, cluster, dag_id: str, log: Callable[[str], None]) -> dict:
    """
    Trigger ``dag_id``, SIGKILL rank 1's executor once rank 0 has recorded step ``KILL_AT``, wait for the run to
    succeed; return the seconds from the kill to the first step trained after it, the work lost, and (from the API's
    record of the tries) when the failed try ended and the retry started.

    :param airflow: the running deployment (:class:`tests.airflow_deployment.AirflowDeployment`).
    :param cluster: the standalone cluster the DAGs run on (:class:`tests.standalone.StandaloneCluster`).
    :param dag_id: :data:`RETRY_DAG` or :data:`IN_JOB_DAG`.
    :param log: progress lines.
    :return: ``to_first_step_s``, ``lost_intervals``, ``try_number``, ``total_steps``; for the retry also
        ``failed_try_end_s`` and ``retry_start_s`` (seconds after the kill).
    :raises RuntimeError: the run did not reach the kill or did not succeed, the kill was not followed by a retry (the
        retry DAG) or by one restart within the try (the in-job DAG).
    """
    from tests.airflow_deployment import _poll, api_epoch

    run_id = airflow.trigger(dag_id)
    where = _poll(
        f"{dag_id}'s checkpoint_dir XCom",
        lambda: airflow.xcom(dag_id, run_id, TASK, "checkpoint_dir", default=None),
        timeout_s=RUN_TIMEOUT_S,
        interval_s=0.5,
    )
    record = Path(where).parent / "steps.jsonl"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    victim, state_checked = None, time.monotonic()
    while victim is None or not any(r["step"] >= KILL_AT for r in _records(record)):
        victim = victim or cluster.rank_executor(1)  # found while the ranks start: the kill follows the step at once
        ended = False
        if time.monotonic() - state_checked > 2:  # a run that ended without the step (every 2 s: a light API load)
            state_checked, ended = time.monotonic(), airflow.run_state(dag_id, run_id) in ("success", "failed")
        if time.monotonic() > deadline or ended:
            raise RuntimeError(
                f"{dag_id} never trained step {KILL_AT}: {airflow.task_log(dag_id, run_id, TASK)[-3000:]}"
            )
        time.sleep(0.05)  # polls a file rank 0 writes and the process table, bounded by the deadline
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    state = airflow.wait_for_run(dag_id, run_id, timeout_s=RUN_TIMEOUT_S)
    ti = airflow.task_instance(dag_id, run_id, TASK)
    if state != "success":
        raise RuntimeError(
            f"{dag_id} ended {state}: {airflow.task_log(dag_id, run_id, TASK, ti['try_number'])[-3000:]}"
        )
    records = _records(record)
    before = [r["step"] for r in records if (r["try"], r["attempt"]) == (1, 0)]  # the killed attempt's, all of them
    after = [r for r in records if (r["try"], r["attempt"]) != (1, 0)]
    wanted = (2, 0) if dag_id == RETRY_DAG else (1, 1)  # the retry's first attempt, or the try's first restart
    restarts = airflow.xcom(dag_id, run_id, TASK, "restarts", default=[])
    if not after or (after[0]["try"], after[0]["attempt"]) != wanted or len(restarts) != wanted[1]:
        raise RuntimeError(
            f"{dag_id}: expected attempt {wanted} after the kill, {len(restarts)} restart(s): {after[:3]}"
        )
    resumed_from = after[0]["step"] - 1
    out = {
        "to_first_step_s": after[0]["t"] - killed_at,
        "lost_intervals": (max(before) - resumed_from) / INTERVAL,
        "try_number": ti["try_number"],
        "total_steps": len(records),
    }
    if dag_id == RETRY_DAG:
        tries = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{TASK}/tries").json()
        by_number = {t["try_number"]: t for t in tries["task_instances"]}
        failed_end, retry_start = api_epoch(by_number[1]["end_date"]), api_epoch(by_number[2]["start_date"])
        out.update(
            failed_try_end_s=failed_end - killed_at,  # the kill -> Airflow recorded the first try's failure
            retry_start_s=retry_start - killed_at,  # the kill -> Airflow started the second try
        )
    log(f"B10 through Airflow, {dag_id}: {json.dumps(out)}")
    return out


def run_through_airflow(cluster, work: Path, reps: int, budget_s: float, notes: list[str], log) -> dict:
    """
    Start a deployment against ``cluster`` and run up to ``reps`` paired rounds (the Airflow retry, then the in-job
    restart), no round starting after ``budget_s`` seconds from the deployment's start (at least one runs).

    :param cluster: B10's running standalone cluster (:class:`tests.standalone.StandaloneCluster`).
    :param work: an empty folder for the deployment's home, DAGs and artifacts.
    :param reps: rounds to run.
    :param budget_s: seconds after which no further round starts.
    :param notes: where a cut is noted.
    :param log: progress lines.
    :return: ``{"rounds": [...], "median_ratio": ...}``; each round has ``retry_s``, ``in_job_s``, ``ratio``,
        the work lost on each path, and the retry's ``failed_try_end_s`` and ``retry_start_s`` (seconds after the
        kill).
    """
    from tests.airflow_deployment import airflow_deployment, copy_dags

    env = {
        **bench_environ(),
        "AIRFLOW_CONN_SPARK_CLUSTER": cluster.airflow_connection(deploy_mode="client"),
        "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(work / "artifacts"),  # bench_environ's PYTHONPATH has the repository:
        # the DAG file imports B10's numbers from benchmarks.lost_executor
    }
    started = time.monotonic()
    rounds: list[dict] = []
    dags = copy_dags(work / "dags", DAGS)
    with airflow_deployment(
        dags, home=work / "home", extra_env=env, components=("api-server", "scheduler", "dag-processor")
    ) as airflow:
        log(f"B10 through Airflow: deployment up in {time.monotonic() - started:.0f} s")
        for i in range(reps):
            per_round = (time.monotonic() - started) / len(rounds) if rounds else 0.0
            if rounds and time.monotonic() - started + per_round > budget_s:
                notes.append(
                    f"B10 through Airflow: {i} of {reps} rounds "
                    f"(the next would have passed its {budget_s:.0f} s budget)"
                )
                break
            try:
                retry = kill_round(airflow, cluster, RETRY_DAG, log)
                in_job = kill_round(airflow, cluster, IN_JOB_DAG, log)
                if (retry["try_number"], in_job["try_number"]) != (2, 1):
                    raise RuntimeError(f"expected a retry and a restart within the try: {retry}, {in_job}")
            except Exception as err:
                if not rounds:
                    raise
                notes.append(f"B10 through Airflow: round {i + 1} failed, the {i} before it stand: {str(err)[:300]}")
                break
            rounds.append(
                {
                    "retry_s": retry["to_first_step_s"],
                    "in_job_s": in_job["to_first_step_s"],
                    "ratio": in_job["to_first_step_s"] / retry["to_first_step_s"],
                    "retry_lost_intervals": retry["lost_intervals"],
                    "in_job_lost_intervals": in_job["lost_intervals"],
                    "failed_try_end_s": retry["failed_try_end_s"],
                    "retry_start_s": retry["retry_start_s"],
                }
            )
            log(f"B10 through Airflow, round {i}: {json.dumps(rounds[-1])}")
    return {"rounds": rounds, "median_ratio": statistics.median(r["ratio"] for r in rounds)}
