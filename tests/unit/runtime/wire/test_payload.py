"""Payload round trip and refusal of tampered, truncated, unsigned or mismatched payloads."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import threading

import cloudpickle
import pytest

from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.wire.payload import (
    MAGIC,
    dumps_payload,
    loads_payload,
    read_header,
    verify_payload,
)
from airflow_provider_horovod.runtime.wire.pickling import shipped_by_value

KEY = b"k" * 32


def add(a, b, *, scale=1):
    return (a + b) * scale


def test_round_trip_with_key():
    data = dumps_payload(add, (2, 3), {"scale": 10}, key=KEY)
    fn, args, kwargs = loads_payload(data, key=KEY)
    assert fn(*args, **kwargs) == 50
    header, body = read_header(data)
    assert header["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert header["cloudpickle"] == cloudpickle.__version__
    assert header["size"] == len(body)


def test_closure_and_lambda_travel():
    offset = 7
    data = dumps_payload(lambda x: x + offset, (1,), None)
    fn, args, kwargs = loads_payload(data)
    assert fn(*args, **kwargs) == 8


def test_tampered_body_is_refused():
    data = bytearray(dumps_payload(add, (1, 2), key=KEY))
    data[-5] ^= 0xFF
    with pytest.raises(PayloadError, match="digest mismatch"):
        loads_payload(bytes(data), key=KEY)


def test_truncated_payload_is_refused():
    data = dumps_payload(add, (1, 2), key=KEY)
    with pytest.raises(PayloadError, match="truncated"):
        verify_payload(data[:-10], key=KEY)
    with pytest.raises(PayloadError, match="header is truncated"):
        verify_payload(MAGIC + b'{"size": 1', key=KEY)


def test_foreign_bytes_are_refused():
    with pytest.raises(PayloadError, match="bad magic"):
        verify_payload(cloudpickle.dumps((add, (), {})))


def test_wrong_key_and_unsigned_are_refused():
    with pytest.raises(PayloadError, match="HMAC"):
        loads_payload(dumps_payload(add, (1, 2), key=KEY), key=b"x" * 32)
    with pytest.raises(PayloadError, match="HMAC"):
        loads_payload(dumps_payload(add, (1, 2)), key=KEY)


def _rewrite_header(data: bytes, **changes) -> bytes:
    header, body = read_header(data)
    header.update(changes)
    return MAGIC + json.dumps(header).encode() + b"\n" + body


def test_version_mismatch_is_refused_with_both_versions():
    data = dumps_payload(add, (1, 2))
    with pytest.raises(PayloadError, match=r"python 2\.7 .* has python 3\.\d+"):
        loads_payload(_rewrite_header(data, python="2.7"))
    with pytest.raises(PayloadError, match=r"cloudpickle 0\.0\.1"):
        loads_payload(_rewrite_header(data, cloudpickle="0.0.1"))


def test_header_forgery_breaks_hmac():
    data = dumps_payload(add, (1, 2), key=KEY)
    with pytest.raises(PayloadError, match="HMAC"):
        verify_payload(_rewrite_header(data, python="3.99"), key=KEY)


def test_unpicklable_argument_names_the_problem():
    with pytest.raises(PayloadError, match="lock"):
        dumps_payload(add, (threading.Lock(), 1))


def test_function_from_non_importable_module_travels_by_value(tmp_path):
    """A DAG file's module cannot be imported by executors: its functions must be pickled by value."""
    src = tmp_path / "my_dag_file.py"
    src.write_text("FACTOR = 6\n\ndef helper(x):\n    return x * FACTOR\n\ndef train(x):\n    return helper(x) + 1\n")
    spec = importlib.util.spec_from_file_location("unusual_prefix_abc_my_dag_file", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        data = dumps_payload(module.train, (7,))
    finally:
        del sys.modules[spec.name]
    assert spec.name not in cloudpickle.list_registry_pickle_by_value()  # registration was undone
    fn, args, kwargs = loads_payload(data)  # the module is gone: only by-value pickling can load this
    assert fn(*args, **kwargs) == 43


class Trainer:
    def __init__(self):
        self.epochs = 3
        self.lock = threading.Lock()

    def train(self):
        return self.epochs


def test_culprit_is_named_for_arguments_closures_and_bound_methods():
    with pytest.raises(PayloadError, match=r"culprit is keyword argument 'cache'.lock \(_thread.lock\)"):
        dumps_payload(add, (1, 2), {"scale": 1, "cache": Trainer()})
    lock = threading.Lock()

    def uses_lock():
        with lock:
            return 1

    with pytest.raises(PayloadError, match=r"culprit is closure variable 'lock' of .*uses_lock \(_thread.lock\)"):
        dumps_payload(uses_lock)
    with pytest.raises(PayloadError, match=r"culprit is attribute 'lock' of Trainer"):
        dumps_payload(Trainer().train)


# --- callables of every shape from a module executors cannot import (issue #10) ------------------------------------

HELPERS_SRC = '''
"""A helper module in the DAG folder: importable by the Airflow worker, not by executors."""
import functools

OFFSET = 100


def scale(x):
    return x * 10 + OFFSET


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


def plain_decorator(fn):
    def wrapper(*args, **kwargs):
        return {"plain_wrapped": fn(*args, **kwargs) + OFFSET}
    return wrapper


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return {"wrapped": fn(*args, **kwargs)}
    return wrapper
'''

SHAPES_SRC = '''
"""Stands for a DAG file: Airflow loads it as unusual_prefix_<hash>_<file>, a name no executor can import."""
import functools
import operator

import dag_folder_helpers as helpers
from dag_folder_helpers import Scaler, logged, plain_decorator
from airflow_provider_horovod.runtime import artifacts

FACTOR = 3


def train(lr, epochs):
    return {"lr": lr, "epochs": epochs, "factor": FACTOR}


def _inner(x):
    return x * FACTOR


def uses_helper(x):
    return _inner(x) + 1


class Trainer:
    def __init__(self, lr):
        self.lr = lr

    def fit(self, epochs):
        return {"lr": self.lr, "epochs": epochs, "cls": type(self).__name__}

    def __call__(self, epochs):
        return self.fit(epochs)

    @staticmethod
    def static(epochs):
        return {"static": epochs * FACTOR}

    @classmethod
    def klass(cls, epochs):
        return {"cls": cls.__name__, "epochs": epochs}


class Config:
    def __init__(self, lr):
        self.lr = lr

    def describe(self):
        return f"lr={self.lr}"


def with_config(config, epochs):
    return {"config": config.describe(), "epochs": epochs}


def describe_all(configs):
    first, (second,) = configs["list"]
    return [first.describe(), second.describe()]


def make_closure(scale):
    def closure(epochs):
        return {"scaled": epochs * scale * FACTOR}
    return closure


lambda_fn = lambda epochs: {"lambda": epochs + FACTOR}  # noqa: E731


def uses_module_helpers(x):
    return {"helper": helpers.scale(x), "scaler": Scaler(2)(x)}


@logged
def decorated(x):
    return x + FACTOR


@plain_decorator
def decorated_without_wraps(x):
    return x + FACTOR


def uses_provider(x):
    return {"provider": artifacts.__name__, "x": x}


SHAPES = {
    "plain": (train, (0.1, 2), {}),
    "partial": (functools.partial(train, lr=0.05), (), {"epochs": 2}),
    "nested_partial": (functools.partial(functools.partial(with_config, Config(0.2)), epochs=3), (), {}),
    "partial_of_bound_method": (functools.partial(Trainer(0.25).fit, 6), (), {}),
    "bound_method": (Trainer(0.3).fit, (4,), {}),
    "callable_instance": (Trainer(0.4), (5,), {}),
    "lambda": (lambda_fn, (1,), {}),
    "closure": (make_closure(2), (3,), {}),
    "staticmethod": (Trainer.static, (2,), {}),
    "staticmethod_object": (Trainer.__dict__["static"], (2,), {}),
    "classmethod": (Trainer.klass, (2,), {}),
    "helper_function": (uses_helper, (2,), {}),
    "helper_module": (uses_module_helpers, (3,), {}),
    "decorated": (decorated, (1,), {}),
    "decorated_without_wraps": (decorated_without_wraps, (1,), {}),
    "dag_object_in_args": (with_config, (Config(0.6),), {"epochs": 1}),
    "installed_callable_dag_args": (operator.methodcaller("describe"), (Config(0.7),), {}),
    "dag_objects_nested_in_kwargs": (describe_all, (), {"configs": {"list": [Config(0.8), (Config(0.9),)]}}),
    "provider_by_reference": (uses_provider, (5,), {}),
}
'''

EXPECTED = {
    "plain": {"lr": 0.1, "epochs": 2, "factor": 3},
    "partial": {"lr": 0.05, "epochs": 2, "factor": 3},
    "nested_partial": {"config": "lr=0.2", "epochs": 3},
    "partial_of_bound_method": {"lr": 0.25, "epochs": 6, "cls": "Trainer"},
    "bound_method": {"lr": 0.3, "epochs": 4, "cls": "Trainer"},
    "callable_instance": {"lr": 0.4, "epochs": 5, "cls": "Trainer"},
    "lambda": {"lambda": 4},
    "closure": {"scaled": 18},
    "staticmethod": {"static": 6},
    "staticmethod_object": {"static": 6},
    "classmethod": {"cls": "Trainer", "epochs": 2},
    "helper_function": 7,
    "helper_module": {"helper": 130, "scaler": 6},
    "decorated": {"wrapped": 4},
    "decorated_without_wraps": {"plain_wrapped": 104},
    "dag_object_in_args": {"config": "lr=0.6", "epochs": 1},
    "installed_callable_dag_args": "lr=0.7",
    "dag_objects_nested_in_kwargs": ["lr=0.8", "lr=0.9"],
    "provider_by_reference": {"provider": "airflow_provider_horovod.runtime.artifacts", "x": 5},
}

LOADER = """
import json, pickle, sys, traceback
import cloudpickle
from airflow_provider_horovod.runtime.wire.payload import loads_payload

with open(sys.argv[1], "rb") as f:
    payloads = pickle.load(f)
results = {}
for name, (kind, data) in payloads.items():
    try:
        if kind == "payload":
            fn, args, kwargs = loads_payload(data)
        else:  # a bare cloudpickle.dumps, as the provider did for a partial before issue #10
            fn, args, kwargs = cloudpickle.loads(data)
        results[name] = {"value": fn(*args, **kwargs)}
    except BaseException as err:
        results[name] = {"error": f"{type(err).__name__}: {err}"}
print(json.dumps(results))
"""


def _load_module(name: str, path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shapes_loaded(tmp_path_factory):
    """
    Every callable shape, dumped while its DAG-like module is loaded, then loaded and called in a fresh interpreter
    whose cwd and sys.path do not contain the modules (as on an executor).
    """
    import pickle
    import subprocess
    import uuid

    src_dir = tmp_path_factory.mktemp("dag-folder")
    (src_dir / "dag_folder_helpers.py").write_text(HELPERS_SRC)
    (src_dir / "callable_shapes.py").write_text(SHAPES_SRC)
    dag_module = f"unusual_prefix_{uuid.uuid4().hex}_callable_shapes"
    _load_module("dag_folder_helpers", src_dir / "dag_folder_helpers.py")
    payloads, by_value, registry_after = {}, {}, {}
    try:
        module = _load_module(dag_module, src_dir / "callable_shapes.py")
        for name, (fn, args, kwargs) in module.SHAPES.items():
            payloads[name] = ("payload", dumps_payload(fn, args, kwargs))
            registry_after[name] = cloudpickle.list_registry_pickle_by_value()
            by_value[name] = shipped_by_value(fn, args, kwargs)
        fn, args, kwargs = module.SHAPES["partial"]
        payloads["partial_bare_cloudpickle"] = ("raw", cloudpickle.dumps((fn, args, kwargs)))
        partial_module = fn.__module__
    finally:
        sys.modules.pop(dag_module, None)
        sys.modules.pop("dag_folder_helpers", None)
    blob = tmp_path_factory.mktemp("payloads") / "payloads.pkl"
    blob.write_bytes(pickle.dumps(payloads))
    elsewhere = tmp_path_factory.mktemp("executor-cwd")
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, str(blob)], cwd=elsewhere, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return {
        "dag_module": dag_module,
        "results": json.loads(proc.stdout.strip().splitlines()[-1]),
        "by_value": by_value,
        "registry_after": registry_after,
        "partial_module": partial_module,
    }


@pytest.mark.parametrize("shape", sorted(EXPECTED))
def test_callable_shape_from_a_dag_file_runs_where_the_module_is_missing(shapes_loaded, shape):
    assert shapes_loaded["results"][shape] == {"value": EXPECTED[shape]}
    assert not shapes_loaded["registry_after"][shape]  # every registration was undone


def test_partial_registration_covers_the_dag_module(shapes_loaded):
    """The bug of issue #10: a partial's ``__module__`` is functools, so the DAG module was never registered."""
    dag_module = shapes_loaded["dag_module"]
    assert shapes_loaded["partial_module"] == "functools"
    assert shapes_loaded["by_value"]["partial"] == [dag_module]
    # what shipping it the old way (nothing registered) does on an executor
    assert shapes_loaded["results"]["partial_bare_cloudpickle"] == {
        "error": f"ModuleNotFoundError: No module named '{dag_module}'"
    }


def test_only_non_importable_modules_are_shipped_by_value(shapes_loaded):
    by_value = shapes_loaded["by_value"]
    dag_module = shapes_loaded["dag_module"]
    assert sorted(by_value["helper_module"]) == sorted([dag_module, "dag_folder_helpers"])
    assert by_value["decorated"] == [dag_module]  # functools.wraps gives the wrapper the DAG module's name
    assert sorted(by_value["decorated_without_wraps"]) == sorted([dag_module, "dag_folder_helpers"])
    assert by_value["installed_callable_dag_args"] == [dag_module]  # operator.methodcaller stays by reference
    assert by_value["provider_by_reference"] == [dag_module]  # this provider's package stays by reference
    for modules in by_value.values():
        assert not any(m.split(".")[0] in {"functools", "operator", "airflow_provider_horovod"} for m in modules)


def test_a_module_the_user_registered_stays_registered(tmp_path):
    src = tmp_path / "user_registered.py"
    src.write_text("def f(x):\n    return x + 1\n")
    module = _load_module("unusual_prefix_user_registered", src)
    cloudpickle.register_pickle_by_value(module)
    try:
        assert shipped_by_value(module.f, (1,)) == []
        assert "unusual_prefix_user_registered" in cloudpickle.list_registry_pickle_by_value()
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules["unusual_prefix_user_registered"]


def test_registration_is_undone_when_pickling_fails(tmp_path):
    src = tmp_path / "fails.py"
    src.write_text("import threading\nLOCK = threading.Lock()\n\ndef f():\n    with LOCK:\n        return 1\n")
    module = _load_module("unusual_prefix_fails", src)
    try:
        with pytest.raises(PayloadError, match="culprit is global 'LOCK'"):
            dumps_payload(module.f)
        assert cloudpickle.list_registry_pickle_by_value() == set()
    finally:
        del sys.modules["unusual_prefix_fails"]


class LockedTrainer:
    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self):
        return 1


