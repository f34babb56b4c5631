"""Moves, random plans and repair never produce an invalid plan (property-based, random DAGs)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import LBDFCostModel
from fuseplan.plan import FusionProblem, Plan, bisect_group, mutate, random_plan
from fuseplan.split import RandomSplitter
from tests.dags import random_dags

BUFFERS = st.sampled_from([3_000, 6_000, 12_000, 40_000])


def assert_structurally_sound(problem: FusionProblem, plan: Plan) -> None:
    assert plan.nodes == problem.fuseable
    assert sum(len(g) for g in plan.groups) == len(problem.fuseable)  # disjoint
    assert all(problem.graph.is_connected(g) for g in plan.groups)
    assert problem.is_acyclic(plan)


@settings(max_examples=150, deadline=None)
@given(graph=random_dags(), buffer=BUFFERS, seed=st.integers(0, 2**31))
def test_random_plans_mutations_and_repair_stay_valid(graph, buffer, seed):
    problem = FusionProblem(LBDFCostModel(graph, buffer))
    rng = random.Random(seed)
    splitter = RandomSplitter()
    splitter.setup(problem, random.Random(seed + 1))
    plan = random_plan(problem, rng)
    assert_structurally_sound(problem, plan)
    for _ in range(15):
        plan = mutate(problem, plan, rng)
        assert_structurally_sound(problem, plan)
        repaired = splitter.repair(plan)
        assert_structurally_sound(problem, repaired)
        assert problem.check(repaired) == []
        assert problem.evaluate(repaired).valid


@settings(max_examples=100, deadline=None)
@given(graph=random_dags(min_nodes=3), seed=st.integers(0, 2**31))
def test_bisecting_any_group_keeps_the_plan_acyclic(graph, seed):
    problem = FusionProblem(LBDFCostModel(graph, 10**9))
    rng = random.Random(seed)
    plan = random_plan(problem, rng, cut_probability=0.1)
    for group in plan.groups:
        if len(group) > 1:
            parts = bisect_group(problem, group, rng)
            assert len(parts) >= 2 and frozenset().union(*parts) == group
            assert_structurally_sound(problem, plan.replace([group], parts))


def test_cyclic_plans_are_detected():
    # a -> b, a -> c, c -> d, b -> d: grouping {a, d} with b and c apart makes a cycle
    from tests.dags import POINT, WINDOW
    from fuseplan.graph.ir import CompGraph, OpNode, Tensor

    edges = {0: (0,), 1: (1,), 2: (1,), 3: (2, 3)}
    nodes = [OpNode(index=i, name=f"n{i}", op_type="Conv" if len(ins) == 1 else "Add", attributes={}, inputs=ins,
                    outputs=(i + 1,), input_geometry=(WINDOW if len(ins) == 1 else POINT,) * len(ins))
             for i, ins in edges.items()]
    consumers = {0: (0,), 1: (1, 2), 2: (3,), 3: (3,), 4: ()}
    tensors = [Tensor(index=t, name=f"t{t}", shape=(1, 4, 8, 8), producer=None if t == 0 else t - 1,
                      consumers=consumers[t], is_model_output=t == 4) for t in range(5)]
    graph = CompGraph("diamond", tuple(nodes), tuple(tensors), (0,), (4,))
    problem = FusionProblem(LBDFCostModel(graph, 10**9))
    bad = Plan.from_groups([{0, 1, 3}, {2}])  # connected via 0-1-3, but 1 -> 2 -> 3 leaves and re-enters
    assert not problem.is_acyclic(bad)
    assert any("cycle" in reason for reason in problem.check(bad))
    assert problem.check(Plan.from_groups([{0, 1, 2, 3}])) == []
    assert any("not connected" in r for r in problem.check(Plan.from_groups([{0, 3}, {1}, {2}])))
    assert any("in no group" in r for r in problem.check(Plan.from_groups([{0, 1}])))
