"""In-place element-wise operators: an activation fused with its producer adds no rows and no traffic."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.cost.streaming import footprint, in_place_operators
from fuseplan.graph import graph_from_model
from tests.conftest import BUFFERS_KB, ZOO, zoo_params

KB = 1024


def conv_relu() -> onnx.ModelProto:
    """conv (3x3, 8 -> 32 channels, 16x16) followed by its ReLU."""
    w = numpy_helper.from_array(np.ones((32, 8, 3, 3), dtype=np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "conv_relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_fused_activation_adds_nothing(scheme):
    graph = graph_from_model(conv_relu(), name="conv_relu")
    assert in_place_operators(graph) == (False, True)
    cost = make_cost_model(scheme, graph, 8 * KB)
    rows: dict[int, int] = {}
    footprint(cost.tables, frozenset({0, 1}), rows, in_place_operators(graph))
    assert {graph.tensors[t].name: r for t, r in rows.items()} == {"x": 3, "c": 0, "y": 1}
    # the pair costs what the convolution alone costs (y replaces c as the tensor written back)
    assert cost.evaluate({0, 1}) == cost.evaluate({0})
    assert cost.dram({0, 1}) == cost.dram({0}) + cost.dram({1}) - 2 * 32 * 16 * 16


def in_place_pairs(graph) -> list[tuple[int, int]]:
    """(producer, in-place operator) pairs where the operator is its input's only reader."""
    flags = in_place_operators(graph)
    pairs = []
    for node in graph.nodes:
        if flags[node.index] and len(node.inputs) == 1:
            t = graph.tensors[node.inputs[0]]
            if t.producer is not None and len(t.consumers) == 1 and not t.is_model_output:
                pairs.append((t.producer, node.index))
    return pairs


@pytest.mark.parametrize("name", zoo_params())
def test_fusing_an_activation_with_its_producer_never_costs_more(zoo_graphs, name):
    graph = zoo_graphs[name]
    pairs = in_place_pairs(graph)
    assert pairs
    for scheme in sorted(SCHEMES):
        for kb in BUFFERS_KB:
            cost = make_cost_model(scheme, graph, kb * KB)
            for p, v in pairs:
                assert cost.dram({p, v}) <= cost.dram({p}) + cost.dram({v}), (scheme, kb, graph.nodes[v].name)
                assert cost.buffer({p, v}) <= cost.buffer({p}), (scheme, kb, graph.nodes[v].name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(ZOO), scheme=st.sampled_from(sorted(SCHEMES)),
       buffer_kb=st.sampled_from(BUFFERS_KB), seed=st.integers(0, 2**32 - 1))
def test_adding_an_activation_to_a_group_never_costs_more_than_leaving_it_out(zoo_graphs, name, scheme,
                                                                             buffer_kb, seed):
    graph = zoo_graphs[name]
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    rng = random.Random(seed)
    pairs = in_place_pairs(graph)
    checked = 0
    for _ in range(20):
        producer, activation = rng.choice(pairs)
        group, frontier = {producer}, set(graph.predecessors[producer])
        for _ in range(rng.randint(0, 12)):  # grow upstream, so the activation stays outside
            if not frontier:
                break
            node = rng.choice(sorted(frontier))
            group.add(node)
            frontier = (frontier | set(graph.predecessors[node])) - group
        bigger = group | {activation}
        if not (graph.is_convex(group) and graph.is_convex(bigger)):
            continue
        checked += 1
        assert cost.dram(bigger) <= cost.dram(group) + cost.dram({activation})
    assert checked > 0
