"""The import graph of `exporter`: no cycle, and no function-level import that hides one.

Parsed with `ast`, so nothing is imported. An import inside a function is allowed only for an
optional third-party extra (a library the daemon runs without); every other one is a module-level
import that was moved into a function, usually to dodge a cycle or to defer start-up work.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "exporter"
# Third-party modules that may be imported lazily: optional at run time.
OPTIONAL_EXTRAS = frozenset({"botocore", "tiktoken", "yaml.cyaml"})
# Modules with function-level imports of exporter modules, left to their owners (listed in the
# report): the CLI defers its commands' imports; bench imports compare and report lazily, which
# hides the cycle bench → compare/report → bench until bench becomes a package; protocols'
# registry imports its submodules lazily (they import the package: a cycle); hints imports
# protocols lazily. Remove entries as they go.
PENDING = frozenset({
    "exporter.cli", "exporter.bench", "exporter.hints",
})


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The exporter module an imported name lives in (`exporter.config.Config` → the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> Iterator[tuple[str, bool, int]]:
    """(imported name, inside a function, line) of every import of a module, outside
    `if TYPE_CHECKING:` blocks."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, in_function, child.lineno
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                for alias in child.names:
                    yield f"{base}.{alias.name}", in_function, child.lineno
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inner)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), False)


def graph(lazy: frozenset[str] = frozenset(MODULES)) -> dict[str, set[str]]:
    """Module → the exporter modules it imports: at module level, and inside functions for the
    modules in `lazy`."""
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for name, in_function, _line in _imports(module):
            if in_function and module not in lazy:
                continue
            target = _resolve(name) if name.startswith("exporter") else None
            if target is not None and target != module:
                edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph(lazy=frozenset())) == []


def test_no_function_level_import_hides_a_cycle() -> None:
    """Counted as if at module level; PENDING modules' lazy imports still do (see PENDING)."""
    assert cycles(graph(lazy=frozenset(MODULES) - PENDING)) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_function_level_imports_but_optional_extras() -> None:
    lazy = []
    for module in MODULES:
        for name, in_function, line in _imports(module):
            optional = any(name == extra or name.startswith(f"{extra}.")
                           for extra in OPTIONAL_EXTRAS)
            if not in_function or optional:
                continue
            if module not in PENDING:
                lazy.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line} {name}")
    assert not lazy, "\n".join(lazy)


def test_pending_modules_still_have_function_level_imports() -> None:
    """An entry of PENDING whose module was cleaned up must go, so the list only shrinks."""
    for module in PENDING:
        assert any(lazy for _, lazy, _ in _imports(module)), f"{module} is clean: drop it"
