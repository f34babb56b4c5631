"""The exact interval reference against brute force, and its plan space."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import LBDFCostModel, make_cost_model
from fuseplan.plan import FusionProblem, Plan
from fuseplan.plan.moves import cut_order
from fuseplan.search import IntervalDP, candidate_orders, interval_dp, is_interval_plan
from fuseplan.search.interval_dp import IntervalDPTooLarge
from tests.dags import random_dags


@settings(max_examples=80, deadline=None)
@given(graph=random_dags(max_nodes=10), buffer=st.sampled_from([2_500, 5_000, 10_000, 30_000]))
def test_dp_matches_brute_force_over_all_cuts(graph, buffer):
    problem = FusionProblem(LBDFCostModel(graph, buffer))
    order = list(range(len(graph)))
    plan, dram, _ = interval_dp(problem, order)
    best = None
    positions = range(1, len(order))
    for k in range(len(order)):
        for cuts in itertools.combinations(positions, k):
            candidate = problem.evaluate(Plan.from_groups(cut_order(problem, order, cuts)))
            if candidate.valid and (best is None or candidate.dram < best):
                best = candidate.dram
    assert plan is not None and problem.check(plan) == []
    assert dram == best == problem.evaluate(plan).dram
    assert is_interval_plan(problem, plan, order)


@settings(max_examples=60, deadline=None)
@given(graph=random_dags(), seed=st.integers(0, 2**31))
def test_interval_membership_of_cut_plans(graph, seed):
    problem = FusionProblem(LBDFCostModel(graph, 10**9))
    rng = random.Random(seed)
    order = list(range(len(graph)))
    cuts = [i for i in range(1, len(order)) if rng.random() < 0.4]
    assert is_interval_plan(problem, Plan.from_groups(cut_order(problem, order, cuts)), order)


@pytest.mark.slow
def test_dp_is_fast_and_valid_on_the_zoo(zoo_graphs):
    stopped = []
    for name, graph in zoo_graphs.items():
        for scheme in ("lbdf", "brr"):
            for kb in (128, 2048):
                problem = FusionProblem(make_cost_model(scheme, graph, kb * 1024))
                try:
                    plan, dram, order_name, by_order = IntervalDP().solve(problem)
                except IntervalDPTooLarge:
                    stopped.append((name, scheme, kb))
                    continue
                assert problem.check(plan) == [], (name, scheme, kb)
                assert dram == problem.evaluate(plan).dram == min(by_order.values())
                assert is_interval_plan(problem, plan, candidate_orders(problem)[order_name])
                assert problem.cost.dram_lower_bound() <= dram <= problem.cost.unfused_dram()
    # Only BRR's long groups under a large buffer on the deepest networks pass the work limit
    # (docs/search.md); everywhere else the reference runs.
    assert all(scheme == "brr" and kb == 2048 for _, scheme, kb in stopped), stopped
    assert len(stopped) <= 2, stopped


def _kahn_by_priority(problem, priority):
    """Kahn's algorithm taking, among ready operators, the smallest ``priority(v, last)`` (the definition)."""
    graph = problem.graph
    waiting = [len(p) for p in graph.predecessors]
    ready = [v for v, n in enumerate(waiting) if n == 0]
    order, last = [], None
    while ready:
        v = min(ready, key=lambda u: priority(u, last))
        ready.remove(v)
        order.append(v)
        last = v
        for s in graph.successors[v]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return order


@settings(max_examples=40, deadline=None)
@given(graph=random_dags(max_nodes=14), buffer=st.sampled_from([1_000, 2_500, 10_000, 30_000]))
def test_named_orders_follow_their_priorities(graph, buffer):
    from fuseplan.search.interval_dp import named_orders

    problem = FusionProblem(LBDFCostModel(graph, buffer))
    excluded = set(problem.excluded)
    succ = graph.successors

    def chained(v, last):
        return (0 if last is not None and v in succ[last] else 1, v)

    expected = {
        "model": list(range(len(graph))),
        "depth-first": _kahn_by_priority(problem, chained),
        "unfuseable-late": _kahn_by_priority(problem, lambda v, last: (v in excluded, v)),
        "depth-first-unfuseable-late": _kahn_by_priority(problem, lambda v, last: (v in excluded, *chained(v, last))),
    }
    assert named_orders(problem) == expected


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(graph=random_dags(max_nodes=12), data=st.data())
def test_the_model_order_shortcut_says_exactly_when_kahn_takes_the_model_order(graph, data):
    from fuseplan.search.interval_dp import _takes_the_model_order

    late = data.draw(st.lists(st.booleans(), min_size=len(graph), max_size=len(graph)))
    succ = graph.successors
    for lateness in (None, late):
        for chained in (False, True):
            def priority(v, last):
                return (bool(lateness and lateness[v]),
                        0 if chained and last is not None and v in succ[last] else 1, v)

            by_definition = _kahn_by_priority(FusionProblem(LBDFCostModel(graph, 10**9)), priority)
            assert _takes_the_model_order(graph, lateness, chained=chained) == (
                by_definition == list(range(len(graph)))), (lateness, chained)


