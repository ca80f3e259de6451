"""
What the provider relies on in Airflow beyond its public API, checked on the installed Airflow: an upgrade that renames
or reshapes one of these fails here, not in a user's task (the Spark provider's are in
``tests/unit/hooks/test_spark_submit_contract.py``).

- ``XCom._set_xcom_in_db`` (``links.push_spark_ui_url``): the "Spark UI" link's own key written while the task runs,
  as Airflow writes links when a try ends; the real deployment's check is
  ``tests/e2e/test_durable.py::test_an_application_killed_from_the_master_ui_fails_the_task_saying_so``.
- ``DecoratedOperator._handle_output`` (``decorators/horovod.py``): TaskFlow's output handling after a deferral.
"""

from __future__ import annotations

import inspect

P = inspect.Parameter


def test_set_xcom_in_db_takes_the_key_value_and_the_task_instance_s_ids_and_sends_them_to_the_supervisor(monkeypatch):
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import SetXCom
    from airflow.sdk.execution_time.xcom import XCom

    from airflow_provider_horovod.links import SparkUILink, push_spark_ui_url

    params = inspect.signature(XCom._set_xcom_in_db).parameters
    assert [p.name for p in params.values()][:2] == ["key", "value"]
    assert {name: params[name].kind for name in ("dag_id", "task_id", "run_id", "map_index")} == dict.fromkeys(
        ("dag_id", "task_id", "run_id", "map_index"), P.KEYWORD_ONLY
    )

    class Comms:  # the supervisor's channel, as a running task has it
        def __init__(self) -> None:
            self.sent: list = []

        def send(self, message):
            self.sent.append(message)

    class TI:
        dag_id, task_id, run_id, map_index = "d", "train", "manual__1", 3

        def __init__(self) -> None:
            self.pushed: dict = {}

        def xcom_push(self, key, value):
            self.pushed[key] = value

    comms, ti = Comms(), TI()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    push_spark_ui_url(ti, "http://127.0.0.1:4040")
    [message] = comms.sent
    assert isinstance(message, SetXCom)
    assert (message.key, message.value, message.dag_id, message.task_id, message.run_id, message.map_index) == (
        SparkUILink().xcom_key,
        "http://127.0.0.1:4040",
        "d",
        "train",
        "manual__1",
        3,
    )
    assert ti.pushed == {"spark_ui_url": "http://127.0.0.1:4040"}  # the data XCom goes through the XCom backend


def test_decorated_operator_handles_a_return_value_after_a_deferral():
    from airflow.providers.common.compat.sdk import DecoratedOperator

    params = list(inspect.signature(DecoratedOperator._handle_output).parameters.values())[1:]
    assert [(p.name, p.kind) for p in params] == [("return_value", P.POSITIONAL_OR_KEYWORD)]
