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

import contextlib
import hashlib
import hmac
import json
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from airflow_provider_horovod.runtime.errors import PayloadError

MAGIC = b"AIRFLOW-HOROVOD-PAYLOAD/1\n"
LARGE_PAYLOAD_BYTES = 50 * 1024 * 1024
"""Payloads above this size (50 MiB) trigger a warning: usually a dataset captured in a closure."""


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _mac(key: bytes, header: dict[str, Any]) -> str:
    signed = json.dumps({k: header[k] for k in ("python", "cloudpickle", "size", "sha256")}, sort_keys=True)
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get("stdlib"), paths.get("platstdlib"), paths.get("purelib"), paths.get("platlib")}
    return tuple(os.path.realpath(r) for r in roots if r)


def _is_installed_module(module: types.ModuleType) -> bool:
    """True for modules that an executor with the same environment can import by name."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(module, "__file__", None) or (spec.origin if spec else None)
    if origin is None or origin in ("built-in", "frozen"):
        return True
    real = os.path.realpath(origin)
    if any(real.startswith(root + os.sep) for root in _installed_roots()):
        return True
    if "site-packages" in real.split(os.sep) or "dist-packages" in real.split(os.sep):
        return True
    # Not installed: importable only where this very file path exists (a DAG file, a test module).
    return False


@contextlib.contextmanager
def pickle_by_value(fn: Callable[..., Any]) -> Iterator[str | None]:
    """
    Make cloudpickle serialize ``fn``'s module by value while the block runs.

    Functions defined in an Airflow DAG file live in a module (``unusual_prefix_..._my_dag``) that executors
    cannot import, so pickling them by reference fails on the executor with ``No module named ...``.
    Modules of installed distributions and of the standard library keep travelling by reference.
    Registration is undone on exit (cloudpickle keeps a process-wide registry).

    :param fn: the training function.
    :return: (as the ``with`` target) the name of the module registered by value, or ``None``.
    """
    module_name = getattr(fn, "__module__", None)
    module = sys.modules.get(module_name) if module_name else None
    registered = None
    if module is not None and module_name != "__main__" and not _is_installed_module(module):
        if module_name not in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.register_pickle_by_value(module)
            registered = module_name
    try:
        yield registered
    finally:
        if registered is not None:
            cloudpickle.unregister_pickle_by_value(sys.modules[registered])


def _first_unpicklable(label: str, value: Any, depth: int = 1) -> str | None:
    try:
        cloudpickle.dumps(value)
        return None
    except Exception:
        pass
    if depth > 0 and hasattr(value, "__dict__") and not isinstance(value, type | types.ModuleType):
        for attr, inner in vars(value).items():
            found = _first_unpicklable(f"{label}.{attr}", inner, depth - 1)
            if found:
                return found
    return f"{label} ({type(value).__module__}.{type(value).__qualname__})"


def find_unpicklable(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """
    Name the first value that cloudpickle cannot serialize: a closure variable or global the function uses,
    an attribute of a bound method's object, or an argument (one level of attributes deep).

    :return: e.g. ``"keyword argument 'cache'.lock (_thread.lock)"``, or ``None`` if none is found.
    """
    import inspect

    name = getattr(fn, "__qualname__", repr(fn))
    candidates: list[tuple[str, Any]] = []
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        candidates += [(f"attribute {a!r} of {type(owner).__qualname__} (bound to {name})", v)
                       for a, v in vars(owner).items()] if hasattr(owner, "__dict__") else []
    try:
        closure = inspect.getclosurevars(fn)
        candidates += [(f"closure variable {n!r} of {name}", v) for n, v in closure.nonlocals.items()]
        candidates += [(f"global {n!r} used by {name}", v) for n, v in closure.globals.items()
                       if not isinstance(v, types.ModuleType)]
    except TypeError:  # not a Python function (a callable object, a builtin)
        candidates.append((f"the callable {name}", fn))
    candidates += [(f"positional argument {i}", v) for i, v in enumerate(args)]
    candidates += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for label, value in candidates:
        found = _first_unpicklable(label, value)
        if found:
            return found
    return None


def dumps_payload(
    fn: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    key: bytes | None = None,
) -> bytes:
    """
    Serialize a training call into a payload.

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
    with pickle_by_value(fn):
        try:
            body = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
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
        header = json.loads(data[len(MAGIC):newline])
    except ValueError as err:
        raise PayloadError(f"payload header is not valid JSON: {err}") from err
    body = data[newline + 1:]
    if len(body) != header.get("size"):
        raise PayloadError(f"payload body is {len(body)} bytes, header says {header.get('size')}: truncated or padded")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise PayloadError("payload digest mismatch: the payload was corrupted or modified after it was written")
    return header, body


def loads_payload(data: bytes, *, key: bytes | None = None) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
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
        raise PayloadError(f"cannot unpickle the training function on {sys.executable}: {type(err).__name__}: {err}. "
                           "A module it needs may be missing on this interpreter.") from err
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
            raise PayloadError("payload authentication failed (HMAC mismatch): refusing to run code that was not "
                               "signed by this run")
    here = {"python": _python_version(), "cloudpickle": cloudpickle.__version__}
    for field, mine in here.items():
        if header.get(field) != mine:
            raise PayloadError(
                f"payload was written with {field} {header.get(field)} but this interpreter ({sys.executable}) has "
                f"{field} {mine}; the Airflow worker, the Spark driver and the executors must use the same Python "
                "major.minor and cloudpickle version (set spark.pyspark.python / PYSPARK_PYTHON)"
            )
    return body