@settings(max_examples=40, deadline=None)
@given(graph=random_dags(max_nodes=14), buffer=st.sampled_from([1_000, 2_500, 10_000, 30_000]),
       cut=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_interval_tables_and_windows_give_the_interval_dp_optimum(graph, buffer, cut):
    from fuseplan.search.interval_dp import interval_tables, window_dp

    problem = FusionProblem(LBDFCostModel(graph, buffer))
    for order in candidate_orders(problem).values():
        tables = interval_tables(problem, order)
        best = interval_dp(problem, order)[1]
        assert tables.forward[-1] == tables.backward[0] == best
        prefix = int(cut[0] * len(order))
        suffix = int(cut[1] * (len(order) - prefix))
        assert window_dp(problem, order, tables, prefix, suffix) == best


@pytest.mark.parametrize(("name", "scheme", "buffer_kb"), [("resnet18", "brr", 256), ("squeezenet", "lbdf", 64),
                                                           ("tests/data/googlenet_opset13.onnx", "brr", 128)])
def test_a_scan_resumed_from_known_runs_finds_the_rest_of_them(name, scheme, buffer_kb):
    # what window_dp does for a start inside the shared prefix: join the operators before p without
    # pricing them, start from the DRAM of order[i:p], price a component only when a later operator joins it
    from fuseplan.graph import load_graph
    from fuseplan.search.interval_dp import _runs, named_orders

    graph = load_graph(name)
    problem = FusionProblem(make_cost_model(scheme, graph, buffer_kb * 1024))
    excluded = set(problem.excluded)
    resumed = 0
    for order in named_orders(problem).values():
        for i in range(0, len(order), 3):
            runs, reach = _runs(order, i, excluded, graph.neighbours, problem.cost.evaluate, problem.buffer_bytes)
            for known_end, total in runs[:-1:4]:
                rest, where = _runs(order, i, excluded, graph.neighbours, problem.cost.evaluate,
                                    problem.buffer_bytes, known=(known_end, total))
                assert rest == [run for run in runs if run[0] > known_end] and where == reach
                resumed += 1
    assert resumed > 100


def _known_prices(problem):
    from fuseplan.search.candidates import enumerate_candidates

    candidates = enumerate_candidates(problem)
    assert candidates.complete
    return dict(zip(candidates.masks, candidates.dram))


@settings(max_examples=60, deadline=None)
@given(graph=random_dags(max_nodes=12, activations=True), scheme=st.sampled_from(["lbdf", "brr"]),
       buffer=st.sampled_from([2_500, 5_000, 10_000, 30_000, 10**7]))
def test_dp_over_known_prices_is_the_dp_that_prices(graph, scheme, buffer):
    # A complete enumeration holds every component the DP could price that fits, so the DP over its
    # prices finds the same optimum per order, without pricing anything.
    from fuseplan.search.interval_dp import interval_dp_known

    problem = FusionProblem(make_cost_model(scheme, graph, buffer))
    prices = _known_prices(problem)
    for order in candidate_orders(problem).values():
        priced_plan, priced, _ = interval_dp(problem, order)
        known_plan, known, _ = interval_dp_known(problem, order, prices)
        assert known == priced
        if known_plan is not None:
            assert problem.check(known_plan) == [] and problem.evaluate(known_plan).dram == known
            assert is_interval_plan(problem, known_plan, order)


@pytest.mark.parametrize("model, scheme, kb", [("resnet50", "brr", 1024), ("mobilenet_v3_small", "lbdf", 256),
                                               ("squeezenet", "brr", 64)])
def test_the_reference_of_a_proven_plan_is_the_dp_that_prices(zoo_graphs, model, scheme, kb):
    # `exact` and `auto` hand plan.json the interval reference over their candidates' prices; it is the
    # reference that pricing the DP's groups gives (reference_record computes that one for other searches,
    # and for a plan found cell by cell, which lists no candidates crossing articulation tensors, unless the
    # proof gives it).
    from fuseplan.search import make_search, minimize, reference_record
    from fuseplan.split import make_splitter

    problem = FusionProblem(make_cost_model(scheme, zoo_graphs[model], kb * 1024))
    for search in ("auto", "exact"):
        result = minimize(problem, make_search(search), make_splitter("random"), budget=10, seed=0)
        by_cells = result.details["exact"]["method"] == "cells"
        assert result.details["optimal"] and (result.reference is None) == by_cells
        fields = ("order", "dram_by_order")
        dp = IntervalDP()
        dp.solve(problem)
        if not by_cells:
            assert {k: result.reference[k] for k in fields} == {k: dp.reference()[k] for k in fields}
        record = reference_record(problem, result)
        dp_dram = min(dp.reference()["dram_by_order"].values())
        assert record["dram_bytes"] == dp_dram and record["ratio"] == round(result.cost.dram / dp_dram, 6)
        in_space = any(is_interval_plan(problem, result.plan, order) for order in candidate_orders(problem).values())
        assert record["plan_in_interval_space"] == in_space
        # the DP is not run where the proof already gives its optimum: a plan found cell by cell that is an
        # interval plan (resnet50 BRR 1MB's), whose order is one the DP finds that optimum in
        assert record.get("from_proof", False) == (by_cells and in_space)
        if record.get("from_proof"):
            assert dp.reference()["dram_by_order"][record["order"]] == dp_dram
