"""
:class:`DeepspeedTorchDistributor`: a drop-in for PySpark's
``pyspark.ml.deepspeed.deepspeed_distributor.DeepspeedTorchDistributor`` on this provider's launcher (the ranks
started inside the barrier tasks, with the torchrun environment DeepSpeed reads).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_horovod.runtime.rank.script import run_script
from airflow_provider_horovod.runtime.torch_distributor import TorchDistributor, script_call

DeepspeedConfig = str | os.PathLike[str] | dict[str, Any] | None
"""What ``deepspeedConfig`` may be: a JSON file's path, the configuration itself, or ``None``."""

_TORCH_ARGUMENTS = {
    "num_processes": "numGpus * nnodes",
    "local_mode": "localMode",
    "use_gpu": "useGpu",
    "_ssl_conf": "nothing (it is ignored)",
}
"""TorchDistributor's own arguments, which this class sets from PySpark's: what to pass instead."""


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _checked_config(value: object) -> DeepspeedConfig:
    """
    Check ``deepspeedConfig``.

    :raises ValueError: it is not a path, a dict or ``None``, or a dict that ``json.dumps`` refuses.
    """
    if value is None or isinstance(value, str | os.PathLike):
        return value  # a bytes PathLike is refused where the path is made absolute (run)
    if isinstance(value, dict):
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"deepspeedConfig: a dict configuration must be JSON-serialisable ({e})") from e
        return value
    raise ValueError(
        "deepspeedConfig must be the path of a DeepSpeed JSON configuration file (str or os.PathLike), the "
        f"configuration as a dict, or None, got {type(value).__name__}"
    )


def _config_path(value: str | os.PathLike[str]) -> str:
    """The absolute form of a configuration path ("" is PySpark's "no configuration" and stays "")."""
    path = os.fspath(value)
    if not isinstance(path, str):
        raise ValueError(f"deepspeedConfig: a path must be a str or a str os.PathLike, got {path!r}")
    return os.path.abspath(path) if path else ""


