"""The driver log channel delivers lines from its own tasks and ignores anyone without the token."""

from __future__ import annotations

import socket

from airflow_provider_horovod.runtime.wire.logs import MAX_FRAME_CHARS, LogClient, LogServer


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
