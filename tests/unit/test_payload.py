"""Payload round trip and refusal of tampered, truncated, unsigned or mismatched payloads."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading

import cloudpickle
import pytest

from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.payload import MAGIC, dumps_payload, loads_payload, read_header, verify_payload

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
