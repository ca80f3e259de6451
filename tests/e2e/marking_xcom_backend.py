"""A custom XCom backend for tests: it stores every value it serializes wrapped, so a test can tell from the
database which XComs went through it and which Airflow wrote straight to the database."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airflow.sdk.bases.xcom import BaseXCom

MARK = "via_marking_backend"


class MarkingXCom(BaseXCom):
    """``{"via_marking_backend": <what BaseXCom stores>}`` for every value pushed through the backend."""

    @staticmethod
    def serialize_value(value: Any, **kwargs: Any) -> Any:
        return {MARK: BaseXCom.serialize_value(value, **kwargs)}

    @staticmethod
    def deserialize_value(result: Any) -> Any:
        stored = result.value
        if isinstance(stored, dict) and MARK in stored:
            return BaseXCom.deserialize_value(SimpleNamespace(value=stored[MARK]))
        return BaseXCom.deserialize_value(result)
