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
import io
import json
import os
import sys
import sysconfig
import threading
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


_OWN_PACKAGE = __name__.split(".")[0]
"""This provider's top-level package: executors import it by name (``--py-files`` ships the runtime)."""

_REGISTRY_LOCK = threading.RLock()
"""cloudpickle's by-value registry is process-wide: one payload at a time registers and unregisters."""


def _is_by_value_candidate(module_name: Any) -> types.ModuleType | None:
    """
    The module named ``module_name`` if its objects must be pickled by value, else ``None``.

    By value: a module that is loaded here but that an executor cannot import by name, i.e. one that does not
    live in the standard library or site-packages (an Airflow DAG file loaded as ``unusual_prefix_<hash>_<file>``,
    a helper module next to it in the DAG folder, a notebook's or a test's module). By reference: installed
    modules, built-ins, this provider's own package, ``__main__`` (cloudpickle already pickles its objects by
    value) and modules not loaded at all (cloudpickle then pickles the object by value itself).
    """
    if not isinstance(module_name, str) or not module_name or module_name == "__main__":
        return None
    if module_name == _OWN_PACKAGE or module_name.startswith(_OWN_PACKAGE + "."):
        return None
    module = sys.modules.get(module_name)
    if not isinstance(module, types.ModuleType) or _is_installed_module(module):
        return None
    return module


