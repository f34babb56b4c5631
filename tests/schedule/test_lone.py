"""The lone-operator mapper: riders, fit, exact minimality over every blocking of small layers, the zoo."""

from __future__ import annotations

import itertools

import pytest

from fuseplan import zoo
from fuseplan.cost.streaming import in_place_operators
from fuseplan.graph import load_graph
from fuseplan.schedule import Schedule
from fuseplan.cost import LBDFCostModel
from fuseplan.schedule.bounds import io_lower_bound
from fuseplan.schedule.lone import (
    CHUNKS, CONV_BLOCKS, CONV_ORDERS, MATMUL_BLOCKS, MATMUL_ORDERS, channel_blocks, conv_cost, conv_geometry,
    epilogue, epilogue_buffers, lone_schedule, matmul_cost, matmul_geometry, riders,
)
from tests.schedule import layers

BUFFERS = (64 * 1024, 256 * 1024, 1024 * 1024)


@pytest.fixture(scope="module")
def vgg16():
    return load_graph("vgg16")


@pytest.fixture(scope="module")
def bert():
    return load_graph("bert_encoder")


def _riders(graph, v):
    return riders(graph, v, in_place_operators(graph))


class TestRiders:
    def test_a_convolutions_relu_rides(self, vgg16):
        v = vgg16.node_index("/features/features.19/Conv")
        assert [vgg16.nodes[u].op_type for u in _riders(vgg16, v)] == ["Relu"]

    def test_a_bias_add_rides_a_matmul_and_stops_at_a_reshape(self, bert):
        v = bert.node_index("/layers.0/query/MatMul")
        assert [bert.nodes[u].name for u in _riders(bert, v)] == ["/layers.0/query/Add"]

    def test_two_readers_stop_the_chain(self):
        graph = load_graph("efficientnet_b0")  # a convolution read by a Sigmoid and by the Mul after it
        v = next(n.index for n in graph.nodes if n.op_type == "Conv"
                 and len(graph.tensors[n.outputs[0]].consumers) == 2)
        assert _riders(graph, v) == ()

    def test_binary_operators_do_not_ride(self, bert):
        v = bert.node_index("/layers.0/Erf")  # Erf -> Add(constant 1) rides; -> Mul of two tensors does not
        assert [bert.nodes[u].op_type for u in _riders(bert, v)] == ["Add"]

    def test_riders_move_nothing_of_their_own(self, vgg16):
        v = vgg16.node_index("/features/features.19/Conv")
        alone = lone_schedule(vgg16, v, (), 65536, 1)
        ridden = lone_schedule(vgg16, v, _riders(vgg16, v), 65536, 1)
        assert ridden.dram == alone.dram and ridden.on_chip == alone.on_chip
        assert ridden.operators == (v, *_riders(vgg16, v))
        conv_out = vgg16.nodes[v].outputs[0]
        assert ridden.tensor(conv_out).holding == "in-place" and ridden.tensor(conv_out).dram_writes == 0


def test_vgg16_features_19_at_64kb_moves_far_less_than_one_block_of_channels_at_a_time(vgg16):
    v = vgg16.node_index("/features/features.19/Conv")
    schedule = lone_schedule(vgg16, v, _riders(vgg16, v), 64 * 1024, 1)
    assert LBDFCostModel(vgg16, 64 * 1024, 1).alone_dram(v) == schedule.dram  # LBDF runs it so
    assert schedule.kind == CONV_BLOCKS and schedule.on_chip < 64 * 1024
    # Blocks of output channels that each re-read the input: with a whole output row of all 512 channels on
    # chip, 512 one-channel blocks (208,282,112 bytes, LBDF's price before it used this mapper); holding only
    # their own channels' rows, 128 blocks (about 54 MB). The input alone is 401,408 elements.
    input_numel = vgg16.tensors[vgg16.nodes[v].inputs[0]].numel
    assert 128 * input_numel > 51_000_000 and schedule.dram < 54_000_000 and schedule.dram * 30 < 208_282_112
    assert schedule.dram >= io_lower_bound(vgg16, v, 64 * 1024, 1).elements


def test_an_element_wise_operator_fits_while_one_line_does(bert):
    v = bert.node_index("/layers.0/Softmax")  # lines of 128
    line = bert.tensors[bert.nodes[v].outputs[0]].shape[-1]
    fits = lone_schedule(bert, v, (), line + 1, 1)
    assert fits is not None and fits.kind == CHUNKS and fits.on_chip == line
    assert fits.dram == 2 * bert.tensors[bert.nodes[v].inputs[0]].numel
    assert lone_schedule(bert, v, (), line, 1) is None  # the rule is strict: on chip < buffer


