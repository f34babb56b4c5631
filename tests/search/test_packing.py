"""Packing bounds: sets too big for the buffer against the tensors that cut them, checked against optima."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.plan import FusionProblem
from fuseplan.search.exact import solve_exact
from fuseplan.search.packing import (cut_lower_bound, greedy_cut_sets, inside_tensors, packing_lower_bound,
                                     reread_lower_bound)
from tests.dags import random_dags
from tests.search.test_exact import brute_force

KB = 1024


def check_against_brute_force(graph, scheme, buffer_bytes):
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_bytes))
    packing = packing_lower_bound(problem)
    optimum = brute_force(problem)
    assert cut_lower_bound(problem) <= packing.bound <= optimum
    in_blocks = packing_lower_bound(problem, block=3)  # blocks of 3 operators, each packed on its own
    assert cut_lower_bound(problem) <= in_blocks.bound <= optimum
    assert reread_lower_bound(problem) <= optimum


@settings(max_examples=15, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=7, activations=True), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([2 * KB, 3 * KB, 6 * KB, 12 * KB]))
def test_the_packing_bound_is_below_brute_force_and_above_the_greedy_cut(graph, scheme, buffer_bytes):
    check_against_brute_force(graph, scheme, buffer_bytes)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=8, activations=True), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([2 * KB, 3 * KB, 6 * KB, 12 * KB]))
def test_the_packing_bound_is_below_brute_force_on_more_graphs(graph, scheme, buffer_bytes):
    check_against_brute_force(graph, scheme, buffer_bytes)


@pytest.mark.parametrize("name,kb", [("squeezenet", 64), ("resnet50", 256), ("mobilenet_v2", 64)])
def test_the_packing_bound_is_below_zoo_optima_and_beats_the_greedy_cut(zoo_graphs, name, kb):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs[name], kb * KB))
    packing = packing_lower_bound(problem)
    optimum = solve_exact(problem)
    assert optimum.optimal
    # measured: 2.18 -> 4.37 MB (squeezenet), 6.74 -> 10.45 MB (resnet50), 2.21 -> 3.60 MB (mobilenet_v2)
    assert cut_lower_bound(problem) < packing.bound <= optimum.dram
    assert packing.stats["sets"] >= len(greedy_cut_sets(problem))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=7, activations=True), st.sampled_from([2 * KB, 3 * KB, 6 * KB, 12 * KB]))
def test_the_reread_bound_is_below_brute_force_under_brr(graph, buffer_bytes):
    # about one graph in twenty gets a re-read bound above the cut bound (15 of 300 when measured)
    problem = FusionProblem(make_cost_model("brr", graph, buffer_bytes))
    assert reread_lower_bound(problem) <= brute_force(problem)


@pytest.mark.parametrize("name,kb", [("squeezenet", 64), ("resnet18", 64),
                                     pytest.param("resnet50", 256, marks=pytest.mark.slow), ("vgg16", 256)])
def test_the_reread_bound_is_below_brr_zoo_optima_and_beats_the_greedy_cut(zoo_graphs, name, kb):
    problem = FusionProblem(make_cost_model("brr", zoo_graphs[name], kb * KB))
    optimum = solve_exact(problem)
    assert optimum.optimal
    # measured: 1.51 -> 1.87 MB (squeezenet), 12.39 -> 12.94 (resnet18), 25.68 -> 26.28 (resnet50),
    # 139.31 -> 141.12 (vgg16); checked below every proven BRR optimum of the zoo, 64KB to 2MB
    assert cut_lower_bound(problem) < reread_lower_bound(problem) <= optimum.dram


def test_the_reread_bound_is_the_cut_bound_where_weights_are_read_once(zoo_graphs):
    for kb in (64, 256):
        problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["resnet50"], kb * KB))
        assert reread_lower_bound(problem) == cut_lower_bound(problem)


def test_blocks_and_limits_keep_the_bound_proven_and_repeatable(zoo_graphs):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["mobilenet_v2"], 64 * KB))
    optimum = solve_exact(problem).dram
    whole = packing_lower_bound(problem)
    assert whole.stats["blocks"] == 1 and packing_lower_bound(problem).bound == whole.bound
    in_blocks = packing_lower_bound(problem, block=20)
    assert in_blocks.stats["blocks"] > 3
    stopped = packing_lower_bound(problem, max_growths=10)
    assert stopped.stats["grown"] <= 10
    for bound in (in_blocks.bound, stopped.bound):
        assert cut_lower_bound(problem) <= bound <= optimum
    assert whole.bound <= optimum


def test_greedy_cut_sets_reach_the_buffer_and_cut_disjoint_tensors(zoo_graphs):
    problem = FusionProblem(make_cost_model("lbdf", zoo_graphs["resnet50"], 256 * KB))
    sets = greedy_cut_sets(problem)
    assert len(sets) > 3
    seen: set[int] = set()
    for group in sets:
        assert problem.graph.is_connected(group)
        assert problem.cost.buffer_floor(group) >= problem.buffer_bytes
        inside = inside_tensors(problem, group)
        assert inside and not inside & seen
        seen |= inside
