"""
The "Training progress" tab in a real browser (Debian's headless Chromium through chromedriver) against a real
deployment's api-server while a real training (np=2 on the embedded local Spark) reports its progress with
``runtime.report()``: before the first report the tab shows the rendezvous (rank 1 holds back from ``hvd.init()`` until
the test has seen it), then the chart's points grow between two reads, the progress text and the ranks appear (rank 1 is
the straggler), the finished history stays; the endpoint refuses requests without a session. A retried task's tab tells
its story: the resume banner, the try picker, the failed try's headline, a log-scale chart with hover values; a task
that never reported says so, and a ``javascript:`` link from XCom is not clickable. A Transformers ``Trainer`` with no
``report()`` call fills the tab and XCom ``metrics`` all the same.

One deployment for the module (api-server, scheduler, dag-processor: ~40 s on 2 cores), one run of ~35 s. Set
``APH_PROGRESS_SCREENSHOT=<file.png>`` to keep a screenshot of the tab taken while the run trains.
"""

from __future__ import annotations

import os
import re
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import httpx
import pytest

from tests.airflow_deployment import airflow_deployment, copy_dags
from tests.integration.shared_cluster_jobs import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DAGS = Path(__file__).resolve().parent / "dags"
DAG_ID, TASK_ID = "horovod_progress_page", "train"
STEPS = 100  # rank 0: one every 0.25 s, rank 1: every 0.35 s: ~35 s of training
PLUGIN = "airflow_provider_horovod.plugins.horovod_plugin:HorovodProgressPlugin"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    registered = [ep.value for ep in entry_points(group="airflow.plugins")]
    assert PLUGIN in registered, (
        "the UI plugin's entry point is not installed (an environment from before it): run "
        f"`make setup` to reinstall the package; airflow.plugins entry points: {registered}"
    )
    dags = copy_dags(tmp_path_factory.mktemp("progress-dags"), DAGS / "horovod_progress_page.py")  # both DAGs
    with airflow_deployment(
        dags, home=tmp_path_factory.mktemp("progress-home"), components=("api-server", "scheduler", "dag-processor")
    ) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "Chromium and chromedriver are missing: run `make setup-browser`"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def training(airflow):
    """A run that trains for ~35 s; the test starts once its task instance runs."""
    run_id = airflow.trigger(DAG_ID)
    wait_until(lambda: airflow.task_states(DAG_ID, run_id).get(TASK_ID) == "running", "the task to run", timeout_s=120)
    return run_id


_READ_TAB = """
const text = (el) => (el ? el.innerText.replace(/\\s+/g, " ").trim() : "");
const charts = {};
for (const c of document.querySelectorAll(".chart")) charts[c.dataset.metric] = Number(c.dataset.points);
return {
  charts: charts,
  status: text(document.getElementById("status-text")),
  ranks: Array.from(document.querySelectorAll("#ranks tbody tr"),
                    (tr) => Array.from(tr.cells, (td) => text(td)).join(" ")),
  footer: text(document.getElementById("footer")),
  slowest: document.querySelectorAll("#ranks tr.slowest").length,
};
"""


def _tab(driver):
    """
    What the tab shows: ``{metric: points}``, the progress text, the ranks' rows, the footer, how many rows are marked
    slowest. Read in one script, so in one turn of the page's event loop: the page re-renders every few seconds, and
    elements found one call before could be gone the next (Selenium's stale element reference).
    """
    return driver.execute_script(_READ_TAB)


def test_the_endpoint_refuses_requests_without_a_session(airflow, training):
    params = {"dag_id": DAG_ID, "run_id": training, "task_id": TASK_ID}
    assert httpx.get(f"{airflow.url}/horovod/progress", params=params, timeout=30).status_code == 401
    forged = httpx.get(
        f"{airflow.url}/horovod/progress", params=params, timeout=30, headers={"Authorization": "Bearer not-a-token"}
    )
    assert forged.status_code == 403
    allowed = httpx.get(
        f"{airflow.url}/horovod/progress",
        params=params,
        timeout=30,
        headers={"Authorization": f"Bearer {airflow.token()}"},
    )
    assert allowed.status_code == 200 and allowed.json()["active"] is True, allowed.text


def _open_tab(airflow, browser, dag_id: str, run_id: str, task_id: str) -> None:
    """Log in the way the UI does (its session cookie, on the api-server's origin), open Airflow's own task instance
    page on the tab, and switch into the tab's iframe (the page)."""
    browser.switch_to.default_content()
    browser.get(f"{airflow.url}/horovod/static/progress.css")
    browser.add_cookie({"name": "_token", "value": airflow.token(), "path": "/"})
    browser.get(f"{airflow.url}/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/plugin/horovod-progress")
    frame = wait_until(
        lambda: browser.find_elements("css selector", "iframe[src*='/horovod/page']"), "the tab's iframe", timeout_s=60
    )[0]
    browser.switch_to.frame(frame)


