"""The simulator never calls the pricing code: it reads schedules and the model, and counts for itself.

``fuseplan.schedule`` sits between the graph and the cost models (a schedule is data a cost model chooses);
``fuseplan.simulate`` may use schedules, the graph and onnxruntime's reference, never ``fuseplan.cost`` or
anything built on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fuseplan.schedule
import fuseplan.simulate


def _imports(package) -> set[str]:
    found = set()
    for path in Path(package.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fuseplan"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("fuseplan"))
    return found


@pytest.mark.parametrize("package, allowed", [
    (fuseplan.schedule, {"fuseplan.schedule", "fuseplan.graph", "fuseplan.errors"}),
    (fuseplan.simulate, {"fuseplan.simulate", "fuseplan.schedule", "fuseplan.graph", "fuseplan.errors",
                         "fuseplan.units", "fuseplan.passes.verify"}),
])
def test_schedules_and_the_simulator_import_nothing_that_prices(package, allowed):
    imported = _imports(package)
    assert imported and all(any(m == a or m.startswith(a + ".") for a in allowed) for m in imported), imported
