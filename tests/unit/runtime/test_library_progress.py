"""
The progress callbacks a rank adds to the libraries' trainers (runtime/library_progress.py): when they are added, to
what, and what they report. The trainers themselves run in tests/integration/test_libraries.py and the browser test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from airflow_provider_horovod.runtime import library_progress
from airflow_provider_horovod.runtime.wire.protocol import ENV_LIBRARY_PROGRESS, ENV_METRICS


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),  # outside a job: no channel
        ({ENV_METRICS: "7"}, True),
        ({ENV_METRICS: "7", ENV_LIBRARY_PROGRESS: "0"}, False),
        ({ENV_METRICS: "7", ENV_LIBRARY_PROGRESS: " Off "}, False),
        ({ENV_METRICS: "7", ENV_LIBRARY_PROGRESS: "false"}, False),
        ({ENV_METRICS: "7", ENV_LIBRARY_PROGRESS: "1"}, True),
    ],
)
def test_enabled_in_a_job_unless_switched_off(environ, expected):
    assert library_progress.enabled(environ) is expected


def test_numeric_keeps_numbers_and_one_element_tensors():
    logs = {
        "loss": torch.tensor(0.5),
        "acc": np.float32(0.25),
        "lr": 1e-3,
        "steps": 3,
        "epoch": 1.5,
        "flag": True,
        "name": "x",
        "vector": torch.ones(2),
        "none": None,
    }
    assert library_progress.numeric(logs, skip=("epoch",)) == {"loss": 0.5, "acc": 0.25, "lr": 1e-3, "steps": 3.0}
    assert library_progress.numeric(None) == {}


@pytest.mark.parametrize(("epoch", "expected"), [(None, None), (0.0, 0), (0.75, 0), (1.0, 0), (1.25, 1), (2.0, 1)])
def test_the_trainer_s_fractional_epoch_is_the_epoch_under_way(epoch, expected):
    assert library_progress._epoch(SimpleNamespace(epoch=epoch)) == expected


CHILD = textwrap.dedent(
    """
    import importlib, json, os, sys
    from airflow_provider_horovod.runtime import library_progress

    import lightning.pytorch.trainer.trainer  # imported before install(): patched at once
    library_progress.install()
    library_progress.install()  # idempotent
    import transformers.trainer  # imported after: patched as it loads
    from transformers import Trainer, TrainerCallback
    import lightning as L

    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    again = L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[library_progress.lightning_callback(
        "lightning.pytorch")()], enable_progress_bar=False)
    print(json.dumps({
        "transformers": [c.__name__ for c in transformers.trainer.DEFAULT_CALLBACKS],
        "transformers_is_callback": issubclass(transformers.trainer.DEFAULT_CALLBACKS[-1], TrainerCallback),
        "loader": type(transformers.trainer.__loader__).__name__,
        "spec_loader": type(transformers.trainer.__spec__.loader).__name__,
        "lightning": [type(c).__name__ for c in trainer.callbacks],
        "lightning_again": [type(c).__name__ for c in again.callbacks].count("ReportProgress"),
        "finders": sum(type(f).__name__ == "_Finder" for f in sys.meta_path),
    }))
    """
)


def _child(extra_env: dict[str, str]) -> dict:
    env = {**os.environ, ENV_METRICS: "1", **extra_env}  # fd 1: any channel; nothing is reported here
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_callbacks_join_the_libraries_trainers_once_whenever_the_library_is_imported():
    seen = _child({})
    assert seen["transformers"] == ["DefaultFlowCallback", "ReportProgress"] and seen["transformers_is_callback"]
    assert seen["loader"] == seen["spec_loader"] == "SourceFileLoader"  # the module keeps its own loader
    assert seen["lightning"].count("ReportProgress") == 1
    assert seen["lightning_again"] == 1  # a Trainer given one already gets no second
    assert seen["finders"] == 1


def test_switched_off_the_trainers_are_left_alone():
    seen = _child({ENV_LIBRARY_PROGRESS: "0"})
    assert seen["transformers"] == ["DefaultFlowCallback"] and "ReportProgress" not in seen["lightning"]
    assert seen["finders"] == 0


def test_a_library_that_cannot_take_the_callback_still_loads(tmp_path, monkeypatch, capfd):
    """A ``Trainer`` module of an unexpected shape: a warning on stderr, the import and the training go on."""
    package = tmp_path / "fakelib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text("VALUE = 42\n")  # no DEFAULT_CALLBACKS
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(library_progress.ADDERS, "fakelib.trainer", library_progress.ADDERS["transformers.trainer"])
    monkeypatch.setenv(ENV_METRICS, "1")
    saved = list(sys.meta_path)
    try:
        library_progress.install()
        import fakelib.trainer  # type: ignore[import-not-found]

        assert fakelib.trainer.VALUE == 42
    finally:
        sys.meta_path[:] = saved
        for name in ("fakelib", "fakelib.trainer"):
            sys.modules.pop(name, None)
    err = capfd.readouterr().err
    assert "no automatic progress from fakelib.trainer (AttributeError:" in err and "report() still works" in err