def run_deepspeed_script(path: str, args: Sequence[str], config: str | dict[str, Any] | None) -> None:
    """
    Run a DeepSpeed training script as one rank, as PySpark's ``DeepspeedTorchDistributor`` has torchrun run it:
    ``path *args --deepspeed [--deepspeed_config CONFIG]``, through
    :func:`~airflow_provider_horovod.runtime.rank.script.run_script` in this (the rank's) process.

    :param path: the script, an absolute path that exists where the ranks run.
    :param args: its own command-line arguments.
    :param config: ``None`` or ``""``: no ``--deepspeed_config`` (DeepSpeed's defaults, or the script's); a str:
        the configuration file's path, passed as is; a dict: written here, as JSON, to a temporary file (in
        ``TMPDIR``) that is passed and removed when the script returns or raises.
    :raises FileNotFoundError: there is no file at ``path`` on this host.
    """
    argv = [*map(str, args), "--deepspeed"]
    if not isinstance(config, dict):
        run_script(path, [*argv, "--deepspeed_config", config] if config else argv)
        return
    fd, config_file = tempfile.mkstemp(prefix="deepspeed_config-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        run_script(path, [*argv, "--deepspeed_config", config_file])
    finally:
        try:
            os.remove(config_file)
        except FileNotFoundError:  # the script removed it
            pass


class DeepspeedTorchDistributor(TorchDistributor):
    """
    Run DeepSpeed training on a Spark barrier stage: the constructor and :meth:`run` of PySpark's
    ``DeepspeedTorchDistributor``, on :class:`~airflow_provider_horovod.runtime.torch_distributor.TorchDistributor`
    (ranks start inside the barrier tasks; a failing rank stops the others at once and the error names it).

    Each rank gets the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``, ...), which ``deepspeed.initialize()`` / ``deepspeed.init_distributed()`` read; on CPU-only
    ranks DeepSpeed picks its CPU accelerator and the ``gloo`` backend itself.

    Differences from PySpark's:

    * a function passed to :meth:`run` returns rank 0's value in every mode (PySpark's local mode returns another
      rank's);
    * one rank per barrier task, ``numGpus * nnodes`` tasks (PySpark also starts one process per task when
      ``localMode=False``, whatever the split between ``numGpus`` and ``nnodes``);
    * the arguments are checked when the distributor is made (PySpark checks none), and a dict configuration is
      written to a file that is removed when the script ends (PySpark leaves it in the temporary directory);
    * the script runs in the rank's process (``runpy``, as ``__main__``) rather than in a torchrun child.

    :param numGpus: processes (ranks) per node, as ``deepspeed --num_gpus`` (positive int).
    :param nnodes: nodes (positive int); the job has ``numGpus * nnodes`` ranks.
    :param localMode: ``True`` (PySpark's default): the ranks run as processes on the driver; ``False``: one
        Spark barrier task per rank.
    :param useGpu: give each rank the GPUs Spark scheduled for its task; ``False`` hides GPUs
        (``CUDA_VISIBLE_DEVICES=""``), and DeepSpeed then runs on its CPU accelerator.
    :param deepspeedConfig: for a training script: the path (str or ``os.PathLike``) of a DeepSpeed JSON
        configuration that exists where the ranks run (a relative path is made absolute against this process's
        directory when :meth:`run` is called; not checked here), the configuration as a JSON-serialisable dict
        (written to a file where each rank runs), or ``None`` (no ``--deepspeed_config``; ``""`` reads as ``None``,
        as in PySpark). Not passed to a function.
    :param settings: further keyword arguments of
        :class:`~airflow_provider_horovod.runtime.torch_distributor.TorchDistributor` (``spark``, ``artifact_dir``,
        ``checkpoint_dir``, ``env``, ``mlflow_run``, timeouts, ...); not ``num_processes``, ``local_mode``,
        ``use_gpu`` or ``_ssl_conf``, which come from PySpark's arguments above.
    :raises ValueError: ``numGpus`` or ``nnodes`` is not a positive int (``bool`` refused), ``deepspeedConfig`` is
        none of a path, a dict or ``None``, or a dict that is not JSON-serialisable, or another argument is invalid
        (before any Spark work); the message names the argument.
    :raises TypeError: a keyword argument that TorchDistributor does not take.
    """

    _DEEPSPEED_SSL_CONF = "deepspeed.spark.distributor.ignoreSsl"
    """PySpark's SSL opt-out for DeepSpeed (kept for compatibility; ignored, as ``_ssl_conf`` is)."""

    def __init__(
        self,
        numGpus: int = 1,
        nnodes: int = 1,
        localMode: bool = True,
        useGpu: bool = True,
        deepspeedConfig: str | os.PathLike[str] | dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        num_gpus = _positive_int("numGpus", numGpus)
        num_nodes = _positive_int("nnodes", nnodes)
        self.deepspeed_config: DeepspeedConfig = _checked_config(deepspeedConfig)
        """The configuration as given (PySpark's attribute)."""
        for name, instead in _TORCH_ARGUMENTS.items():
            if name in settings:
                raise ValueError(f"{name} is not a DeepspeedTorchDistributor argument: pass {instead}")
        super().__init__(
            num_gpus * num_nodes,
            localMode,
            useGpu,
            _ssl_conf=DeepspeedTorchDistributor._DEEPSPEED_SSL_CONF,
            **settings,
        )

    def run(self, train_object: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """
        Run ``train_object`` on every rank.

        :param train_object: the path (str or ``os.PathLike``) of a DeepSpeed training script, run on every rank as
            PySpark's has torchrun run it: ``train_object *args --deepspeed [--deepspeed_config FILE]`` (the script
            parses these with ``deepspeed.add_config_arguments``; ``FILE`` is the configuration's path, or the file
            a dict configuration was written to); or a function, run exactly as
            :meth:`TorchDistributor.run <airflow_provider_horovod.runtime.torch_distributor.TorchDistributor.run>`
            runs it, called as ``train_object(*args, **kwargs)`` on every rank, without the configuration (as in
            PySpark: the function passes it to ``deepspeed.initialize(config=...)`` itself).
        :param args: the script's command-line arguments (as strings), or the function's positional arguments.
        :param kwargs: the function's keyword arguments; a script takes none.
        :return: rank 0's return value for a function (in local mode too); ``None`` for a script.
        :raises ValueError: a script was given keyword arguments, ``train_object`` is neither callable nor the path
            of an existing file, or the configuration is no longer valid (a dict changed since construction).
        :raises RankFailedError: a rank failed; the message names it, with its traceback and last output lines.
        :raises LaunchError: the stage could not run.
        """
        if not isinstance(train_object, str | os.PathLike):
            return super().run(train_object, *args, **kwargs)
        if kwargs:
            raise ValueError(
                "DeepspeedTorchDistributor with pytorch file doesn't support keyword arguments, got "
                f"{sorted(kwargs)} (a script takes command-line arguments only)"
            )
        config = _checked_config(self.deepspeed_config)
        if config is not None and not isinstance(config, dict):
            config = _config_path(config)
        _, (path, script_args) = script_call(os.fspath(train_object), args)
        return self.run_call(run_deepspeed_script, (path, script_args, config))
