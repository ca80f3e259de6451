"""
A job's fork server (``runtime/rank/fork_server.py``) and a task's side of it (``runtime/task/fork_client.py``): a
rank forked from it runs as a started one would (its environment, directory, pipes, exit status, process group) with
its framework imported already; only the job's key is served; it goes when the job succeeded.

A real server process and real rank processes (the worker's ``main``), no Horovod collectives.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import sys

import cloudpickle
import psutil
import pytest

from airflow_provider_horovod.runtime.rank.fork_server import FORK, send_request, socket_name
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task import fork_client
from airflow_provider_horovod.runtime.task.fork_client import ForkServerLink, server_environ
from airflow_provider_horovod.runtime.task.plan import local_plan
from airflow_provider_horovod.runtime.task.rank_process import RankProcess
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.payload import dumps_payload


def what_the_rank_sees():
    import os

    print("hello from the rank", flush=True)
    import horovod.torch  # noqa: F401 - imported already in a forked rank

    return {
        "port": os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT"),
        "rank": os.environ.get("HOROVOD_RANK"),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "session": os.getsid(0),
        "torch_threads": __import__("torch").get_num_threads(),
        "path_head": sys.path[:3],
    }


def exits_with_3():

    sys.exit(3)


def sleeps():
    import time

    time.sleep(60)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, _slot, line: str) -> None:
        self.lines.append(line)


def rank(tmp_path, fn, sink=None, threads: str = "1") -> RankProcess:
    spec = JobSpec(payload=dumps_payload(fn), settings=JobSettings(np=1, start_timeout_s=60))
    gloo = {"HOROVOD_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_PORT": "0", "OMP_NUM_THREADS": threads}
    return RankProcess(local_plan(1)[0], spec, gloo, str(tmp_path), sink or Lines(), devices={})


@pytest.fixture
def server(tmp_path):
    """A fork server for a new key, started as a barrier task starts it (from its own rank's environment)."""
    key = secrets.token_hex(16)
    starter = rank(tmp_path / "starter", what_the_rank_sees)
    starter.start(deferred=True)  # its environment names the imports (horovod.torch): what the server imports
    starter.kill()
    link = ForkServerLink(key, server_environ(starter.environ), joined=lambda: True)
    with link:
        link._thread.join(timeout=30)
        yield key, link
    link.job_succeeded()


def _server_process(key: str) -> psutil.Process | None:
    """The server holding ``key``'s socket (the process with that abstract socket open)."""
    name = "@" + socket_name(key)[1:]
    for proc in psutil.process_iter():
        try:
            if any(conn.laddr == name for conn in proc.net_connections(kind="unix")):
                return proc
        except psutil.Error:
            continue
    return None


def test_a_forked_rank_runs_as_a_started_one_with_its_framework_imported(tmp_path, server):
    key, _link = server
    lines = Lines()
    proc = rank(tmp_path, what_the_rank_sees, sink=lines, threads="2")
    proc.start(deferred=True, fork_key=key)
    try:
        assert proc.forked
        assert psutil.Process(proc._proc.pid).ppid() != os.getpid()  # the server's child, not this process's
        proc.release({"HOROVOD_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_PORT": "41234"}, {})
        assert proc.run_to_end() is None, lines.lines
        value = cloudpickle.loads(proc.result())
    finally:
        proc.kill()
    assert value["port"] == "41234" and value["rank"] == "0"  # the released variables, as for a started rank
    assert value["cwd"] == str(tmp_path / "rank-0")
    assert value["session"] == value["pid"]  # its own session and process group: killpg takes what it starts
    assert value["torch_threads"] == 2  # its OMP_NUM_THREADS, although torch loaded in the server
    assert "hello from the rank" in lines.lines  # its output reaches the task


def test_a_forked_rank_reports_its_exit_status(tmp_path, server):
    key, _link = server
    proc = rank(tmp_path, exits_with_3)
    proc.start(fork_key=key)
    try:
        failure = proc.run_to_end()
    finally:
        proc.kill()
    assert proc.forked and proc.returncode == 3
    assert failure is not None and "sys.exit(3)" in str(failure)


def test_killing_a_forked_rank_kills_its_group_and_its_status_says_so(tmp_path, server):
    key, _link = server
    proc = rank(tmp_path, sleeps)
    proc.start(fork_key=key)
    pid = proc._proc.pid
    proc.kill()
    assert proc.forked and proc.returncode == -signal.SIGKILL
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_request_without_the_job_key_is_refused(tmp_path, server):
    key, _link = server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(socket_name(key))
        send_request(conn, {"op": FORK, "key": "not-the-key", "env": {}, "cwd": "/", "fd_vars": []})
        assert conn.recv(100) == b""  # closed without forking anything


def test_without_a_server_the_rank_starts_as_a_process_of_its_own(tmp_path):
    proc = rank(tmp_path, exits_with_3)
    proc.start(fork_key=secrets.token_hex(16))
    try:
        proc.run_to_end()
    finally:
        proc.kill()
    assert not proc.forked and proc.returncode == 3


def test_the_server_outlives_its_starter_and_goes_when_the_job_succeeded(tmp_path, server):
    key, link = server
    found = _server_process(key)
    assert found is not None and found.ppid() != os.getpid()  # detached: not the starting task's child
    environ = found.environ()
    assert "HOROVOD_RANK" not in environ and "HOROVOD_GLOO_RENDEZVOUS_PORT" not in environ  # no rank's identity
    assert key not in " ".join(found.cmdline()) and key not in "".join(environ.values())
    link.job_succeeded()
    gone, _alive = psutil.wait_procs([found], timeout=30)
    assert gone, "the fork server did not exit after the job succeeded"


def test_a_second_task_on_the_host_holds_the_running_server_and_starts_none(tmp_path, server):
    key, _link = server
    found = _server_process(key)
    assert found is not None
    second = ForkServerLink(key, {}, joined=lambda: True)  # another task of the job on this host
    with second:
        second._thread.join(timeout=10)
        assert second._hold is not None  # it holds the server: the server stays up while either task runs
        assert _server_process(key).pid == found.pid  # the same one: the first to bind the socket serves


def leaves_a_thread_that_writes_late(path: str):
    import threading
    import time

    def later() -> None:
        time.sleep(0.5)
        with open(path, "w") as f:
            f.write("done")

    threading.Thread(target=later).start()  # not a daemon: the rank's exit waits for it, as Python's own does
    return "returned"


@pytest.mark.parametrize("forked", [True, False])
def test_a_rank_waits_for_the_non_daemon_thread_its_function_left_and_succeeds(tmp_path, server, forked):
    key, _link = server
    out = tmp_path / "late.txt"
    proc = RankProcess(
        local_plan(1)[0],
        JobSpec(payload=dumps_payload(leaves_a_thread_that_writes_late, (str(out),)), settings=JobSettings(np=1)),
        {"HOROVOD_RANK": "0"},
        str(tmp_path),
        Lines(),
        devices={},
    )
    proc.start(fork_key=key if forked else None)
    try:
        assert proc.run_to_end() is None
    finally:
        proc.kill()
    assert proc.forked is forked
    assert out.read_text() == "done" and cloudpickle.loads(proc.result()) == "returned"


def test_a_fork_request_left_unanswered_starts_the_rank_on_new_pipes(tmp_path, monkeypatch):
    """A server that takes the request but never answers (stalled): the task starts the rank itself, on pipes of its
    own, so a fork that comes late would find its lifeline closed and end at once."""
    monkeypatch.setattr(fork_client, "REPLY_TIMEOUT_S", 0.5)
    key = secrets.token_hex(16)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stalled:
        stalled.bind(socket_name(key))
        stalled.listen(1)
        proc = rank(tmp_path, sleeps)
        proc.start(fork_key=key)
        conn, _ = stalled.accept()
        with conn:
            _data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 8)
        try:
            assert not proc.forked and proc.returncode is None  # started as a process after the silence; running
            lifeline = fds[1]  # the request's descriptors: the output pipe's write end, then the lifeline's read end
            assert select.select([lifeline], [], [], 5.0)[0] and os.read(lifeline, 1) == b""  # a late fork would end
        finally:
            proc.kill()
            for fd in fds:
                os.close(fd)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a process as another user")
def test_a_socket_name_held_by_another_user_is_sent_nothing(tmp_path):
    key = secrets.token_hex(16)
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:  # another user binds the job's name first and records whatever reaches it
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as squatter:
                squatter.bind(socket_name(key))
                squatter.listen(4)
                os.write(ready_write, b"x")
                squatter.settimeout(20)
                conn, _ = squatter.accept()
                received = conn.recv(65536)
                os._exit(3 if received else 0)
        finally:
            os._exit(1)
    assert os.read(ready_read, 1) == b"x"
    proc = rank(tmp_path, exits_with_3)
    proc.start(fork_key=key)
    try:
        proc.run_to_end()
    finally:
        proc.kill()
    assert not proc.forked  # it started the rank itself
    _pid, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # connected, then closed without sending a byte
