"""Parts no candidate spans, solved apart: never a bound above the optimum, and the same optimum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.search.candidates import enumerate_candidates
from fuseplan.search.decompose import independent_parts, restrict
from fuseplan.search.exact import downset_search, solve_exact, solve_parts
from tests.dags import random_dags
from tests.search.test_exact import brute_force

KB = 1024


def assert_parts_partition_the_operators(problem, candidates, parts):
    union = 0
    for part in parts:
        assert union & part == 0
        union |= part
    assert union == sum(1 << v for v in problem.fuseable)
    for mask in candidates.masks:
        assert sum(1 for part in parts if mask & part) == 1  # no candidate spans two parts
    assert sum(len(restrict(candidates, part)) for part in parts) == len(candidates)


@settings(max_examples=30, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=8), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([2 * KB, 3 * KB, 6 * KB, 12 * KB]))
def test_parts_bound_and_plan_agree_with_brute_force(graph, scheme, buffer_bytes):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes))
    optimum = brute_force(problem)
    candidates = enumerate_candidates(problem)
    parts = independent_parts(problem, candidates)
    assert_parts_partition_the_operators(problem, candidates, parts)
    by_parts = solve_parts(problem, candidates, parts, max_states=10_000)
    assert by_parts.lower_bound <= optimum
    if by_parts.plan is not None:
        assert problem.check(by_parts.plan) == [] and problem.evaluate(by_parts.plan).dram == optimum


def test_googlenet_at_64kb_splits_into_parts_with_the_joint_optimum():
    problem = FusionProblem(make_cost_model("lbdf", load_graph("tests/data/googlenet_opset13.onnx"), 64 * KB))
    candidates = enumerate_candidates(problem)
    parts = independent_parts(problem, candidates)
    assert len(parts) > 1
    assert_parts_partition_the_operators(problem, candidates, parts)
    outcome = solve_exact(problem, by_cells=False)
    assert outcome.method == "downset by parts" and outcome.optimal
    assert outcome.stats["decomposition"]["parts"] == len(parts)
    joint = downset_search(problem, candidates)
    assert joint.optimal and joint.dram == outcome.dram and problem.check(outcome.plan) == []
    # apart, the parts settle fewer states than the joint search
    assert outcome.stats["decomposition"]["states"] < joint.stats["states"]
