"""An unfolded BatchNormalization and a PRelu riding on convolutions (the zoo folds BN away): their constants are
one value per channel, which must broadcast along axis 1 in every executor, a channel block of them where a
block loop runs them. Each schedule runs as priced: simulated DRAM equal to ``F_D``, peak within ``F_beta``,
values within 1e-4 of onnxruntime."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from fuseplan.cost import make_cost_model
from fuseplan.schedule.lone import lone_schedule
from fuseplan.simulate.kernels import per_channel
from fuseplan.simulate.memory import DramTraffic, OnChip
from fuseplan.simulate.run import TOLERANCE, simulate_alone
from fuseplan.simulate.tiles import SLICE, TileRun
from tests.builders import conv_bn_prelu

pytest.importorskip("onnxruntime", reason="the simulator compares with onnxruntime (the rewrite extra)")


@lru_cache(maxsize=None)
def _prepared():
    from fuseplan.graph.onnx_import import graph_from_model, prepare_model
    from fuseplan.simulate.values import ModelValues

    model, _ = prepare_model(conv_bn_prelu(), "conv_bn_prelu")
    graph = graph_from_model(model, "conv_bn_prelu", passes=[])
    return graph, ModelValues(model, graph, seed=0)


def _runs_as_priced(graph, values, cost, schedule, group=None):
    outcome = simulate_alone(graph, schedule, values, cost.buffer_bytes - 1)
    assert outcome.finding is None and outcome.skipped is None, outcome
    if group is not None:
        assert schedule.dram == cost.evaluate(group).dram
    assert outcome.simulated_dram == schedule.dram
    assert outcome.peak_on_chip <= schedule.on_chip
    assert outcome.max_error <= TOLERANCE
    return outcome


def _group(graph, *names):
    return frozenset(graph.node_index(name) for name in names)


def test_batch_normalizations_constants_lie_along_the_channels():
    scale = np.arange(3, dtype=np.float32)
    assert per_channel("BatchNormalization", scale, 4).shape == (3, 1, 1)
    assert per_channel("BatchNormalization", scale, 2).shape == (3,)
    assert per_channel("PRelu", scale, 4) is scale  # numpy's own broadcasting is ONNX's here


@pytest.mark.parametrize("scheme, kb, names, kind", [
    ("lbdf", 16, ("conv1", "bn1", "prelu1", "conv2", "bn2", "prelu2"), "stream"),
    ("brr", 8, ("conv2", "bn2", "prelu2", "conv3"), "row-tiles"),
    ("brr", 2, ("conv1", "bn1", "prelu1"), "conv-blocks"),
])
def test_a_group_with_bn_and_prelu_riding_on_a_convolution_runs_as_priced(scheme, kb, names, kind):
    graph, values = _prepared()
    cost = make_cost_model(scheme, graph, kb * 1024)
    group = _group(graph, *names)
    schedule = cost.schedule(group)
    assert schedule.kind == kind
    if kind == "row-tiles":  # the riders run a block of channels at a time, their constants cut to the block
        p2 = graph.nodes[graph.node_index("prelu2")].outputs[0]
        use = schedule.tensor(p2)
        assert 0 < use.elements < use.rows * graph.tensors[p2].row_numel
        run = TileRun(graph, schedule, values, {}, OnChip(None), DramTraffic())
        assert run.roles[graph.node_index("bn2")] == run.roles[graph.node_index("prelu2")] == SLICE
    _runs_as_priced(graph, values, cost, schedule, group)


def test_convolutions_run_alone_carry_bn_and_prelu_and_so_does_a_batch_normalization():
    graph, values = _prepared()
    cost = make_cost_model("lbdf", graph, 2 * 1024)
    conv1, bn1, prelu1 = (graph.node_index(name) for name in ("conv1", "bn1", "prelu1"))
    assert cost.alone_schedule(conv1).operators == (conv1, bn1, prelu1)
    for v in (v for v in cost.unfuseable if v not in cost.riding):
        _runs_as_priced(graph, values, cost, cost.alone_schedule(v))
    # a BatchNormalization run alone, line by line, with its PRelu
    schedule = lone_schedule(graph, bn1, (prelu1,), 2 * 1024, 1)
    assert schedule.kind == "chunks" and schedule.operators == (bn1, prelu1)
    _runs_as_priced(graph, values, cost, schedule)
