"""
The example DAG's model and training set-up, for the ranks of the benchmarks and of the GPU check.

``build_model`` and ``horovod_trainer`` are compiled from the source of ``example_dags/horovod_digits_retraining.py``
(importing the DAG file would need Airflow), so what is measured is exactly what the example trains. This module is
registered with cloudpickle to travel by value: a rank needs neither the DAG file nor the ``benchmarks`` package.
"""

from __future__ import annotations
import __future__

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import cloudpickle

from benchmarks.paths import EXAMPLE_DAG


def load_functions(path: Path, *names: str) -> dict[str, Callable]:
    """
    Compile the named top-level functions of a Python file, without running the rest of it.

    :param path: the file, e.g. the example DAG.
    :param names: the functions to compile; they must not depend on the file's other top-level names.
    :return: the functions by name, sharing one namespace (they may call one another) that is this module's.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in nodes}
    if missing:
        raise LookupError(f"{path} defines no top-level function {', '.join(sorted(missing))}")
    code = compile(
        ast.Module(body=nodes, type_ignores=[]),
        str(path),
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    exec(code, globals())  # noqa: S102 - our own file
    return {name: globals()[name] for name in names}


_example = load_functions(EXAMPLE_DAG, "build_model", "horovod_trainer")
build_model = _example["build_model"]
horovod_trainer = _example["horovod_trainer"]
cloudpickle.register_pickle_by_value(sys.modules[__name__])
