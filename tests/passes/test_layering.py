"""The passes stage sits below the graph stage: it may use onnx and the shared helpers, nothing above."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import fuseplan.passes
import fuseplan.runtime

# fuseplan.documents (strict JSON and YAML) imports only fuseplan.errors; fuseplan.files only those two;
# fuseplan.runtime (onnxruntime sessions, shared with the rewrite stage) only fuseplan.errors
ALLOWED = {"fuseplan.documents", "fuseplan.errors", "fuseplan.files", "fuseplan.runtime", "fuseplan.passes"}


def _fuseplan_imports(paths: Iterable[Path]) -> set[str]:
    imported = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fuseplan"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("fuseplan"))
    return imported


def test_passes_import_nothing_from_later_stages():
    imported = _fuseplan_imports(Path(fuseplan.passes.__file__).parent.rglob("*.py"))
    assert imported and all(any(m == a or m.startswith(a + ".") for a in ALLOWED) for m in imported), imported
    assert "fuseplan.runtime" in imported  # the pass search times graphs with the rewrite stage's sessions


def test_the_shared_onnxruntime_sessions_sit_below_every_stage():
    assert _fuseplan_imports([Path(fuseplan.runtime.__file__)]) == {"fuseplan.errors"}
