"""Horovod's rendezvous store, as the launcher starts it, answers only the job's hosts."""

from __future__ import annotations

import http.client
import socket

import pytest

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.task.plan import local_plan
from airflow_provider_horovod.runtime.task.rendezvous import (
    DONE_SCOPE,
    _report_done,
    _start_rendezvous,
    _stop_rendezvous,
    _stop_rendezvous_soon,
)


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


def test_a_rank_done_without_hvd_init_is_reported_to_task_zero():
    """Task 0 learns that a rank ended without hvd.init(), before or after it starts watching, and only that rank."""
    server, port = _start_rendezvous(local_plan(3))
    seen: list[str] = []
    try:
        _report_done("127.0.0.1", port, 1, initialized=False)
        server.ranks_done.on_uninitialized(seen.append)
        assert seen == ["1"]  # reported before the watch began
        _report_done("127.0.0.1", port, 2)  # initialized: not news
        assert seen == ["1"] and server.ranks_done.wait_for([1, 2], timeout_s=0)
    finally:
        _stop_rendezvous_soon(server).join(timeout=10)


def test_each_planned_scope_is_cleared_when_its_own_ranks_finish():
    """
    Gloo rank processes DELETE their key from each scope once connected; a scope is cleared when all its ranks did.
    Horovod 0.28's handler forgets the other scopes' counts whenever one scope clears, so a half-counted scope kept
    stale addresses that a later hvd.init() (after hvd.shutdown()) read.
    """
    server, port = _start_rendezvous(local_plan(2))  # scopes: global (2), local_<host> (2), cross_0 (1), cross_1 (1)
    local = next(scope for scope in server._httpd.scope_size if scope.startswith("local_"))
    try:
        for rank in ("0", "1"):
            assert _request(port, "127.0.0.1", "PUT", f"/{local}/{rank}", b"addr") == 200
        assert _request(port, "127.0.0.1", "DELETE", f"/{local}/1") == 200  # rank 1 done with the local scope
        assert _request(port, "127.0.0.1", "PUT", "/cross_0/0", b"addr") == 200
        assert _request(port, "127.0.0.1", "DELETE", "/cross_0/0") == 200  # a one-rank scope: cleared at once
        assert _request(port, "127.0.0.1", "GET", f"/{local}/0") == 200  # rank 0 has not finished: kept
        assert _request(port, "127.0.0.1", "DELETE", f"/{local}/0") == 200
        assert _request(port, "127.0.0.1", "GET", f"/{local}/0") == 404  # both finished: no stale address left
        assert _request(port, "127.0.0.1", "GET", f"/{local}/1") == 404
    finally:
        _stop_rendezvous_soon(server).join(timeout=10)


def test_the_store_listens_on_the_given_address_only():
    import psutil

    server, port = _start_rendezvous(local_plan(2))
    try:
        bound = {
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
        }
        assert bound == {"127.0.0.1"}  # not 0.0.0.0, as Horovod's own start() binds
    finally:
        _stop_rendezvous_soon(server).join(timeout=10)


def test_the_port_held_for_torch_distributed_is_taken_by_its_store_and_by_nothing_else():
    from datetime import timedelta

    from airflow_provider_horovod.runtime.task.rendezvous import reserve_port

    torch_dist = pytest.importorskip("torch.distributed")
    held = reserve_port("127.0.0.1")
    try:
        port = held.getsockname()[1]
        # while it is held, a plain bind to it fails (no other process is given the port) ...
        with socket.socket() as other:
            with pytest.raises(OSError):
                other.bind(("127.0.0.1", port))
        # ... but rank 0's store (what init_process_group(init_method="env://") starts) binds and serves on it
        store = torch_dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=10))
        store.set("k", "v")
        assert store.get("k") == b"v"
        del store
    finally:
        held.close()


def test_ranks_connecting_at_once_are_queued_not_dropped():
    """Horovod's server listens with socketserver's backlog of 5: the kernel dropped the SYNs of every rank past the
    sixth that connected while it was busy, and each waited out TCP's retransmission timeout (1 s, 3 s, ...): 3.1 s
    for Gloo's requests of 16 ranks (B12). The store takes as many as the kernel allows."""
    from tests.listen_queue import handshakes_while_not_accepting

    server, port = _start_rendezvous(local_plan(2))
    try:
        server._httpd.shutdown()  # the serving loop stops; the socket still listens: only its queue takes them
        assert handshakes_while_not_accepting(("127.0.0.1", port), 64) == 64
    finally:
        server._httpd.server_close()
