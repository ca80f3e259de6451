"""
The package's shape, read from its source: no import circles, every name imported from the module that defines it,
the hooks in ``hooks/`` and in each cluster manager's ``hook.py``. (That the runtime never imports Airflow:
test_isolation.py.)
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

from airflow.sdk import BaseHook

from airflow_provider_horovod.get_provider_info import get_provider_info
from tests.package_imports import PACKAGE_DIR, cycles, defined_names, describe, file_imports, import_graph, modules

REPO = PACKAGE_DIR.parent
FACADES = {
    "airflow_provider_horovod._compat": "the Airflow names that moved between 3.x releases, from where they are",
    "airflow_provider_horovod.runtime": "the runtime's user API: HorovodRunner, artifact_dir, tensorboard_dir, ...",
    "airflow_provider_horovod.clients": "the REST clients' package API",
}
"""The modules whose purpose is to hand on names defined elsewhere; importing from them is not a pass-through."""


def test_package_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 150  # it did read the package
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(cycle, graph) for cycle in found)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_import_graph_counts_every_form_of_import(tmp_path):
    """Relative, ``from pkg import module``, in functions, under TYPE_CHECKING, and a package's ``__init__``."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "def f():\n    from pkg.sub.c import C\n",
            "pkg/sub/__init__.py": "from .d import D\n",
            "pkg/sub/c.py": "C = 1\n",
            "pkg/sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\nD = 1\n",
            "pkg/e.py": "import pkg.sub.c\nfrom pkg.sub import c, D\n",
        },
    )
    graph = import_graph(root)
    assert graph["pkg.a"] == {"pkg.b": 1}
    assert graph["pkg.b"] == {"pkg.sub.c": 2, "pkg.sub": 2}  # importing pkg.sub.c runs pkg/sub/__init__.py
    assert graph["pkg.sub"] == {"pkg.sub.d": 1}
    assert graph["pkg.sub.c"] == {} and graph["pkg.sub.d"] == {"pkg.a": 3}
    assert graph["pkg.e"] == {"pkg.sub.c": 1, "pkg.sub": 1}
    found = cycles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.d", "pkg.a"]]
    assert describe(found[0], graph) == (
        "pkg.a -> pkg.b (line 1 of pkg.a) -> pkg.sub (line 2 of pkg.b) -> pkg.sub.d "
        "(line 1 of pkg.sub) -> pkg.a (line 3 of pkg.sub.d)"
    )


def _importing_files() -> dict[str, Path]:
    """Every Python file that imports the package: its own modules, tests, benchmarks, example DAGs."""
    files = modules()
    for folder in ("tests", "benchmarks", "example_dags"):
        for path in sorted((REPO / folder).rglob("*.py")):
            files[".".join(path.relative_to(REPO).with_suffix("").parts)] = path
    return files


def test_names_are_imported_from_the_module_that_defines_them():
    """No importer reaches a name through a module that only imports it (no re-export shims to keep alive)."""
    known = modules()
    defined = {name: defined_names(path) for name, path in known.items()}
    passed_through = []
    for importer, path in _importing_files().items():
        for imp in file_imports(path, importer):
            if imp.target not in known or imp.target in FACADES:
                continue
            for name in imp.names:
                if name not in defined[imp.target] and name != "*":
                    passed_through.append(f"{path.relative_to(REPO)}:{imp.line}: {name} from {imp.target}")
    assert not passed_through, "imported from a module that does not define them:\n" + "\n".join(passed_through)


def _defines_a_hook(path: Path) -> bool:
    """Whether the module's source defines a class with ``BaseHook`` among its bases (read, not imported)."""
    return any(
        isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("BaseHook") for base in node.bases)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


def test_hooks_hold_only_hooks_and_the_provider_lists_them_all():
    """
    Every module of ``hooks/`` defines a hook, and a cluster manager's package keeps its hook in its ``hook.py``
    (``standalone/hook.py``: the hook lives with the submission, polls and states it uses, the home a second cluster
    manager copies); no other module defines one, and ``get_provider_info`` lists exactly these.
    """
    hook_homes = sorted(
        name for name in modules() if name.startswith("airflow_provider_horovod.hooks.") or name.endswith(".hook")
    )
    assert "airflow_provider_horovod.standalone.hook" in hook_homes
    for name in hook_homes:
        module = importlib.import_module(name)
        hooks = [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == name and issubclass(cls, BaseHook)
        ]
        assert hooks, f"{name} defines no BaseHook subclass: its helpers belong in airflow_provider_horovod.utils"
    elsewhere = sorted(name for name, path in modules().items() if name not in hook_homes and _defines_a_hook(path))
    assert elsewhere == [], "hooks outside hooks/ and the cluster managers' hook.py"
    listed = sorted(m for entry in get_provider_info()["hooks"] for m in entry["python-modules"])
    assert listed == hook_homes


TASK_OR_RANK_ONLY = (
    "airflow_provider_horovod.runtime.task",
    "airflow_provider_horovod.runtime.rank",
    "airflow_provider_horovod.runtime.driver.",
    "airflow_provider_horovod.runtime.data",
    "airflow_provider_horovod.runtime.wire.logs",
    "airflow_provider_horovod.runtime.wire.jobspec",
)
"""Runtime modules (prefixes) that only the Spark driver, its barrier tasks or the ranks load; the hooks load only
the driver program itself (its file is what they submit) and the runtime zip's builder."""


def test_parsing_a_dag_that_uses_the_operator_loads_no_task_or_rank_code():
    import subprocess
    import sys

    # a fresh interpreter, as the dag-processor has: -X importtime lists every module the import loads
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import airflow_provider_horovod.operators.horovod"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "airflow_provider_horovod.operators.horovod" in loaded  # the listing is real
    assert "airflow_provider_horovod.runtime.settings" in loaded
    allowed = {"airflow_provider_horovod.runtime.driver.program", "airflow_provider_horovod.runtime.driver.shipping"}
    assert sorted(m for m in loaded if m.startswith(TASK_OR_RANK_ONLY) and m not in allowed) == []
