"""The lone-operator executor: real values against onnxruntime, DRAM counted equal to the schedule's, peak within it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fuseplan.cost.streaming import in_place_operators
from fuseplan.graph.onnx_import import graph_from_model, prepare_model
from fuseplan.schedule.bounds import io_lower_bound
from fuseplan.schedule.lone import (
    CHANNELS_OUTER, CONV_ORDERS, MATMUL_ORDERS, ROWS_INNER, ROWS_OUTER, channel_blocks, conv_blocks_schedule,
    conv_geometry, epilogue, epilogue_buffers, lone_schedule, matmul_blocks_schedule, riders,
)
from fuseplan.simulate.memory import DramTraffic, OnChip
from tests.schedule import layers
from tests.simulate.conftest import prepared

pytest.importorskip("onnxruntime", reason="the executor is compared with onnxruntime")

from fuseplan.simulate.lone import run_lone  # noqa: E402
from fuseplan.simulate.values import ModelValues, relative_error  # noqa: E402


def layer(model):
    ready, _ = prepare_model(model, "layer")
    graph = graph_from_model(ready, "layer", passes=[])
    return graph, ModelValues(ready, graph, seed=0)


def execute(graph, values, schedule):
    """Run ``schedule`` in a buffer of exactly its ``on_chip`` and check everything the schedule says."""
    assert schedule is not None
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    chip, traffic = OnChip(schedule.on_chip), DramTraffic()
    written = run_lone(schedule, graph, values, dram, chip, traffic)
    assert written
    for t, value in written.items():
        assert relative_error(value, values.tensor(t)) < 1e-4, graph.tensors[t].name
    for use in schedule.tensors:
        name = f"tensor {graph.tensors[use.tensor].name}"
        assert (traffic.reads[name], traffic.writes[name]) == (use.dram_reads, use.dram_writes), name
    for use in schedule.weights:
        assert traffic.reads[f"weights {graph.nodes[use.operator].name}"] == use.dram_reads
    assert traffic.total == schedule.dram
    assert chip.peak <= schedule.on_chip
    v, ride = schedule.operators[0], schedule.operators[1:]
    # a bound that a simulated schedule beats is wrong
    assert traffic.total >= io_lower_bound(graph, v, schedule.on_chip + 1, 1, ride).elements
    return traffic


def mapped(graph, values, name, buffer):
    v = graph.node_index(name)
    schedule = lone_schedule(graph, v, riders(graph, v, in_place_operators(graph)), buffer, 1)
    return execute(graph, values, schedule), schedule


# -- every blocking of small layers -----------------------------------------------------------------------
SLOW = pytest.mark.slow
CONVS = [
    pytest.param(dict(c_in=6, c_out=8, size=9, kernel=3, pad=1, relu=True), marks=SLOW),  # dense, padding, a rider
    pytest.param(dict(c_in=5, c_out=6, size=11, kernel=3, stride=2, pad=1, width=7), marks=SLOW),  # not square
    pytest.param(dict(c_in=8, c_out=6, size=10, kernel=1, stride=2, pad=0), marks=SLOW),  # rows, columns skipped
    pytest.param(dict(c_in=4, c_out=6, size=9, kernel=3, pad=2, dilation=2), marks=SLOW),
    dict(c_in=3, c_out=4, size=5, kernel=3, pad=6, dilation=6, relu=True),  # only the centre taps are read
    dict(c_in=8, c_out=12, size=8, kernel=3, pad=1, groups=4),  # grouped: blocks within a group, whole groups
    dict(c_in=6, c_out=6, size=9, kernel=3, pad=1, groups=6, bias=False),  # depthwise
    dict(c_in=3, c_out=4, size=6, kernel=3, pad=1, relu=True, batch=2),  # images in turn
    pytest.param(dict(c_in=4, c_out=8, size=6, kernel=3, pad=1, groups=2, batch=2), marks=SLOW),
]


def _blockings(g):
    ks = sorted({1, 2, g.cout_group, g.c_out} | ({2 * g.cout_group} if g.groups > 2 else set()))
    for order, k in itertools.product(CONV_ORDERS, [k for k in ks if k < g.cout_group or k % g.cout_group == 0]):
        block_in = channel_blocks(g, k)[1]
        for c, h in itertools.product(sorted({1, 2, block_in}), sorted({1, 3, g.h_out})):
            yield order, k, c, h


def _conv_id(spec) -> str:
    return "-".join(f"{k}{v}" for k, v in spec.items())


@pytest.mark.parametrize("spec", CONVS, ids=[_conv_id(c if isinstance(c, dict) else c.values[0]) for c in CONVS])
def test_every_order_of_a_small_convolution_executes_as_priced(spec):
    model, _, _ = layers.conv(**spec)
    graph, values = layer(model)
    ride = riders(graph, 0, in_place_operators(graph))
    g = conv_geometry(graph, 0)
    orders = set()
    for order, k, c, h in _blockings(g):
        schedule = conv_blocks_schedule(graph, 0, ride, order, k, c, h)
        if schedule is None:
            continue
        execute(graph, values, schedule)
        orders.add((order, schedule.params["halo"]))
    assert {CHANNELS_OUTER, ROWS_OUTER} <= {o for o, _ in orders}
    if g.groups == 1 and g.c_in > 1:
        assert {(CHANNELS_OUTER, "kept"), (CHANNELS_OUTER, "re-read"), (ROWS_INNER, "kept")} <= orders


@pytest.mark.parametrize("op, kernel, stride, pad, attrs", [
    ("MaxPool", 3, 2, 1, {}), ("AveragePool", 3, 2, 1, {}), ("AveragePool", 3, 1, 1, {"count_include_pad": 1}),
    ("MaxPool", 2, 2, 0, {"ceil_mode": 1}),
])
def test_every_order_of_a_small_pooling_executes_as_priced(op, kernel, stride, pad, attrs):
    model, _, _ = layers.pool(op, channels=5, size=9, kernel=kernel, stride=stride, pad=pad, **attrs)
    graph, values = layer(model)
    g = conv_geometry(graph, 0)
    for order, k, c, h in _blockings(g):
        schedule = conv_blocks_schedule(graph, 0, (), order, k, c, h)
        if schedule is not None:
            execute(graph, values, schedule)


@pytest.mark.parametrize("spec", [dict(m=7, k=5, n=6), dict(m=5, k=4, n=6, batch=(2,), weight=False)])
def test_every_order_of_a_small_matrix_product_executes_as_priced(spec):
    model, _, _ = layers.matmul(**spec)
    graph, values = layer(model)
    for order, m, n, kk in itertools.product(MATMUL_ORDERS, (1, 3, spec["m"]), (2, spec["n"]), (1, 2, spec["k"])):
        execute(graph, values, matmul_blocks_schedule(graph, 0, (), order, m, n, kk))


def test_a_gemm_with_its_bias_executes_as_priced():
    model, _, _ = layers.gemm(m=3, k=6, n=5)
    graph, values = layer(model)
    for order, m, n, kk in itertools.product(MATMUL_ORDERS, (1, 3), (2, 5), (1, 6)):
        execute(graph, values, matmul_blocks_schedule(graph, 0, (), order, m, n, kk))


# -- zoo layers, in small buffers -------------------------------------------------------------------------
ZOO_LAYERS = [
    pytest.param("mobilenet_v2", "/features/features.0/features.0.0/Conv", 6 * 1024, marks=SLOW),  # stride 2, Clip
    pytest.param("mobilenet_v2", "/features/features.1/conv/conv.0/conv.0.0/Conv", 4 * 1024, marks=SLOW),  # depthwise
    pytest.param("mobilenet_v2", "/features/features.2/conv/conv.0/conv.0.0/Conv", 8 * 1024, marks=SLOW),  # 1x1
    pytest.param("mobilenet_v2", "/classifier/classifier.1/Gemm", 64 * 1024, marks=SLOW),
    pytest.param("mobilenet_v2", "/GlobalAveragePool", 4 * 1024, marks=SLOW),
    pytest.param("resnet18", "/maxpool/MaxPool", 4 * 1024, marks=SLOW),
    pytest.param("resnet18", "/layer2/layer2.0/downsample/downsample.0/Conv", 16 * 1024, marks=SLOW),  # 1x1, stride 2
    pytest.param("resnet18", "/layer1/layer1.0/Add", 1024, marks=SLOW),
    # broadcast
    pytest.param("efficientnet_b0", "/features/features.1/features.1.0/block/block.1/Mul", 1024, marks=SLOW),
    pytest.param("squeezenet", "/features/features.3/Concat", 1024, marks=SLOW),
    pytest.param("deeplabv3_mobilenet_v3_large", "/model/classifier/classifier.0/convs.4/Resize", 4 * 1024, marks=SLOW),
    ("bert_encoder", "/layers.0/query/MatMul", 16 * 1024),  # the bias Add rides
    ("bert_encoder", "/layers.0/MatMul", 16 * 1024),  # two activations, batched
    ("bert_encoder", "/layers.0/Softmax", 1024),
    ("bert_encoder", "/layers.0/attention_norm/LayerNormalization", 4 * 1024),
    ("bert_encoder", "/layers.0/Transpose_2", 1024),
    ("bert_encoder", "/layers.0/Reshape", 1024),
    ("bert_encoder", "/layers.0/Erf", 4 * 1024),
]


@pytest.mark.parametrize("model, name, buffer", ZOO_LAYERS,
                         ids=[getattr(p, "values", p)[1] for p in ZOO_LAYERS])
def test_zoo_operators_execute_as_priced_in_small_buffers(model, name, buffer):
    graph, values = prepared(model)
    _, schedule = mapped(graph, values, name, buffer)
    assert any(count > 1 for _, count in schedule.loops)  # really in blocks


# An element-wise graph that branches and rejoins, applied to each output block (a second block held meanwhile).
EPILOGUES = [
    ("bert_encoder", "/layers.0/intermediate/MatMul", 16 * 1024, "matmul-blocks"),  # bias and GELU
    ("bert_encoder", "/layers.0/intermediate/Add", 4 * 1024, "chunks"),  # GELU on a line
    pytest.param("efficientnet_b0", "/features/features.0/features.0.0/Conv", 8 * 1024, "conv-blocks",
                 marks=SLOW),  # Swish: x * sigmoid(x), stride 2
    pytest.param("efficientnet_b0", "/features/features.1/features.1.0/block/block.0/block.0.0/Conv", 8 * 1024,
                 "conv-blocks", marks=SLOW),  # depthwise, Swish
]


@pytest.mark.parametrize("model, name, buffer, kind", EPILOGUES, ids=[getattr(p, "values", p)[1] for p in EPILOGUES])
def test_an_epilogue_that_branches_executes_as_priced(model, name, buffer, kind):
    graph, values = prepared(model)
    v = graph.node_index(name)
    carried = epilogue(graph, v)
    assert epilogue_buffers(graph, v, carried) == 2
    schedule = lone_schedule(graph, v, carried, buffer, 1)
    assert schedule.kind == kind and schedule.operators == (v, *carried)
    execute(graph, values, schedule)
    # one tensor written, the last operator's; none of the tensors inside the epilogue moves
    written = [u.tensor for u in schedule.tensors if u.dram_writes]
    assert written == [graph.nodes[carried[-1]].outputs[0]]
    inside = {graph.nodes[u].outputs[0] for u in (v, *carried[:-1])}
    assert not any(u.dram_reads or u.dram_writes for u in schedule.tensors if u.tensor in inside)
    assert any(count > 1 for _, count in schedule.loops)


@pytest.mark.parametrize("op, inputs, outputs, constants, attrs, kind", [
    ("Split", [(1, 6, 4, 5)], [(1, 2, 4, 5), (1, 4, 4, 5)], [np.array([2, 4], dtype=np.int64)], {"axis": 1}, "chunks"),
    ("Flatten", [(1, 3, 4, 5)], [(1, 60)], [], {"axis": 1}, "chunks"),
    ("Transpose", [(2, 3, 4)], [(4, 2, 3)], [], {"perm": [2, 0, 1]}, "chunks"),  # the last axis moves
    ("Concat", [(2, 3), (2, 5)], [(2, 8)], [], {"axis": 1}, "chunks"),  # along the line
    ("ReduceMean", [(1, 3, 4, 5)], [(1, 3, 4, 1)], [], {"axes": [-1]}, "whole"),  # no loop nest of its own
])
def test_copies_and_the_whole_fallback_execute_as_priced(op, inputs, outputs, constants, attrs, kind):
    model, _, _ = layers.single(op, inputs, outputs, constants, **attrs)
    graph, values = layer(model)
    schedule = lone_schedule(graph, 0, (), 1 << 16, 1)
    assert schedule.kind == kind
    execute(graph, values, schedule)


@pytest.mark.slow
def test_random_blockings_of_random_convolutions_execute_as_priced():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @st.composite
    def cases(draw):
        groups = draw(st.sampled_from([1, 1, 2, 3]))
        kernel, dilation, stride = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        pad = draw(st.integers(0, (kernel - 1) * dilation + 1))
        least = max(1, (kernel - 1) * dilation + 1 - 2 * pad)
        spec = dict(c_in=groups * draw(st.integers(1, 3)), c_out=groups * draw(st.integers(1, 3)),
                    size=draw(st.integers(least, max(least, 10))), kernel=kernel, stride=stride, pad=pad,
                    dilation=dilation, groups=groups, bias=draw(st.booleans()), relu=draw(st.booleans()))
        return spec, draw(st.sampled_from(CONV_ORDERS)), draw(st.integers(1, 9)), draw(st.integers(1, 9)), \
            draw(st.integers(1, 10))

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(cases())
    def check(case):
        spec, order, k, c, h = case
        model, _, _ = layers.conv(**spec)
        graph, values = layer(model)
        g = conv_geometry(graph, 0)
        k = min(k, g.c_out) if k < g.cout_group else g.cout_group * max(1, min(k // g.cout_group, g.groups))
        block_in = channel_blocks(g, k)[1]
        schedule = conv_blocks_schedule(graph, 0, riders(graph, 0, in_place_operators(graph)), order, k,
                                        1 + (c - 1) % block_in if g.groups == 1 else block_in, min(h, g.h_out))
        if schedule is not None:
            execute(graph, values, schedule)

    check()


def test_a_product_by_one_activation_matrix_folds_the_rows_of_a():
    model, _, _ = layers.single("MatMul", [(2, 3, 4), (4, 5)], [(2, 3, 5)])
    graph, values = layer(model)
    for order, m, n, kk in itertools.product(MATMUL_ORDERS, (1, 4, 6), (2, 5), (1, 4)):
        schedule = matmul_blocks_schedule(graph, 0, (), order, m, n, kk)
        assert dict(schedule.loops)["batch"] == 1 and dict(schedule.loops)["m blocks"] == -(-6 // m)
        execute(graph, values, schedule)
