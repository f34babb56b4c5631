"""Properties of fusion under both cost models: fusing never moves more than the operators apart, splitting a
convolution never makes it cheaper, and in-place operators ride with an operator that does not fit alone.

Hypothesis draws are derandomized (a fixed sequence of examples), so these tests cannot flake.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuseplan import load_graph
from fuseplan.cost import CostModel, make_cost_model
from fuseplan.cost.streaming import in_place_operators
from fuseplan.graph import CompGraph
from fuseplan.schedule.lone import EPILOGUE_OPS, lone_schedule
from tests.conftest import BUFFERS_KB, ZOO
from tests.cost.test_properties import grow_group
from tests.dags import random_dags

KB = 1024


def deterministic(examples: int) -> settings:
    """Hypothesis settings drawing a fixed sequence of ``examples`` examples."""
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def apart(cost: CostModel, v: int) -> int:
    """DRAM bytes of the best schedule of operator ``v`` run by itself: its group of one where that fits, or
    the lone-operator mapper's least-DRAM blocking that fits, whichever moves less."""
    best = cost.dram(frozenset((v,))) if cost.fits(frozenset((v,))) else None
    blocked = lone_schedule(cost.graph, v, (), cost.buffer_bytes, cost.bytes_per_element)
    if blocked is not None and (best is None or cost.bytes_per_element * blocked.dram < best):
        best = cost.bytes_per_element * blocked.dram
    assert best is not None, f"{cost.graph.nodes[v].name} runs nowhere alone"
    return best


def fitting_groups(graph: CompGraph, cost: CostModel, rng: random.Random, tries: int) -> list[frozenset[int]]:
    """Convex, connected groups of two or more fuseable operators that fit, grown at random, and one pair
    of an operator and its successor that fits (found in a random order), so that the list is never empty
    where any such pair exists."""
    fuseable = set(cost.fuseable)
    found = []
    for _ in range(tries):
        group = frozenset(grow_group(graph, rng, rng.randint(2, 12)))
        if len(group) > 1 and group <= fuseable and graph.is_convex(group) and cost.fits(group):
            found.append(group)
    order = sorted(fuseable)
    rng.shuffle(order)
    for v in order:
        pair = next((frozenset((v, s)) for s in sorted(graph.successors[v]) if s in fuseable
                     and graph.is_convex(frozenset((v, s))) and cost.fits(frozenset((v, s)))), None)
        if pair is not None:
            found.append(pair)
            break
    return found


def _fusing_checks(zoo_graphs, scheme: str, name: str, buffer_kb: int, seed: int) -> tuple[int, list[str]]:
    graph = zoo_graphs[name]
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    groups = fitting_groups(graph, cost, random.Random(seed), 20)
    worse = [f"{sorted(graph.nodes[v].name for v in g)}: {cost.dram(g)} > {sum(apart(cost, v) for v in g)}"
             for g in groups if cost.dram(g) > sum(apart(cost, v) for v in g)]
    return len(groups), worse


@deterministic(15)
@given(name=st.sampled_from(ZOO), buffer_kb=st.sampled_from(BUFFERS_KB), seed=st.integers(0, 2**32 - 1))
def test_a_lbdf_group_never_moves_more_than_its_operators_apart(zoo_graphs, name, buffer_kb, seed):
    checked, worse = _fusing_checks(zoo_graphs, "lbdf", name, buffer_kb, seed)
    assert checked > 0
    assert not worse


@deterministic(40)
@given(graph=random_dags(activations=True), buffer_kb=st.sampled_from((16, 32, 64)), seed=st.integers(0, 1000))
def test_a_lbdf_group_of_a_random_graph_never_moves_more_than_its_operators_apart(graph, buffer_kb, seed):
    cost = make_cost_model("lbdf", graph, buffer_kb * KB)
    for group in fitting_groups(graph, cost, random.Random(seed), 10):
        assert cost.dram(group) <= sum(apart(cost, v) for v in group)


