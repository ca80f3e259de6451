"""
The "Training progress" endpoint's response time for a 10,000-point history, through a real api-server.

Starts a deployment (api-server, scheduler, dag-processor on 127.0.0.1; tests/airflow_deployment.py), runs the
tests' progress-writer DAG once with 10,000 steps written at once (two metrics, so 20,000 points), then times
``GET /horovod/progress`` as the page calls it (default thinning to 2,000 points per metric) and with the whole
history (``max_points=0``), plus the file reading and shaping alone in this process. Not part of ``python -m
benchmarks`` (its own command, ~1.5 min on 2 cores)::

    .venv/bin/python -m benchmarks.ui_endpoint [--steps 10000] [--requests 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
DAG_ID, TASK_ID = "horovod_progress_writer", "train"


def _timings(call, requests: int) -> tuple[list[float], int]:
    call()  # warm-up: imports, fsspec instance, page cache
    times, size = [], 0
    for _ in range(requests):
        start = time.perf_counter()
        size = call()
        times.append(time.perf_counter() - start)
    return times, size


def _row(name: str, times: list[float], size: int) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"| {name} | {statistics.median(times) * 1000:.0f} ms | {p95 * 1000:.0f} ms | {size / 1024:.0f} KiB |"


def main(argv: list[str] | None = None) -> int:
    """
    Run the benchmark and print a Markdown table to stdout (progress to stderr).

    :param argv: ``--steps`` (records in ``metrics.jsonl``, default 10,000), ``--requests`` (timed per case, 30).
    :return: the exit status.
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ui_endpoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from airflow_provider_horovod.plugins.progress_reader import read_progress
    from tests.airflow_deployment import airflow_deployment, copy_dags

    with tempfile.TemporaryDirectory(prefix="ui-endpoint-bench-") as tmp:
        dags = copy_dags(Path(tmp) / "dags", REPO / "tests" / "e2e" / "dags" / "horovod_progress_writer.py")
        started = time.monotonic()
        with airflow_deployment(
            dags, home=Path(tmp) / "home", components=("api-server", "scheduler", "dag-processor")
        ) as airflow:
            print(f"deployment up in {time.monotonic() - started:.0f} s", file=sys.stderr)
            run_id = airflow.trigger(DAG_ID, conf={"steps": args.steps, "interval_s": 0})
            state = airflow.wait_for_run(DAG_ID, run_id, timeout_s=300)
            if state != "success":
                print(f"the writer run ended {state}:\n{airflow.task_log(DAG_ID, run_id, TASK_ID)}", file=sys.stderr)
                return 1
            artifact_dir = airflow.xcom(DAG_ID, run_id, TASK_ID, "artifact_dir")
            headers = {"Authorization": f"Bearer {airflow.token()}"}
            params = {"dag_id": DAG_ID, "run_id": run_id, "task_id": TASK_ID}
            with httpx.Client(base_url=airflow.url, headers=headers, timeout=60) as client:

                def get(**extra):
                    def call() -> int:
                        response = client.get("/horovod/progress", params={**params, **extra})
                        response.raise_for_status()
                        return len(response.content)

                    return call

                paged = _timings(get(), args.requests)
                full = _timings(get(max_points=0), args.requests)
                count = client.get("/horovod/progress", params={**params, "max_points": 0}).json()["history"]
            local = _timings(lambda: len(str(read_progress(artifact_dir, max_points=0))), args.requests)
    points = sum(len(v) for v in count["metrics"].values())
    print(
        f"\n{count['count']} records, {points} points ({len(count['metrics'])} metrics); "
        f"{args.requests} requests each, after one warm-up; load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| case | median | p95 | response size |\n|---|---|---|---|")
    print(_row("GET /horovod/progress (page default: <= 2,000 points per metric)", *paged))
    print(_row("GET /horovod/progress?max_points=0 (all points)", *full))
    print(_row("read_progress() alone, in process (all points)", *local))
    return 0


if __name__ == "__main__":
    sys.exit(main())
