"""Reused deltas: a substitution met again in the same context is priced from what it changed before, without
being built, and the search finds what lazy pricing finds."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.rewrite import backtracking_search, make_objective  # noqa: E402

_SAME = ("steps", "initial_cost", "cost", "expanded", "generated", "refused", "unpriced", "oversized", "undoing",
         "budget_spent", "verified", "verification_failures")


def _prepared(name: str):
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _search(model, scheme: str, alpha: float, budget: int, pricing: str, check: bool = False):
    objective = make_objective("dram", scheme=scheme, buffer_bytes=256 * 1024)
    return backtracking_search(model, objective, alpha=alpha, budget=budget, seed=0, pricing=pricing,
                               check_reuse=check)


@pytest.mark.slow
@pytest.mark.parametrize("source,scheme,alpha", [("resnet18", "lbdf", 1.05), ("squeezenet", "brr", 1.05),
                                                 ("mobilenet_v2", "lbdf", 1.0)])
def test_reused_deltas_give_the_estimate_computed_afresh(source, scheme, alpha):
    checked = _search(_prepared(source), scheme, alpha, 12, "reuse", check=True)
    assert checked.reuse_checks > 50 and checked.reused == 0
    assert checked.reuse_mismatches == 0


@pytest.mark.parametrize("source,scheme", [("resnet18", "lbdf"),
                                           pytest.param("squeezenet", "brr", marks=pytest.mark.slow)])
def test_reuse_finds_what_lazy_pricing_finds_and_builds_fewer_candidates(source, scheme):
    model = _prepared(source)
    lazy = _search(model, scheme, 1.05, 8, "lazy")
    reused = _search(model, scheme, 1.05, 8, "reuse")
    assert {k: getattr(reused, k) for k in _SAME} == {k: getattr(lazy, k) for k in _SAME}
    assert reused.reused > 0 and lazy.reused == 0
    # a reused candidate is neither built nor priced afresh
    assert reused.estimated + reused.exact_pricings < lazy.estimated + lazy.exact_pricings


@pytest.mark.slow
def test_latency_deltas_are_reused_and_agree(tmp_path):
    import shutil
    from pathlib import Path

    cache = tmp_path / "latency.json"  # the benchmarks' cache holds every resnet18 configuration: nothing is timed
    shutil.copyfile(Path(__file__).parents[2] / "benchmarks" / "results" / "rewrite_latency_cache.json", cache)
    model = _prepared("resnet18")
    results = []
    for pricing, check in (("reuse", True), ("reuse", False)):
        objective = make_objective("latency", cache=cache, seed=0)
        results.append(backtracking_search(model, objective, alpha=1.05, budget=6, seed=0, pricing=pricing,
                                           check_reuse=check))
        assert objective.measured == 0
    checked, reused = results
    assert checked.reuse_checks > 50 and checked.reuse_mismatches == 0
    assert reused.reused > 50 and reused.steps == checked.steps and reused.cost == checked.cost


@pytest.mark.slow  # two searches: about 3 s
def test_a_bounded_group_price_table_gives_the_same_search():
    from fuseplan.rewrite import GroupPrices

    model = _prepared("resnet18")
    results = []
    for capacity in (None, 500):
        objective = make_objective("dram", scheme="lbdf", buffer_bytes=256 * 1024)
        if capacity is not None:
            objective.prices = GroupPrices(capacity)
        result = backtracking_search(model, objective, alpha=1.05, budget=8, seed=0)
        results.append(({k: getattr(result, k) for k in _SAME}, objective.prices))
    (unbounded, full), (bounded, small) = results
    assert bounded == unbounded
    assert full.dropped == 0 and len(full) > 2_000  # the search priced far more groups than the bound holds
    assert small.dropped > 0 and len(small) <= 500
    assert small.misses > full.misses  # dropped prices were priced again


def test_group_price_table_generations():
    from fuseplan.rewrite import GroupPrices

    table = GroupPrices(4)
    for key in range(3):
        table._store((key,), (key, key))
    assert len(table) == 3 and table.dropped == 0 and set(table.older) == {(0,), (1,)}
    table._store((3,), (3, 3))  # the recent generation is full again: it becomes the older, the older goes
    assert table.dropped == 2 and set(table.older) == {(2,), (3,)} and not table.prices
    table._store((4,), (4, 4))
    assert len(table) == 3 and set(table.prices) == {(4,)}
    with pytest.raises(ValueError, match="at least 2"):
        GroupPrices(1)
