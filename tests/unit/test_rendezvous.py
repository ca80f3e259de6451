"""Horovod's rendezvous store, as the launcher starts it, answers only the job's hosts."""

from __future__ import annotations

import http.client
import socket

import pytest

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.launch import (
    DONE_SCOPE,
    _report_done,
    _start_rendezvous,
    _stop_rendezvous,
    _stop_rendezvous_soon,
)
from airflow_provider_horovod.runtime.plan import local_plan


def _request(port: int, source: str, method: str = "GET", path: str = "/global/0", body: bytes | None = None) -> int:
    """The HTTP status the store gives a request sent from the local address ``source``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        headers = {"Content-Length": str(len(body))} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _get(port: int, source: str) -> int:
    return _request(port, source)


def test_requests_from_other_addresses_are_refused():
    server, port = _start_rendezvous(local_plan(2), peers=["127.0.0.3"])
    try:
        assert _get(port, "127.0.0.1") == 404  # a job host: served (the key is just not there yet)
        assert _get(port, "127.0.0.3") == 404  # a peer host: served
        assert _get(port, "127.0.0.2") == 403  # anyone else: refused
    finally:
        _stop_rendezvous(server)
    with socket.socket() as probe:  # stopped means stopped
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def _put_done(port: int, source: str, rank: int) -> int:
    return _request(port, source, "PUT", f"/{DONE_SCOPE}/{rank}", b"1")


def test_task_zero_learns_when_every_other_rank_is_done():
    """The store replaces the final Spark barrier: task 0 waits until each other task reports its rank's exit."""
    server, port = _start_rendezvous(local_plan(3), peers=["127.0.0.3"])
    try:
        assert not server.ranks_done.wait_for([1], timeout_s=0)
        assert _put_done(port, "127.0.0.2", 1) == 403  # not a job host: refused, and not counted
        assert not server.ranks_done.wait_for([1], timeout_s=0)
        _report_done("127.0.0.1", port, 1)
        assert server.ranks_done.wait_for([1], timeout_s=0)  # counted before the store answered
        assert _put_done(port, "127.0.0.1", 7) == 200  # a key that is no rank of the job ...
        assert not server.ranks_done.wait_for([1, 2], timeout_s=0)  # ... does not stand in for rank 2
        assert _put_done(port, "127.0.0.3", 2) == 200
        assert server.ranks_done.wait_for([1, 2], timeout_s=0)
    finally:
        _stop_rendezvous_soon(server).join(timeout=10)
    with socket.socket() as probe:  # stopped in the background, but stopped
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_rank_that_cannot_report_fails_its_task():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(LaunchError, match=r"rank 1 finished but could not tell the rendezvous store"):
        _report_done("127.0.0.1", port, 1, timeout_s=2)