def test_the_tab_follows_the_training_and_keeps_its_history(airflow, training, browser):
    _open_tab(airflow, browser, DAG_ID, training, TASK_ID)
    # before the first report the tab says what the ranks do: rank 1 holds back from hvd.init() until the file
    # "go" is in the artifact directory, so rank 0 waits there alone
    waiting = wait_until(
        lambda: (t := _tab(browser))["status"].startswith("rendezvous: ") and t, "the rendezvous phase", timeout_s=120
    )
    assert waiting["status"] == "rendezvous: 1/2 ranks in hvd.init(), 0 joined" and not waiting["charts"], waiting
    Path(airflow.xcom(DAG_ID, training, TASK_ID, "artifact_dir"), "go").write_text("")
    first = wait_until(
        lambda: (t := _tab(browser))["charts"].get("loss") and t, "the chart's first points", timeout_s=120
    )  # Spark and the ranks start first
    later = wait_until(
        lambda: (t := _tab(browser))["charts"]["loss"] > first["charts"]["loss"] and t,
        "the chart to grow",
        timeout_s=20,
    )
    assert set(later["charts"]) == {"loss", "acc"}
    assert re.search(rf"step \d+/{STEPS} \(\d+%\) · .* steps/s · ETA ", later["status"]), later["status"]
    assert len(later["ranks"]) == 2 and "refreshing every" in later["footer"], later
    # the straggler is marked once it is more than about a second of steps behind: rank 1 falls behind by ~1.1
    # steps a second, so a few seconds after the first points (the read above may come before that)
    straggler = wait_until(
        lambda: (t := _tab(browser))["slowest"] == 1 and t, "rank 1 marked as the slowest", timeout_s=20
    )
    assert any(row.startswith("1 (slowest)") for row in straggler["ranks"]), straggler
    if os.environ.get("APH_PROGRESS_SCREENSHOT"):
        browser.save_screenshot(os.environ["APH_PROGRESS_SCREENSHOT"])

    assert airflow.wait_for_run(DAG_ID, training, timeout_s=120) == "success"
    done = wait_until(
        lambda: "not refreshing" in (t := _tab(browser))["footer"] and t, "the finished history", timeout_s=30
    )
    # the history is sampled (at most two records a second per rank, and the last one): every chart ends at the
    # last step with more points than while it ran
    assert set(done["charts"]) == {"loss", "acc"} and done["charts"]["loss"] > later["charts"]["loss"], done
    assert done["status"].startswith(f"step {STEPS}/{STEPS} (100%)") and "finished" in done["status"], done


_READ_STORY = """
const text = (el) => (el && !el.hidden ? el.innerText.replace(/\\s+/g, " ").trim() : "");
const charts = {};
for (const c of document.querySelectorAll(".chart")) {
  charts[c.dataset.metric] = [Number(c.dataset.points), c.dataset.scale, c.querySelectorAll("circle").length,
                              c.querySelectorAll("circle title").length];
}
const link = document.getElementById("spark-ui");
return {
  charts: charts, status: text(document.getElementById("status-text")),
  resumed: text(document.getElementById("resumed")), failure: text(document.getElementById("failure")),
  tries: Array.from(document.querySelectorAll("#try option"), (o) => o.textContent),
  picked: document.getElementById("try").value, picker_shown: !document.getElementById("try").hidden,
  link_href: link.getAttribute("href"), link_text: text(link), footer: text(document.getElementById("footer")),
};
"""


