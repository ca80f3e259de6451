"""
The training payload: a cloudpickled ``(fn, args, kwargs)`` with a header that makes it checkable.

Wire format (one file or byte string)::

    b"AIRFLOW-HOROVOD-PAYLOAD/1\\n"
    <header: one line of JSON>\\n
    <body: cloudpickle.dumps((fn, args, kwargs))>

The header records the producer's Python ``major.minor``, the cloudpickle version, the body's size and
SHA-256, and optionally an HMAC-SHA256 over those fields made with a per-run secret that is never stored
beside the payload. cloudpickle only guarantees that the *same* cloudpickle version on the *same* Python
can load what it wrote, so both must match exactly on the loading side.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle

from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.wire.pickling import dumps, find_unpicklable, pickle_by_value

MAGIC = b"AIRFLOW-HOROVOD-PAYLOAD/1\n"
LARGE_PAYLOAD_BYTES = 50 * 1024 * 1024
"""Payloads above this size (50 MiB) trigger a warning: usually a dataset captured in a closure."""


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _mac(key: bytes, header: dict[str, Any]) -> str:
    signed = json.dumps({k: header[k] for k in ("python", "cloudpickle", "size", "sha256")}, sort_keys=True)
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def dumps_payload(
    fn: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    key: bytes | None = None,
) -> bytes:
    """
    Serialize a training call into a payload.

    Whatever the call holds that comes from a module executors cannot import (an Airflow DAG file, a helper module
    beside it, a notebook) travels by value, however it is reached: the callable itself or a ``functools.partial``,
    bound method, callable object, static or class method, lambda or closure wrapping it, the functions, classes and
    modules they use, and the arguments. Installed modules, the standard library and this provider travel by
    reference. See :class:`~.pickling._ByValuePickler`.

    :param fn: the training function; it must be callable.
    :param args: positional arguments for ``fn``.
    :param kwargs: keyword arguments for ``fn``.
    :param key: optional HMAC key (bytes); when given, loaders must present the same key.
    :return: the payload bytes (see the module docstring for the format).
    :raises TypeError: ``fn`` is not callable.
    :raises PayloadError: cloudpickle cannot serialize ``fn`` or its arguments; the message names the
        object cloudpickle reported.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with pickle_by_value() as modules:
        try:
            body = dumps((fn, tuple(args), dict(kwargs or {})), modules)
        except Exception as err:  # cloudpickle raises TypeError/PicklingError/AttributeError, etc.
            culprit = find_unpicklable(fn, tuple(args), dict(kwargs or {}))
            where = f" The culprit is {culprit}." if culprit else ""
            raise PayloadError(
                f"cannot serialize the training function {getattr(fn, '__qualname__', fn)!r} or its arguments "
                f"with cloudpickle: {type(err).__name__}: {err}.{where} Capture only picklable values (paths, "
                "numbers, configs) and create locks, sessions, sockets and SparkContexts inside the function."
            ) from err
    header: dict[str, Any] = {
        "python": _python_version(),
        "cloudpickle": cloudpickle.__version__,
        "size": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    header["hmac"] = _mac(key, header) if key is not None else None
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body


def read_header(data: bytes) -> tuple[dict[str, Any], bytes]:
    """
    Split a payload into its header and body and check the body's size and digest.

    :raises PayloadError: not a payload, truncated, or the digest does not match (corrupted).
    """
    if not data.startswith(MAGIC):
        raise PayloadError("not an airflow-provider-horovod payload (bad magic); the file is corrupt or foreign")
    newline = data.find(b"\n", len(MAGIC))
    if newline < 0:
        raise PayloadError("payload header is truncated")
    try:
        header = json.loads(data[len(MAGIC) : newline])
    except ValueError as err:
        raise PayloadError(f"payload header is not valid JSON: {err}") from err
    body = data[newline + 1 :]
    if len(body) != header.get("size"):
        raise PayloadError(f"payload body is {len(body)} bytes, header says {header.get('size')}: truncated or padded")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise PayloadError("payload digest mismatch: the payload was corrupted or modified after it was written")
    return header, body


def loads_payload(
    data: bytes, *, key: bytes | None = None
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """
    Check and deserialize a payload made by :func:`dumps_payload`.

    :param data: the payload bytes.
    :param key: the HMAC key the payload was signed with, or ``None`` to skip the authenticity check (only
        for a payload that already arrived through an authenticated channel).
    :return: ``(fn, args, kwargs)``.
    :raises PayloadError: corrupt, truncated, unsigned when a key is given, signed with another key, or made
        by a different Python ``major.minor`` / cloudpickle version than this interpreter's.
    """
    body = verify_payload(data, key=key)
    try:
        fn, args, kwargs = cloudpickle.loads(body)
    except Exception as err:
        raise PayloadError(
            f"cannot unpickle the training function on {sys.executable}: {type(err).__name__}: {err}. "
            "A module it needs may be missing on this interpreter."
        ) from err
    return fn, tuple(args), dict(kwargs)


def verify_payload(data: bytes, *, key: bytes | None = None) -> bytes:
    """
    Check a payload without unpickling it (no user code runs).

    :param data: the payload bytes.
    :param key: the HMAC key, or ``None`` to skip the authenticity check.
    :return: the body (the cloudpickle bytes).
    :raises PayloadError: as :func:`loads_payload`.
    """
    header, body = read_header(data)
    if key is not None:
        expected = _mac(key, header)
        if not header.get("hmac") or not hmac.compare_digest(expected, str(header["hmac"])):
            raise PayloadError(
                "payload authentication failed (HMAC mismatch): refusing to run code that was not signed by this run"
            )
    here = {"python": _python_version(), "cloudpickle": cloudpickle.__version__}
    for field, mine in here.items():
        if header.get(field) != mine:
            raise PayloadError(
                f"payload was written with {field} {header.get(field)} but this interpreter ({sys.executable}) has "
                f"{field} {mine}; the Airflow worker, the Spark driver and the executors must use the same Python "
                "major.minor and cloudpickle version: set conf={'spark.pyspark.python': ...} on the operator (a "
                "PYSPARK_PYTHON set on the Airflow side does not reach a cluster-mode driver; see 'Which Python runs "
                "where' in docs/getting-started.md)"
            )
    return body
