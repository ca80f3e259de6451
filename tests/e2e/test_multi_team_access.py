"""
The progress endpoint's access rule in a real multi-team deployment (``[core] multi_team``, the simple auth manager's
users with teams, two DAG bundles each owned by a team): a viewer of the team that owns the DAG gets 200 from
``/horovod/progress``, a viewer of another team gets 403 there exactly as from Airflow's own task instance and XCom
endpoints, and the admin (no team) gets 200. The endpoint relies on Airflow's own ``requires_access_dag`` checks, so
the rule is the auth manager's, not ours.

One deployment for the module (api-server and dag-processor: no task runs; triggering a run creates the task
instance the endpoint reads).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.airflow_deployment import airflow_deployment, copy_dags

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DAGS = Path(__file__).resolve().parent / "dags"
DAG_ID, TASK_ID = "team_training", "train"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    team_a = copy_dags(tmp_path_factory.mktemp("team-a-dags"), DAGS / "team_training.py")
    team_b = tmp_path_factory.mktemp("team-b-dags")  # a team with a bundle of its own and no access to team_a's
    bundle = "airflow.dag_processing.bundles.local.LocalDagBundle"
    bundles = [
        {"name": "team-a", "classpath": bundle, "kwargs": {"path": str(team_a)}, "team_name": "team_a"},
        {"name": "team-b", "classpath": bundle, "kwargs": {"path": str(team_b)}, "team_name": "team_b"},
    ]
    env = {
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,alice:viewer:team_a,bob:viewer:team_b",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
    }
    with airflow_deployment(
        team_a,
        home=tmp_path_factory.mktemp("team-home"),
        extra_env=env,
        components=("api-server", "dag-processor"),
        prepare=[["teams", "sync"]],
    ) as deployment:  # the teams the bundles name
        yield deployment


def test_only_the_owning_team_and_the_admin_read_a_task_s_progress(airflow):
    run_id = airflow.trigger(DAG_ID)
    params = {"dag_id": DAG_ID, "run_id": run_id, "task_id": TASK_ID}
    airflow_own = (
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}",
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/xcomEntries",
    )

    def answers(user: str) -> tuple[int, list[int], httpx.Response]:
        headers = {"Authorization": f"Bearer {airflow.login(user)}"}
        ours = httpx.get(f"{airflow.url}/horovod/progress", params=params, headers=headers, timeout=30)
        own = [httpx.get(f"{airflow.url}{path}", headers=headers, timeout=30).status_code for path in airflow_own]
        return ours.status_code, own, ours

    bob, bob_own, refused = answers("bob")
    assert (bob, bob_own) == (403, [403, 403]), refused.text
    assert "run_id" not in refused.text and run_id not in refused.text  # nothing of the run leaks into the refusal
    for user in ("alice", "admin"):
        status, own, allowed = answers(user)
        assert (status, own) == (200, [200, 200]), (user, allowed.text)
        body = allowed.json()
        assert (body["dag_id"], body["run_id"], body["task_id"]) == (DAG_ID, run_id, TASK_ID)
        assert body["progress"] is None and body["history"]["count"] == 0  # the task never ran
