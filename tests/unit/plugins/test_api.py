"""
The progress endpoint: Airflow's own security dependencies guard it (driven here by a stub auth manager), its answer
for the latest and earlier tries, and the page's files (no script from outside the wheel).
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from jwt import InvalidTokenError

from airflow_provider_horovod.plugins import api
from airflow_provider_horovod.plugins.api import STATIC_DIR, build_answer, create_app

QUERY = {"dag_id": "train_dag", "run_id": "manual__1", "task_id": "train"}


class StubAuthManager:
    """Token ``reader`` may read ``train_dag`` only; any other token is invalid."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, object, str | None]] = []

    async def get_user_from_token(self, token: str):
        if token != "reader":
            raise InvalidTokenError("bad token")
        return object()

    def is_authorized_dag(self, *, method, access_entity, details, user):
        self.asked.append((method, access_entity, details.id))
        return details.id == "train_dag"


@pytest.fixture
def client(monkeypatch):
    from airflow.api_fastapi.core_api import security
    from airflow.models.dag import DagModel

    stub = StubAuthManager()
    monkeypatch.setattr(security, "get_auth_manager", lambda: stub)
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **_: None))
    app = create_app()
    app.dependency_overrides[api.SessionDep.__metadata__[0].dependency] = lambda: None
    monkeypatch.setattr(api, "progress_of", lambda session, **kw: {"answered": kw["dag_id"]})
    with TestClient(app) as test_client:
        test_client.stub = stub
        yield test_client


def test_no_session_or_token_is_refused_with_401(client):
    response = client.get("/progress", params=QUERY)
    assert response.status_code == 401
    assert client.stub.asked == []


def test_an_invalid_token_is_refused_with_403(client):
    assert client.get("/progress", params=QUERY, headers={"Authorization": "Bearer forged"}).status_code == 403


def test_a_user_who_cannot_read_the_dag_gets_403(client):
    response = client.get(
        "/progress", params={**QUERY, "dag_id": "other_dag"}, headers={"Authorization": "Bearer reader"}
    )
    assert response.status_code == 403
    assert client.stub.asked[0][2] == "other_dag"


def test_a_reader_gets_the_answer_and_both_task_instance_and_xcom_access_are_checked(client):
    client.cookies.set("_token", "reader")  # the session cookie the UI sets at login
    response = client.get("/progress", params=QUERY)
    assert response.status_code == 200, response.text
    assert response.json() == {"answered": "train_dag"}
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    assert sorted(e.value for _, e, _ in client.stub.asked) == [
        DagAccessEntity.TASK_INSTANCE.value,
        DagAccessEntity.XCOM.value,
    ]


def test_the_page_and_its_files_are_served_and_need_nothing_from_outside(client):
    page = client.get("/page")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(not re.match(r"^(https?:)?//", s) for s in sources), sources
    for source in sources:
        assert client.get("/" + source).status_code == 200, source
    script = (STATIC_DIR / "progress.js").read_text()
    assert "http://" not in script.replace("http://www.w3.org/2000/svg", "") and "https://" not in script


def test_answer_for_the_running_latest_try(tmp_path):
    (tmp_path / "progress.json").write_text(json.dumps({"state": "running", "step": 5}))
    xcoms = {"artifact_dir": str(tmp_path), "spark_ui_url": "http://127.0.0.1:4040", "tensorboard_dir": "/tb"}
    answer = build_answer("deferred", 1, 1, xcoms)
    assert answer["active"] is True and answer["state"] == "deferred"
    assert answer["progress"] == {"state": "running", "step": 5} and answer["spark_ui_url"] == "http://127.0.0.1:4040"
    assert build_answer("success", 1, 1, xcoms)["active"] is False


def test_answer_for_an_earlier_try_reads_its_directory(tmp_path):
    for n in (1, 2):
        (tmp_path / f"try-{n}").mkdir()
        (tmp_path / f"try-{n}" / "progress.json").write_text(json.dumps({"step": n}))
    answer = build_answer("running", 2, 1, {"artifact_dir": str(tmp_path / "try-2")})
    assert answer["progress"] == {"step": 1} and answer["active"] is False and answer["state"] is None


def test_answer_without_artifact_dir_or_with_unreadable_storage():
    assert build_answer("queued", 1, 1, {})["progress"] is None
    broken = build_answer("running", 1, 1, {"artifact_dir": "nosuchproto://x/y"})
    assert broken["progress"] is None and broken["error"].startswith("cannot read nosuchproto://x/y")


def test_only_http_links_reach_the_page_and_the_tries_and_tensorboard_directory_are_told(tmp_path):
    for url in ("javascript:alert(1)", "data:text/html,x", "//evil.example/x", "file:///etc/passwd", 7):
        assert build_answer("running", 1, 1, {"spark_ui_url": url})["spark_ui_url"] is None, url
    assert (
        build_answer("running", 1, 1, {"spark_ui_url": " https://spark:4040/ "})["spark_ui_url"]
        == "https://spark:4040/"
    )
    assert build_answer("running", 3, 3, {})["tries"] == [1, 2, 3]
    # the TensorBoard directory as soon as the training made it (the XCom comes only at the end)
    assert build_answer("running", 1, 1, {"artifact_dir": str(tmp_path)})["tensorboard_dir"] is None
    (tmp_path / "tensorboard").mkdir()
    assert build_answer("running", 1, 1, {"artifact_dir": str(tmp_path)})["tensorboard_dir"] == str(
        tmp_path / "tensorboard"
    )
    assert build_answer("running", 1, 1, {"artifact_dir": "memory://b/x"})["tensorboard_dir"] is None
