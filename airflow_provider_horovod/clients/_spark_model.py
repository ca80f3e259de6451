"""
The base of the Spark REST models: frozen pydantic v2 models read from Spark's JSON keys (aliases), whose
validation errors become a :class:`SparkRestPayloadError` naming the field.

Spark's JSON is read as it is written, not coerced: booleans must be booleans, strings may be numbers (Spark writes
some ids as numbers), integers may be integral strings (the master writes a driver's start time as a string).
A ``null`` field counts as absent. Unknown fields are ignored, so newer Spark versions parse too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    Strict,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from airflow_provider_horovod.clients.spark_rest_errors import SparkRestPayloadError


def _number_to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _integral_str_to_int(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    return value


Str = Annotated[str, Strict(), BeforeValidator(_number_to_str)]
"""A string; an integer is accepted and converted."""
Int = Annotated[int, Strict(), BeforeValidator(_integral_str_to_int)]
"""An integer; an integral string is accepted and converted; booleans and floats are refused."""
Bool = Annotated[bool, Strict()]
"""A JSON boolean (``"yes"`` or ``1`` are refused)."""
EpochMs = Annotated[Int | None, AfterValidator(lambda value: None if value is None or value < 0 else value)]
"""An epoch in milliseconds where Spark writes ``-1`` (or nothing) for "not yet": ``None`` then."""
Ints = tuple[Annotated[int, Strict()], ...]
Strs = tuple[Annotated[str, Strict()], ...]
StrMap = dict[str, Annotated[str, Strict()]]


def _resources_in(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    return {name: (info.get("addresses") or ()) if isinstance(info, Mapping) else info for name, info in value.items()}


Resources = Annotated[
    dict[str, Strs],
    BeforeValidator(_resources_in),
    PlainSerializer(lambda value: {name: {"name": name, "addresses": list(a)} for name, a in value.items()}),
]
"""``{"gpu": {"name": "gpu", "addresses": ["0", "1"]}}`` held as ``{"gpu": ("0", "1")}``."""

_SCALARS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
}
_CONTAINERS = {
    "tuple_type": "a JSON array",
    "list_type": "a JSON array",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
}

M = TypeVar("M", bound="SparkModel")


class SparkModel(BaseModel):
    """A value object read from one decoded JSON object of the Spark REST API (frozen, hashable)."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", validate_by_alias=True, validate_by_name=True, defer_build=True
    )  # schemas built on first use, not when a DAG file is parsed

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and any(v is None for v in data.values()):
            return {k: v for k, v in data.items() if v is not None}
        return data

    @classmethod
    def from_json(cls: type[M], data: Any) -> M:
        """
        Build the model from one decoded JSON object of the Spark REST API.

        :param data: the decoded object; unknown fields are ignored, ``null`` ones count as absent.
        :return: the model.
        :raises SparkRestPayloadError: when ``data`` is not an object, or a field is missing or has the wrong type.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise payload_error(cls.__name__, err) from None

    def to_dict(self) -> dict[str, Any]:
        """The model as a JSON-serializable dict with Spark's own keys: ``from_json(x.to_dict()) == x``."""
        return self.model_dump(mode="json", by_alias=True)

    def __hash__(self) -> int:  # pydantic's own hash fails on the dict fields, which equality still compares
        return hash((type(self), *(v for v in self.__dict__.values() if not isinstance(v, dict))))


class CamelCaseModel(SparkModel):
    """
    A model of JSON written with camelCase keys (the monitoring API, the REST submission server): each field is
    read from its name in camelCase (``num_tasks`` from ``numTasks``) unless it names its own key, as the fields
    whose unit Spark leaves out do (``duration_ms`` from ``duration``).
    """

    model_config = ConfigDict(alias_generator=to_camel)


def _run_together(name: str) -> str:
    return name.replace("_", "")


class RunTogetherModel(SparkModel):
    """
    A model of JSON written with lowercase run-together keys (the standalone master's ``/json/``): each field is read
    from its name without underscores (``cores_used`` from ``coresused``) unless it names its own key
    (``memory_mb`` from ``memory``).
    """

    model_config = ConfigDict(alias_generator=_run_together)


def state_in(states: frozenset[str], doc: str, *, field: str = "status") -> property:
    """
    A read-only property: whether the model's ``field`` is one of ``states`` (``JobInfo.is_terminal``,
    ``DriverStatus.is_successful``, ...).

    :param states: the states for which the property is true.
    :param doc: the property's docstring.
    :param field: the field holding the state.
    """

    def check(self: SparkModel) -> bool:
        return getattr(self, field) in states

    return property(check, doc=doc)


def payload_error(what: str, err: ValidationError) -> SparkRestPayloadError:
    """
    The :class:`SparkRestPayloadError` for the first problem pydantic found, naming its field.

    :param what: the model's name, e.g. ``"JobInfo"``; nested fields are named after it, ``MasterState.workers[0]``.
    :param err: the validation error.
    :return: the error, e.g. ``JobInfo: field 'numTasks' should be an integer, got 'two'``.
    """
    errors = err.errors(include_url=False)
    first = errors[0]
    loc, kind, value = first["loc"], first["type"], first.get("input")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    if kind in _CONTAINERS:  # the object or array itself has the wrong type
        message = f"{_path(what, loc)}: expected {_CONTAINERS[kind]}, got {type(value).__name__}"
    elif kind == "missing":
        present = sorted(value) if isinstance(value, Mapping) else []
        message = f"{_path(what, loc[:-1])}: field {loc[-1]!r} is missing (fields present: {present})"
    else:
        expected = f"should be {_SCALARS[kind]}" if kind in _SCALARS else first["msg"].lower()
        if loc and isinstance(loc[-1], str):
            message = f"{_path(what, loc[:-1])}: field {loc[-1]!r} {expected}, got {value!r}"
        else:
            message = f"{_path(what, loc)}: {expected}, got {value!r}"
    return SparkRestPayloadError(message + more)


def _path(what: str, loc: tuple[int | str, ...]) -> str:
    return what + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def parse_list(cls: type[M], data: Any, what: str) -> list[M]:
    """
    Parse a JSON array of ``cls`` objects (``cls.from_json`` each).

    :param cls: the model.
    :param data: the decoded array.
    :param what: what the array is, for the error (``"jobs"``).
    :return: the models, in order.
    :raises SparkRestPayloadError: when ``data`` is not an array of valid objects.
    """
    if not isinstance(data, list):
        raise SparkRestPayloadError(f"{what}: expected a JSON array, got {type(data).__name__}")
    return [cls.from_json(item) for item in data]
