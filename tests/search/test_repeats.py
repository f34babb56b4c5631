"""Repeated stages: sets priced as their copy a stage below, growths copied, the same candidates."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.graph.ir import CompGraph, OpNode, Tensor
from fuseplan.plan import FusionProblem
from fuseplan.search.candidates import enumerate_candidates
from fuseplan.search.repeats import Repeats
from tests.dags import POINT, WINDOW

KB = 1024


@st.composite
def repeated_blocks(draw) -> CompGraph:
    """A stem convolution, a random block of 2 to 5 operators (3x3 or 1x1 'Conv's, 'Relu's, 'Add's of two
    earlier tensors of the block) repeated 2 to 6 times, each copy reading the one before, and a random
    tail (a 1x1 'Conv' to other channels, or nothing), so the repeats start and end inside the graph."""
    size = draw(st.integers(2, 5))
    copies = draw(st.integers(2, 6))
    width = draw(st.sampled_from([4, 8, 16]))
    # per block position: what it is and which earlier positions of the block (-1: the block's input) it reads
    kinds, reads, weights = [], [], []
    for i in range(size):
        earlier = list(range(-1, i))
        if i and draw(st.booleans()):
            kinds.append("Add")
            reads.append(tuple(sorted(set(draw(st.lists(st.sampled_from(earlier), min_size=2, max_size=2))))))
        else:
            kinds.append(draw(st.sampled_from(["Conv3", "Conv1", "Relu"])))
            reads.append((draw(st.sampled_from(earlier)),))
        weights.append(draw(st.integers(100, 3000)))
    tail = draw(st.booleans())
    nodes: list[OpNode] = []
    shapes = [(1, width, 16, 16)]
    producer: list[int | None] = [None]

    def add(op: str, inputs: tuple[int, ...], channels: int, weight: int, geometry) -> int:
        index, tensor = len(nodes), len(shapes)
        shapes.append((1, channels, 16, 16))
        producer.append(index)
        nodes.append(OpNode(index=index, name=f"n{index}", op_type=op, attributes={}, inputs=inputs,
                            outputs=(tensor,), input_geometry=(geometry,) * len(inputs), weight_numel=weight))
        return tensor

    x = add("Conv", (0,), width, 500, WINDOW)
    for _ in range(copies):
        made: list[int] = []
        for kind, read, weight in zip(kinds, reads, weights):
            inputs = tuple(x if r < 0 else made[r] for r in read)
            if kind == "Add":
                made.append(add("Add", inputs, width, 0, POINT))
            elif kind == "Relu":
                made.append(add("Relu", inputs, width, 0, POINT))
            else:
                made.append(add("Conv", inputs, width, weight, WINDOW if kind == "Conv3" else POINT))
        x = made[-1]
    if tail:
        add("Conv", (x,), 2 * width, 700, POINT)
    consumers: dict[int, list[int]] = {t: [] for t in range(len(shapes))}
    for node in nodes:
        for t in node.inputs:
            consumers[t].append(node.index)
    tensors = tuple(Tensor(index=t, name=f"t{t}", shape=shapes[t], producer=producer[t],
                           consumers=tuple(consumers[t]), is_model_output=t > 0 and not consumers[t])
                    for t in range(len(shapes)))
    return CompGraph(name="repeated", nodes=tuple(nodes), tensors=tensors, model_inputs=(0,),
                     model_outputs=tuple(t.index for t in tensors if t.is_model_output))


def both(problem: FusionProblem, repeats: Repeats):
    """The candidates with ``repeats`` and pricing every set, each on a cost model of its own."""
    fresh = FusionProblem(make_cost_model(problem.cost.name, problem.graph, problem.buffer_bytes))
    return enumerate_candidates(problem, repeats=repeats), enumerate_candidates(fresh, repeats=Repeats(()))


@settings(max_examples=30, deadline=None)
@given(graph=repeated_blocks(), scheme=st.sampled_from(["lbdf", "brr"]),
       buffer=st.sampled_from([3 * KB, 8 * KB, 32 * KB, 10**7]))
def test_copies_give_the_candidates_of_pricing_every_set(graph, scheme, buffer):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer))
    repeats = Repeats.of(problem, min_agreeing=1)
    assume(repeats.shifts)  # none where the buffer leaves some copies' neighbours unfuseable and others not
    copied, priced = both(problem, repeats)
    assert (copied.masks, copied.dram, copied.outside, copied.complete, copied.sets_visited) == \
        (priced.masks, priced.dram, priced.outside, priced.complete, priced.sets_visited)


@settings(max_examples=20, deadline=None)
@given(graph=repeated_blocks(), limit=st.integers(1, 200))
def test_copies_keep_the_limits_cuts(graph, limit):
    # a limit that cuts some seeds short: a copied growth must be cut exactly where its own would be
    problem = FusionProblem(make_cost_model("lbdf", graph, 10**7))
    fresh = FusionProblem(make_cost_model("lbdf", graph, 10**7))
    copied = enumerate_candidates(problem, max_sets=limit, repeats=Repeats.of(problem, min_agreeing=1))
    priced = enumerate_candidates(fresh, max_sets=limit, repeats=Repeats(()))
    assert (copied.masks, copied.dram, copied.complete, copied.sets_visited) == \
        (priced.masks, priced.dram, priced.complete, priced.sets_visited)


def test_resnets_repeat_their_bottleneck(zoo_graphs):
    # a bottleneck block is 7 operators once BatchNorm is folded: Conv, Relu, Conv, Relu, Conv, Add, Relu
    problem = FusionProblem(make_cost_model("brr", zoo_graphs["resnet152"], 256 * KB))
    shifts = dict(Repeats.of(problem).shifts)
    assert 7 in shifts and bin(shifts[7]).count("1") > 250  # 36 blocks in the third stage alone


@pytest.mark.parametrize("model, scheme, kb", [("resnet50", "brr", 256), ("efficientnet_b0", "lbdf", 512)])
def test_copies_give_the_zoos_candidates(zoo_graphs, model, scheme, kb):
    problem = FusionProblem(make_cost_model(scheme, zoo_graphs[model], kb * KB))
    repeats = Repeats.of(problem)
    assert repeats.shifts
    copied, priced = both(problem, repeats)
    assert copied.complete and len(copied) > 1000
    assert (copied.masks, copied.dram, copied.outside) == (priced.masks, priced.dram, priced.outside)


@pytest.mark.slow
def test_copies_give_every_zoo_models_candidates(zoo_graphs):
    for name, graph in {**zoo_graphs, "bert_encoder": load_graph("bert_encoder")}.items():
        for scheme in ("lbdf", "brr"):
            for kb in (64, 1024):
                problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
                copied, priced = both(problem, Repeats.of(problem))
                assert (copied.masks, copied.dram, copied.outside, copied.sets_visited) == \
                    (priced.masks, priced.dram, priced.outside, priced.sets_visited), (name, scheme, kb)
