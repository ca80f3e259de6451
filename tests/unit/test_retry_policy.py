"""
Which failures of a training task the provider's retry policy retries (airflow_provider_horovod/retry_policy.py), on
the errors as the Airflow side raises them; in a real deployment: tests/e2e/test_real_worker.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction

from airflow_provider_horovod.exceptions import (
    HorovodAccessError,
    HorovodExecutorLostError,
    HorovodJobError,
    HorovodJobKilledError,
    HorovodRankKilledError,
    HorovodRendezvousError,
)
from airflow_provider_horovod.retry_policy import failure_kind, training_retry_policy
from airflow_provider_horovod.runtime.rank_errors import WAITING_FOR_PEERS, rank_failed


def _rank(**facts) -> dict:
    return rank_failed(rank=1, **facts).to_dict()


CASES = [
    (HorovodExecutorLostError("lost", facts={"executor": "1"}), "infrastructure"),
    (HorovodRankKilledError("killed", failure=_rank(exit_code=-9)), "infrastructure"),
    (HorovodRendezvousError("never joined", failure=_rank(exit_code=1, exc_type=WAITING_FOR_PEERS)), "infrastructure"),
    (HorovodJobError("bug", failure=_rank(exit_code=1, exc_type="ValueError", exc_message="x")), "training code"),
    # a bystander's error stands for a cause that went unreported: not the code's fault for sure
    (HorovodJobError("shut down", failure=_rank(exit_code=1, exc_type="horovod.common.HorovodInternalError")), "other"),
    (HorovodJobError("the Spark driver ended before running the job"), "other"),
    (HorovodJobKilledError("killed from the UI", facts={"job_id": 3}), "other"),
    (HorovodAccessError("403"), "other"),
    (ValueError("np must be a non-zero int"), "input"),
    (RuntimeError("anything else"), "other"),
]


@pytest.mark.parametrize(("err", "kind"), CASES, ids=[f"{type(e).__name__}-{k}" for e, k in CASES])
def test_failure_kind(err, kind):
    assert failure_kind(err) == kind
    assert getattr(err, "infrastructure", False) is (kind == "infrastructure")


def test_the_policy_retries_infrastructure_fails_on_the_code_and_input_and_leaves_the_rest():
    policy = training_retry_policy(retry_delay=timedelta(seconds=20))
    expected = {
        "infrastructure": RetryAction.RETRY,
        "training code": RetryAction.FAIL,
        "input": RetryAction.FAIL,
        "other": RetryAction.DEFAULT,
    }
    for err, kind in CASES:
        decision = policy.evaluate(err, try_number=1, max_tries=3)
        assert decision.action == expected[kind], (err, decision)
        if kind == "infrastructure":
            assert decision.retry_delay == timedelta(seconds=20) and "resumes from the latest checkpoint" in (
                decision.reason or ""
            )
    assert training_retry_policy().evaluate(CASES[0][0], 1, 3).retry_delay is None  # the task's own retry_delay
    assert policy.serialize() == {"__type": "airflow_provider_horovod.TrainingRetryPolicy", "retry_delay": 20.0}
