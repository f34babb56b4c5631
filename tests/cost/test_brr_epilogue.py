"""BRR runs an operator with its epilogue (GELU, Swish) as the lone-operator mapper does, not only with an
in-place chain: such a group is priced by the mapper's schedule where that moves less than row tiles."""

from __future__ import annotations

import pytest

from fuseplan.cost import BRRCostModel, LBDFCostModel
from fuseplan.graph import load_graph
from fuseplan.plan.problem import FusionProblem
from fuseplan.schedule.lone import epilogue, lone_schedule, riders
from fuseplan.search import make_search, minimize
from fuseplan.split import make_splitter

KB = 1024


@pytest.fixture(scope="module")
def bert():
    return load_graph("bert_encoder")


def test_a_matmul_with_its_gelu_runs_alone_where_row_tiles_do_not_fit(bert):
    v = bert.node_index("/layers.0/intermediate/MatMul")
    carried = epilogue(bert, v)
    assert [bert.nodes[u].op_type for u in carried] == ["Add", "Div", "Erf", "Add", "Mul", "Mul"]
    cost = BRRCostModel(bert, 256 * KB)
    group = frozenset((v, *carried))
    # a 128 x 4096 activation held whole: no row tiling of the group fits 256KB
    tiles = [c for name, c in cost.schedules(group).items() if name.startswith("row tiles")]
    assert tiles and min(c.buffer for c in tiles) >= 256 * KB
    alone = lone_schedule(bert, v, carried, 256 * KB, 1)
    assert cost.schedule(group) == alone
    price = cost.evaluate(group)
    assert (price.buffer, price.dram) == (alone.on_chip, alone.dram)
    assert cost.fits(group)


def test_only_a_prefix_that_leaves_one_tensor_runs_alone(bert):
    v = bert.node_index("/layers.0/intermediate/MatMul")
    carried = epilogue(bert, v)
    cost = BRRCostModel(bert, 256 * KB)
    # MatMul, bias and the division: the bias sum is read by the GELU's last product too, so two tensors
    # leave the group, which one output block at a time cannot write
    assert "alone" not in cost.schedules(frozenset((v, *carried[:2])))
    # MatMul and its bias alone: an in-place chain, as before
    assert riders(bert, v, cost.in_place)[:1] == carried[:1]
    assert "alone" in cost.schedules(frozenset((v, carried[0])))


def test_a_convolution_with_its_swish_runs_alone():
    graph = load_graph("efficientnet_b0")
    v = graph.node_index("/features/features.0/features.0.0/Conv")
    carried = epilogue(graph, v)
    assert [graph.nodes[u].op_type for u in carried] == ["Sigmoid", "Mul"]
    cost = BRRCostModel(graph, 64 * KB)
    group = frozenset((v, *carried))
    schedules = cost.schedules(group)
    alone = lone_schedule(graph, v, carried, 64 * KB, 1)
    assert (schedules["alone"].buffer, schedules["alone"].dram) == (alone.on_chip, alone.dram)
    assert cost.evaluate(group) == min(schedules.values(), key=lambda c: (c.buffer >= 64 * KB, c.dram, c.buffer))


def test_bert_moves_about_as_much_under_brr_as_under_lbdf():
    # BRR used to price the feed-forward products' GELU by row tiles only, which hold the 128 x 4096
    # activation whole: at 256KB its plan moved 1.52 times LBDF's
    graph = load_graph("bert_encoder")
    totals = {}
    for cls in (LBDFCostModel, BRRCostModel):
        cost = cls(graph, 256 * KB)
        result = minimize(FusionProblem(cost), make_search("auto"), make_splitter("random"), budget=5000, seed=0)
        totals[cls.name] = result.cost.dram + sum(cost.alone_dram(v) for v in cost.unfuseable
                                                  if v not in cost.riding)
    assert totals["brr"] <= 1.5 * totals["lbdf"] and totals["lbdf"] <= 1.5 * totals["brr"]


@pytest.mark.slow
def test_only_models_with_a_branching_epilogue_are_priced_differently_from_version_8():
    # docs/benchmarks.md: a version-8 BRR figure of any other zoo model holds under version 9, because the
    # only groups whose schedules version 9 adds are an operator with an epilogue prefix longer than its
    # in-place chain
    from fuseplan import zoo
    changed = set()
    for name in (*zoo.names(), *zoo.transformer_names()):
        graph = load_graph(name)
        cost = BRRCostModel(graph, 256 * KB)
        in_place = cost.in_place
        for v in range(len(graph.nodes)):
            chain = riders(graph, v, in_place)
            if any(set(ride) - set(chain) for ride in cost._ride_sets[v].values()):
                changed.add(name)
                break
    assert changed == {"efficientnet_b0", "efficientnet_b3", "bert_encoder"}
