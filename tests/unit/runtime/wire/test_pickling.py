"""What cannot be pickled is named by its path inside the argument: dict keys and values, lists, tuples, sets."""

from __future__ import annotations

import re
import threading
import time

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.runtime.errors import PayloadError
from airflow_provider_horovod.runtime.wire.payload import dumps_payload


def train(cfg=None, **kwargs):
    return cfg


def culprit(*args, **kwargs) -> str:
    with pytest.raises(PayloadError) as raised:
        dumps_payload(train, args, kwargs)
    return str(raised.value).split("The culprit is ", 1)[1].split(". Capture", 1)[0]


def test_a_generator_inside_a_dict_in_op_kwargs_is_named_by_its_path():
    op = HorovodRunnerOperator(
        task_id="t", python_callable=train, op_kwargs={"cfg": {"a": 1, "gen": (x for x in range(3))}}
    )
    with pytest.raises(
        HorovodJobError, match=r"The culprit is keyword argument 'cfg'\['gen'\] \(builtins.generator\)\."
    ):
        op._payload()


def test_the_path_goes_through_lists_tuples_sets_and_attributes():
    lock = threading.Lock()
    assert (
        culprit(cfg={"layers": [1, 2, {"opt": (0.1, lock)}]})
        == "keyword argument 'cfg'['layers'][2]['opt'][1] (_thread.lock)"
    )
    assert culprit([0, {frozenset({1}), lock}]) == "positional argument 0[1]{...} (_thread.lock)"
    assert re.fullmatch(r"keyword argument 'cfg' key <unlocked _th.*> \(_thread.lock\)", culprit(cfg={lock: "v"}))
    holder = type("Holder", (), {})()
    holder.state = {"locks": [lock]}
    assert culprit(cfg=[holder]) == "keyword argument 'cfg'[0].state['locks'][0] (_thread.lock)"


def test_a_container_that_holds_itself_is_not_entered_again():
    loop: list = []
    loop.append(loop)
    loop.append({"gen": (x for x in range(3))})
    assert culprit(cfg=loop) == "keyword argument 'cfg'[1]['gen'] (builtins.generator)"


def test_the_search_is_bounded_in_depth_and_width():
    deep: dict = {"gen": (x for x in range(3))}
    for _ in range(50):
        deep = {"next": deep}
    found = culprit(cfg=deep)  # named down to the depth limit, not to the generator 50 levels down
    assert found.startswith("keyword argument 'cfg'['next']['next']") and found.endswith("(builtins.dict)")
    assert found.count("['next']") < 10
    wide = [b"x" * 1000] * 100_000 + [threading.Lock()]  # the lock is past the items tried: the list is named
    start = time.monotonic()
    assert culprit(cfg=wide) == "keyword argument 'cfg' (builtins.list)"
    assert time.monotonic() - start < 20
