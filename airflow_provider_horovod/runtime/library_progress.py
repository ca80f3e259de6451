"""
Progress with no code change: a Transformers ``Trainer`` or a Lightning ``Trainer`` run by a rank reports its step,
total steps, epoch and logged metrics through :func:`~airflow_provider_horovod.runtime.reports.report` (the same
channel: the task log's progress line, XCom ``metrics``, the Training progress tab, MLflow), without a line of the
user's script changed.

How: the rank (:mod:`~airflow_provider_horovod.runtime.rank.worker`) calls :func:`install` before it loads the
training function. It puts a finder first on ``sys.meta_path`` that lets the libraries' modules load as they would,
then adds this module's callback through each library's own extension point, the moment the module has loaded:

- Transformers (``transformers.trainer``): appended to ``DEFAULT_CALLBACKS``, the callbacks every ``Trainer`` starts
  with (beside ``DefaultFlowCallback``), so a subclass or a ``callbacks=[...]`` argument keeps it;
- Lightning (``lightning.pytorch`` and ``pytorch_lightning``): added to each ``Trainer``'s ``callbacks`` once its
  ``__init__`` has run, unless one is there already.

Neither library is imported here: a job that does not use them pays one dictionary look-up per import. Switched off
with ``HOROVOD_AIRFLOW_LIBRARY_PROGRESS=0`` in the job's environment (the operator's ``env_vars``, the runner's
``env``); off outside a job (no progress channel). A failure to add the callback is written to the rank's stderr and
never fails the training.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import math
import numbers
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from airflow_provider_horovod.runtime.reports import report
from airflow_provider_horovod.runtime.wire.protocol import ENV_LIBRARY_PROGRESS, ENV_METRICS, switched_off

_MARK = "_airflow_provider_horovod_progress"
"""Attribute set on what this module added, so it is added once however often a module is loaded."""


def numeric(logs: Mapping[str, Any] | None, skip: Sequence[str] = ()) -> dict[str, Any]:
    """
    The entries of a library's logs that are numbers (Python or NumPy numbers, one-element tensors), as floats.

    :param logs: metric name to value, as the library logged them (``None``: none).
    :param skip: names to leave out (those reported as ``step``/``epoch`` already).
    """
    found: dict[str, Any] = {}
    for name, value in (logs or {}).items():
        if name in skip or isinstance(value, bool):
            continue
        if isinstance(value, numbers.Number) or getattr(value, "shape", None) == () or _one_element(value):
            try:
                found[str(name)] = float(value)
            except (TypeError, ValueError):
                continue
    return found


def _one_element(value: Any) -> bool:
    numel = getattr(value, "numel", None)
    return callable(numel) and numel() == 1


def _count(value: Any) -> int | None:
    """A step or epoch count a library gives (int, float, or infinite/unknown) as ``report()`` takes it."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 0 else None


