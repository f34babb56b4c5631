"""The graph IR's own shortcuts agree with what they stand for."""

from __future__ import annotations

import dataclasses

import pytest


@pytest.mark.parametrize("name", ["resnet18", "squeezenet"])
def test_operators_and_tensors_moved_equal_their_dataclass_replacements(zoo_graphs, name):
    graph = zoo_graphs[name]
    for node in graph.nodes:
        assert node.windows == tuple((t, g.kernel, g.stride, g.reach) for t, g in zip(node.inputs, node.input_geometry))
        moved = node.moved(node.index + 2, tuple(t + 1 for t in node.inputs), (7,))
        assert moved.windows == tuple((t + 1, k, s, r) for t, k, s, r in node.windows)  # not kept over
        assert moved == dataclasses.replace(node, index=node.index + 2, inputs=tuple(t + 1 for t in node.inputs),
                                            outputs=(7,))
        assert type(moved) is type(node) and node.index == graph.nodes.index(node)  # the original unchanged
        with pytest.raises(dataclasses.FrozenInstanceError):
            moved.index = 0
    for tensor in graph.tensors:
        changes = dict(index=tensor.index + 1, name=tensor.name + "_x", consumers=(), is_model_output=True,
                       producer=None)
        assert tensor.consumer_set == frozenset(tensor.consumers)
        assert tensor.moved(**changes) == dataclasses.replace(tensor, **changes)
        assert tensor.moved(**changes).consumer_set == frozenset()  # computed for the moved tensor, not kept


@pytest.mark.parametrize("name", ["resnet18", "squeezenet", "deeplabv3_mobilenet_v3_large"])
def test_successors_and_predecessors_follow_the_edges(zoo_graphs, name):
    graph = zoo_graphs[name]
    assert [(i, j) for i, out in enumerate(graph.successors) for j in out] == list(graph.edges)
    assert sorted((i, j) for j, into in enumerate(graph.predecessors) for i in into) == list(graph.edges)