def _check(graph, schedule, buffer, b=1):
    assert schedule is not None
    assert b * schedule.on_chip < buffer
    assert schedule.dram >= io_lower_bound(graph, schedule.operators[0], buffer, b, schedule.operators[1:]).compulsory
    assert Schedule.from_json(schedule.to_json()) == schedule


@pytest.mark.parametrize("name", ["vgg16", "mobilenet_v2", "bert_encoder"])
def test_every_operator_of_a_few_models_gets_a_schedule_at_64kb(name):
    graph = load_graph(name)
    for v in range(len(graph.nodes)):
        _check(graph, lone_schedule(graph, v, _riders(graph, v), 64 * 1024, 1), 64 * 1024)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.names() + zoo.transformer_names())
def test_every_operator_of_the_zoo_gets_a_schedule(name):
    graph = load_graph(name)
    for v, buffer in itertools.product(range(len(graph.nodes)), BUFFERS):
        _check(graph, lone_schedule(graph, v, _riders(graph, v), buffer, 1), buffer)
    # two bytes an element: half the elements fit
    for v in range(len(graph.nodes)):
        _check(graph, lone_schedule(graph, v, _riders(graph, v), 256 * 1024, 2), 256 * 1024, 2)


# -- the search is the minimum over every blocking ----------------------------------------------------------
SMALL_CONVS = [
    dict(c_in=6, c_out=10, size=9, kernel=3, pad=1),
    dict(c_in=5, c_out=7, size=11, kernel=3, stride=2, pad=1),
    dict(c_in=8, c_out=6, size=10, kernel=1, stride=2, pad=0),
    dict(c_in=4, c_out=6, size=9, kernel=3, pad=2, dilation=2),
    dict(c_in=3, c_out=4, size=5, kernel=3, pad=6, dilation=6),  # outer taps only ever read padding
    dict(c_in=8, c_out=12, size=8, kernel=3, pad=1, groups=4),
    dict(c_in=6, c_out=6, size=9, kernel=3, pad=1, groups=6, bias=False),
    dict(c_in=6, c_out=12, size=9, kernel=5, stride=2, pad=2, groups=6),
    dict(c_in=4, c_out=6, size=7, kernel=3, pad=1, batch=3),  # weights stay across images only if all held
    dict(c_in=4, c_out=8, size=7, kernel=3, pad=1, groups=2, batch=2),
]


def _conv_blockings(g):
    ks = [k for k in range(1, g.c_out + 1) if k < g.cout_group or k % g.cout_group == 0]
    for order, k in itertools.product(CONV_ORDERS, ks):
        block_in = channel_blocks(g, k)[1]
        for c, h in itertools.product(range(1, block_in + 1), range(1, g.h_out + 1)):
            cost = conv_cost(g, order, k, c, h)
            if cost is not None:
                yield cost


