"""BRR ``row-tiles`` schedules run through their loop nest (:mod:`fuseplan.simulate.tiles`): channel blocks read
through one-row windows run exactly as priced, and so does a tensor a 3x3 window reads (BRR holds it whole); a
schedule that held such a tensor a block at a time would need rows of other channels it dropped, and keeping
them (the halo) is what makes that run correct."""

from __future__ import annotations

from dataclasses import replace
from math import ceil

import numpy as np
import pytest

from fuseplan.cost import make_cost_model
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.run import TOLERANCE, simulate_alone
from fuseplan.simulate.tiles import ACCUMULATE, PRODUCE, TileRun
from fuseplan.simulate.values import relative_error
from tests.simulate.conftest import prepared

DOWNSAMPLE = ("/layer3/layer3.0/downsample/downsample.0/Conv", "/layer3/layer3.0/Add", "/layer3/layer3.0/relu_1/Relu")
BLOCK = ("/layer1/layer1.0/conv1/Conv", "/layer1/layer1.0/relu/Relu", "/layer1/layer1.0/conv2/Conv")


def _schedule(graph, names, kb):
    cost = make_cost_model("brr", graph, kb * 1024)
    index = {node.name: node.index for node in graph.nodes}
    group = frozenset(index[name] for name in names)
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles"
    return cost, group, schedule


def _block_held(graph, schedule) -> list[int]:
    return [u.tensor for u in schedule.tensors if 0 < u.elements < u.rows * graph.tensors[u.tensor].row_numel]


def _tensor(graph, name: str) -> int:
    return next(t.index for t in graph.tensors if t.name == name)


def _assert_runs_as_priced(graph, schedule, values, cost, group):
    """The schedule runs inside the buffer, moves the DRAM it and the cost model say, and computes the
    model's tensors; returns the outcome."""
    outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    assert outcome.finding is None and outcome.skipped is None, outcome
    assert outcome.simulated_dram == schedule.dram == cost.evaluate(group).dram
    assert outcome.peak_on_chip <= schedule.on_chip
    assert outcome.max_error <= TOLERANCE
    assert outcome.agrees
    return outcome


def _run_with_halo(graph, schedule, values):
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    before = set(dram)
    chip, traffic = OnChip(None), DramTraffic()
    run = TileRun(graph, schedule, values, dram, chip, traffic, keep_halo=True)
    run.run()
    errors = [relative_error(dram[t], values.tensor(t)) for t in dram if t not in before]
    return run, traffic, max(errors)


@pytest.mark.parametrize("kb, tiles", [(256, 1), (16, 7)])
def test_channel_blocks_read_through_one_row_windows_run_as_priced(kb, tiles):
    graph, values = prepared("resnet18")
    cost, group, schedule = _schedule(graph, DOWNSAMPLE, kb)
    assert schedule.params["tiles"] == tiles  # several tiles: the weights stream, read once per tile
    held = _block_held(graph, schedule)
    assert held  # the Add reads the long branch a block at a time, and its output leaves a block at a time
    members = set(schedule.operators)
    for t in held:
        for c in graph.tensors[t].consumers:
            if c in members:
                assert all(k == 1 for x, k, _s, _r in graph.nodes[c].windows if x == t)
    _assert_runs_as_priced(graph, schedule, values, cost, group)


@pytest.mark.parametrize("kb", [256, pytest.param(64, marks=pytest.mark.slow)])
def test_an_input_read_through_a_3x3_window_is_held_whole_and_runs_as_priced(kb):
    graph, values = prepared("resnet18")
    cost, group, schedule = _schedule(graph, BLOCK, kb)
    pooled = _tensor(graph, "/maxpool/MaxPool_output_0")
    # the full entry convolution takes it a block at a time, but its 3-row window needs rows of every channel
    # from one tile to the next: BRR holds it whole
    assert pooled not in _block_held(graph, schedule)
    assert _block_held(graph, schedule)  # the partial conv2's output leaves a block at a time
    _assert_runs_as_priced(graph, schedule, values, cost, group)


@pytest.mark.parametrize("kb", [256, pytest.param(64, marks=pytest.mark.slow)])
def test_a_schedule_holding_a_3x3_windows_input_a_block_at_a_time_misses_the_rows_of_other_channels(kb):
    # the schedule BRR priced up to version 4: the simulator finds what it dropped, and keeping the halo mends it
    graph, values = prepared("resnet18")
    cost, group, priced = _schedule(graph, BLOCK, kb)
    pooled = _tensor(graph, "/maxpool/MaxPool_output_0")
    channels = graph.tensors[pooled].shape[1]
    schedule = replace(priced, tensors=tuple(replace(u, elements=ceil(u.elements * cost.channel_block / channels))
                                             if u.tensor == pooled else u for u in priced.tensors))
    assert pooled in _block_held(graph, schedule)
    outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    assert not outcome.agrees
    assert "/maxpool/MaxPool_output_0 block 0" in outcome.finding and "elements missing" in outcome.finding
    # with every channel of the rows its window still needs kept, the run is correct and moves the priced DRAM
    run, traffic, error = _run_with_halo(graph, schedule, values)
    assert traffic.total == schedule.dram
    assert error <= TOLERANCE
    n, channels, _h, width = graph.tensors[pooled].shape
    overlap = 3 - 1  # a 3x3 window at stride 1: two rows of the next window were read by this one
    assert run.excess()[pooled] >= overlap * (channels - run.block[pooled]) * width * n


