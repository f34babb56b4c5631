"""The passes stage sits below the graph stage: it may use onnx and the shared helpers, nothing above."""

from __future__ import annotations

import ast
from pathlib import Path

import fuseplan.passes

# fuseplan.documents (strict JSON and YAML) imports only fuseplan.errors; fuseplan.files only those two
ALLOWED = {"fuseplan.documents", "fuseplan.errors", "fuseplan.files", "fuseplan.passes"}


def test_passes_import_nothing_from_later_stages():
    package = Path(fuseplan.passes.__file__).parent
    imported = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fuseplan"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("fuseplan"))
    assert imported and all(any(m == a or m.startswith(a + ".") for a in ALLOWED) for m in imported), imported
