"""Groups grown by reduced cost for a cut-short candidate list: real candidates, and plans no worse."""

from __future__ import annotations

import pytest

pytest.importorskip("ortools", reason="the solver extra is not installed")

from fuseplan import load_graph, make_cost_model  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.search.candidates import Reachability, bits, enumerate_candidates, predecessors_outside  # noqa: E402
from fuseplan.search.columns import grow_columns  # noqa: E402
from fuseplan.search.exact import downset_search, solve_exact  # noqa: E402


def _connected(problem, members: list[int]) -> bool:
    inside, stack, seen = set(members), [members[0]], {members[0]}
    while stack:
        for u in problem.graph.neighbours[stack.pop()]:
            if u in inside and u not in seen:
                seen.add(u)
                stack.append(u)
    return seen == inside


@pytest.mark.parametrize("model,scheme,kb,limit", [("squeezenet", "brr", 256, 60), ("resnet18", "lbdf", 512, 80),
                                                   ("mobilenet_v2", "brr", 1024, 200)])
def test_grown_groups_are_candidates_and_the_plan_over_them_is_no_worse(model, scheme, kb, limit):
    problem = FusionProblem(make_cost_model(scheme, load_graph(model), kb * 1024))
    cut = enumerate_candidates(problem, max_sets=limit)
    assert not cut.complete
    grown, stats = grow_columns(problem, cut)
    assert grown.masks[:len(cut.masks)] == cut.masks and stats["rounds"] >= 1
    added = grown.masks[len(cut.masks):]
    assert len(added) == stats["added"] > 0 and len(set(grown.masks)) == len(grown.masks)
    reach = Reachability.of(problem)
    for position, mask in enumerate(added, len(cut.masks)):
        members = bits(mask)
        assert set(members) <= problem.fuseable and _connected(problem, members)
        down = up = 0
        for v in members:
            down |= reach.descendants[v]
            up |= reach.ancestors[v]
        assert not down & up & ~mask  # convex
        priced = problem.cost.evaluate(frozenset(members))
        assert priced.buffer < problem.buffer_bytes and grown.dram[position] == priced.dram
        assert grown.outside[position] == predecessors_outside(problem, mask)
        assert position in grown.by_min[members[0]]
    before = downset_search(problem, cut)
    after = downset_search(problem, grown)
    assert after.plan is not None and not problem.check(after.plan) and after.dram < before.dram
    # from a list of a few dozen sets per seed, two rounds reach the optimum the complete list proves
    assert after.dram == solve_exact(problem).dram


def test_a_complete_list_gets_no_columns_in_the_exact_search():
    problem = FusionProblem(make_cost_model("brr", load_graph("squeezenet"), 256 * 1024))
    outcome = solve_exact(problem)
    assert outcome.optimal and "columns" not in outcome.stats
    cut = solve_exact(problem, max_sets=60)
    assert not cut.optimal and cut.stats["columns"]["rounds"] >= 1
