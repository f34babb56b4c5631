"""Incremental pricing: a group grown by one operator, priced from the state of the group before it, costs
exactly what pricing it from scratch costs (both schemes, real networks, the growth the interval DP does)."""

from __future__ import annotations

import random

import pytest

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.cost.streaming import StreamingState, footprint
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.search.interval_dp import _runs, named_orders
from tests.conftest import ZOO
from tests.cost.test_properties import grow_group

KB = 1024
GOOGLENET = "tests/data/googlenet_opset13.onnx"  # four-branch inception blocks: components merge often


def from_scratch(cost):
    """A cost model like ``cost`` that prices every group from scratch."""
    reference = make_cost_model(cost.name, cost.graph, cost.buffer_bytes, cost.bytes_per_element)
    reference.incremental = False
    return reference


def priced_by_scans(cost, starts: int) -> list[frozenset[int]]:
    """The groups ``cost`` prices (in that order) while the interval DP's scans run from ``starts``
    evenly spread starts of every named order."""
    priced: list[frozenset[int]] = []
    price = cost.price

    def recording(group):
        priced.append(group)
        return price(group)

    cost.price = recording
    problem = FusionProblem(cost)
    excluded = set(problem.excluded)
    for order in named_orders(problem).values():
        for i in range(0, len(order), max(1, len(order) // starts)):
            _runs(order, i, excluded, cost.graph.neighbours, cost.evaluate, problem.buffer_bytes)
    return priced


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize(("name", "buffer_kb"), [("resnet18", 256), ("squeezenet", 64), (GOOGLENET, 256),
                                                 ("mobilenet_v3_small", 1024)])
def test_the_groups_the_interval_dp_grows_cost_what_they_cost_from_scratch(name, buffer_kb, scheme):
    graph = load_graph(name)
    cost = make_cost_model(scheme, graph, buffer_kb * KB)
    states, built = [], []
    pricing_state, new_state = cost.pricing_state, cost.new_state
    cost.pricing_state = lambda group: states.append(pricing_state(group)) or states[-1]
    cost.new_state = lambda: built.append(new_state()) or built[-1]
    priced = priced_by_scans(cost, starts=12)
    several = sum(len(group) > 1 for group in priced)
    used = sum(state is not None for state in states)
    assert used > several // 2 and len(built) < used // 2  # most were priced from a grown state
    reference = from_scratch(cost)
    for group in priced:
        assert cost.evaluate(group) == reference.price(group), (name, scheme, sorted(group))
        if scheme == "brr":  # each schedule, from a state built from scratch
            assert cost.schedules(group) == reference.schedules(group)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", ZOO)
def test_random_groups_grown_an_operator_at_a_time_cost_what_they_cost_from_scratch(zoo_graphs, name, scheme):
    # every prefix (in index order) of random connected groups, each grown from the one before it; then
    # some prefixes grown again by a later operator anywhere in the graph (their states were handed on:
    # built again from scratch)
    graph = zoo_graphs[name]
    rng = random.Random(7)
    for buffer_kb in (64, 512):
        cost = make_cost_model(scheme, graph, buffer_kb * KB)
        reference = from_scratch(cost)
        for _ in range(6):
            members = sorted(grow_group(graph, rng, rng.randint(2, 40)))
            for size in range(1, len(members) + 1):
                part = frozenset(members[:size])
                assert cost.evaluate(part) == reference.price(part), (name, scheme, buffer_kb, members[:size])
            for size in rng.sample(range(1, len(members) + 1), min(3, len(members))):
                if members[size - 1] + 1 < len(graph):
                    bigger = frozenset(members[:size]) | {rng.randrange(members[size - 1] + 1, len(graph))}
                    assert cost.evaluate(bigger) == reference.price(bigger), (name, scheme, sorted(bigger))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_large", GOOGLENET])
def test_a_grown_streaming_state_keeps_the_rows_footprint_finds(name):
    graph = load_graph(name)
    cost = make_cost_model("lbdf", graph, 256 * KB)
    rng = random.Random(3)
    for _ in range(20):
        members = sorted(grow_group(graph, rng, rng.randint(1, 30)))
        state = StreamingState(cost.tables, cost.in_place)
        state.add(members[0])
        state.members = frozenset(members[:1])
        for size in range(1, len(members) + 1):
            group = frozenset(members[:size])
            if size > 1:
                state.grow(members[size - 1], group)
            rows: dict[int, int] = {}
            streamed: set[int] = set()
            expected = footprint(cost.tables, group, rows, cost.in_place, streamed)
            assert state.footprint() == expected
            assert state.rows() == rows
            assert list(state.rows()) == list(rows)  # the same order, which BRR's float sums rely on
            assert state.streamed() == streamed


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
@pytest.mark.parametrize("name", ["squeezenet", "resnet18", "mobilenet_v2", "efficientnet_b0"])
def test_every_price_is_its_schedule(zoo_graphs, name, scheme):
    """F_beta and F_D are what the schedule a scheme chooses holds and moves (fuseplan.schedule)."""
    graph = zoo_graphs[name]
    rng = random.Random(5)
    for kb, width in ((32, 1), (64, 2), (256, 1), (1024, 1)):
        cost = make_cost_model(scheme, graph, kb * 1024, width)
        for _ in range(60):
            group = frozenset(grow_group(graph, rng, rng.randint(1, 10)))
            schedule = cost.schedule(group)
            assert (width * schedule.on_chip, width * schedule.dram) == tuple(cost.evaluate(group)), sorted(group)
            assert sorted(schedule.operators) == sorted(group)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_shared_state_prices_every_group_grown_from_it_as_from_scratch(scheme):
    # GoogLeNet's inception blocks: one group grown by each of several later operators in turn, the state
    # shared (copied for all but the last), then each grown group grown once more
    graph = load_graph(GOOGLENET)
    cost = make_cost_model(scheme, graph, 256 * KB)
    reference = from_scratch(cost)
    states = []
    pricing_state = cost.pricing_state
    cost.pricing_state = lambda group: states.append(pricing_state(group)) or states[-1]
    rng = random.Random(3)
    shared = 0
    for start in rng.sample(range(len(graph)), 40):
        members = [start]
        while len(members) < 6:  # a chain of successors: each above every member
            later = [s for s in graph.successors[members[-1]]]
            if not later:
                break
            members.append(min(later))
        base = frozenset(members)
        if len(base) < 2:
            continue
        cost.evaluate(frozenset(members[:1]))  # in the cache: the states start from here
        for size in range(2, len(members) + 1):  # priced a prefix at a time, so the state is kept
            cost.price(frozenset(members[:size]))
        top = max(base)
        neighbours = sorted({s for v in base for s in graph.successors[v] if s > top})
        if len(neighbours) < 2:
            continue
        cost.share_state(base, len(neighbours))
        for u in neighbours:
            grown = base | {u}
            before = len(states)
            assert cost.price(grown) == reference.price(grown), (scheme, sorted(grown))
            assert states[before] is not None  # priced from the shared state, not from scratch
            shared += 1
            onward = sorted(s for s in graph.successors[u] if s > u)
            if onward:
                assert cost.price(grown | {onward[0]}) == reference.price(grown | {onward[0]})
    assert shared >= 20
