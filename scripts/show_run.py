"""
Show the task states and XComs of the latest run of a DAG in the current ``AIRFLOW_HOME``.

``python scripts/show_run.py DAG_ID`` prints a short summary; ``--json`` prints one JSON object
(``run_state``, ``states``, ``tries``, ``xcom``) for tests.
"""

from __future__ import annotations

import argparse
import json
import os


def latest_run(dag_id: str) -> dict:
    """Task states, try numbers and deserialized XComs of the newest run of ``dag_id``."""
    if not os.environ.get("AIRFLOW_HOME"):  # Airflow would make ~/airflow and an empty database there
        raise SystemExit(
            "AIRFLOW_HOME is not set: set it to the Airflow home of the run, e.g. "
            "AIRFLOW_HOME=$PWD/.airflow for `make demo`'s"
        )
    from airflow.models import DagRun, TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        if run is None:
            raise SystemExit(f"no run of {dag_id} in this AIRFLOW_HOME")
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id).all()
        xcoms = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id).all()
        return {
            "run_id": run.run_id,
            "run_state": str(run.state),
            "states": {ti.task_id: str(ti.state) for ti in tis},
            "tries": {ti.task_id: ti.try_number for ti in tis},
            "xcom": {f"{x.task_id}.{x.key}": XComModel.deserialize_value(x) for x in xcoms},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("dag_id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    run = latest_run(args.dag_id)
    if args.json:
        print(json.dumps(run, default=str))
        return
    print(f"\nDAG {args.dag_id}, run {run['run_id']}: {run['run_state']}")
    for task_id, state in run["states"].items():
        print(f"  task {task_id:<14} {state}")
    print("XCom:")
    for key, value in sorted(run["xcom"].items()):
        if "._link_" not in key:  # the operator extra links' own entries: buttons in the Airflow UI, not results
            print(f"  {key:<28} {value}")


if __name__ == "__main__":
    main()
