"""
The package's imports, read from its source with ``ast`` (nothing is imported): for the structure and isolation
tests.

Every import statement counts, wherever it is: at module level, inside functions, under ``if TYPE_CHECKING:``, in
``try``. Relative imports are resolved, and ``from pkg import name`` names the submodule ``pkg.name`` when there is
one, else ``pkg``.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from pathlib import Path

import airflow_provider_horovod

PACKAGE_DIR = Path(airflow_provider_horovod.__file__).resolve().parent


@dataclass(frozen=True)
class Import:
    """One imported module as one statement names it."""

    importer: str
    """The importing module (dotted name; a package is its ``__init__.py``)."""
    target: str
    """The module imported: for a module of the scanned package the deepest one that exists, else as written."""
    names: tuple[str, ...]
    """``from target import a, b``: ``("a", "b")``, submodules left out; ``import target``: ``()``."""
    line: int


def modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """
    Every module of the package at ``root``: dotted name -> source file.

    :param root: the package's directory (its name is the directory's).
    """
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _known(name: str, known: dict[str, Path]) -> str:
    """The deepest existing module of ``name`` (``pkg.mod.attr`` -> ``pkg.mod``)."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def file_imports(path: Path, importer: str, root: Path = PACKAGE_DIR) -> list[Import]:
    """
    Every import statement of one source file, in source order, the package at ``root``'s modules resolved.

    :param path: the file (of the package, or a test, benchmark or DAG file that imports it).
    :param importer: its dotted module name (relative imports are resolved against it).
    :param root: the package's directory.
    """
    known = modules(root)
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                inside = alias.name.split(".")[0] == root.name
                found.append(Import(importer, _known(alias.name, known) if inside else alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, importer, is_package)
            if base.split(".")[0] != root.name:
                found.append(Import(importer, base, tuple(a.name for a in node.names), node.lineno))
                continue
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.append(Import(importer, f"{base}.{alias.name}", (), node.lineno))
                else:
                    names.append(alias.name)
            if names:
                found.append(Import(importer, _known(base, known), tuple(names), node.lineno))
    return sorted(found, key=lambda imp: imp.line)


def imports(root: Path = PACKAGE_DIR) -> list[Import]:
    """
    Every import statement of every module of the package at ``root`` (see :func:`file_imports`).

    :param root: the package's directory.
    """
    return [imp for name, path in modules(root).items() for imp in file_imports(path, name, root)]


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, dict[str, int]]:
    """
    The package's modules and what each imports of them: ``{importer: {imported: line}}``.

    Importing ``a.b.c`` also runs ``a/b/__init__.py``: the packages above an imported module count as imported too,
    unless they are above the importer as well (already being imported when it runs).

    :param root: the package's directory.
    """
    known = modules(root)
    graph: dict[str, dict[str, int]] = {name: {} for name in known}
    for imp in imports(root):
        if imp.target not in known:
            continue
        above_importer = {imp.importer.rsplit(".", i)[0] for i in range(imp.importer.count(".") + 1)}
        parts = imp.target.split(".")
        for depth in range(len(parts), 0, -1):
            target = ".".join(parts[:depth])
            if target in above_importer:
                break
            if target != imp.importer:
                graph[imp.importer].setdefault(target, imp.line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """
    One import circle per group of modules that import each other (strongly connected component), as the list of
    modules along it, the first repeated at the end; ``[]`` when the graph has no circle.

    :param graph: from :func:`import_graph`.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the package is small enough for recursion
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, {}):
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:  # the shortest way from the group's first module back to itself, inside the group
        start = min(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for succ in sorted(graph.get(node, {})):
                if succ == start:
                    found.append([*paths[node], start])
                    queue = []
                    break
                if succ in group and succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    queue.append(succ)
    return sorted(found)


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    """``a -> b (a.py line 3) -> a (b.py line 9)``: a circle with the line of each import."""
    steps = [cycle[0]]
    for importer, imported in itertools.pairwise(cycle):
        steps.append(f"{imported} (line {graph[importer][imported]} of {importer})")
    return " -> ".join(steps)


def defined_names(path: Path) -> set[str]:
    """
    The names a module binds at its top level itself (functions, classes, assignments, also under a top-level
    ``if``/``try``), not the names it imports.

    :param path: the module's source file.
    """
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return names