# Measured on the zoo under cost-model version 6 (20 tries at each of the 5 buffers, seed 0: 621 fitting
# groups): 66 BRR groups move more than their operators apart (vgg16 30, resnet101 and resnet152 10 each,
# resnet18 6, resnet50 5, deeplabv3 3, mobilenet_v2 and squeezenet 1): BRR prices a group by its row
# tiles, which re-read streamed weights once per tile, while each operator alone may run in the
# lone-operator mapper's blocking. Since version 6 (weights of one-row operators read once) none of the
# efficientnets' groups does. The strict mark makes the suite say so when mobilenet_v2's stops.
@pytest.mark.parametrize("name", [
    "efficientnet_b0",
    pytest.param("mobilenet_v2", marks=pytest.mark.xfail(
        strict=True, reason="BRR: 66 of 621 zoo groups move more than their operators apart, 1 of mobilenet_v2's")),
])
def test_a_brr_group_never_moves_more_than_its_operators_apart(zoo_graphs, name):
    worse = []
    for kb in BUFFERS_KB:
        worse += _fusing_checks(zoo_graphs, "brr", name, kb, 0)[1]
    assert not worse


def _ride_chain(graph: CompGraph, v: int, in_place: tuple[bool, ...]) -> list[int]:
    """The operators that apply in place to ``v``'s output, one after another: each the only reader of the
    tensor before it, in place, with one input and an output of the same shape."""
    chain, t = [], graph.nodes[v].outputs[0]
    while not graph.tensors[t].is_model_output and len(graph.tensors[t].consumers) == 1:
        u = graph.tensors[t].consumers[0]
        node = graph.nodes[u]
        if not in_place[u] or len(node.inputs) != 1 or graph.tensors[node.outputs[0]].shape != graph.tensors[t].shape:
            break
        chain.append(u)
        t = node.outputs[0]
    return chain


def _closed_epilogue(graph: CompGraph, v: int, carried: tuple[int, ...]) -> int:
    """Check that ``carried`` can be applied to each output block of ``v``: element-wise operators of its
    output's shape, reading only ``v``'s output and each other's, exactly one of the tensors made read
    outside them (or a model output); returns that tensor."""
    shape = graph.tensors[graph.nodes[v].outputs[0]].shape
    made = [graph.nodes[v].outputs[0]]
    for u in carried:
        node = graph.nodes[u]
        assert node.op_type in EPILOGUE_OPS and len(node.outputs) == 1
        assert graph.tensors[node.outputs[0]].shape == shape
        assert all(t in made for t in node.inputs), "an epilogue reads only what it and the operator make"
        made.append(node.outputs[0])
    escaping = [t for t in made if graph.tensors[t].is_model_output
                or not set(graph.tensors[t].consumers) <= set(carried)]
    assert len(escaping) == 1
    return escaping[0]


# LBDF only: BRR, which streams weights, finds no unfuseable operator with an in-place reader in these
# models from 16KB to 128KB; both schemes share CostModel.riding.
@pytest.mark.parametrize("scheme", ["lbdf"])
def test_the_in_place_operators_on_an_unfuseable_output_ride_with_it(zoo_graphs, scheme):
    rode = branched = 0
    for name, kb in [(name, kb) for name in ("resnet18", "mobilenet_v2", "vgg16", "efficientnet_b0")
                     for kb in (64, 256, 1024)]:
        graph = zoo_graphs[name]
        in_place = in_place_operators(graph)
        cost = make_cost_model(scheme, graph, kb * KB)
        too_big = [v for v in cost.unfuseable if v not in cost.riding]
        expected = {}
        for v in too_big:
            assert not cost.fits(frozenset((v,)))
            chain = _ride_chain(graph, v, in_place)
            carried = cost.carried(v)
            schedule = cost.alone_schedule(v)
            assert schedule.operators == (v, *carried)
            if list(carried) != chain:
                # an element-wise graph on the output (Swish: x * sigmoid(x)), taken where it moves no more
                # than the chain alone, its further weights aside
                assert set(chain) < set(carried)
                alone = lone_schedule(graph, v, tuple(chain), kb * KB, 1)
                extra = sum(graph.nodes[u].weight_numel for u in carried if u not in chain)
                assert alone is None or schedule.dram - extra <= alone.dram
                branched += 1
            expected.update({u: v for u in carried})
            # the blocks are written once, after the epilogue: its one tensor read outside, not v's own
            last = _closed_epilogue(graph, v, carried)
            written = {use.tensor for use in schedule.tensors if use.dram_writes}
            assert last in written and (not carried or graph.nodes[v].outputs[0] not in written)
        assert cost.riding == expected
        for u in expected:
            assert u in cost.unfuseable and cost.alone_dram(u) == 0
        rode += len(expected)
    assert rode > 0 and branched > 0


