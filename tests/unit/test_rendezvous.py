"""Horovod's rendezvous store, as the launcher starts it, answers only the job's hosts."""

from __future__ import annotations

import http.client
import socket

from airflow_provider_horovod.runtime.launch import _start_rendezvous, _stop_rendezvous
from airflow_provider_horovod.runtime.plan import local_plan


def _get(port: int, source: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", "/global/0")
        return conn.getresponse().status
    finally:
        conn.close()


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
