"""The tile executor's steps are the step rule's (:mod:`fuseplan.schedule.steps`): the loop nest run on arrays
makes each operator's rows in the steps the rule finds on row counts alone, and streams its weights once per
such step; where those steps are not BRR's tiles (pipeline fill), that and nothing else is what a schedule
moves other than its price."""

from __future__ import annotations

from functools import lru_cache

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.graph.onnx_import import load_prepared
from fuseplan.schedule.steps import RowSteps, executed_dram
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.run import TOLERANCE, simulate_alone
from fuseplan.simulate.tiles import TileRun
from fuseplan.simulate.values import ModelValues
from tests.simulate.test_stream import _random_groups

# resnet18's second residual block with layer2's downsampling convolution, a group of a BRR plan at 64KB and
# 96x96: 2 tiles of 13 rows, the block's output held a block of channels at a time (its reader, the
# downsampling, sums the blocks), written to DRAM for layer2.0.conv1
BLOCK_AND_DOWNSAMPLE = ("/layer1/layer1.1/conv1/Conv", "/layer1/layer1.1/relu/Relu", "/layer1/layer1.1/conv2/Conv",
                        "/layer1/layer1.1/Add", "/layer1/layer1.1/relu_1/Relu",
                        "/layer2/layer2.0/downsample/downsample.0/Conv")


@lru_cache(maxsize=None)
def _at_96(name: str):
    prepared, graph = load_prepared(name)
    (input_name, shape), = graph.input_shapes.items()
    prepared, graph = load_prepared(name, input_shapes={input_name: (*shape[:2], 96, 96)})
    return graph, ModelValues(prepared, graph, seed=0)


def _run(graph, values, schedule) -> tuple[TileRun, DramTraffic]:
    dram = {u.tensor: values.tensor(u.tensor) for u in schedule.tensors if u.dram_reads}
    traffic = DramTraffic()
    run = TileRun(graph, schedule, values, dram, OnChip(None), traffic)
    run.run()
    return run, traffic


def _counted(graph, schedule) -> dict[int, tuple[int, ...]]:
    uses = {u.tensor: (u.holding, u.rows, u.elements) for u in schedule.tensors}
    return RowSteps(graph, schedule.operators, uses, int(schedule.params["rows_per_tile"]),
                    schedule.params["weights"] == "resident").count()


def _random_row_tile_schedules(graph, cost, count: int, seed: int):
    found = []
    for group in _random_groups(graph, cost, count * 4, seed):
        schedule = cost.schedule(group)
        if schedule.kind == "row-tiles" and not any(v in cost.unfuseable for v in group) and schedule not in found:
            found.append(schedule)
    return found[:count]


def test_a_reader_that_finishes_in_a_step_lets_its_block_held_input_be_made_to_the_end_in_it():
    """The downsampling (1x1, stride 2) reads rows 0, 2, ..., 22 of the block's 24-row output: after its
    last row in step 1 it needs nothing more, so the block's last row is made (and written to DRAM) in that
    step too, and every operator makes its rows in the 2 tiles, as priced (when the reader still bounded the
    rows made, layer1.1.conv2 made its last row in a third step and read its 36,928 weights a third time)."""
    graph, values = _at_96("resnet18")
    cost = make_cost_model("brr", graph, 64 * 1024)
    index = {node.name: node.index for node in graph.nodes}
    group = frozenset(index[name] for name in BLOCK_AND_DOWNSAMPLE)
    schedule = cost.schedule(group)
    assert schedule.kind == "row-tiles" and schedule.params["weights"] == "streamed"
    assert schedule.params["tiles"] == 2 and schedule.params["entry"] == "full"
    block_output = graph.nodes[index["/layer1/layer1.1/relu_1/Relu"]].outputs[0]
    run, traffic = _run(graph, values, schedule)
    assert block_output in run.block and block_output in run.written
    assert all(steps == [0, 1] for steps in run.made_in.values())
    assert traffic.total == schedule.dram == cost.evaluate(group).dram == 256_512
    outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    assert outcome.agrees and outcome.max_error <= TOLERANCE


@pytest.mark.parametrize("model, kb", [("resnet18", 64),
                                       pytest.param("efficientnet_b0", 64, marks=pytest.mark.slow),
                                       pytest.param("resnet50", 64, marks=pytest.mark.slow),
                                       pytest.param("mobilenet_v2", 256, marks=pytest.mark.slow)])
def test_the_loop_nest_makes_rows_in_the_rules_steps_and_reads_streamed_weights_once_per_step(model, kb):
    """On random row-tile groups: each operator makes its rows in the steps the rule counts; a streamed
    operator's weights are read once per such step; every tensor moves what the price says. So what a
    schedule moves other than priced is its weight reads in steps that are not the tiles."""
    graph, values = _at_96(model)
    cost = make_cost_model("brr", graph, kb * 1024)
    schedules = _random_row_tile_schedules(graph, cost, 12, seed=1)
    other_steps = 0
    for schedule in schedules:
        run, traffic = _run(graph, values, schedule)
        assert {v: tuple(steps) for v, steps in run.made_in.items()} == _counted(graph, schedule)
        priced_weights = {graph.nodes[w.operator].name: w.dram_reads for w in schedule.weights}
        for v, steps in run.made_in.items():
            node = graph.nodes[v]
            if node.weight_numel and schedule.params["weights"] == "streamed":
                assert traffic.reads[f"weights {node.name}"] == node.weight_numel * len(steps)
                other_steps += traffic.reads[f"weights {node.name}"] != priced_weights[node.name]
        moved = sum(n for what, n in traffic.reads.items() if what.startswith("tensor ")) + sum(traffic.writes.values())
        priced = sum(u.dram_reads + u.dram_writes for u in schedule.tensors)
        assert moved == priced
        assert traffic.total - schedule.dram == sum(traffic.reads[f"weights {name}"] - reads
                                                    for name, reads in priced_weights.items())
        assert traffic.total == executed_dram(graph, schedule)  # what plan.json and simulate report as run
    assert len(schedules) >= 8
    if model == "resnet18":
        assert other_steps  # the fill is there to see: some operator reads its weights in other steps than tiles
