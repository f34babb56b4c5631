"""The buffer floor the exact solver prunes on: never above ``F_beta`` of any group that holds the floored one."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.graph import CompGraph
from fuseplan.search.candidates import enumerate_candidates
from fuseplan.plan import FusionProblem
from tests.conftest import BUFFERS_KB, ZOO
from tests.cost.test_properties import grow_group
from tests.dags import random_dags

KB = 1024


def grow_from(graph: CompGraph, group: set[int], rng: random.Random, extra: int) -> set[int]:
    """``group`` with up to ``extra`` more operators, each a neighbour of the group so far."""
    bigger = set(group)
    for _ in range(extra):
        frontier = sorted(set().union(*(graph.neighbours[v] for v in bigger)) - bigger)
        if not frontier:
            break
        bigger.add(rng.choice(frontier))
    return bigger


def check_floor_chain(graph: CompGraph, cost, rng: random.Random, small: int, extra: int) -> int:
    """Grow a chain of nested groups and check the floor of each against every later one; returns checks."""
    chain = [grow_group(graph, rng, small)]
    for _ in range(3):
        chain.append(grow_from(graph, chain[-1], rng, rng.randint(1, extra)))
    checks = 0
    for i, group in enumerate(chain):
        floor = cost.buffer_floor(group)
        for bigger in chain[i:]:
            names = sorted(graph.nodes[v].name for v in group)
            assert floor <= cost.buffer(bigger), (
                f"{cost!r}: floor {floor} of {names} exceeds F_beta {cost.buffer(bigger)} of a group holding it")
            assert floor <= cost.buffer_floor(bigger), f"{cost!r}: floor of {names} falls as the group grows"
            checks += 1
    return checks


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(ZOO), scheme=st.sampled_from(sorted(SCHEMES)),
       buffer_kb=st.sampled_from((64, *BUFFERS_KB)), seed=st.integers(0, 2**32 - 1))
def test_floor_never_exceeds_f_beta_of_a_larger_group_in_the_zoo(zoo_graphs, name, scheme, buffer_kb, seed):
    graph = zoo_graphs[name]
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    rng = random.Random(seed)
    checks = sum(check_floor_chain(graph, cost, rng, rng.randint(1, 6), 8) for _ in range(8))
    assert checks >= 8 * 10


@settings(max_examples=150, deadline=None)
@given(graph=random_dags(min_nodes=2, max_nodes=14, activations=True), scheme=st.sampled_from(sorted(SCHEMES)),
       buffer_kb=st.sampled_from((2, 4, 8, 16, 64)), bytes_per_element=st.sampled_from((1, 2)),
       seed=st.integers(0, 2**32 - 1))
def test_floor_never_exceeds_f_beta_of_a_larger_group_in_random_dags(graph, scheme, buffer_kb, bytes_per_element,
                                                                       seed):
    cost = make_cost_model(scheme, graph, buffer_kb * KB, bytes_per_element)
    rng = random.Random(seed)
    for _ in range(4):
        check_floor_chain(graph, cost, rng, rng.randint(1, 3), 4)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_floor_counts_an_overwritten_activation_as_nothing(zoo_graphs, scheme):
    # conv -> relu: the convolution's output may be overwritten by the ReLU, so the floor of the
    # convolution alone holds no row of its output, while pricing it alone writes one row back.
    graph = zoo_graphs["vgg16"]
    conv = next(n.index for n in graph.nodes if n.op_type == "Conv" and n.index > 0)
    relu = graph.tensors[graph.nodes[conv].outputs[0]].consumers[0]
    assert graph.nodes[relu].op_type == "Relu"
    cost = make_cost_model(scheme, graph, 256 * KB)
    assert cost.floor_row_elements[graph.nodes[conv].outputs[0]] == 0
    assert cost.floor_row_elements[graph.nodes[relu].outputs[0]] > 0
    assert cost.buffer_floor({conv}) <= cost.buffer({conv, relu}) <= cost.buffer({conv})


def test_brr_floor_is_exact_on_a_plain_chain_and_prunes_what_cannot_fit(zoo_graphs):
    # The floor is useful, not only safe: on vgg16's plain chain of convolutions, activations and
    # pools it equals the least any schedule of the group holds (one-row tiles, what a 1-byte buffer prices:
    # nothing fits, so no tile grows) wherever a run of two convolutions or more ends in an activation (the
    # alternation of channel blocks is then fixed by the group itself), and it tells that the first 14
    # operators cannot fit 128KB without pricing any larger group.
    graph = zoo_graphs["vgg16"]
    cost = make_cost_model("brr", graph, 128 * KB)
    least = make_cost_model("brr", graph, 1)
    ends = [n.index for n in graph.nodes[3:14] if n.op_type == "Relu"]
    assert len(ends) >= 4
    for end in ends:
        run = list(range(end + 1))
        assert cost.buffer_floor(run) == least.buffer(run) <= cost.buffer(run), graph.nodes[end].name
    assert cost.buffer_floor(range(14)) >= cost.buffer_bytes
    assert cost.lone_floor(range(14)) is None  # several convolutions: never a lone operator's group


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", ["squeezenet", "resnet18", "mobilenet_v2"])
def test_candidates_hold_every_fitting_group_of_a_random_sample(zoo_graphs, scheme, name):
    # What the floor is for: complete candidate enumeration must find every fitting connected convex
    # group; a floor above some group's F_beta would silently drop it.
    graph = zoo_graphs[name]
    problem = FusionProblem(make_cost_model(scheme, graph, 256 * KB))
    found = enumerate_candidates(problem, max_sets=400_000)
    assert found.complete
    masks = set(found.masks)
    rng = random.Random(0)
    fuseable = set(problem.fuseable)
    seen = 0
    for _ in range(300):
        group = grow_group(graph, rng, rng.randint(1, 8))
        if not group <= fuseable or not graph.is_convex(group) or not problem.cost.fits(group):
            continue
        seen += 1
        assert sum(1 << v for v in group) in masks, sorted(graph.nodes[v].name for v in group)
    assert seen > 20


def check_joined_floor(graph: CompGraph, cost, rng: random.Random, size: int, extra: int) -> bool:
    """Split a grown group at a label into the operators before and after it and check that the floor joined
    from the halves' parts never exceeds the union's (own terms and features, the lone floor aside); whether
    the split was one :meth:`CostModel.join_floor` takes."""
    group = grow_from(graph, grow_group(graph, rng, size), rng, extra)
    labels = sorted(group)
    if len(labels) < 2:
        return False
    cut = rng.randint(1, len(labels) - 1)
    earlier, later = labels[:cut], labels[cut:]
    read_first = {t for v in earlier for t in graph.nodes[v].inputs}
    if any(t in read_first for v in later for t in graph.nodes[v].inputs if graph.tensors[t].producer not in later):
        return False  # both halves read a tensor from outside the second: not a split the search joins
    joined = cost.join_floor(cost.floor_parts(earlier), cost.floor_parts(later))
    whole = cost.floor_parts(labels)
    names = [graph.nodes[v].name for v in labels]
    assert joined.own <= whole.own and joined.features <= whole.features + 1e-6, (
        f"{cost!r}: the floor joined at {cut} of {names} exceeds the union's")
    assert cost.floor_bytes(joined) <= cost.floor_bytes(whole)
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(ZOO), scheme=st.sampled_from(sorted(SCHEMES)),
       buffer_kb=st.sampled_from((64, *BUFFERS_KB)), seed=st.integers(0, 2**32 - 1))
def test_a_floor_joined_from_two_halves_never_exceeds_the_unions_in_the_zoo(zoo_graphs, name, scheme, buffer_kb,
                                                                            seed):
    graph = zoo_graphs[name]
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    rng = random.Random(seed)
    assert sum(check_joined_floor(graph, cost, rng, rng.randint(2, 12), 20) for _ in range(40)) >= 10


@settings(max_examples=150, deadline=None)
@given(graph=random_dags(min_nodes=2, max_nodes=14, activations=True), scheme=st.sampled_from(sorted(SCHEMES)),
       buffer_kb=st.sampled_from((2, 8, 64)), seed=st.integers(0, 2**32 - 1))
def test_a_floor_joined_from_two_halves_never_exceeds_the_unions_in_random_dags(graph, scheme, buffer_kb, seed):
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    rng = random.Random(seed)
    for _ in range(6):
        check_joined_floor(graph, cost, rng, rng.randint(2, 8), 6)