def test_culprit_is_named_inside_partials_callable_objects_and_helper_modules(tmp_path):
    lock = threading.Lock()
    with pytest.raises(PayloadError, match=r"culprit is keyword argument 'cache' bound by functools.partial\(add\)"):
        dumps_payload(functools.partial(functools.partial(add, 1), cache=lock), (2,))
    with pytest.raises(PayloadError, match=r"culprit is attribute 'lock' of the callable LockedTrainer"):
        dumps_payload(LockedTrainer())
    # a helper module that ships by value goes whole: an unpicklable attribute of it is named
    (tmp_path / "helper_with_lock.py").write_text(
        "import threading\nLOCK = threading.Lock()\n\ndef one():\n    return 1\n"
    )
    (tmp_path / "dag_file.py").write_text(
        "import helper_with_lock\n\ndef train():\n    return helper_with_lock.one()\n"
    )
    _load_module("helper_with_lock", tmp_path / "helper_with_lock.py")
    try:
        dag = _load_module("unusual_prefix_locked_dag_file", tmp_path / "dag_file.py")
        with pytest.raises(PayloadError, match=r"culprit is attribute 'LOCK' of module 'helper_with_lock'"):
            dumps_payload(dag.train)
    finally:
        sys.modules.pop("helper_with_lock", None)
        sys.modules.pop("unusual_prefix_locked_dag_file", None)
    assert cloudpickle.list_registry_pickle_by_value() == set()
