"""The driver log channel delivers lines from its own tasks and ignores anyone without the token."""

from __future__ import annotations

import socket
import threading

from airflow_provider_horovod.runtime.wire import logs
from airflow_provider_horovod.runtime.wire.logs import (
    MAX_FRAME_CHARS,
    STOP,
    ControlListener,
    LogClient,
    LogServer,
    stop_message,
    stop_reason,
)


def test_lines_arrive_in_order_and_strangers_are_ignored():
    received: list[str] = []
    with LogServer("127.0.0.1", on_line=received.append) as server:
        stranger = LogClient(server.address, "not-the-token")
        stranger.send("[rank 9] injected")
        stranger.close()
        client = LogClient(server.address, server.token)
        for i in range(50):
            client.send(f"[rank 0] line {i}")
        client.send("x" * (MAX_FRAME_CHARS + 100))
        client.close()
    assert received[:50] == [f"[rank 0] line {i}" for i in range(50)]
    assert received[50] == "x" * MAX_FRAME_CHARS
    assert not any("injected" in line for line in received)


def test_unreachable_channel_does_not_raise(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    client = LogClient(("127.0.0.1", port), "t", connect_timeout_s=2)
    client.send("hello")
    client.send("again")
    client.close()
    assert "cannot reach the driver's log channel" in capsys.readouterr().err


def test_threads_sharing_one_client_send_whole_frames_over_one_connection():
    """A rank's output, its report() records and its milestones come from three threads through one client."""
    import threading

    lines: list[str] = []
    records: list[dict] = []
    connections: list[int] = []
    with LogServer("127.0.0.1", on_line=lines.append, on_metrics=records.append) as server:
        client = LogClient(server.address, server.token)
        original = client._connect

        def counted() -> None:
            connections.append(1)
            original()

        client._connect = counted
        big = "y" * 10_000
        pad = "z" * 200_000  # a record larger than a socket buffer: one sendall() takes several send() calls

        def output(n: int) -> None:
            for i in range(200):
                client.send(f"[rank {n}] {i} {big}")

        def metrics(n: int) -> None:
            for i in range(200):
                client.send_metrics({"rank": n, "step": i, "metrics": {"pad": pad}})

        threads = [
            threading.Thread(target=output, args=(0,)),
            threading.Thread(target=output, args=(1,)),
            threading.Thread(target=metrics, args=(0,)),
            threading.Thread(target=metrics, args=(1,)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client.close()
    assert len(connections) == 1
    assert len(lines) == 400 and all(line.endswith(big) for line in lines)
    for n in (0, 1):
        assert [int(line.split()[2]) for line in lines if line.startswith(f"[rank {n}]")] == list(range(200))
        assert [r["step"] for r in records if r["rank"] == n] == list(range(200))
    assert all(r["metrics"]["pad"] == pad for r in records)


def test_after_a_failed_stage_closing_waits_only_for_tasks_that_did_not_report():
    """A bystander that reported waits out a grace before Spark kills it: closing does not wait for it, but it waits
    (bounded) for a task still connected without a report, and keeps everything both sent."""
    import threading
    import time

    lines: list[str] = []
    server = LogServer("127.0.0.1", on_line=lines.append)
    with server:
        reported, silent = LogClient(server.address, server.token), LogClient(server.address, server.token)
        reported.send("[rank 0] its traceback")
        reported.report_failure({"rank": 0, "exc_type": "HorovodInternalError", "exc_message": "shut down"})
        silent.send("[rank 1] still computing")
        closing = threading.Timer(0.5, silent.close)  # the task still computing ends (Spark kills it) 0.5 s later
        closing.start()
        server.drain_timeout_s = 10.0  # the stage failed
        started = time.monotonic()
    took = time.monotonic() - started
    closing.join()
    reported.close()
    assert 0.4 < took < 5, took  # waited for the silent task, not for the one that reported
    assert sorted(lines) == ["[rank 0] its traceback", "[rank 1] still computing"]  # two connections: any order
    assert [f["rank"] for f in server.failures] == [0]


def test_the_drain_is_bounded_for_a_task_that_never_reports_nor_ends():
    import time

    server = LogServer("127.0.0.1", on_line=lambda line: None)
    with server:
        stuck = LogClient(server.address, server.token)
        stuck.send("[rank 1] stuck in a collective")
        server.drain_timeout_s = 0.3
        started = time.monotonic()
    took = time.monotonic() - started
    stuck.close()
    assert 0.25 < took < 5, took


def test_the_drain_covers_a_connection_whose_handler_has_not_read_its_token_yet():
    """A task that connected just before the stage failed may not have been read at all when closing starts: the
    drain still bounds the wait for it (the race behind a hung CI run: the connection was registered only after its
    handler read the token, so closing never cut it and waited for it forever)."""
    import socket
    import threading
    import time

    server = LogServer("127.0.0.1", on_line=lambda line: None)
    server.__enter__()
    early = socket.create_connection(server.address)  # connected, nothing sent: its handler waits for the token
    try:
        server.drain_timeout_s = 0.3
        closing = threading.Thread(target=server.__exit__, args=(None, None, None), daemon=True)
        started = time.monotonic()
        closing.start()
        closing.join(timeout=20)
        took = time.monotonic() - started
        assert not closing.is_alive(), "closing the server waited for a connection past its drain"
        assert 0.25 < took < 5, took
    finally:
        early.close()


def test_tasks_connecting_at_once_are_queued_not_dropped():
    """Every barrier task connects at about the same time: with socketserver's backlog of 5, the kernel would drop the
    SYNs of all but six while the server is busy, and each would wait out TCP's retransmission timeout (1 s, 3 s)."""
    from tests.listen_queue import handshakes_while_not_accepting

    server = LogServer("127.0.0.1", on_line=lambda line: None)
    with server:
        assert server._server is not None
        server._server.shutdown()  # the serving loop stops; the socket still listens: only its queue takes them
        assert handshakes_while_not_accepting(server.address, 64) == 64


def test_a_bystander_that_reported_learns_the_stage_failed_when_the_driver_closes_its_channel():
    """A task whose rank failed only because another did waits, after its report, until the driver closes its
    connection (the failed stage's drain), not for Spark to kill it seconds later: it gives the slot a restart waits
    for back at once. While the stage has not failed (the server still serving), the wait runs out instead."""
    import threading
    import time

    server = LogServer("127.0.0.1", on_line=lambda line: None)
    server.__enter__()
    bystander = LogClient(server.address, server.token)
    try:
        assert bystander.report_failure({"rank": 0, "exc_type": "HorovodInternalError", "exc_message": "shut down"})
        started = time.monotonic()
        assert bystander.wait_closed(0.3) is False  # the stage has not failed: nobody closes the channel
        assert time.monotonic() - started >= 0.25
        server.drain_timeout_s = 10.0  # the stage failed: closing cuts the connections of tasks that reported
        closing = threading.Timer(0.2, server.__exit__, args=(None, None, None))
        closing.start()
        started = time.monotonic()
        assert bystander.wait_closed(10.0) is True
        assert time.monotonic() - started < 5
        closing.join()
    finally:
        bystander.close()
        if server._thread is not None and server._thread.is_alive():
            server.__exit__(None, None, None)
    assert [f["rank"] for f in server.failures] == [0]
    assert server.accepted == 1  # counted once its token was read (complete once the server is closed)


def test_waiting_for_the_close_without_a_connection_returns_at_once():
    client = LogClient(("127.0.0.1", 9), "token", connect_timeout_s=0.5)  # never connected: nothing to watch
    assert client.wait_closed(30.0) is False


def _until(condition, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)


def test_the_driver_tells_listening_tasks_only_and_a_stranger_cannot_listen():
    """The driver's word to an attempt (stop at the next checkpoint) reaches the tasks that opened a control listener
    with the token, over a connection of their own: a task's log connection stays one-way, and its lines still
    arrive."""
    import threading

    heard: list[str] = []
    stranger_heard: list[str] = []
    got = threading.Event()
    lines: list[str] = []
    with LogServer("127.0.0.1", on_line=lines.append) as server:
        assert server.tell(STOP) == 0  # nobody listens yet: the driver tries again at its next look
        log = LogClient(server.address, server.token)
        log.send("[rank 0] before")
        with (
            ControlListener(server.address, "not-the-token", stranger_heard.append),
            ControlListener(server.address, server.token, lambda m: (heard.append(m), got.set())),
        ):
            _until(lambda: server.tell(STOP) == 1)  # once its handler has read the token and the marker
            assert got.wait(10)
            log.send("[rank 0] after")
            assert log.wait_closed(0.2) is False  # the word went to the listener, not to the log connection
        _until(lambda: server.tell(STOP) == 0)  # the listener closed: its handler ended
        log.close()
    assert heard[0] == STOP and stranger_heard == []
    assert stop_reason(stop_message("all np=2 task slots are free again")) == "all np=2 task slots are free again"
    assert stop_reason(STOP) == "" and stop_reason("stopped") is None
    assert lines == ["[rank 0] before", "[rank 0] after"]
    assert server.accepted == 2  # the log connection and the listener (the stranger never got in)


def test_closing_the_channel_ends_a_listener_that_is_still_open():
    """The driver's attempt ends while rank 0's task still listens: closing does not wait for it, and the listener's
    reader ends (its connection closed), so the task's exit is prompt too."""
    import time

    server = LogServer("127.0.0.1", on_line=lambda line: None)
    server.__enter__()
    listener = ControlListener(server.address, server.token, lambda message: None)
    listener.__enter__()
    try:
        _until(lambda: server._controls != set())
        started = time.monotonic()
        server.__exit__(None, None, None)
        assert time.monotonic() - started < 5
        listener._thread.join(5)
        assert not listener._thread.is_alive()
    finally:
        listener.__exit__(None, None, None)


def test_a_listener_without_a_driver_does_not_raise(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    with ControlListener(("127.0.0.1", port), "t", lambda message: None, connect_timeout_s=2):
        pass
    assert "cannot open the driver's control channel" in capsys.readouterr().err


def test_tasks_gather_each_others_parts_in_task_order_and_a_bystander_still_sees_the_close():
    """The driver answers every task's gather once the last part came, in task order, while their lines go on; after
    it, a task's wait for the close still sees only the close (the answer was read)."""
    lines: list[str] = []
    server = LogServer("127.0.0.1", on_line=lines.append)
    with server:
        clients = [LogClient(server.address, server.token) for _ in range(3)]
        answers: dict[int, list | None] = {}

        def gather(task: int) -> None:
            clients[task].send(f"line of task {task}")
            answers[task] = clients[task].gather(task, 3, {"port": 1000 + task})

        threads = [threading.Thread(target=gather, args=(task,)) for task in (2, 0)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(0.3)
        assert answers == {}  # task 1 has not sent its part: nobody has an answer
        gather(1)
        for thread in threads:
            thread.join(10)
        assert answers == {task: [{"port": 1000}, {"port": 1001}, {"port": 1002}] for task in range(3)}
        assert not clients[0].wait_closed(0.2)  # the answer is not mistaken for the driver's close
        for client in clients:
            client.close()
    assert sorted(lines) == ["line of task 0", "line of task 1", "line of task 2"]


def test_gathering_without_a_channel_says_so_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    client = LogClient(("127.0.0.1", port), "token", connect_timeout_s=1.0)
    assert client.gather(0, 2, {"port": 1}) is None  # the task gathers with Spark instead


def test_when_a_task_never_sends_its_part_every_task_is_told_to_gather_with_spark(monkeypatch):
    """All or none gather through the driver: a task that could not reach the channel gathers with Spark, so once
    the wait is over the others (and any late one) are told to do the same, instead of waiting for ever."""
    monkeypatch.setattr(logs, "GATHER_WAIT_S", 0.3)
    server = LogServer("127.0.0.1", on_line=lambda line: None)
    with server:
        clients = [LogClient(server.address, server.token) for _ in range(3)]
        answers: dict[int, object] = {}
        threads = [
            threading.Thread(target=lambda t=task: answers.__setitem__(t, clients[t].gather(t, 3, {"port": t})))
            for task in (0, 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert answers == {0: None, 1: None}  # task 2 never came: both were told to gather with Spark
        assert clients[2].gather(2, 3, {"port": 2}) is None  # and so is a late one
        for client in clients:
            client.close()
