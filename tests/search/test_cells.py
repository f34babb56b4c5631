"""Plans cell by cell between articulation tensors: the tensors separate the graph, the shares add up to the
prices of the groups that cross them, and the optimum is brute force's, the whole-graph search's and the
recorded GoogLeNet optima."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseplan.cost import make_cost_model
from fuseplan.graph import load_graph
from fuseplan.plan import FusionProblem
from fuseplan.search.candidates import bits, enumerate_candidates
from fuseplan.search import cells
from fuseplan.search.cells import articulation_tensors, cell_search
from fuseplan.search.exact import solve_exact
from tests.dags import random_dags
from tests.search.test_exact import brute_force

KB = 1024
REPO = Path(__file__).parents[2]
GOOGLENET = str(REPO / "tests" / "data" / "googlenet_opset13.onnx")
SHUFFLENET = str(REPO / "tests" / "data" / "shufflenet_v2_x0_5_opset11_bn.onnx")  # channel splits and shuffles


def lbdf(model, buffer_bytes: int) -> FusionProblem:
    graph = model if not isinstance(model, str) else load_graph(model)
    return FusionProblem(make_cost_model("lbdf", graph, buffer_bytes))


def assert_separates(problem: FusionProblem) -> None:
    """Every articulation tensor is the only tensor read on both sides of its producer, and every operator is
    its producer's ancestor or descendant (checked on the tensors, not on the reachability masks)."""
    graph = problem.graph
    for articulation in articulation_tensors(problem):
        p = articulation.producer
        for tensor in graph.tensors:
            readers_after = [c for c in tensor.consumers if c > p]
            side = tensor.producer if tensor.producer is not None else min(tensor.consumers, default=p + 1)
            if readers_after and side <= p:
                assert tensor.index == articulation.tensor
        assert graph.tensors[articulation.tensor].producer == p
        seen = {p}
        for v in range(p, -1, -1):  # ancestors by walking back from p
            if v in seen:
                seen.update(graph.predecessors[v])
        assert seen >= set(range(p + 1))
        after = {p}
        for v in range(p, len(graph)):
            if v in after:
                after.update(graph.successors[v])
        assert after >= set(range(p, len(graph)))


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", GOOGLENET])
def test_articulation_tensors_separate_the_graph(model):
    problem = lbdf(model, 256 * KB)
    assert_separates(problem)
    if model == GOOGLENET:  # after each of the nine inception blocks, among others
        producers = [problem.graph.nodes[a.producer].op_type for a in articulation_tensors(problem)]
        assert producers.count("Concat") == 9


@settings(max_examples=30, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=12, activations=True))
def test_articulation_tensors_separate_random_graphs(graph):
    assert_separates(lbdf(graph, 8 * KB))


def pieces(problem: FusionProblem, mask: int) -> list[tuple[int, int | None, int | None]]:
    """``mask`` cut into its parts between articulation tensors: (part, tensor it enters by, tensor it leaves
    by), following the definitions, not the search's own cells."""
    articulations = articulation_tensors(problem)
    bounds = [-1] + [a.producer for a in articulations] + [len(problem.graph) - 1]
    found = []
    for k in range(len(bounds) - 1):
        cell = ((1 << (bounds[k + 1] + 1)) - 1) & ~((1 << (bounds[k] + 1)) - 1)
        part = mask & cell
        if not part:
            continue
        entering = articulations[k - 1].tensor if k > 0 and mask >> bounds[k] & 1 else None
        leaving = (articulations[k].tensor if k < len(articulations) and mask >> (bounds[k + 1] + 1) != 0
                   else None)
        found.append((part, entering, leaving))
    return found


@pytest.mark.parametrize("model, kb", [("resnet18", 256), ("mobilenet_v2", 64), ("squeezenet", 256),
                                       ("efficientnet_b0", 64), (GOOGLENET, 64)])
def test_shares_add_up_to_the_price_of_every_crossing_candidate(model, kb):
    problem = lbdf(model, kb * KB)
    cost = problem.cost
    crossing = 0
    for mask in enumerate_candidates(problem).masks:
        parts = pieces(problem, mask)
        if len(parts) < 2:
            continue
        crossing += 1
        shares = [cost.articulation_share(frozenset(bits(part)), entering, leaving)
                  for part, entering, leaving in parts]
        price = cost.evaluate(frozenset(bits(mask)))
        assert sum(share.buffer for share in shares) == price.buffer
        assert sum(share.dram for share in shares) == price.dram
    assert crossing > 20


def brr(model, buffer_bytes: int) -> FusionProblem:
    graph = model if not isinstance(model, str) else load_graph(model)
    return FusionProblem(make_cost_model("brr", graph, buffer_bytes))


