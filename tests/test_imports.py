"""The import graph of `exporter`: no cycle, no function-level import dodging one, and the
offline readers of a run (`bench.compare`, `bench.report`) load no probing machinery.

Read from the source with `ast`: module-level imports make the graph (those under
`if TYPE_CHECKING:` only name types and run never). A function-level import of an `exporter`
module is allowed only in `cli.py`, where each command loads what it needs (see its docstring);
a function-level import of anything else only for an optional extra, inside a
`try: … except ImportError:`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "exporter"
# Where commands import what they need when they run (exporter/cli.py's docstring says why).
LAZY_ALLOWED = {"exporter.cli"}


def module_name(path: Path) -> str:
    """`exporter/bench/model.py` → `exporter.bench.model`; a package is its `__init__`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    """One import statement: what it names, where, and how it is guarded."""

    module: str  # the importing module
    names: tuple[str, ...]  # every dotted name it may load (`from a import b`: a and a.b)
    line: int
    in_function: bool
    guarded: bool  # inside `try: … except ImportError`

    @property
    def targets(self) -> set[str]:
        """The `exporter` modules it loads."""
        return {t for t in map(resolve, self.names) if t is not None}


def resolve(name: str) -> str | None:
    """The `exporter` module a dotted name is, or lives in (None: not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> tuple[str, ...]:
    if isinstance(node, ast.Import):
        return tuple(alias.name for alias in node.names)
    base = node.module or ""
    if node.level:  # relative: from the package the module is in
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return (base, *(f"{base}.{alias.name}" for alias in node.names))


def _is_type_checking(node: ast.If) -> bool:
    return any(isinstance(n, ast.Name | ast.Attribute) and ast.unparse(n).endswith(
        "TYPE_CHECKING") for n in ast.walk(node.test))


def _catches_import_error(node: ast.Try) -> bool:
    return any(handler.type is not None and any(
        ast.unparse(n).split(".")[-1] in ("ImportError", "ModuleNotFoundError")
        for n in ast.walk(handler.type)) for handler in node.handlers)


def imports_of(module: str) -> Iterator[Import]:
    """Every import statement of `module` that runs (not the TYPE_CHECKING-only ones)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool, guarded: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                yield from (i for n in child.orelse for i in visit_one(n, in_function, guarded))
                continue
            yield from visit_one(child, in_function, guarded)

    def visit_one(node: ast.AST, in_function: bool, guarded: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield Import(module, _names(node, module, is_package), node.lineno, in_function,
                         guarded)
            return
        if isinstance(node, ast.Try):
            catches = _catches_import_error(node)
            for child in node.body:
                yield from visit_one(child, in_function, guarded or catches)
            for part in (*node.handlers, *node.orelse, *node.finalbody):
                yield from visit_one(part, in_function, guarded)
            return
        function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from visit(node, in_function or function, guarded)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), False, False)


ALL_IMPORTS = [i for module in MODULES for i in imports_of(module)]


def module_graph() -> dict[str, set[str]]:
    """Each module → the `exporter` modules its module-level imports load."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for i in ALL_IMPORTS:
        if not i.in_function:
            graph[i.module] |= i.targets - {i.module}
    return graph


def test_the_parser_sees_what_python_sees() -> None:
    """The graph is not empty by mistake: known edges are in it, TYPE_CHECKING ones are not."""
    graph = module_graph()
    assert {"exporter.bench.model", "exporter.bench.summary"} <= graph["exporter.bench.report"]
    assert "exporter.record" in graph["exporter.serve.pages"]
    assert "exporter.errors" in graph["exporter.result"]
    assert "exporter.config" not in graph["exporter.cli"]  # only under TYPE_CHECKING there
    assert len(MODULES) > 50


def test_the_import_graph_has_no_cycle() -> None:
    try:
        TopologicalSorter(module_graph()).prepare()
    except CycleError as exc:
        cycle = exc.args[1][::-1]  # graphlib lists each module before the one importing it
        pytest.fail("import cycle (each imports the next): " + " → ".join(cycle))


def test_no_function_level_import_of_an_exporter_module() -> None:
    """A function-level import would hide a cycle the test above cannot see."""
    lazy = [f"{MODULES[i.module].relative_to(ROOT)}:{i.line} imports "
            f"{', '.join(sorted(i.targets))}"
            for i in ALL_IMPORTS if i.in_function and i.targets
            and i.module not in LAZY_ALLOWED]
    assert not lazy, "\n".join(lazy)


def test_lazy_third_party_imports_are_optional_extras() -> None:
    """Outside cli.py, a function-level import is an optional dependency: guarded."""
    lazy = [f"{MODULES[i.module].relative_to(ROOT)}:{i.line} imports {i.names[0]}"
            for i in ALL_IMPORTS if i.in_function and not i.targets
            and i.module not in LAZY_ALLOWED and not i.guarded]
    assert not lazy, "\n".join(lazy)


def _loaded_by(module: str) -> set[str]:
    """Every module a fresh interpreter has loaded after importing `module`."""
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("module", ["exporter.bench.report", "exporter.bench.compare"])
def test_offline_readers_load_only_the_run_model(module: str) -> None:
    """Comparing or rendering a run.json loads the model of a run, not what made it."""
    loaded = _loaded_by(module)
    ours = {m for m in loaded if m.startswith("exporter")}
    assert ours <= {"exporter", "exporter.bench", "exporter.bench.model",
                    "exporter.bench.summary", "exporter.bench.compare", "exporter.bench.gate",
                    "exporter.bench.report", "exporter.record", "exporter.result",
                    "exporter.errors", "exporter.measure", "exporter.commands",
                    "exporter.commands.cells", "exporter.log"}
    assert "aiohttp" not in loaded
