"""``HorovodConnectHook.application_id``: the Connect server's ``spark.app.id``, or ``None`` when it tells none.

The real server's answer is tested in tests/integration/test_spark_connect.py; the stand-in session here gives the
answers a real server cannot be made to give (no id, an error).
"""

from __future__ import annotations

import pytest

from airflow_provider_horovod.hooks.connect import HorovodConnectHook


class _Conf:
    def __init__(self, value: str | None = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def get(self, key: str, default: str | None = None) -> str | None:
        assert key == "spark.app.id"
        if self.error is not None:
            raise self.error
        return self.value if self.value is not None else default


class _Session:
    def __init__(self, conf: _Conf) -> None:
        self.conf = conf


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        (_Conf("local-1700000000000"), "local-1700000000000"),
        (_Conf(None), None),
        (_Conf(error=RuntimeError("not allowed")), None),  # the job runs all the same
    ],
)
def test_application_id(conf, expected):
    assert HorovodConnectHook(conn_id="c").application_id(_Session(conf)) == expected
