"""
The training function's report() (runtime/reports.py) in a real process: throttled, never lost, a no-op outside a job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_horovod.runtime import report
from airflow_provider_horovod.runtime.reports import SEND_INTERVAL_S
from airflow_provider_horovod.runtime.wire.protocol import ENV_METRICS

CALLS = """
import sys, time
from airflow_provider_horovod.runtime import report
started = time.monotonic()
for step in range(1, 20001):
    report(step=step, total_steps=20000, epoch=step // 5000, loss=1.0 / step, acc=float("nan"))
print(time.monotonic() - started)
"""


def _run(code: str, rank: str) -> tuple[list[dict], str]:
    read, write = os.pipe()
    env = {**os.environ, ENV_METRICS: str(write), "RANK": rank}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        pass_fds=(write,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        records = [json.loads(line) for line in pipe]
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return records, out


def test_every_step_reports_cost_little_are_throttled_and_the_first_and_last_ones_arrive():
    records, out = _run(CALLS, rank="0")
    elapsed = float(out)
    assert len(records) <= 3 + elapsed / SEND_INTERVAL_S  # sampled, not one record per call
    first = records[0]  # each metric's first value, however fast the next ones come (the curve's start)
    assert (first["step"], first["metrics"]) == (1, {"loss": 1.0, "acc": None})
    last = records[-1]
    assert (last["rank"], last["step"], last["total_steps"], last["epoch"]) == (0, 20000, 20000, 4)  # at exit
    assert last["metrics"] == {"loss": 1.0 / 20000, "acc": None}  # NaN has no JSON: null
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)


def test_other_ranks_send_their_step_only():
    records, _ = _run(CALLS, rank="1")
    assert records and records[-1]["step"] == 20000 and records[-1]["rank"] == 1
    assert all("metrics" not in r for r in records)


def test_outside_a_job_report_does_nothing(monkeypatch):
    monkeypatch.delenv(ENV_METRICS, raising=False)
    assert report(step=1, loss=0.5) is None


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"loss": "low"}, "metric loss='low' must be a number"),
        ({"step": -1}, "step must be a non-negative int"),
        ({"total_steps": 2.5}, "total_steps must be a non-negative int"),
    ],
)
def test_a_bad_value_is_named(kwargs, says):
    code = (
        "from airflow_provider_horovod.runtime import report\n"
        "try:\n"
        f"    report(**{kwargs!r})\n"
        "except TypeError as err:\n"
        "    print(err)\n"
    )
    _records, out = _run(code, rank="0")
    assert says in out


EVENT_THEN_REPORTS = """
from airflow_provider_horovod.runtime import report
from airflow_provider_horovod.runtime.reports import send_event
report(step=1)
send_event("resumed", step=10, try_number=2)
for step in range(2, 2001):
    report(step=step)
"""


def test_an_event_is_never_dropped_by_the_throttle():
    records, _ = _run(EVENT_THEN_REPORTS, rank="0")
    events = [r for r in records if r.get("event")]
    assert [(e["event"], e["step"], e["try_number"], e["rank"]) for e in events] == [("resumed", 10, 2, 0)]
    assert [r for r in records if not r.get("event")][-1]["step"] == 2000  # the reports go on around it


def test_each_metric_keeps_its_newest_value_at_its_own_step():
    from airflow_provider_horovod.runtime.reports import _Pending

    pending = _Pending()
    for step in range(1, 101):
        metrics = {"loss": 1.0 / step}
        if step == 50:
            metrics["epoch_loss"] = 0.5  # reported once, in the same call as one of the loss values
        pending.put({"step": step, "epoch": step // 50, "metrics": metrics}, keep=False)
    records = pending.take()
    assert [(r["step"], r["metrics"]) for r in records] == [(50, {"epoch_loss": 0.5}), (100, {"loss": 0.01})]
    assert not pending and pending.take() == []


def test_a_record_without_metrics_keeps_only_the_newest_and_kept_records_stay_whole():
    from airflow_provider_horovod.runtime.reports import _Pending

    pending = _Pending()
    for step in range(1, 11):
        pending.put({"step": step}, keep=False)  # another rank's: its step only
    assert [r["step"] for r in pending.take()] == [10]
    pending.put({"step": 1, "metrics": {"loss": 2.0, "acc": 0.1}}, keep=True)  # report(..., sample=False)
    pending.put({"step": 2, "metrics": {"loss": 1.0}}, keep=False)
    pending.put({"step": 3, "metrics": {"loss": 0.5}}, keep=False)
    assert [(r["step"], r["metrics"]) for r in pending.take()] == [(1, {"loss": 2.0, "acc": 0.1}), (3, {"loss": 0.5})]


SLOW_AND_FAST = """
import time
from airflow_provider_horovod.runtime import report
step = 0
for epoch in range(1, 7):
    for _ in range(300):
        step += 1
        report(step=step, epoch=epoch, loss=1.0 / step)
        time.sleep(0.002)  # ~0.6 s an epoch: more than a send interval
    report(step=step, epoch=epoch, epoch_loss=1.0 / epoch)
for i in range(5):
    report(step=step, marker=i, sample=False)  # every one kept, though all within one interval
"""


def test_a_metric_reported_once_an_epoch_keeps_every_value_beside_one_reported_every_step():
    records, _ = _run(SLOW_AND_FAST, rank="0")
    epoch_loss = [(r["epoch"], r["metrics"]["epoch_loss"]) for r in records if "epoch_loss" in r.get("metrics", {})]
    assert epoch_loss == [(e, 1.0 / e) for e in range(1, 7)]
    loss = [r for r in records if "loss" in r.get("metrics", {})]
    assert 6 <= len(loss) < 300 and loss[-1]["step"] == 1800 and loss[-1]["metrics"]["loss"] == 1.0 / 1800
    assert [r["metrics"]["marker"] for r in records if "marker" in r.get("metrics", {})] == list(range(5))