def test_the_roles_the_loop_nest_derives_from_the_schedule_are_brr_modes():
    graph, values = prepared("resnet18")
    for names in (DOWNSAMPLE, BLOCK):
        cost, group, schedule = _schedule(graph, names, 256)
        run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
        modes = cost.modes(group, schedule.params["entry"] == "full")
        dense = {v: role for v, role in run.roles.items() if role in (PRODUCE, ACCUMULATE)}
        assert dense
        assert all((role == ACCUMULATE) == modes[v] for v, role in dense.items())


def test_a_buffer_smaller_than_the_schedule_overflows():
    graph, values = prepared("resnet18")
    cost, group, schedule = _schedule(graph, DOWNSAMPLE, 256)
    outcome = simulate_alone(graph, schedule, values, schedule.on_chip // 2)
    assert outcome.finding is not None and "overflows" in outcome.finding
    assert np.isfinite(outcome.peak_on_chip)


def _pooled_model(channels: int = 64, size: int = 16):
    """Two 1x1 convolutions, a Relu and a 2x2 max pooling at stride 2 (VGG's pattern, 1x1 for speed)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from fuseplan.graph.onnx_import import graph_from_model
    from fuseplan.simulate.values import ModelValues

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32), name)
               for name in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y1"], name="conv1", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["y1", "w2"], ["y"], name="conv2", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    body = helper.make_graph(
        nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, channels, size // 2, size // 2])], weights)
    model = onnx.shape_inference.infer_shapes(helper.make_model(body, opset_imports=[helper.make_opsetid("", 17)]))
    graph = graph_from_model(model, "pooled")
    return graph, ModelValues(model, graph, seed=0)


@pytest.mark.parametrize("kb", [3, 12])
def test_a_tensor_read_by_a_2x2_stride_2_pooling_is_held_whole_and_runs_as_priced(kb):
    # The partial conv2's Relu output is read by the pooling a block at a time, through a window no taller than
    # its stride; but a step that makes an odd row leaves it for the pooling's next step, when a block buffer
    # holds another block. BRR holds it whole; held a block at a time (the rule before, which counted only
    # windows taller than their stride) the run misses that row of the other channels.
    from fuseplan.cost.brr import BRRCostModel

    graph, values = _pooled_model()
    group = frozenset(range(len(graph.nodes)))
    relu = _tensor(graph, "r")
    cost = BRRCostModel(graph, kb * 1024)
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles" and relu not in _block_held(graph, schedule)
    outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    assert outcome.agrees, outcome
    assert outcome.simulated_dram == schedule.dram == cost.evaluate(group).dram
    before = BRRCostModel(graph, kb * 1024)
    before._tall_readers = tuple(tuple(c for c in t.consumers if any(x == t.index and k > s for x, k, s, _r in
                                                                     graph.nodes[c].windows))
                                 for t in graph.tensors)
    old = before.schedule(group)
    assert relu in _block_held(graph, old)
    outcome = simulate_alone(graph, old, values, before.buffer_bytes - 1)
    assert not outcome.agrees and "tensor r block 0" in outcome.finding and "elements missing" in outcome.finding


SQUEEZE_EXCITE = ("/features/features.5/block/block.2/avgpool/GlobalAveragePool",
                  "/features/features.5/block/block.2/fc1/Conv", "/features/features.5/block/block.2/activation/Relu",
                  "/features/features.5/block/block.2/fc2/Conv",
                  "/features/features.5/block/block.2/scale_activation/HardSigmoid",
                  "/features/features.5/block/block.2/Mul", "/features/features.5/block/block.3/block.3.0/Conv")


def test_an_operator_with_one_output_row_reads_its_weights_once_however_many_tiles():
    graph, values = prepared("mobilenet_v3_small")
    cost, group, schedule = _schedule(graph, SQUEEZE_EXCITE, 64)
    tiles = schedule.params["tiles"]
    assert tiles > 1 and schedule.params["weights"] == "streamed"
    index = {node.name: node.index for node in graph.nodes}
    one_row = {index[name] for name in SQUEEZE_EXCITE if "/fc" in name}  # the excitation's convs, on 1x1 maps
    reads = {w.operator: w.dram_reads for w in schedule.weights}
    for v in reads:
        weights = graph.nodes[v].weight_numel
        assert reads[v] == (weights if v in one_row else weights * tiles)
    assert all(graph.nodes[v].weight_numel for v in one_row)
    # the loop nest makes each one-row output in one step: the price reads those weights once, as it does
    _assert_runs_as_priced(graph, schedule, values, cost, group)
