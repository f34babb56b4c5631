"""The rows and columns each reader touches, remembered per reader configuration across graphs."""

from __future__ import annotations

import pytest

from fuseplan.cost import base
from fuseplan.graph import CompGraph
from fuseplan.graph.onnx_import import load_prepared

GRAPHS = [("squeezenet", None), ("resnet18", None), ("mobilenet_v2", None), ("tests/data/googlenet_opset13.onnx", None),
          ("squeezenet", 112), ("resnet18", 57)]


def _graph(name: str, size: int | None):
    _, graph = load_prepared(name)
    if size is not None:
        (input_name, shape), = graph.input_shapes.items()
        _, graph = load_prepared(name, input_shapes={input_name: (*shape[:2], size, size)})
    return graph


@pytest.fixture(scope="module")
def graphs():
    return [_graph(name, size) for name, size in GRAPHS]


def test_remembered_reads_are_what_each_graph_computes_afresh(graphs, monkeypatch):
    fresh = []
    for graph in graphs:
        monkeypatch.setattr(base, "_READER_MASKS", {})
        monkeypatch.setattr(base, "_READER_MASKS_BY_OPERATOR", {})
        fresh.append(base.partial_reads(graph))
    monkeypatch.setattr(base, "_READER_MASKS", {})
    monkeypatch.setattr(base, "_READER_MASKS_BY_OPERATOR", {})
    for graph in graphs:  # one memory across models and input sizes: a reader found again reads what it read
        base.partial_reads(graph)
    assert len(base._READER_MASKS) < sum(len(g.nodes) for g in graphs)  # readers were found again
    for graph, expected in zip(graphs, fresh, strict=True):
        assert base.partial_reads(graph) == expected
    # some reader of a stride-2 1x1 convolution or a pooling skips lines: the tables are not all "whole"
    assert any(reads is not None for expected in fresh for reads in expected)


def test_an_operator_remembered_by_identity_reads_what_its_tensors_say(graphs, monkeypatch):
    """The same operator objects (as a rewritten graph shares them) reading tensors of other shapes: the
    reads remembered by the operators' identity are not taken; what is found is what is computed afresh."""
    large, small = graphs[0], graphs[4]  # squeezenet at 224 and at 112: the same operators and tensor indices
    shared = CompGraph(small.name, large.nodes, small.tensors, small.model_inputs, small.model_outputs)
    monkeypatch.setattr(base, "_READER_MASKS", {})
    monkeypatch.setattr(base, "_READER_MASKS_BY_OPERATOR", {})
    expected = base.partial_reads(shared)
    monkeypatch.setattr(base, "_READER_MASKS", {})
    monkeypatch.setattr(base, "_READER_MASKS_BY_OPERATOR", {})
    at_large = base.partial_reads(large)  # remembers every operator of ``large`` by identity
    assert len(base._READER_MASKS_BY_OPERATOR) == sum(1 for node in large.nodes if node.outputs)
    assert at_large != expected  # so taking what was remembered regardless of the shapes would fail below
    assert base.partial_reads(shared) == expected
    assert base.partial_reads(large) == at_large  # found by identity, the same as afresh


def test_the_memory_is_bounded(graphs, monkeypatch):
    monkeypatch.setattr(base, "_READER_MASKS", {})
    monkeypatch.setattr(base, "_READER_MASKS_BY_OPERATOR", {})
    monkeypatch.setattr(base, "MAX_READER_MASKS", 5)
    expected = base.partial_reads(graphs[1])
    for graph in graphs:
        base.partial_reads(graph)
        assert len(base._READER_MASKS) <= base.MAX_READER_MASKS + 1
        assert len(base._READER_MASKS_BY_OPERATOR) <= base.MAX_READER_MASKS + 1
    assert base.partial_reads(graphs[1]) == expected
