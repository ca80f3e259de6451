"""The training function's report() (runtime/progress.py) in a real process: throttled, never lost, a no-op outside a job."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_horovod.runtime import report
from airflow_provider_horovod.runtime.progress import SEND_INTERVAL_S
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
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(write,), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        records = [json.loads(line) for line in pipe]
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return records, out


def test_every_step_reports_cost_little_are_throttled_and_the_last_one_arrives():
    records, out = _run(CALLS, rank="0")
    elapsed = float(out)
    assert len(records) <= 2 + elapsed / SEND_INTERVAL_S  # sampled, not one record per call
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


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"loss": "low"}, "metric loss='low' must be a number"),
    ({"step": -1}, "step must be a non-negative int"),
    ({"total_steps": 2.5}, "total_steps must be a non-negative int"),
])
def test_a_bad_value_is_named(kwargs, says):
    code = ("from airflow_provider_horovod.runtime import report\n"
            "try:\n"
            f"    report(**{kwargs!r})\n"
            "except TypeError as err:\n"
            "    print(err)\n")
    _records, out = _run(code, rank="0")
    assert says in out


EVENT_THEN_REPORTS = """
from airflow_provider_horovod.runtime import report
from airflow_provider_horovod.runtime.progress import send_event
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