@pytest.mark.parametrize("spec", SMALL_CONVS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_the_conv_search_finds_the_least_dram_of_every_blocking(spec):
    _, graph, _ = layers.conv(**spec)
    g = conv_geometry(graph, 0)
    priced = [cost.totals(g) for cost in _conv_blockings(g)]
    for room in sorted({on_chip for _, on_chip in priced})[::3]:
        schedule = lone_schedule(graph, 0, (), room + 1, 1)
        assert schedule is not None and schedule.kind == CONV_BLOCKS
        # the least DRAM of any blocking that fits (in its fewest steps: possibly more on chip than the least)
        assert schedule.dram == min(d for d, o in priced if o <= room) and schedule.on_chip <= room
    assert lone_schedule(graph, 0, (), min(o for _, o in priced), 1) is None


@pytest.mark.parametrize("spec", [dict(m=6, k=5, n=7), dict(m=1, k=9, n=8),
                                  dict(m=5, k=4, n=6, batch=(3,), weight=False)])
def test_the_matmul_search_finds_the_least_dram_of_every_blocking(spec):
    _, graph, _ = layers.matmul(**spec)
    g = matmul_geometry(graph, 0)
    priced = [matmul_cost(g, order, m, n, kk).totals(g) for order in MATMUL_ORDERS
              for m, n, kk in itertools.product(range(1, g.m + 1), range(1, g.n + 1), range(1, g.k + 1))]
    for room in sorted({on_chip for _, on_chip in priced})[::2]:
        schedule = lone_schedule(graph, 0, (), room + 1, 1)
        assert schedule is not None and schedule.kind == MATMUL_BLOCKS
        # the least DRAM of any blocking that fits (in its fewest steps: possibly more on chip than the least)
        assert schedule.dram == min(d for d, o in priced if o <= room) and schedule.on_chip <= room


def test_a_dilated_convolution_reads_only_the_taps_off_the_padding():
    _, graph, weights = layers.conv(c_in=3, c_out=4, size=5, kernel=3, pad=6, dilation=6)
    g = conv_geometry(graph, 0)
    assert (g.taps_h, g.taps_w) == (1, 1)
    schedule = lone_schedule(graph, 0, (), 1 << 20, 1)
    assert schedule.weights[0].dram_reads == 4 * 3 + 4  # the centre taps and the bias


def test_a_strided_1x1_convolution_reads_only_the_rows_and_columns_it_uses():
    _, graph, _ = layers.conv(c_in=8, c_out=6, size=10, kernel=1, stride=2, pad=0)
    schedule = lone_schedule(graph, 0, (), 1 << 20, 1)
    assert schedule.tensor(graph.nodes[0].inputs[0]).dram_reads == 8 * 5 * 5


@pytest.mark.slow
def test_the_conv_search_is_exact_on_random_layers():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @st.composite
    def convs(draw):
        groups = draw(st.sampled_from([1, 1, 2, 3]))
        c_in = groups * draw(st.integers(1, 4))
        c_out = groups * draw(st.integers(1, 4))
        kernel = draw(st.integers(1, 5))
        dilation = draw(st.integers(1, 3))
        stride = draw(st.integers(1, 3))
        pad = draw(st.integers(0, (kernel - 1) * dilation + 1))
        least = max(1, (kernel - 1) * dilation + 1 - 2 * pad)  # one output row at least
        size = draw(st.integers(least, max(least, 12)))
        return dict(c_in=c_in, c_out=c_out, size=size, kernel=kernel, stride=stride, pad=pad, dilation=dilation,
                    groups=groups, bias=draw(st.booleans()))

    @settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(convs(), st.floats(0, 1))
    def check(spec, where):
        _, graph, _ = layers.conv(**spec)
        g = conv_geometry(graph, 0)
        priced = [cost.totals(g) for cost in _conv_blockings(g)]
        rooms = sorted({on_chip for _, on_chip in priced})
        room = rooms[int(where * (len(rooms) - 1))]
        schedule = lone_schedule(graph, 0, (), room + 1, 1)
        assert schedule.dram == min(d for d, o in priced if o <= room) and schedule.on_chip <= room, spec

    check()


@pytest.mark.slow
def test_the_matmul_search_is_exact_on_random_products():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.booleans(), st.floats(0, 1))
    def check(m, k, n, weight, where):
        _, graph, _ = layers.matmul(m=m, k=k, n=n, batch=() if weight else (2,), weight=weight)
        g = matmul_geometry(graph, 0)
        priced = [matmul_cost(g, order, bm, bn, bk).totals(g) for order in MATMUL_ORDERS
                  for bm, bn, bk in itertools.product(range(1, m + 1), range(1, n + 1), range(1, k + 1))]
        rooms = sorted({on_chip for _, on_chip in priced})
        room = rooms[int(where * (len(rooms) - 1))]
        schedule = lone_schedule(graph, 0, (), room + 1, 1)
        # the least DRAM of any blocking that fits (in its fewest steps: possibly more on chip than the least)
        assert schedule.dram == min(d for d, o in priced if o <= room) and schedule.on_chip <= room

    check()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "efficientnet_b0", "bert_encoder"])
def test_an_epilogue_extends_the_in_place_chain(name):
    """Where an operator's in-place chain is all its output meets, the epilogue is that chain, in one block;
    otherwise it goes on through the graph on the output and holds more blocks only where a branch rejoins."""
    graph = load_graph(name)
    in_place = in_place_operators(graph)
    branched = 0
    for v in range(len(graph.nodes)):
        chain, carried = riders(graph, v, in_place), epilogue(graph, v)
        assert carried[:len(chain)] == chain
        buffers = epilogue_buffers(graph, v, carried)
        # one block per tensor alive at once: a chain overwrites its input at every step
        if all(len(graph.nodes[u].inputs) == 1 for u in carried):
            assert buffers == 1
        else:
            branched += buffers > 1
    assert (branched > 0) == (name in ("efficientnet_b0", "bert_encoder"))  # Swish, GELU
