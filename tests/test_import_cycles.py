"""The package's modules import each other without a cycle: every import counts, also those inside functions
(a cycle through a deferred import still couples the two modules and breaks when the import is hoisted)."""

from __future__ import annotations

import ast
from pathlib import Path

import fuseplan

PACKAGE_ROOT = Path(fuseplan.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The package's modules that ``tree`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    found = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(path): path for path in PACKAGE_ROOT.rglob("*.py")}
    modules = set(files)
    return {name: _imported(ast.parse(path.read_text("utf-8")), name, path.name == "__init__.py", modules)
            for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, the first repeated at the end), or ``None``.

    A package importing its own submodules (``fuseplan.graph`` -> ``fuseplan.graph.ir``) is how packages
    re-export, and a submodule importing its parent package's ``__init__`` first runs it, so edges
    from a module to a package that contains it are left out.
    """
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph[name]):
            if name.startswith(target + "."):
                continue
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


def test_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "fuseplan.graph.onnx_import" in graph and len(graph) > 50
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
