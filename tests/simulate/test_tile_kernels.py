"""The tile executor's block kernels beyond convolutions (:mod:`fuseplan.simulate.tiles`), on real zoo groups that
BRR holds a channel block at a time: a Concat's block loop runs over its output's channels (each input in its
place), a global pooling takes a streamed input a block at a time, the classifier's rank-2 tensors (a
Flatten's output read by a full Gemm, a partial Gemm's output) run a block at a time, and a Flatten of a 7x7 map
held a block of channels at a time passes them on a block of features at a time. Each runs as priced:
simulated DRAM equal to ``F_D``, peak within ``F_beta``, outputs within 1e-4 of onnxruntime."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.run import TOLERANCE, simulate_alone
from fuseplan.simulate.tiles import ACCUMULATE, FEATURE_BLOCKS, PRODUCE, SLICE, TileRun
from fuseplan.simulate.values import relative_error
from tests.simulate.test_tiles import _assert_runs_as_priced as _runs_as_priced, _tensor

pytest.importorskip("onnxruntime", reason="the simulator compares with onnxruntime (the rewrite extra)")


@lru_cache(maxsize=None)
def _prepared(name: str, size: int):
    """(graph, values) of a zoo CNN at a ``size`` x ``size`` input (smaller maps: a quicker run)."""
    from fuseplan.graph.onnx_import import load_prepared
    from fuseplan.simulate.values import ModelValues

    _, graph = load_prepared(name)
    (input_name, shape), = graph.input_shapes.items()
    prepared, graph = load_prepared(name, input_shapes={input_name: (*shape[:2], size, size)})
    return graph, ModelValues(prepared, graph, seed=0)


def _schedule(graph, names, kb):
    cost = make_cost_model("brr", graph, kb * 1024)
    group = frozenset(graph.node_index(name) for name in names)
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles"
    return cost, group, schedule


def _block_held(graph, schedule) -> set[int]:
    return {u.tensor for u in schedule.tensors if 0 < u.elements < u.rows * graph.tensors[u.tensor].row_numel}


FIRE = ("/features/features.4/expand1x1/Conv", "/features/features.4/expand1x1_activation/Relu",
        "/features/features.4/expand3x3/Conv", "/features/features.4/expand3x3_activation/Relu",
        "/features/features.4/Concat", "/features/features.5/squeeze/Conv",
        "/features/features.5/squeeze_activation/Relu", "/features/features.5/expand1x1/Conv")


def test_a_concat_held_a_block_at_a_time_runs_its_block_loop_over_its_output_channels():
    graph, values = _prepared("squeezenet", 112)
    cost, group, schedule = _schedule(graph, FIRE, 256)
    concat = _tensor(graph, "/features/features.4/Concat_output_0")
    second = _tensor(graph, "/features/features.4/expand3x3_activation/Relu_output_0")
    assert {concat, second} <= _block_held(graph, schedule)  # 128 channels and its second input's 64
    run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
    assert run.roles[graph.node_index("/features/features.4/Concat")] == SLICE
    # the second input lies after the first one's 64 channels of the loop over the Concat's 128
    assert run.offset[second] == 64 and run.offset[concat] == 0
    assert run.loop_channels[run.root_of[graph.node_index("/features/features.4/Concat")]] == 128
    _runs_as_priced(graph, schedule, values, cost, group)


STEM = ("/features/features.0/features.0.0/Conv", "/features/features.0/features.0.2/Sigmoid",
        "/features/features.0/features.0.2/Mul", "/features/features.1/features.1.0/block/block.0/block.0.0/Conv",
        "/features/features.1/features.1.0/block/block.0/block.0.2/Sigmoid",
        "/features/features.1/features.1.0/block/block.0/block.0.2/Mul",
        "/features/features.1/features.1.0/block/block.1/avgpool/GlobalAveragePool",
        "/features/features.1/features.1.0/block/block.1/fc1/Conv")
POOLED = "/features/features.1/features.1.0/block/block.1/avgpool/GlobalAveragePool_output_0"


def test_a_global_pooling_sums_a_streamed_input_a_block_at_a_time_into_its_whole_output():
    graph, values = _prepared("efficientnet_b0", 112)
    cost, group, schedule = _schedule(graph, STEM, 64)
    pool = graph.node_index("/features/features.1/features.1.0/block/block.1/avgpool/GlobalAveragePool")
    source = graph.nodes[pool].inputs[0]
    assert source in _block_held(graph, schedule) and schedule.tensor(source).rows < graph.tensors[source].rows
    pooled = _tensor(graph, POOLED)
    assert pooled not in _block_held(graph, schedule)  # its sums build over every step: all channels held
    run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
    assert run.roles[pool] == SLICE
    _runs_as_priced(graph, schedule, values, cost, group)


def test_a_global_poolings_output_held_a_block_at_a_time_drops_the_other_blocks_sums():
    # What BRR priced before it held a global pooling's output whole: the run finds the sums gone.
    graph, values = _prepared("efficientnet_b0", 112)
    _cost, _group, schedule = _schedule(graph, STEM, 64)
    pooled = _tensor(graph, POOLED)
    use = schedule.tensor(pooled)
    block = use.elements * 16 // graph.tensors[pooled].shape[1]
    old = replace(schedule, tensors=tuple(replace(u, elements=block) if u.tensor == pooled else u
                                          for u in schedule.tensors))
    outcome = simulate_alone(graph, old, values, None)
    assert outcome.finding is not None and "lacks the sums" in outcome.finding and POOLED in outcome.finding


CLASSIFIER = ("/Flatten", "/classifier/classifier.0/Gemm", "/classifier/classifier.1/HardSwish",
              "/classifier/classifier.3/Gemm")


@pytest.mark.parametrize("first", [0, 1])
def test_the_classifiers_rank_2_tensors_run_a_block_at_a_time(first):
    # with the Flatten: the partial Gemm's output leaves its HardSwish a block at a time for the full Gemm;
    # without it: the Flatten's output comes from DRAM a block at a time, and the last Gemm writes blocks
    graph, values = _prepared("mobilenet_v3_small", 112)
    cost, group, schedule = _schedule(graph, CLASSIFIER[first:], 256)
    held = _block_held(graph, schedule)
    assert held and all(len(graph.tensors[t].shape) == 2 for t in held)
    if first:
        assert _tensor(graph, "/Flatten_output_0") in held and schedule.tensor(_tensor(graph, "output")).dram_writes
    run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
    gemms = [v for v in schedule.operators if graph.nodes[v].op_type == "Gemm"]
    assert {run.roles[v] for v in gemms} == {ACCUMULATE, PRODUCE}
    modes = cost.modes(group, schedule.params["entry"] == "full")
    assert all((run.roles[v] == ACCUMULATE) == modes[v] for v in gemms)
    _runs_as_priced(graph, schedule, values, cost, group)


TAIL = ("/avgpool/GlobalAveragePool", "/Flatten", "/fc/Gemm")


def test_a_partial_gemm_writes_its_output_a_block_at_a_time():
    graph, values = _prepared("resnet18", 112)
    cost, group, schedule = _schedule(graph, TAIL, 64)
    logits = graph.nodes[graph.node_index("/fc/Gemm")].outputs[0]
    assert logits in _block_held(graph, schedule) and schedule.tensor(logits).dram_writes
    _runs_as_priced(graph, schedule, values, cost, group)


ATTENTION_OUT = ("/layers.0/attention_out/MatMul", "/layers.0/attention_out/Add", "/layers.0/Add")


def test_bert_runs_as_priced_and_a_schedule_blocking_its_tokens_reads_the_weights_once_per_block():
    # A rank-3 tensor's axis 1 is bert_encoder's 128 tokens. BRR holds such tensors whole, and the group runs as
    # priced. Held a block of tokens at a time (what BRR priced before), the MatMul makes block j from block j
    # of its input with every weight (they contract the last axis): the run computes onnxruntime's values
    # within the buffer, but streams the weights once per block where that price read them once.
    from tests.simulate.conftest import prepared

    graph, values = prepared("bert_encoder")
    cost, group, schedule = _schedule(graph, ATTENTION_OUT, 256)
    matmul = graph.node_index("/layers.0/attention_out/MatMul")
    source = graph.nodes[matmul].inputs[0]
    assert len(graph.tensors[source].shape) == 3 and not _block_held(graph, schedule)
    _runs_as_priced(graph, schedule, values, cost, group)

    tokens = graph.tensors[source].shape[1]
    blocked = replace(schedule, tensors=tuple(replace(u, elements=u.elements * 16 // tokens) if u.tensor == source
                                              else u for u in schedule.tensors),
                      params={**schedule.params, "weights": "streamed", "weight_block": 4096})
    run = TileRun(graph, blocked, values, {}, OnChip(None), DramTraffic())
    assert run.roles[matmul] == SLICE and matmul in run.weights_per_block
    blocks = tokens // run.block[source]
    assert blocks == 8
    outcome = simulate_alone(graph, blocked, values, None)
    assert outcome.finding is None and outcome.skipped is None
    assert outcome.max_error <= TOLERANCE and outcome.peak_on_chip <= blocked.on_chip
    weights = graph.nodes[matmul].weight_numel
    assert outcome.simulated_dram == blocked.dram + (blocks - 1) * weights



def _vgg16_range(graph, first: str, last: str) -> tuple[str, ...]:
    """The names of vgg16's operators from ``first`` to ``last`` (a chain: every such range is a group)."""
    start, stop = graph.node_index(first), graph.node_index(last)
    return tuple(graph.nodes[v].name for v in range(start, stop + 1))