def test_the_tab_tells_a_retried_task_s_story_and_links_only_http(airflow, browser):
    """Try 1 fails after a checkpoint, try 2 resumes from it (issue #34): the resume banner, the try picker, the
    failed try's headline, the log scale a loss over four decades gets, markers with their values on hover; a task
    that never reported says so; a ``javascript:`` URL put into the link's XCom through the REST API is no link."""
    dag_id = "horovod_progress_retry"
    run_id = airflow.trigger(dag_id)
    assert airflow.wait_for_run(dag_id, run_id, timeout_s=400) == "success", airflow.task_states(dag_id, run_id)
    xcom_path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/silent/xcomEntries"
    for key in ("spark_ui_url", "_link_SparkUILink"):  # the operator's XCom and the link's own
        value = {"value": "javascript:alert(document.cookie)"}
        if airflow.api("PATCH", f"{xcom_path}/{key}", json=value, expect=(200, 404)).status_code == 404:
            airflow.api("POST", xcom_path, json={"key": key, **value}, expect=(201,))

    _open_tab(airflow, browser, dag_id, run_id, "train")
    latest = wait_until(
        lambda: (t := browser.execute_script(_READ_STORY))["resumed"] and "not refreshing" in t["footer"] and t,
        "the finished second try",
        timeout_s=60,
    )
    assert latest["resumed"] == "resumed from checkpoint step 10 (saved by try 1)", latest
    assert latest["tries"] == ["try 1", "try 2 (latest)"] and latest["picked"] == "2" and latest["picker_shown"]
    assert latest["status"].startswith("step 40/40 (100%)") and not latest["failure"], latest
    points, scale, markers, titles = latest["charts"]["loss"]
    assert scale == "log" and markers == titles == points > 1, latest  # 2.3 -> 2.3e-4: log scale by default
    if os.environ.get("APH_PROGRESS_SCREENSHOT"):
        browser.save_screenshot(os.environ["APH_PROGRESS_SCREENSHOT"].replace(".png", "-retry.png"))

    browser.execute_script(
        "const s = document.getElementById('try'); s.value = '1';s.dispatchEvent(new Event('change'));"
    )
    first = wait_until(
        lambda: (t := browser.execute_script(_READ_STORY))["failure"] and t, "try 1's headline", timeout_s=30
    )
    assert first["picked"] == "1" and "ValueError: corrupt shard on the first try" in first["failure"], first
    assert first["failure"].startswith("failed: ") and re.match(r"step 10/40 \(25%\)", first["status"]), first
    assert not first["resumed"]

    _open_tab(airflow, browser, dag_id, run_id, "silent")
    silent = wait_until(
        lambda: (t := browser.execute_script(_READ_STORY))["status"] != "loading…" and t,
        "the silent task's tab",
        timeout_s=60,
    )
    assert silent["status"] == "finished, no progress reported", silent
    assert silent["link_href"] is None and "javascript" not in silent["link_text"], silent


def test_a_transformers_trainer_fills_the_tab_and_xcom_without_report_calls(airflow, browser):
    """``@task.torch_distributed`` running a Transformers ``Trainer`` that never calls ``report()`` (issue #37): the
    rank's callback sends the Trainer's steps and logs, so XCom ``metrics`` and the tab have them."""
    dag_id = "horovod_progress_trainer"
    run_id = airflow.trigger(dag_id)
    assert airflow.wait_for_run(dag_id, run_id, timeout_s=400) == "success", airflow.task_states(dag_id, run_id)
    assert airflow.xcom(dag_id, run_id, "train") == {"steps": 64, "world_size": 2}  # 256 / 4 / 2 ranks, 2 epochs
    metrics = airflow.xcom(dag_id, run_id, "train", "metrics")
    assert {"loss", "learning_rate", "grad_norm", "train_runtime", "train_loss"} <= set(metrics), metrics

    _open_tab(airflow, browser, dag_id, run_id, "train")
    done = wait_until(
        lambda: "not refreshing" in (t := _tab(browser))["footer"] and t, "the finished history", timeout_s=60
    )
    assert done["status"].startswith("step 64/64 (100%)") and "finished" in done["status"], done
    assert {"loss", "learning_rate", "grad_norm"} <= set(done["charts"]) and done["charts"]["loss"] > 1, done
    assert len(done["ranks"]) == 2, done  # both ranks' steps came through


_READ_RESTARTS = """
const text = (el) => (el && !el.hidden ? el.innerText.replace(/\\s+/g, " ").trim() : "");
const loss = document.querySelector(".chart[data-metric='loss']");
return {
  restarts: text(document.getElementById("restarts")), footer: text(document.getElementById("footer")),
  status: text(document.getElementById("status-text")),
  lines: loss ? Array.from(loss.querySelectorAll("line.restart title"), (t) => t.textContent) : [],
};
"""


def test_a_restart_within_the_try_is_told_and_marked_on_the_chart(airflow, browser):
    """max_restarts=1 (issue #36): rank 1 SIGKILLed at step 12; the tab says the job restarted, why and at which step,
    and the loss chart marks the step."""
    dag_id = "horovod_progress_restart"
    run_id = airflow.trigger(dag_id)
    assert airflow.wait_for_run(dag_id, run_id, timeout_s=400) == "success", airflow.task_states(dag_id, run_id)
    assert airflow.xcom(dag_id, run_id, "train") == 1  # the restarted attempt returned
    _open_tab(airflow, browser, dag_id, run_id, "train")
    done = wait_until(
        lambda: "not refreshing" in (t := browser.execute_script(_READ_RESTARTS))["footer"] and t,
        "the finished history",
        timeout_s=60,
    )
    assert done["restarts"] == "restarted 1 time within this try: restart 1: rank 1 killed by SIGKILL at step 12", done
    assert done["lines"] == ["restart 1 at step 12: rank 1 killed by SIGKILL"], done
    if os.environ.get("APH_PROGRESS_SCREENSHOT"):
        browser.save_screenshot(os.environ["APH_PROGRESS_SCREENSHOT"].replace(".png", "-restart.png"))
    assert done["status"].startswith("step 30/30 (100%)"), done