class _ByValueModules:
    """The modules registered with ``cloudpickle.register_pickle_by_value`` for one payload; :meth:`undo` unregisters."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self._modules: list[types.ModuleType] = []
        self._decided: set[str] = set()

    def consider(self, module_name: Any) -> None:
        """Register ``module_name`` by value if executors cannot import it (each name is decided once)."""
        if not isinstance(module_name, str) or module_name in self._decided:
            return
        self._decided.add(module_name)
        module = _is_by_value_candidate(module_name)
        if module is None:
            return
        already = cloudpickle.list_registry_pickle_by_value()
        parts = module_name.split(".")
        if any(".".join(parts[:i]) in already for i in range(1, len(parts) + 1)):
            return  # registered by the user (or a parent package is): leave it registered afterwards
        cloudpickle.register_pickle_by_value(module)
        self.registered.append(module_name)
        self._modules.append(module)

    def undo(self) -> None:
        while self._modules:
            module = self._modules.pop()
            if module.__name__ in cloudpickle.list_registry_pickle_by_value():
                cloudpickle.unregister_pickle_by_value(module)


class _ByValuePickler(cloudpickle.Pickler):
    """
    cloudpickle's pickler, registering by value every non-importable module whose objects it meets.

    ``reducer_override`` sees every function, class and module object the first time the pickle reaches it: the
    callable itself, what a ``functools.partial`` wraps and binds, a bound method's function and instance, an
    instance's class (through its ``__reduce_ex__``) and the classes and functions of its state, a function's
    globals, closure cells, defaults and ``__wrapped__``, the arguments. The object's module is registered before
    cloudpickle decides between by reference and by value, so the object and everything it references from that
    module travel by value. The walk is cloudpickle's own: bounded by its memo (each object once) and its
    recursion guard, and it registers nothing the payload does not contain.
    """

    def __init__(self, file: Any, modules: _ByValueModules) -> None:
        super().__init__(file)
        self._modules = modules

    def reducer_override(self, obj: Any) -> Any:
        try:
            is_class = issubclass(type(obj), type)
        except TypeError:
            is_class = False
        if is_class or isinstance(obj, types.FunctionType):
            self._modules.consider(getattr(obj, "__module__", None))
        elif isinstance(obj, types.ModuleType):
            self._modules.consider(obj.__name__)
        return super().reducer_override(obj)


def _dumps(obj: Any, modules: _ByValueModules) -> bytes:
    with io.BytesIO() as file:
        _ByValuePickler(file, modules).dump(obj)
        return file.getvalue()


@contextlib.contextmanager
def pickle_by_value() -> Iterator[_ByValueModules]:
    """
    Hold cloudpickle's by-value registry for one payload and undo what it registered on exit.

    :return: (as the ``with`` target) the registrations; pass it to the pickling and read ``registered``.
    """
    with _REGISTRY_LOCK:
        modules = _ByValueModules()
        try:
            yield modules
        finally:
            modules.undo()


def shipped_by_value(fn: Callable[..., Any], args: tuple[Any, ...] | list[Any] = (),
                     kwargs: dict[str, Any] | None = None) -> list[str]:
    """
    The modules whose code :func:`dumps_payload` ships by value for this call (in the order met).

    Diagnostic only: it pickles the call once. E.g. ``["unusual_prefix_1a2b_my_dag"]`` for a
    ``functools.partial`` of a DAG-file function.
    """
    with pickle_by_value() as modules:
        _dumps((fn, tuple(args), dict(kwargs or {})), modules)
        return list(modules.registered)


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


def _callable_candidates(fn: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """The values a callable carries, labelled for an error message: what a partial binds, a bound method's or a
    callable object's attributes, a function's closure variables and globals (and the attributes of a module it uses
    that ships by value)."""
    import functools
    import inspect

    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if isinstance(fn, functools.partial) and depth < 8:
        inner = getattr(fn.func, "__qualname__", None) or type(fn.func).__qualname__
        found = [(f"positional argument {i} bound by functools.partial({inner})", v) for i, v in enumerate(fn.args)]
        found += [(f"keyword argument {k!r} bound by functools.partial({inner})", v) for k, v in fn.keywords.items()]
        return found + _callable_candidates(fn.func, depth + 1)
    found: list[tuple[str, Any]] = []
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType | type) and hasattr(owner, "__dict__"):
        found += [(f"attribute {a!r} of {type(owner).__qualname__} (bound to {name})", v) for a, v in vars(owner).items()]
    try:
        closure = inspect.getclosurevars(fn)
    except TypeError:  # not a Python function: a callable object, a builtin
        if not isinstance(fn, types.BuiltinFunctionType | type) and hasattr(fn, "__dict__"):
            found += [(f"attribute {a!r} of the callable {type(fn).__qualname__}", v) for a, v in vars(fn).items()]
        return found + [(f"the callable {name}", fn)]
    found += [(f"closure variable {n!r} of {name}", v) for n, v in closure.nonlocals.items()]
    for n, v in closure.globals.items():
        if not isinstance(v, types.ModuleType):
            found.append((f"global {n!r} used by {name}", v))
        elif _is_by_value_candidate(v.__name__) is not None:  # shipped whole, with every attribute
            found += [(f"attribute {a!r} of module {v.__name__!r} (used by {name})", attr)
                      for a, attr in vars(v).items() if not a.startswith("__")]
    return found


def find_unpicklable(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """
    Name the first value that cloudpickle cannot serialize: a value a ``functools.partial`` binds, an attribute of a
    bound method's object or of a callable object, a closure variable or global the function uses (or an attribute
    of a non-installed module it uses, which ships whole), or an argument (one level of attributes deep).

    :return: e.g. ``"keyword argument 'cache'.lock (_thread.lock)"``, or ``None`` if none is found.
    """
    candidates = _callable_candidates(fn)
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

    Whatever the call holds that comes from a module executors cannot import (an Airflow DAG file, a helper module
    beside it, a notebook) travels by value, however it is reached: the callable itself or a ``functools.partial``,
    bound method, callable object, static or class method, lambda or closure wrapping it, the functions, classes and
    modules they use, and the arguments. Installed modules, the standard library and this provider travel by
    reference. See :class:`_ByValuePickler`.

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
            body = _dumps((fn, tuple(args), dict(kwargs or {})), modules)
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
                "major.minor and cloudpickle version: set conf={'spark.pyspark.python': ...} on the operator (a "
                "PYSPARK_PYTHON set on the Airflow side does not reach a cluster-mode driver; see 'Which Python runs "
                "where' in docs/getting-started.md)"
            )
    return body