@pytest.mark.slow
def test_vgg16s_flatten_of_a_7x7_map_passes_a_channel_block_on_a_feature_block_at_a_time():
    # BRR holds the 7x7 map a block of 16 channels at a time (784 features) and the Flatten's output a block of
    # 16 features, which the first classifier Gemm sums into all 4,096 outputs: 49 feature blocks per channel block
    graph, values = _prepared("vgg16", 224)
    flattened = _tensor(graph, "/Flatten_output_0")
    gemm = graph.node_index("/classifier/classifier.0/Gemm")
    for kb, last in ((256, "/classifier/classifier.6/Gemm"), (1024, "/classifier/classifier.0/Gemm")):
        cost, group, schedule = _schedule(graph, _vgg16_range(graph, "/features/features.28/Conv", last), kb)
        pooled = _tensor(graph, "/avgpool/AveragePool_output_0")
        assert {pooled, flattened} <= _block_held(graph, schedule) and schedule.tensor(flattened).elements == 16
        run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
        assert run.roles[graph.node_index("/Flatten")] == FEATURE_BLOCKS and run.roles[gemm] == ACCUMULATE
        _runs_as_priced(graph, schedule, values, cost, group)
    # at 64KB the map comes a row at a time too (14 tiles): each row of a channel block is 112 features, and the
    # Gemm reads the weight rows of those features only, so all its weights once over the 7 tiles it sums in
    cost, group, schedule = _schedule(graph, _vgg16_range(graph, "/features/features.27/Relu",
                                                          "/classifier/classifier.4/Relu"), 64)
    assert schedule.params["tiles"] > 1 and schedule.tensor(_tensor(graph, "/avgpool/AveragePool_output_0")).rows == 1
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    chip, traffic = OnChip(cost.buffer_bytes - 1), DramTraffic()
    run = TileRun(graph, schedule, values, dram, chip, traffic)
    run.run()
    assert traffic.reads["weights /classifier/classifier.0/Gemm"] == next(w.dram_reads for w in schedule.weights
                                                                          if w.operator == gemm)
    assert run.peaks[flattened] == 16 and not run.excess() and chip.peak <= schedule.on_chip
    written = _tensor(graph, "/classifier/classifier.4/Relu_output_0")
    assert relative_error(dram[written], values.tensor(written)) <= TOLERANCE
