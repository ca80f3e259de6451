"""
The driver's watch over the barrier tasks' heartbeats (runtime/driver/heartbeats.py), over the real log channel:
a task whose heartbeats stop while its connection stays open is silent after ``heartbeat_timeout_s``; one whose
connection closed (it ended, or its process died: Spark's to tell) is not. The watchdog then cancels the job, asks
for the task's executor to be replaced and names it in an ``ExecutorLostError`` that ``max_restarts`` restarts.
The real thing (a frozen executor of a standalone cluster): tests/integration/test_runner_standalone.py.
"""

from __future__ import annotations

import threading

from airflow_provider_horovod.runtime.driver.heartbeats import HeartbeatWatch, Watchdog
from airflow_provider_horovod.runtime.driver.restarts import restart_cause
from airflow_provider_horovod.runtime.errors import ExecutorLostError
from airflow_provider_horovod.runtime.wire.logs import Heartbeats, LogClient, LogServer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _beat(task: int, rank: int) -> dict:
    return {"task": task, "rank": rank, "host": "10.0.0.7", "stage": 3, "pid": 4242}


def test_heartbeats_arrive_over_the_log_channel_and_a_closed_connection_ends_the_task():
    clock = Clock()
    watch = HeartbeatWatch(timeout_s=10, clock=clock)
    task_0_ended, task_1_beat = threading.Event(), threading.Event()

    def record(beat: dict) -> None:
        watch.record(beat)
        if beat["task"] == 0 and beat.get("ended"):
            task_0_ended.set()
        elif beat["task"] == 1 and not beat.get("ended"):
            task_1_beat.set()

    lines: list[str] = []
    with LogServer("127.0.0.1", on_line=lines.append, on_heartbeat=record) as server:
        ending, silent = LogClient(server.address, server.token), LogClient(server.address, server.token)
        with Heartbeats(ending, _beat(0, 0), interval_s=0.05):
            ending.send("[rank 0] hello")
        ending.close()  # task 0 ended: its connection closes
        assert task_0_ended.wait(10)
        with Heartbeats(silent, _beat(1, 1), interval_s=0.05):
            assert task_1_beat.wait(10)
        # task 1 stops beating but keeps its connection open, as a frozen host's does
        clock.now += 10.5
        assert [(beat["task"], round(s, 1)) for beat, s in watch.silent()] == [(1, 10.5)]
        silent.close()
    assert lines == ["[rank 0] hello"]  # heartbeats are not output lines
    assert watch.silent() == []  # its connection closed once the server shut down: ended, not silent


def test_a_task_is_silent_only_past_the_timeout_and_never_once_ended():
    clock = Clock()
    watch = HeartbeatWatch(timeout_s=8, clock=clock)
    watch.record(_beat(0, 0))
    watch.record(_beat(1, 1))
    clock.now += 8
    assert watch.silent() == []  # not past the timeout yet
    watch.record(_beat(0, 0))
    clock.now += 0.5
    assert [beat["task"] for beat, _ in watch.silent()] == [1]
    watch.record({"task": 1, "ended": True})
    watch.record(_beat(1, 1))  # a late heartbeat does not bring an ended task back
    clock.now += 100
    assert [beat["task"] for beat, _ in watch.silent()] == [0]
    watch.record({"no": "task"})  # not a heartbeat: ignored


def test_the_watchdog_cancels_replaces_the_executor_and_tells_a_restartable_loss():
    clock = Clock()
    watch = HeartbeatWatch(timeout_s=8, clock=clock)
    watch.record(_beat(0, 0))
    watch.record(_beat(1, 1))
    cancelled, replaced, located = threading.Event(), [], []

    def locate(stage: int, task: int) -> tuple[str, str]:
        located.append((stage, task))
        return "5", "10.0.0.7"

    with Watchdog(watch, cancel=cancelled.set, locate=locate, replace=replaced.append, interval_s=0.02) as dog:
        watch.record(_beat(0, 0))
        clock.now += 9
        watch.record(_beat(0, 0))  # task 0 keeps beating: only task 1 is silent
        assert cancelled.wait(10)
    assert located == [(3, 1)] and replaced == ["5"]
    err = dog.error()
    assert isinstance(err, ExecutorLostError)
    assert (err.executor, err.host, err.rank, err.partition, err.reason) == (
        "5",
        "10.0.0.7",
        1,
        1,
        "no heartbeat for 9 s",
    )
    assert str(err).startswith(
        "Spark's executor 5 on 10.0.0.7 (barrier task 1, rank 1) sent no heartbeat for 9 s (heartbeat_timeout_s=8)"
    ), err
    assert "executor 5 was killed and another requested in its place" in str(err)
    assert restart_cause(err) == "executor 5 on 10.0.0.7 lost (no heartbeat for 9 s), holding rank 1"


def test_the_watchdog_stays_quiet_while_every_task_beats():
    watch = HeartbeatWatch(timeout_s=8)
    watch.record(_beat(0, 0))
    cancelled = threading.Event()
    with Watchdog(
        watch, cancel=cancelled.set, locate=lambda s, t: (None, None), replace=lambda e: None, interval_s=0.01
    ) as dog:
        assert not cancelled.wait(0.2)
    assert dog.lost is None


def test_an_executor_spark_cannot_name_is_still_told_and_not_replaced():
    clock = Clock()
    watch = HeartbeatWatch(timeout_s=6, clock=clock)
    watch.record(_beat(2, 0))
    replaced: list[str] = []
    cancelled = threading.Event()
    with Watchdog(
        watch, cancel=cancelled.set, locate=lambda s, t: (None, None), replace=replaced.append, interval_s=0.01
    ) as dog:
        clock.now += 7
        assert cancelled.wait(10)
    assert replaced == []
    err = dog.error()
    assert (err.executor, err.host) == ("unknown", "10.0.0.7")  # the host the heartbeat named
    assert "Spark frees its slot once spark.network.timeout passes" in str(err)
