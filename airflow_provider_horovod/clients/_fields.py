"""Typed readers of decoded JSON fields, and declarative records; a bad field is a :class:`SparkRestPayloadError`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from airflow_provider_horovod.clients.spark_rest_errors import SparkRestPayloadError

_MISSING = object()


def obj(data: Any, what: str) -> Mapping[str, Any]:
    """Return ``data`` when it is a JSON object, else raise :class:`SparkRestPayloadError` naming ``what``."""
    if not isinstance(data, Mapping):
        raise SparkRestPayloadError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def objs(data: Any, what: str) -> list[Mapping[str, Any]]:
    """Return ``data`` when it is a JSON array of objects, else raise :class:`SparkRestPayloadError`."""
    if not isinstance(data, list):
        raise SparkRestPayloadError(f"{what}: expected a JSON array, got {type(data).__name__}")
    return [obj(item, f"{what}[{i}]") for i, item in enumerate(data)]


def _get(data: Mapping[str, Any], key: str, what: str, required: bool) -> Any:
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise SparkRestPayloadError(f"{what}: field {key!r} is missing (fields present: {sorted(data)})")
        return None
    return value


def req_str(data: Mapping[str, Any], key: str, what: str) -> str:
    """A required string field (numbers are accepted and converted: Spark writes some ids as numbers)."""
    value = _get(data, key, what, True)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be a string, got {value!r}")
    return str(value)


def opt_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    """An optional string field: ``None`` when absent or null."""
    return None if data.get(key) is None else req_str(data, key, what)


def req_int(data: Mapping[str, Any], key: str, what: str) -> int:
    """A required integer field; integral strings are accepted (the master writes driver start times as strings)."""
    value = _get(data, key, what, True)
    if isinstance(value, bool):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise SparkRestPayloadError(f"{what}: field {key!r} should be an integer, got {value!r}")


def opt_int(data: Mapping[str, Any], key: str, what: str) -> int | None:
    """An optional integer field: ``None`` when absent or null."""
    return None if data.get(key) is None else req_int(data, key, what)


def req_bool(data: Mapping[str, Any], key: str, what: str) -> bool:
    """A required boolean field."""
    value = _get(data, key, what, True)
    if not isinstance(value, bool):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be a boolean, got {value!r}")
    return value


def opt_bool(data: Mapping[str, Any], key: str, what: str) -> bool | None:
    """An optional boolean field: ``None`` when absent or null."""
    return None if data.get(key) is None else req_bool(data, key, what)


def int_list(data: Mapping[str, Any], key: str, what: str) -> tuple[int, ...]:
    """An optional array of integers: ``()`` when absent."""
    value = data.get(key) or []
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be an array of integers, got {value!r}")
    return tuple(value)


def str_list(data: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    """An optional array of strings: ``()`` when absent."""
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be an array of strings, got {value!r}")
    return tuple(value)


def str_map(data: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
    """An optional object of string values: ``{}`` when absent."""
    value = data.get(key) or {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise SparkRestPayloadError(f"{what}: field {key!r} should be an object of strings, got {value!r}")
    return dict(value)


def epoch_ms(data: Mapping[str, Any], key: str, what: str) -> int | None:
    """An epoch in milliseconds where Spark writes ``-1`` (or nothing) for "not yet": ``None`` then."""
    value = opt_int(data, key, what)
    return None if value is None or value < 0 else value


# --- declarative records: each dataclass field names its JSON key and how to read and write it -------------------


@dataclass(frozen=True)
class Kind:
    """How one JSON field is read (``read(data, key, what)``) and written back (``write(value)``)."""

    read: Callable[[Mapping[str, Any], str, str], Any]
    write: Callable[[Any], Any] = lambda value: value
    hashable: bool = True


STR = Kind(req_str)
OPT_STR = Kind(opt_str)
INT = Kind(req_int)
OPT_INT = Kind(opt_int)
BOOL = Kind(req_bool)
OPT_BOOL = Kind(opt_bool)
EPOCH_MS = Kind(epoch_ms)
INTS = Kind(int_list, list)
STRS = Kind(str_list, list)
STR_MAP = Kind(str_map, dict, hashable=False)


def records(cls: type[R]) -> Kind:
    """A JSON array of ``cls`` records, held as a tuple."""
    return Kind(lambda d, k, w: tuple(cls.from_json(x) for x in objs(d.get(k) or [], f"{w}.{k}")),
                lambda value: [x.to_dict() for x in value])


def spark_field(key: str, kind: Kind) -> Any:
    """A dataclass field read from JSON key ``key`` as ``kind``."""
    return field(metadata={"json": key, "kind": kind}, hash=None if kind.hashable else False)


R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """Mixin for frozen dataclasses whose fields are all declared with :func:`spark_field`."""

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """
        Build the record from one decoded JSON object of the Spark REST API.

        :param data: the decoded object; unknown fields are ignored.
        :raises SparkRestPayloadError: when it is not an object, or a field is missing or has the wrong type.
        """
        data = obj(data, cls.__name__)
        what = cls.__name__
        return cls(**{f.name: f.metadata["kind"].read(data, f.metadata["json"], what) for f in fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-serializable dict with Spark's own keys: ``from_json(x.to_dict()) == x``."""
        return {f.metadata["json"]: f.metadata["kind"].write(getattr(self, f.name)) for f in fields(self)}