def test_brr_prices_closed_groups_whole_not_by_shares():
    problem = brr("resnet18", 256 * KB)
    assert problem.cost.articulation_share(frozenset({0}), None, None) is None and problem.cost.prices_open_groups
    outcome = solve_exact(problem)
    assert outcome.method == "cells" and outcome.optimal


@pytest.mark.parametrize("model, kb", [("resnet18", 256), ("mobilenet_v2", 64), ("squeezenet", 1024)])
def test_a_brr_closing_priced_from_records_is_its_price(model, kb):
    """Every group crossing one articulation tensor, priced from an open group's record and the delta of the
    cheapest (here: the first) open group of the same key, is the cost model's price of the group; the open
    group's closing floor is never above that group's F_beta."""
    problem = brr(model, kb * KB)
    cost = problem.cost
    articulations = {a.producer: a for a in articulation_tensors(problem) if cost.groups_cross(a.producer, a.tensor)}
    by_cut: dict[tuple, list] = {}
    for mask in enumerate_candidates(problem).masks:
        for p, articulation in articulations.items():
            if not mask >> p & 1 or not mask >> (p + 1):
                continue
            left, right = mask & ((1 << (p + 1)) - 1), mask >> (p + 1) << (p + 1)
            if right >> (next((a for a in sorted(articulations) if a > p), len(problem.graph)) + 1):
                continue  # crosses a second one: left for the search's own test
            state = cost.new_state()
            for v in bits(left):
                state.add(v)
            state.members = frozenset(bits(left))
            key, vector, record = cost.open_record(state, articulation.tensor)
            by_cut.setdefault((p, key, right), []).append((left, state, record))
            assert cost.closing_floor(vector) <= cost.evaluate(frozenset(bits(mask))).buffer
    checked = arrays = 0
    for (p, key, right), lefts in by_cut.items():
        first_left, first_state, _ = lefts[0]
        delta, price = cost.close_delta(first_state, frozenset(bits(first_left)), frozenset(bits(right)))
        assert price == cost.evaluate(frozenset(bits(first_left | right)))
        for left, _state, record in lefts[1:]:
            assert cost.price_closed(key, record, delta) == cost.evaluate(frozenset(bits(left | right)))
            checked += 1
        if len(lefts) > 1:  # the same, priced as arrays
            buffers, drams = cost.price_closed_many(key, np.array([r for _, _, r in lefts[1:]], dtype=np.float64),
                                                    delta)
            assert [(int(f), int(d)) for f, d in zip(buffers, drams)] == [
                tuple(cost.evaluate(frozenset(bits(left | right)))) for left, _, _ in lefts[1:]]
            arrays += 1
    assert checked > 10 and arrays > 3


@settings(max_examples=120, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=8, activations=True), st.sampled_from(["lbdf", "brr"]),
       st.sampled_from([2 * KB, 3 * KB, 6 * KB, 12 * KB, 24 * KB]))
def test_cell_search_agrees_with_brute_force(graph, scheme, buffer_bytes):
    problem = (lbdf if scheme == "lbdf" else brr)(graph, buffer_bytes)
    found = cell_search(problem)
    if found is None:  # no group can cross an articulation tensor
        return
    assert found["dram"] == brute_force(problem)
    assert problem.check(found["plan"]) == []
    assert problem.evaluate(found["plan"]).dram == found["dram"]
    if scheme == "brr":  # the closings of every key of two open groups or more priced as arrays: the same plan
        with patch.object(cells, "_MANY", 2):
            assert cell_search(problem)["plan"] == found["plan"]


ZOO_FAST = [("resnet18", 64), ("squeezenet", 256), ("mobilenet_v2", 256), ("efficientnet_b0", 1024),
            (GOOGLENET, 64)]
ZOO_SLOW = [(m, kb) for m in ["resnet50", "resnet101", "resnet152", "vgg16", "mobilenet_v3_small",
                              "mobilenet_v3_large", "efficientnet_b3", "deeplabv3_mobilenet_v3_large",
                              "bert_encoder", "resnet18", "squeezenet", "mobilenet_v2", "efficientnet_b0"]
            for kb in (64, 256, 1024)] + [(GOOGLENET, 128), (GOOGLENET, 256), (SHUFFLENET, 64)]


def assert_same_optimum_as_the_whole_graph(model, kb, scheme="lbdf"):
    problem = lbdf if scheme == "lbdf" else brr
    found = cell_search(problem(model, kb * KB))
    whole = solve_exact(problem(model, kb * KB), by_cells=False)
    assert whole.optimal
    if found is None:  # bert_encoder at 64KB: nothing crosses
        return
    assert found["dram"] == whole.dram


@pytest.mark.parametrize("model, kb", ZOO_FAST)
def test_cell_search_agrees_with_the_whole_graph_search(model, kb):
    assert_same_optimum_as_the_whole_graph(model, kb)