@functools.cache
def transformers_callback() -> type:
    """
    The Transformers ``TrainerCallback`` that reports a ``Trainer``'s progress: every optimizer step its
    ``state.global_step``, ``state.max_steps`` and epoch (0-based: the epoch under way), and every ``on_log`` (each
    ``logging_steps``, and the training's summary at its end) the logged numbers (``loss``, ``learning_rate``,
    ``grad_norm``, ``eval_*``, ``train_runtime``, ...). Imports ``transformers``.
    """
    from transformers import TrainerCallback

    class ReportProgress(TrainerCallback):
        """Report the ``Trainer``'s steps and logs through ``airflow_provider_horovod.runtime.report``."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            report(step=_count(state.global_step), total_steps=_count(state.max_steps) or None, epoch=_epoch(state))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            report(
                step=_count(state.global_step),
                total_steps=_count(state.max_steps) or None,
                epoch=_epoch(state),
                **numeric(logs, skip=("epoch", "step")),
            )

    setattr(ReportProgress, _MARK, True)
    return ReportProgress


def _epoch(state: Any) -> int | None:
    """The epoch under way, 0-based, from the ``Trainer``'s fractional ``state.epoch`` (``1.0`` at the first's end)."""
    epoch = getattr(state, "epoch", None)
    if epoch is None:
        return None
    whole = _count(epoch)
    if whole is None:
        return None
    return whole - 1 if whole == epoch and whole > 0 else whole


@functools.cache
def lightning_callback(package: str) -> type:
    """
    The Lightning ``Callback`` that reports a ``Trainer``'s progress: every training batch its ``global_step``,
    ``estimated_stepping_batches`` and ``current_epoch``; every ``log_every_n_steps`` steps and at each epoch's end
    (after validation) the numbers in ``callback_metrics`` (what ``self.log`` logged). Reading the metrics only then
    keeps a GPU from synchronising every step.

    :param package: ``"lightning.pytorch"`` or ``"pytorch_lightning"``, whose ``Callback`` it subclasses.
    """
    base = importlib.import_module(f"{package}.callbacks").Callback

    class ReportProgress(base):  # type: ignore[misc,valid-type]
        """Report the ``Trainer``'s steps and ``self.log`` metrics through ``runtime.report()``."""

        def __init__(self) -> None:
            super().__init__()
            self._total: int | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            try:
                self._total = _count(trainer.estimated_stepping_batches)
            except Exception:  # noqa: BLE001 - an iterable dataset of unknown length: no total
                self._total = None

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step, every = trainer.global_step, trainer.log_every_n_steps
            metrics = numeric(trainer.callback_metrics) if every and step % every == 0 else {}
            report(step=step, total_steps=self._total, epoch=trainer.current_epoch, **metrics)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            report(
                step=trainer.global_step,
                total_steps=self._total,
                epoch=trainer.current_epoch,
                **numeric(trainer.callback_metrics),
            )

    setattr(ReportProgress, _MARK, True)
    return ReportProgress


def _add_to_transformers(module: ModuleType) -> None:
    callbacks = module.DEFAULT_CALLBACKS
    if not any(getattr(c, _MARK, False) for c in callbacks):
        callbacks.append(transformers_callback())


def _add_to_lightning(package: str) -> Callable[[ModuleType], None]:
    def add(module: ModuleType) -> None:
        trainer = module.Trainer
        if getattr(trainer.__init__, _MARK, False):
            return
        original = trainer.__init__

        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            callback = lightning_callback(package)
            if not any(isinstance(c, callback) for c in self.callbacks):
                self.callbacks.append(callback())

        setattr(__init__, _MARK, True)
        trainer.__init__ = __init__

    return add


ADDERS: dict[str, Callable[[ModuleType], None]] = {
    "transformers.trainer": _add_to_transformers,
    "lightning.pytorch.trainer.trainer": _add_to_lightning("lightning.pytorch"),
    "pytorch_lightning.trainer.trainer": _add_to_lightning("pytorch_lightning"),
}
"""Module that defines a library's ``Trainer`` -> what adds the callback to it once it has loaded."""


def _add(name: str, module: ModuleType) -> None:
    try:
        ADDERS[name](module)
    except Exception as err:  # noqa: BLE001 - progress is a convenience: the training must run regardless
        sys.stderr.write(
            f"airflow-provider-horovod: no automatic progress from {name} ({type(err).__name__}: {err}); "
            "report() still works\n"
        )


class _AddingLoader(importlib.abc.Loader):
    """The module's own loader, then :func:`_add`; the module keeps its own loader as ``__loader__``."""

    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _add(self._name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: finds nothing itself; wraps the loader the other finders give a watched module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in ADDERS:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _AddingLoader(spec.loader, fullname)
                return spec
        return None


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a rank with this environment adds the callbacks: in a job, unless ``HOROVOD_AIRFLOW_LIBRARY_PROGRESS``
    is ``0``/``false``/``no``/``off``."""
    if not environ.get(ENV_METRICS):
        return False
    return not switched_off(environ.get(ENV_LIBRARY_PROGRESS))


def install() -> None:
    """
    Add the progress callbacks to the libraries' trainers in this process: at once to a library already imported,
    and to one imported later when it loads. Idempotent; does nothing when :func:`enabled` is false.
    """
    if not enabled():
        return
    for name in ADDERS:
        if name in sys.modules:
            _add(name, sys.modules[name])
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
