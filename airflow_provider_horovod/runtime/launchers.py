"""
What differs between the launchers a job can use: Horovod (``launcher="horovod"``, the default) and PyTorch's
``torch.distributed`` (``launcher="torch"``, the torchrun environment contract). One :class:`Launcher` each, in
:data:`LAUNCHERS`. Standard library only: the barrier task imports it before its checks of the executor's Python.
"""

from __future__ import annotations

from dataclasses import dataclass

HOROVOD = "horovod"
TORCH = "torch"


@dataclass(frozen=True)
class Launcher:
    """
    One way of starting the ranks.

    :param name: the ``launcher`` setting's value.
    :param label: how messages name a rank's framework (``"Horovod rank 1 failed"``).
    :param init_call: the call that joins a rank to the others, as messages name it (the launcher's
        ``start_timeout_s`` clock runs while a rank is inside it).
    :param required_modules: what the executor's Python must be able to import (checked before a rank starts).
    :param frameworks: modules a rank started ahead of its rendezvous imports meanwhile when its payload names them.
    :param always_preimport: modules such a rank imports meanwhile whatever its payload names.
    :param install_hint: what to install where a required module is missing.
    :param imports_devices_late: its framework must be imported only once the rank's devices are set
        (``horovod.torch`` looks at the GPUs on import, before ``CUDA_VISIBLE_DEVICES`` would be set): a rank with GPUs
        does not import it ahead of its rendezvous.
    :param sets_omp_threads: like its own launcher (torchrun), it sets ``OMP_NUM_THREADS=1`` on ranks that share a
        host, when nothing else sets it (``horovodrun`` sets nothing).
    :param timeline: it can record the Horovod Timeline (``timeline=True``).
    :param rank_defaults: variables every rank gets unless the job's ``env_vars`` or the executor's environment set
        them (torchrun's ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``), as ``(name, value)`` pairs.
    :param cpu_only_env: variables a rank without a GPU (``use_gpu=False``) gets unless ``env_vars`` or the
        executor's environment set them: what the libraries that pick their device themselves read, so an unchanged
        Accelerate or Transformers ``Trainer`` script runs distributed on CPU (``ACCELERATE_USE_CPU=true``; an empty
        value crashes Accelerate), as ``(name, value)`` pairs.
    :param error_file_variable: the variable naming the file the framework writes a failing rank's exception to
        (torchrun's ``TORCHELASTIC_ERROR_FILE``, written by ``torch.distributed.elastic``'s ``@record``); each rank gets
        its own, and a failure whose rank left no error of its own is read from it. ``None``: none.
    :param restart_variables: the variables that tell a rank its attempt's restart count and the job's
        ``max_restarts`` (torchrun's ``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_MAX_RESTARTS``); ``None``: none
        of the framework's (``runtime.restart_count()`` works for every launcher).
    """

    name: str
    label: str
    init_call: str
    required_modules: tuple[str, ...]
    frameworks: tuple[str, ...] = ()
    always_preimport: tuple[str, ...] = ()
    install_hint: str = ""
    imports_devices_late: bool = False
    sets_omp_threads: bool = False
    timeline: bool = False
    rank_defaults: tuple[tuple[str, str], ...] = ()
    cpu_only_env: tuple[tuple[str, str], ...] = ()
    error_file_variable: str | None = None
    restart_variables: tuple[str, str] | None = None

    def preimports(self, payload: bytes) -> list[str]:
        """
        The modules a rank started ahead of its rendezvous imports while it waits, read from the payload bytes
        without loading them: :attr:`always_preimport`, then the :attr:`frameworks` the payload names.

        A function pickled by value carries its code's names as plain strings (``import horovod.torch as hvd`` puts
        ``horovod.torch`` there), so a byte search finds them; a false hit only costs an import. Functions pickled
        by reference (an installed module) name no imports: only :attr:`always_preimport` is imported for them.

        :param payload: the payload (:mod:`~airflow_provider_horovod.runtime.wire.payload` format).
        """
        return [*self.always_preimport, *(name for name in self.frameworks if name.encode() in payload)]


LAUNCHERS = {
    HOROVOD: Launcher(
        name=HOROVOD,
        label="Horovod",
        init_call="hvd.init()",
        required_modules=("horovod.runner.http.http_server", "horovod.torch", "cloudpickle"),
        frameworks=("horovod.torch", "horovod.tensorflow", "horovod.keras"),
        install_hint="Horovod built with Gloo and PyTorch: pip install 'airflow-provider-horovod[horovod]' where "
        "it builds, or scripts/build_horovod.sh",
        imports_devices_late=True,
        timeline=True,
    ),
    TORCH: Launcher(
        name=TORCH,
        label="torch.distributed",
        init_call="init_process_group()",
        required_modules=("torch.distributed", "cloudpickle"),
        always_preimport=("torch.distributed",),
        install_hint="PyTorch",
        sets_omp_threads=True,
        rank_defaults=(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),),
        cpu_only_env=(("ACCELERATE_USE_CPU", "true"),),
        error_file_variable="TORCHELASTIC_ERROR_FILE",
        restart_variables=("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"),
    ),
}
"""The launchers by the ``launcher`` setting's value."""


def get_launcher(name: str) -> Launcher:
    """
    The launcher named ``name``.

    :raises ValueError: not a key of :data:`LAUNCHERS` (the message lists them).
    """
    if not isinstance(name, str) or name not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {tuple(LAUNCHERS)}, got {name!r}")
    return LAUNCHERS[name]


def require_launcher(given: object, name: str, *, entry_points: str, instead: str) -> str:
    """
    Check the ``launcher`` given to an entry point that runs one launcher only (it may only repeat ``name``).

    :param given: the argument as given.
    :param name: the launcher the entry point runs.
    :param entry_points: the entry points, as the message names them.
    :param instead: what to use for another launcher, as the message says it.
    :return: ``name``.
    :raises ValueError: ``given`` is not one of the launchers (the message lists them), or another one than ``name``.
    """
    get_launcher(given)  # type: ignore[arg-type]  # refuses a non-string too
    if given != name:
        raise ValueError(f"launcher must be {name!r} for {entry_points}, got {given!r}; {instead}")
    return name


def preimports(payload: bytes, launcher_name: str = HOROVOD) -> list[str]:
    """
    The modules a rank of ``launcher_name`` started ahead of its rendezvous imports meanwhile
    (:meth:`Launcher.preimports`).

    :param payload: the payload bytes.
    :param launcher_name: the job's ``launcher``.
    """
    return get_launcher(launcher_name).preimports(payload)
