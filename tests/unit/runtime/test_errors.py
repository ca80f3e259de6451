"""Rank failures survive Spark's exception text and read well."""

from __future__ import annotations

import signal

import pytest

from airflow_provider_horovod.runtime import rank_errors as errors
from airflow_provider_horovod.runtime.rank_errors import RankFailedError


def test_marker_round_trip_inside_noise():
    err = RankFailedError(
        rank=3,
        exit_code=1,
        exc_type="ValueError",
        exc_message="bad batch",
        traceback="Traceback (most recent call last):\n  ...\nValueError: bad batch\n",
        output_tail=["step 1", "step 2"],
        host="10.0.0.9",
    )
    text = "py4j.protocol.Py4JJavaError: ... PythonException: " + str(err) + "\n" + err.marker() + "\n\tat org..."
    found = RankFailedError.find_in(text)
    assert found is not None and found.to_dict() == err.to_dict()
    assert RankFailedError.find_in("no marker here") is None


def test_message_names_rank_exit_and_traceback_once():
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom'
    err = RankFailedError(
        rank=1,
        exit_code=1,
        exc_type="ValueError",
        exc_message="boom",
        traceback=tb,
        output_tail=["epoch 1", *tb.splitlines()],
    )
    text = str(err)
    assert text.startswith("Horovod rank 1 failed (exit code 1): ValueError: boom")
    assert text.count("ValueError: boom") == 2  # the head and the traceback, not again from the output tail
    assert "epoch 1" in text


def test_signal_exit_is_named():
    err = RankFailedError(rank=0, exit_code=-signal.SIGKILL)
    assert "killed by signal SIGKILL" in str(err)


def test_root_cause_prefers_the_real_exception_over_bystanders():
    from airflow_provider_horovod.runtime.rank_errors import root_cause

    bystander = RankFailedError(
        rank=0,
        exit_code=1,
        exc_type="horovod.common.exceptions.HorovodInternalError",
        exc_message="Horovod has been shut down",
        failed_at=100.0,
    )
    real = RankFailedError(rank=1, exit_code=1, exc_type="ValueError", exc_message="boom", failed_at=100.5)
    killed = RankFailedError(rank=2, exit_code=-9, failed_at=101.0)
    assert root_cause([bystander, real, killed]) is real
    assert root_cause([bystander, killed]) is killed  # a rank killed by a signal is a primary failure
    earlier = RankFailedError(rank=3, exit_code=1, exc_type="KeyError", exc_message="x", failed_at=99.0)
    assert root_cause([real, earlier]) is earlier


def test_only_limits_the_launcher_enforced_read_as_timeouts():
    """A runtime error (a payload that cannot be loaded) is not a timeout: the head says what happened."""
    from airflow_provider_horovod.runtime.rank_errors import LOAD_ERROR, START_TIMEOUT

    load = RankFailedError(
        rank=1,
        exit_code=1,
        exc_type=LOAD_ERROR,
        host="10.0.0.2",
        exc_message="ModuleNotFoundError: No module named 'mylib' (Python /opt/py/bin/python)",
    )
    head = str(load).splitlines()[0]
    assert head.startswith(
        "Horovod rank 1 on 10.0.0.2 could not load the training function (exit code 1): "
        "ModuleNotFoundError: No module named 'mylib'"
    )
    assert "If 'mylib' is importable where the DAG was parsed, this rank's Python lacks it" in head
    assert "timed out" not in head
    payload = RankFailedError(
        rank=0,
        exit_code=1,
        exc_type="airflow_provider_horovod.runtime.errors.PayloadError",
        exc_message="payload digest mismatch",
    )
    assert "timed out" not in str(payload) and "PayloadError: payload digest mismatch" in str(payload)
    timeout = RankFailedError(rank=1, exit_code=-9, exc_type=START_TIMEOUT, exc_message="rank 1 never reached ...")
    assert str(timeout).startswith("Horovod rank 1 timed out and was stopped: rank 1 never reached")


def test_exit_without_exception_and_sys_exit_heads():
    crashed = RankFailedError(rank=1, exit_code=7)
    assert str(crashed) == (
        "Horovod rank 1 failed (exit code 7): the process ended without a Python exception from "
        "the training function (os._exit() or a crash in native code)"
    )
    exited = RankFailedError(
        rank=1, exit_code=3, exc_type="SystemExit", exc_message="the training function called sys.exit(3)"
    )
    assert str(exited) == "Horovod rank 1 failed (exit code 3): the training function called sys.exit(3)"


def test_a_torch_distributed_rank_is_named_by_its_launcher_and_survives_the_marker():
    err = RankFailedError(
        rank=1, exit_code=1, exc_type="ValueError", exc_message="bad shard", host="h", launcher="torch"
    )
    assert str(err).startswith("torch.distributed rank 1 on h failed (exit code 1): ValueError: bad shard")
    again = RankFailedError.find_in(f"wrapped by Spark: {err.marker()} ...")
    assert again is not None and again.launcher == "torch" and str(again) == str(err)
    # a marker written before the launcher field existed reads as Horovod's
    old = RankFailedError.from_dict({"rank": 0, "exit_code": 1, "exc_type": "ValueError", "exc_message": "x"})
    assert old.launcher == "horovod" and str(old).startswith("Horovod rank 0 failed")


