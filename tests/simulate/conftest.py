"""Models prepared once per test session, with seeded weights and onnxruntime's reference values."""

from __future__ import annotations

from functools import lru_cache

import pytest

pytest.importorskip("onnxruntime", reason="the simulator compares with onnxruntime (the rewrite extra)")


@lru_cache(maxsize=None)
def prepared(name: str):
    """(graph, values) of a zoo model or a test model file, prepared as the importer prepares it."""
    from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model
    from fuseplan.simulate.values import ModelValues

    path, stem = model_path(name)
    model, _ = prepare_model(read_model(path), stem)
    graph = graph_from_model(model, stem, passes=[])
    return graph, ModelValues(model, graph, seed=0)
