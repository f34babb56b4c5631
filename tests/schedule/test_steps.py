"""The step rule of row-tile schedules (:mod:`fuseplan.schedule.steps`) on row counts alone."""

from __future__ import annotations

import pytest

from fuseplan import load_graph, make_cost_model
from fuseplan.schedule.steps import RowSteps, StepStall


def _rule(graph, schedule):
    uses = {u.tensor: (u.holding, u.rows, u.elements) for u in schedule.tensors}
    return RowSteps(graph, schedule.operators, uses, int(schedule.params["rows_per_tile"]),
                    schedule.params["weights"] == "resident")


@pytest.fixture(scope="module")
def resnet50_fill():
    """resnet50 at 112x112, ``layer2.0.conv3`` to ``layer2.1`` at 64KB: BRR's row tiles of 3 rows of the
    downsampling's 28-row input, 10 of them, weights streamed."""
    plain = load_graph("resnet50")
    (name, shape), = plain.input_shapes.items()
    graph = load_graph("resnet50", input_shapes={name: (*shape[:2], 112, 112)})
    cost = make_cost_model("brr", graph, 64 * 1024)
    names = [n.name for n in graph.nodes]
    first = names.index(next(n for n in names if "layer2.0/conv3" in n))
    last = max(i for i, n in enumerate(names) if "layer2/layer2.1/" in n)
    schedule = cost.schedule(frozenset(range(first, last + 1)))
    assert schedule.kind == "row-tiles" and schedule.params["weights"] == "streamed"
    assert schedule.params["rows_per_tile"] == 3 and schedule.params["tiles"] == 10
    return graph, schedule, names.index(next(n for n in names if "layer2.1/conv2" in n))


def test_operators_make_their_rows_in_steps_that_are_not_the_priced_tiles(resnet50_fill):
    """The operators make their 14 rows in 7 steps, those from the 3x3 convolution on in 8 (its window lags
    a row behind): the steps in which each reads its streamed weights, where the price reads them once per
    tile, 10 times (pipeline fill, not priced)."""
    graph, schedule, conv2 = resnet50_fill
    steps = _rule(graph, schedule).count()
    for v in schedule.operators:
        assert graph.tensors[graph.nodes[v].outputs[0]].rows == 14
        assert steps[v] == tuple(range(8 if v >= conv2 else 7))
    for use in schedule.weights:
        assert use.dram_reads == graph.nodes[use.operator].weight_numel * schedule.params["tiles"]


def test_a_buffer_too_short_for_a_window_stalls_the_rule(resnet50_fill):
    """Held one row at a time (in one-row tiles), the input of ``layer2.1.conv2`` cannot give its 3x3 window
    the three rows it reads at once: the convolution makes no row, the operators before it stop when their
    buffers fill, and the rule stops with the first operator left waiting and its row."""
    graph, schedule, conv2 = resnet50_fill
    window_input = graph.nodes[conv2].inputs[0]
    uses = {u.tensor: (u.holding, 1 if u.tensor == window_input else u.rows, u.elements) for u in schedule.tensors}
    rule = RowSteps(graph, schedule.operators, uses, 1, False)
    with pytest.raises(StepStall) as stalled:
        rule.count()
    assert rule.emitted[conv2] == 0 and 0 < rule.made[window_input] < 3
    waiting = stalled.value.operator
    assert waiting < conv2 and rule.emitted[waiting] == stalled.value.row < 14
    assert graph.nodes[waiting].name in str(stalled.value)
