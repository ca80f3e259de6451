"""
Pickling a training call for executors: cloudpickle with every module executors cannot import registered by value
(:func:`pickle_by_value`, :func:`shipped_by_value`), and naming the value cloudpickle cannot serialize
(:func:`find_unpicklable`). The payload format around the pickle is in
:mod:`~airflow_provider_horovod.runtime.wire.payload`.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import reprlib
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle


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
    """
    The modules registered with ``cloudpickle.register_pickle_by_value`` for one payload; :meth:`undo` unregisters.
    """

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


def dumps(obj: Any, modules: _ByValueModules) -> bytes:
    """
    Cloudpickle ``obj`` with ``modules`` (from :func:`pickle_by_value`) pickled by value.

    :raises pickle.PicklingError: (or what the object's ``__reduce__`` raises) when something in ``obj`` cannot be
        pickled; :func:`find_unpicklable` names it.
    """
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


def shipped_by_value(
    fn: Callable[..., Any], args: tuple[Any, ...] | list[Any] = (), kwargs: dict[str, Any] | None = None
) -> list[str]:
    """
    The modules whose code :func:`~.payload.dumps_payload` ships by value for this call (in the order met).

    Diagnostic only: it pickles the call once. E.g. ``["unusual_prefix_1a2b_my_dag"]`` for a
    ``functools.partial`` of a DAG-file function.

    :param fn: the training callable.
    :param args: its positional arguments.
    :param kwargs: its keyword arguments.
    """
    with pickle_by_value() as modules:
        dumps((fn, tuple(args), dict(kwargs or {})), modules)
        return list(modules.registered)


_MAX_DEPTH = 6
"""How many containers and attributes deep the search for an unpicklable value goes."""
_MAX_ITEMS = 1000
"""How many of one container's items (a dict's keys and values apiece) and attributes are tried, each pickled once."""


def _first_unpicklable(
    label: str, value: Any, depth: int = _MAX_DEPTH, path: frozenset[int] = frozenset()
) -> str | None:
    """
    ``label`` with the path to the innermost value that cannot be pickled, e.g. ``keyword argument 'cfg'['gen']
    (builtins.generator)``, or ``None`` when ``value`` pickles.

    It goes into a failing dict (its keys and values), list, tuple, set or frozenset and an object's attributes, and
    only into the first item that fails on its own, so each level pickles what is below it at most once: the work
    is bounded by ``depth`` times the value's size, and by :data:`_MAX_ITEMS` items a container. ``path`` holds the
    ids of the values on the way down: one that holds itself (or an outer value) is not entered again.
    """
    try:
        cloudpickle.dumps(value)
        return None
    except Exception:
        pass
    if depth > 0:
        inner = path | {id(value)}
        for item_label, item in itertools.islice(_parts(label, value), _MAX_ITEMS):
            found = None if id(item) in inner else _first_unpicklable(item_label, item, depth - 1, inner)
            if found:
                return found
    return f"{label} ({type(value).__module__}.{type(value).__qualname__})"


def _parts(label: str, value: Any) -> Iterator[tuple[str, Any]]:
    """What ``value`` holds, each labelled by its place: ``[key]`` (``key <k>`` for a dict's key), ``[i]``, ``{...}``
    for a set's element, ``.attr``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{label} key {reprlib.repr(key)}", key
            yield f"{label}[{reprlib.repr(key)}]", item
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield f"{label}[{i}]", item
    elif isinstance(value, set | frozenset):
        for item in value:
            yield f"{label}{{...}}", item
    if hasattr(value, "__dict__") and not isinstance(value, type | types.ModuleType):
        for attr, item in vars(value).items():
            yield f"{label}.{attr}", item


def _callable_candidates(fn: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """The values a callable carries, labelled for an error message: what a partial binds, a bound method's or a
    callable object's attributes, a function's closure variables and globals (and the attributes of a module it uses
    that ships by value)."""
    import functools
    import inspect

    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if isinstance(fn, functools.partial) and depth < 8:
        inner = getattr(fn.func, "__qualname__", None) or type(fn.func).__qualname__
        bound = [(f"positional argument {i} bound by functools.partial({inner})", v) for i, v in enumerate(fn.args)]
        bound += [(f"keyword argument {k!r} bound by functools.partial({inner})", v) for k, v in fn.keywords.items()]
        return bound + _callable_candidates(fn.func, depth + 1)
    found: list[tuple[str, Any]] = []
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType | type) and hasattr(owner, "__dict__"):
        found += [
            (f"attribute {a!r} of {type(owner).__qualname__} (bound to {name})", v) for a, v in vars(owner).items()
        ]
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
            found += [
                (f"attribute {a!r} of module {v.__name__!r} (used by {name})", attr)
                for a, attr in vars(v).items()
                if not a.startswith("__")
            ]
    return found


def find_unpicklable(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """
    Name the first value that cloudpickle cannot serialize: a value a ``functools.partial`` binds, an attribute of a
    bound method's object or of a callable object, a closure variable or global the function uses (or an attribute
    of a non-installed module it uses, which ships whole), or an argument; inside it, the innermost culprit down
    through dicts (keys and values), lists, tuples, sets and attributes, up to 6 levels deep.

    :param fn: the training callable.
    :param args: its positional arguments.
    :param kwargs: its keyword arguments.
    :return: e.g. ``"keyword argument 'cache'.lock (_thread.lock)"`` or
        ``"keyword argument 'cfg'['gen'] (builtins.generator)"``, or ``None`` if none is found.
    """
    candidates = _callable_candidates(fn)
    candidates += [(f"positional argument {i}", v) for i, v in enumerate(args)]
    candidates += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for label, value in candidates:
        found = _first_unpicklable(label, value)
        if found:
            return found
    return None