@pytest.mark.parametrize(
    ("exc_type", "message", "secondary"),
    [
        ("torch.distributed.DistBackendError", "NCCL error", True),
        (
            "RuntimeError",
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1",
            True,
        ),
        ("RuntimeError", "Connection reset by peer", True),
        ("ValueError", "bad shard", False),
    ],
)
def test_a_rank_whose_collective_lost_its_peer_is_a_bystander(exc_type, message, secondary):
    err = RankFailedError(rank=0, exit_code=1, exc_type=exc_type, exc_message=message, launcher="torch")
    assert err.is_secondary is secondary


def test_a_huge_message_traceback_and_output_stay_within_the_bound_and_survive_the_round_trip():
    from airflow_provider_horovod.runtime.bounds import MAX_EXC_MESSAGE_CHARS, MAX_LINE_CHARS, MAX_MESSAGE_CHARS

    huge = "z" * 5_000_000
    tb = (
        "Traceback (most recent call last):\n"
        + '  File "train.py", line 3, in fn\n' * 5000
        + '  File "train.py", line 9, in fn\n    raise ValueError(huge)\n'
        + f"ValueError: {huge}"
    )
    err = RankFailedError(
        rank=1,
        exit_code=1,
        exc_type="ValueError",
        exc_message=huge,
        traceback=tb,
        output_tail=[f"step {i} " + "o" * 50_000 for i in range(100)],
    )
    text = str(err)
    assert len(text) <= MAX_MESSAGE_CHARS, len(text)
    head = text.splitlines()[0]
    assert head.startswith("Horovod rank 1 failed (exit code 1): ValueError: zzz") and "characters cut" in head
    assert len(head) <= MAX_EXC_MESSAGE_CHARS + 100
    assert "line 9, in fn\n    raise ValueError(huge)" in text  # the traceback's last frames are kept
    assert "step 99 ooo" in text and "older lines left out" in text  # the newest output lines, as many as fit
    assert all(len(line) <= MAX_LINE_CHARS for line in err.output_tail)
    assert len(err.marker()) < 2 * MAX_MESSAGE_CHARS  # what travels inside Spark's exception text is bounded too
    again = RankFailedError.from_dict(err.to_dict())
    assert str(again) == text and RankFailedError.find_in(err.marker()).to_dict() == err.to_dict()


# --- failure kinds as types (#35 item 6): code that acts on a failure (a restart, a retry) reads the type and its
# facts, never the message


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"exit_code": -signal.SIGKILL}, "RankKilledError"),  # the OOM killer, a kill -9
        ({"exit_code": -signal.SIGSEGV}, "RankKilledError"),  # a crash in native code
        ({"exit_code": -signal.SIGTERM, "exc_type": "KeyboardInterrupt"}, "RankFailedError"),  # its own exception
        ({"exit_code": 1, "exc_type": "ValueError"}, "RankFailedError"),
        ({"exit_code": 1}, "RankFailedError"),  # os._exit(1)
        ({"exit_code": -signal.SIGTERM, "exc_type": errors.START_TIMEOUT}, "RendezvousError"),
        ({"exit_code": -signal.SIGTERM, "exc_type": errors.WAITING_FOR_PEERS}, "RendezvousError"),
        ({"exit_code": -signal.SIGTERM, "exc_type": errors.PEER_LEFT}, "RendezvousError"),
        ({"exit_code": -signal.SIGTERM, "exc_type": errors.TRAINING_TIMEOUT}, "RankFailedError"),
    ],
)
def test_a_rank_failure_is_of_its_kind_and_stays_so_through_the_marker(fields, kind):
    err = errors.rank_failed(rank=1, exc_message="m", output_tail=["a line"], host="h", **fields)
    assert type(err).__name__ == kind and isinstance(err, RankFailedError)
    back = RankFailedError.find_in(f"Spark's noise {err.marker()} more noise")
    assert type(back) is type(err) and back.to_dict() == err.to_dict()
    assert str(back) == str(err)  # the message does not depend on the kind


def test_a_killed_rank_names_its_signal():
    err = errors.rank_failed(rank=0, exit_code=-signal.SIGKILL)
    assert isinstance(err, errors.RankKilledError) and err.signal is signal.SIGKILL
    assert "killed by signal SIGKILL" in str(err)
    assert errors.rank_failed(rank=0, exit_code=-200).signal == 200  # a number Python has no name for


def test_the_rank_failures_the_task_side_builds_are_of_their_kind(tmp_path):
    import json

    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.runtime.task.rank_failure import exit_failure, timeout_failure
    from airflow_provider_horovod.runtime.wire.jobspec import JobSpec

    killed = exit_failure(
        rank=1,
        exit_code=-signal.SIGKILL,
        error_path=str(tmp_path / "none.json"),
        host="h",
        output_tail=[],
        exited_at=1.0,
    )
    assert isinstance(killed, errors.RankKilledError)
    (tmp_path / "error.json").write_text(json.dumps({"exc_type": "ValueError", "exc_message": "bad"}))
    raised = exit_failure(
        rank=1, exit_code=1, error_path=str(tmp_path / "error.json"), host="h", output_tail=[], exited_at=1.0
    )
    assert type(raised) is RankFailedError and raised.exc_type == "ValueError"
    spec = JobSpec(payload=b"", settings=JobSettings(np=2, start_timeout_s=30.0, training_timeout_s=60.0))
    for which, kind in [
        ("start", errors.RendezvousError),
        ("init", errors.RendezvousError),
        ("peer", errors.RendezvousError),
        ("training", RankFailedError),
    ]:
        err = timeout_failure(
            which, rank=0, spec=spec, peer_left="rank 1 ended", exit_code=-15, host="h", output_tail=[]
        )
        assert type(err) is kind, which
