"""Lazy pricing: a candidate is kept or dropped by an estimate that is a real plan's DRAM (never below the
exact price), and every graph the search expands or returns carries its exact price."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.cost import make_cost_model  # noqa: E402
from fuseplan.errors import FuseplanError  # noqa: E402
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, load_rules  # noqa: E402
from fuseplan.plan import FusionProblem  # noqa: E402
from fuseplan.rewrite import DramObjective, backtracking_search, total_dram  # noqa: E402
from fuseplan.rewrite.ir_graph import graph_from_ir  # noqa: E402
from fuseplan.rewrite.trial import undo_for  # noqa: E402
from fuseplan.search import candidate_orders  # noqa: E402
from fuseplan.search.interval_dp import interval_tables, optimal_cuts, window_dp  # noqa: E402


def _prepared(name: str):
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


@pytest.mark.parametrize("source,scheme", [("squeezenet", "brr"), ("resnet18", "lbdf")])
def test_a_narrowed_window_is_never_below_the_optimum_and_meets_it_at_optimal_cuts(source, scheme):
    graph = graph_from_ir(ir.from_proto(_prepared(source)))
    problem = FusionProblem(make_cost_model(scheme, graph, 64 * 1024))
    rng = random.Random(0)
    for order in candidate_orders(problem).values():
        tables = interval_tables(problem, order)
        n, best = len(order), tables.best
        cuts = optimal_cuts(tables)
        assert cuts[0] == 0 and cuts[-1] == n and all(tables.forward[k] + tables.backward[k] == best for k in cuts)
        for _ in range(12):
            prefix = rng.randrange(n + 1)
            suffix = rng.randrange(n - prefix + 1)
            first = rng.randrange(prefix + 1)
            last = rng.randrange(n - suffix, n + 1)
            assert window_dp(problem, order, tables, prefix, suffix, first=first, last=last) >= best
            # Narrowed to optimal cuts around the window, an optimal plan is among those it searches.
            at_cuts = (max(k for k in cuts if k <= first), min(k for k in cuts if k >= last))
            assert window_dp(problem, order, tables, prefix, suffix, first=at_cuts[0], last=at_cuts[1]) == best
        # With no narrowing it is the window DP itself.
        assert window_dp(problem, order, tables, n // 3, n // 3, first=0, last=n) == best


@pytest.mark.slow
@pytest.mark.parametrize("source,scheme", [("squeezenet", "brr"), ("resnet18", "brr"), ("mobilenet_v2", "lbdf")])
def test_estimates_are_never_below_the_exact_price_and_expanded_prices_are_exact(source, scheme):
    buffer_bytes = 256 * 1024
    objective = DramObjective(scheme=scheme, buffer_bytes=buffer_bytes)
    working = ir.from_proto(_prepared(source))
    expansion = objective.expansion(working)
    assert objective.expanded_cost(expansion, working) == total_dram(ir.to_proto(working), scheme, buffer_bytes)
    priced = equal = 0
    for name, rule in load_rules().items():
        for site in rule.sites(working)[::3]:
            _, _, undo = undo_for(working, site)
            try:
                apply_in_place(working, name, site)
            except FuseplanError:
                undo()
                continue
            try:
                exact = total_dram(ir.to_proto(working), scheme, buffer_bytes)
                estimate, is_exact = objective.estimate_near(expansion, working, undo.changed)
                assert objective.price_near(expansion, working, undo.changed) == exact
            finally:
                undo()
            assert estimate >= exact, (name, site)
            assert estimate == exact or not is_exact
            priced += 1
            equal += estimate == exact
    assert priced >= 10 and equal >= priced // 2  # the estimate is exact more often than not on a first expansion


@pytest.mark.parametrize("source,scheme,alpha,budget", [
    ("squeezenet", "brr", 1.05, 2),
    pytest.param("mobilenet_v3_small", "lbdf", 1.05, 3, marks=pytest.mark.slow),
    pytest.param("resnet18", "brr", 1.1, 6, marks=pytest.mark.slow),
    pytest.param("mobilenet_v2", "lbdf", 1.05, 6, marks=pytest.mark.slow),
])
def test_a_lazy_search_returns_its_graph_at_its_exact_price_and_never_prices_a_candidate_by_the_full_window(
        source, scheme, alpha, budget, monkeypatch):
    model = _prepared(source)
    objective = DramObjective(scheme=scheme, buffer_bytes=256 * 1024)

    def full_window(*args, **kwargs):
        raise AssertionError("a lazy search priced a candidate by the full window DP")

    monkeypatch.setattr(objective, "price_near", full_window)
    result = backtracking_search(model, objective, alpha=alpha, budget=budget, seed=0, pricing="lazy")
    assert result.cost == total_dram(result.model, scheme, 256 * 1024)  # priced afresh
    assert result.cost <= result.greedy["cost"] <= result.initial_cost
    assert result.estimated > 0


def test_an_unknown_pricing_is_one_clear_error():
    with pytest.raises(FuseplanError, match="unknown pricing"):
        backtracking_search(_prepared("squeezenet"), DramObjective(), pricing="eager")


def test_the_estimate_benchmark_measures_rank_agreement_as_it_says():
    from tests.scripts import load_script

    bench = load_script("bench_rewrite_estimate")
    exact = [3.0, 1.0, 2.0, 5.0]
    assert bench.spearman(exact, exact) == pytest.approx(1.0)
    assert bench.spearman(exact, [-x for x in exact]) == pytest.approx(-1.0)
    assert bench.discordant_share(exact, exact) == 0.0
    # One pair of six swapped (1 and 2), and a tie the prices do not have counts as ordered otherwise.
    assert bench.discordant_share(exact, [3.0, 2.0, 1.0, 5.0]) == pytest.approx(1 / 6)
    assert bench.discordant_share(exact, [3.0, 2.0, 2.0, 5.0]) == pytest.approx(1 / 6)
    assert bench.spearman([1.0], [1.0]) is None and bench.discordant_share([1.0, 1.0], [1.0, 2.0]) is None