@pytest.mark.parametrize("model, kb", [("resnet18", 64), ("squeezenet", 256), ("mobilenet_v2", 1024)])
def test_brr_cell_search_agrees_with_the_whole_graph_search(model, kb):
    assert_same_optimum_as_the_whole_graph(model, kb, "brr")


@pytest.mark.slow
@pytest.mark.parametrize("model, kb", ZOO_SLOW)
def test_cell_search_agrees_with_the_whole_graph_search_on_the_zoo(model, kb):
    assert_same_optimum_as_the_whole_graph(model, kb)


@pytest.mark.slow  # GoogLeNet: the whole-graph search proves nothing under BRR; the recorded optima below
@pytest.mark.parametrize("model, kb", [(model, kb) for model, kb in ZOO_SLOW if model != GOOGLENET])
def test_brr_cell_search_agrees_with_the_whole_graph_search_on_the_zoo(model, kb):
    assert_same_optimum_as_the_whole_graph(model, kb, "brr")


def recorded_googlenet_optima(scheme: str) -> dict[int, int]:
    """The optima of complete enumerations (``benchmarks/bench_optima.py``: 14 s to 6.5 minutes each)."""
    optima = {}
    for name in ("googlenet_optima.json", "googlenet_optima_brr_1mb.json", "googlenet_optima_brr_2mb.json"):
        recorded = json.loads((REPO / "benchmarks" / "results" / name).read_text())
        optima.update({row["buffer_kb"]: row["exact"]["optimum_bytes"] for row in recorded["rows"]
                       if row["scheme"] == scheme and row["exact"].get("optimal")})
    return optima


def test_cell_search_finds_the_recorded_googlenet_optima():
    optima = recorded_googlenet_optima("lbdf")
    assert set(optima) == {512, 1024, 2048}
    graph = load_graph(GOOGLENET)
    for kb, optimum in optima.items():
        found = cell_search(lbdf(graph, kb * KB))
        assert found is not None and found["dram"] == optimum


@pytest.mark.slow  # 2.5 to 10 s each
@pytest.mark.parametrize("kb", [64, 128, 256, 512, 1024, 2048])
def test_brr_cell_search_finds_the_recorded_googlenet_optima(kb):
    optima = recorded_googlenet_optima("brr")
    assert set(optima) == {64, 128, 256, 512, 1024, 2048}
    found = cell_search(brr(GOOGLENET, kb * KB))
    assert found is not None and found["dram"] == optima[kb]


def test_exact_and_auto_plan_cell_by_cell_under_lbdf():
    problem = lbdf(GOOGLENET, 2048 * KB)
    outcome = solve_exact(problem)
    assert outcome.method == "cells" and outcome.optimal and outcome.bound_source == "optimum"
    assert outcome.stats["cells"] == 20 and outcome.stats["pieces"] > 0
    assert outcome.lower_bound == outcome.dram == problem.evaluate(outcome.plan).dram


def test_cell_search_gives_up_past_its_limits():
    problem = lbdf("squeezenet", 1024 * KB)
    assert cell_search(problem, max_sets=20) is None
    assert cell_search(problem, max_states=10) is None
    outcome = solve_exact(lbdf("squeezenet", 1024 * KB), max_sets=20)
    assert outcome.method != "cells" and not outcome.optimal  # the whole-graph search, cut short


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_the_cell_search_reports_how_far_each_phase_is(scheme):
    """Every cell of each phase is reported where reports may come at any time, the last of each phase always
    (here as the exact search's status, which `plan` shows on a terminal)."""
    problem = (lbdf if scheme == "lbdf" else brr)("resnet18", 256 * KB)
    heard: list[str] = []
    with patch.object(cells, "PROGRESS_EVERY", 0.0):
        outcome = solve_exact(problem, on_status=lambda stage, incumbent, bound: heard.append(stage))
    assert outcome.method == "cells" and outcome.optimal
    total = outcome.stats["cells"]
    listing = [line for line in heard if line.startswith("cell by cell, listing pieces")]
    searching = [line for line in heard if line.startswith("cell by cell, searching")]
    assert listing == [f"cell by cell, listing pieces: cell {k} of {total}" for k in range(1, total + 1)]
    assert searching == [f"cell by cell, searching: cell {k} of {total}" for k in range(total + 1)]
    assert heard.index(listing[-1]) < heard.index(searching[0]) and heard[-1].startswith("optimal cell by cell")
    heard.clear()  # by default at most every quarter of a second, and the end of each phase
    solve_exact(problem, on_status=lambda stage, incumbent, bound: heard.append(stage))
    assert f"cell by cell, searching: cell {total} of {total}" in heard and len(heard) < 2 * total