def test_gelu_rides_with_the_transformer_matrix_product_that_does_not_fit():
    """bert_encoder at 256KB (LBDF): each feed-forward MatMul of 256K weights runs alone and applies its
    bias and GELU (``x * (erf(x / sqrt 2) + 1) / 2``, a branch that rejoins) to each output block: the
    1x128x1024 tensors between them never reach DRAM."""
    graph = load_graph("bert_encoder")
    cost = make_cost_model("lbdf", graph, 256 * KB)
    head = graph.node_index("/layers.0/intermediate/MatMul")
    assert head in cost.unfuseable and head not in cost.riding
    names = [graph.nodes[u].name.removeprefix("/layers.0/") for u in cost.carried(head)]
    assert names == ["intermediate/Add", "Div_1", "Erf", "Add_1", "Mul", "Mul_1"]
    schedule = cost.alone_schedule(head)
    written = [use for use in schedule.tensors if use.dram_writes]
    assert [graph.tensors[use.tensor].name for use in written] == ["/layers.0/Mul_1_output_0"]
    # what the product alone must move: its input, its weights and the epilogue's, and one output
    x, y = graph.tensors[graph.nodes[head].inputs[0]], written[0]
    weights = sum(graph.nodes[u].weight_numel for u in (head, *cost.carried(head)))
    assert schedule.dram == x.numel + weights + graph.tensors[y.tensor].numel
    # x stays while erf(x / sqrt 2) + 1 is made: a second output block, counted on chip
    assert schedule.scratch == 2 * schedule.params["m"] * schedule.params["n"]


# 243 splits of squeezenet, resnet18 and mobilenet_v2 at 64KB, 256KB and 1MB were checked under each scheme
# (none cheaper than the whole); the fast set keeps two of these cases.
@pytest.mark.parametrize("name, buffer_kb, scheme", [
    ("squeezenet", 64, "lbdf"), ("resnet18", 256, "brr"),
    pytest.param("squeezenet", 64, "brr", marks=pytest.mark.slow),
    pytest.param("resnet18", 256, "lbdf", marks=pytest.mark.slow)])
def test_splitting_a_convolution_by_output_channels_never_lowers_its_price(name, buffer_kb, scheme):
    ir = pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model
    from fuseplan.passes.rewrite import apply_in_place, load_rules

    path, label = model_path(name)
    model = prepare_model(read_model(path), label)[0]
    original = graph_from_model(model, label, passes=[])
    cost = make_cost_model(scheme, original, buffer_kb * KB)
    by_name = {node.name: node.index for node in original.nodes}
    working = ir.from_proto(model)
    sites = load_rules()["split-conv-by-channels"].sites(working)
    rng = random.Random(0)
    checked = 0
    for site in rng.sample(sites, min(6, len(sites))):
        copy = working.clone()
        conv = next(node.name for node in copy.graph if node.outputs[0].name in site)
        apply_in_place(copy, "split-conv-by-channels", site)
        split = graph_from_model(ir.to_proto(copy), label, passes=[])
        parts = [node.index for node in split.nodes if node.name.startswith(f"{conv}_part")]
        assert len(parts) == 2
        split_cost = make_cost_model(scheme, split, buffer_kb * KB)
        whole = apart(cost, by_name[conv])
        assert sum(apart(split_cost, v) for v in parts) >= whole, conv
        checked += 1
    assert checked == min(6, len(sites))
