"""I/O lower bounds: exact compulsory traffic, the segment bound's formula, and no schedule beating either."""

from __future__ import annotations

import itertools
from math import sqrt

import pytest

from fuseplan import zoo
from fuseplan.cost.streaming import in_place_operators
from fuseplan.graph import load_graph
from fuseplan.schedule.bounds import io_lower_bound
from fuseplan.schedule.lone import conv_geometry, lone_schedule, matmul_cost, matmul_geometry, riders
from tests.schedule import layers
from tests.schedule.test_lone import MATMUL_ORDERS, SMALL_CONVS, _conv_blockings

BUFFERS = (64 * 1024, 128 * 1024, 256 * 1024, 1024 * 1024)


def _never_beaten(graph, buffers=BUFFERS):
    flags = in_place_operators(graph)
    for v, buffer in itertools.product(range(len(graph.nodes)), buffers):
        ride = riders(graph, v, flags)
        schedule = lone_schedule(graph, v, ride, buffer, 1)
        bound = io_lower_bound(graph, v, buffer, 1, ride)
        assert schedule.dram >= bound.elements, (graph.nodes[v].name, buffer, schedule.dram, bound)


@pytest.mark.parametrize("name", ["vgg16", "bert_encoder"])
def test_no_schedule_of_the_mapper_beats_the_bound(name):
    _never_beaten(load_graph(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.names())
def test_no_schedule_of_the_mapper_beats_the_bound_on_the_zoo(name):
    _never_beaten(load_graph(name))


@pytest.mark.parametrize("spec", SMALL_CONVS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_no_blocking_of_a_small_convolution_beats_the_bound(spec):
    _, graph, _ = layers.conv(**spec)
    g = conv_geometry(graph, 0)
    for cost in _conv_blockings(g):
        dram, on_chip = cost.totals(g)
        assert dram >= io_lower_bound(graph, 0, on_chip + 1, 1).elements, cost


def test_no_blocking_of_a_matrix_product_beats_the_bound():
    _, graph, _ = layers.matmul(m=24, k=20, n=28)
    g = matmul_geometry(graph, 0)
    binding = 0
    for order, m, n, kk in itertools.product(MATMUL_ORDERS, range(1, 25, 3), range(1, 29, 3), (1, 4, 20)):
        cost = matmul_cost(g, order, m, n, kk)
        dram, on_chip = cost.totals(g)
        bound = io_lower_bound(graph, 0, on_chip + 1, 1)
        assert dram >= bound.elements, cost
        binding += bound.communication > bound.compulsory
    assert binding  # small buffers make the segment bound the larger one


def test_the_compulsory_traffic_counts_what_some_output_needs():
    _, graph, _ = layers.conv(c_in=8, c_out=6, size=10, kernel=1, stride=2, pad=0)
    assert io_lower_bound(graph, 0, 1 << 20, 1).compulsory == 8 * 5 * 5 + 6 * 8 + 6 + 6 * 5 * 5
    _, graph, _ = layers.conv(c_in=3, c_out=4, size=5, kernel=3, pad=6, dilation=6, bias=False)
    assert io_lower_bound(graph, 0, 1 << 20, 1).compulsory == 3 * 25 + 4 * 3 + 4 * 25  # the centre taps only
    _, graph, _ = layers.pool("MaxPool", channels=4, size=9, kernel=3, stride=2)
    assert io_lower_bound(graph, 0, 1 << 20, 1) .compulsory == 4 * 81 + 4 * 16


def test_the_segment_bound_of_a_matrix_product():
    _, graph, _ = layers.matmul(m=512, k=512, n=512)
    bound = io_lower_bound(graph, 0, 4096, 1)
    assert bound.communication == pytest.approx(sqrt(2) * 512 ** 3 / 64 - 4 * 4096, abs=1)
    assert bound.source == "segments (matrix product)" and bound.elements == bound.communication
    assert io_lower_bound(graph, 0, 4096 * 2, 2) == bound  # the buffer in elements is what counts


def test_the_segment_bound_of_a_convolution_divides_by_the_window_reuse():
    # 3x3, stride 1: an input element is 9 entries of the im2col matrix; stride 2: 4; 1x1: 1
    for kernel, stride, reuse in ((3, 1, 9), (3, 2, 4), (1, 1, 1)):
        _, graph, _ = layers.conv(c_in=64, c_out=64, size=32, kernel=kernel, stride=stride, pad=0, bias=False)
        g = conv_geometry(graph, 0)
        macs = 64 * 64 * g.h_out * g.w_out * kernel * kernel
        expected = sqrt(2) * macs / sqrt(reuse * 1024) - 4 * 1024
        assert io_lower_bound(graph, 0, 1024, 1).communication == pytest.approx(expected, abs=1)


def test_the_segment_bound_is_the_binding_one_for_large_convolutions_in_small_buffers():
    graph = load_graph("vgg16")
    bound = io_lower_bound(graph, graph.node_index("/features/features.12/Conv"), 64 * 1024, 1)
    assert bound.communication > bound.compulsory and bound.source.startswith("segments (convolution")
