"""
A task that writes a training's progress files the way ``airflow_provider_horovod.runtime.report`` does
(``metrics.jsonl`` appended, ``progress.json`` rewritten, in the try's artifact directory, whose path it pushes as
XCom ``artifact_dir`` first), without Spark: for the UI page's tests and the endpoint's benchmark.

``dag_run.conf``: ``steps`` (default 120), ``interval_s`` between steps (default 0.25; 0 writes all at once),
``ranks`` (default 2; rank 1 lags a few steps).
"""

from __future__ import annotations

import json
import math
import os
import time

import pendulum
from airflow.sdk import dag, get_current_context, task

from airflow_provider_horovod.paths import default_artifact_dir
from airflow_provider_horovod.xcom_keys import XCOM_ARTIFACT_DIR


def _snapshot(state, step, total, started, now, losses, ranks):
    rate = step / (now - started) if now > started and step else None
    return {
        "time": now,
        "started_at": started,
        "state": state,
        "step": step,
        "total_steps": total,
        "epoch": step // 40,
        "percent": 100.0 * step / total,
        "steps_per_s": rate,
        "eta_s": (total - step) / rate if rate else None,
        "metrics": losses,
        "ranks": {str(r): {"step": max(0, step - 3 * r), "time": now} for r in range(ranks)},
        "slowest_rank": ranks - 1 if ranks > 1 else None,
    }


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, max_active_runs=1)
def horovod_progress_writer():
    @task
    def train():
        context = get_current_context()
        conf = context["dag_run"].conf or {}
        steps, interval = int(conf.get("steps", 120)), float(conf.get("interval_s", 0.25))
        ranks = int(conf.get("ranks", 2))
        directory = default_artifact_dir(context)
        os.makedirs(directory, exist_ok=True)
        context["ti"].xcom_push(key=XCOM_ARTIFACT_DIR, value=directory)
        started = time.time()
        with open(os.path.join(directory, "metrics.jsonl"), "a") as history:
            for step in range(1, steps + 1):
                now = time.time()
                metrics = {"loss": 2.0 * math.exp(-step / 40) + 0.05, "acc": 1 - math.exp(-step / 30)}
                history.write(
                    json.dumps(
                        {
                            "time": now,
                            "rank": 0,
                            "step": step,
                            "total_steps": steps,
                            "epoch": step // 40,
                            "metrics": metrics,
                        }
                    )
                    + "\n"
                )
                if interval or step == steps:
                    history.flush()
                    state = "finished" if step == steps else "running"
                    tmp = os.path.join(directory, "progress.json.tmp")
                    with open(tmp, "w") as out:
                        json.dump(_snapshot(state, step, steps, started, now, metrics, ranks), out)
                    os.replace(tmp, os.path.join(directory, "progress.json"))
                    time.sleep(interval)
        return steps

    train()


horovod_progress_writer()
