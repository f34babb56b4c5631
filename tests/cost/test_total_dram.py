"""Total DRAM: unfuseable operators priced as they run alone, and totals that never grow with the buffer."""

from __future__ import annotations

import json

import pytest

from fuseplan.cost import SCHEMES, make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import PlanFile, plan_document, read_plan_file
from fuseplan.plan.validate import validate_plan
from fuseplan.report.inspect import inspect_model
from fuseplan.schedule.bounds import io_lower_bound
from fuseplan.search.exact import solve_exact
from tests.conftest import HEAVY_UNDER_BRR, LARGER, ZOO, zoo_params

KB = 1024
GRID_KB = (64, 128, 256, 512, 1024, 2048)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", zoo_params(slow=LARGER))
def test_an_operator_alone_never_moves_more_with_a_bigger_buffer(zoo_graphs, name, scheme):
    graph = zoo_graphs[name]
    models = [make_cost_model(scheme, graph, kb * KB) for kb in GRID_KB]
    for v in range(len(graph)):
        for cost in models:
            alone = frozenset((v,))
            if v in cost.riding:  # applied to the output blocks of an operator that does not fit
                assert cost.alone_dram(v) == 0 and not cost.fits(frozenset((cost.riding[v],)))
            elif cost.fits(alone):
                assert cost.alone_dram(v) == cost.dram(alone)
            else:  # the least-DRAM blocking that fits, never below the operator's I/O lower bound
                schedule = cost.alone_schedule(v)
                assert cost.alone_dram(v) == cost.bytes_per_element * schedule.dram
                assert cost.bytes_per_element * schedule.on_chip < cost.buffer_bytes
                bound = io_lower_bound(graph, v, cost.buffer_bytes, cost.bytes_per_element, schedule.operators[1:])
                assert schedule.dram >= bound.elements
        # while an operator does not fit, a bigger buffer never makes its blocking dearer
        blocked = [cost.alone_dram(v) for cost in models if v in cost._too_big]
        assert blocked == sorted(blocked, reverse=True), (name, scheme, graph.nodes[v].name, blocked)


def test_lbdf_runs_operators_that_do_not_fit_in_their_least_dram_blocking(zoo_graphs):
    graph = zoo_graphs["vgg16"]
    cost = make_cost_model("lbdf", graph, 64 * KB)
    v = graph.node_index("/features/features.19/Conv")
    schedule = cost.alone_schedule(v)
    assert schedule.operators == (v, graph.node_index("/features/features.20/Relu"))  # its ReLU rides
    node = graph.nodes[v]
    compulsory = node.weight_numel + graph.tensors[node.inputs[0]].numel + graph.tensors[node.outputs[0]].numel
    # all weights on chip, one output row of all channels: 512 one-channel blocks re-reading the input (208 MB)
    assert compulsory < cost.alone_dram(v) < 8 * 2**20
    # the whole network: fused groups and operators run alone, proven optimal, well under 480 MB
    problem = FusionProblem(cost)
    outcome = solve_exact(problem)
    assert outcome.optimal and outcome.dram + cost.unfuseable_dram() < 480 * 2**20
    assert make_cost_model("lbdf", graph, 2048 * KB).alone_dram(v) < cost.alone_dram(v)


def _optimal_totals(graph, scheme):
    totals = []
    for kb in GRID_KB:
        problem = FusionProblem(make_cost_model(scheme, graph, kb * KB))
        outcome = solve_exact(problem)
        assert outcome.optimal
        totals.append(outcome.dram + problem.cost.unfuseable_dram())
    return totals


@pytest.mark.parametrize("scheme, name", [
    # mobilenet_v2 and squeezenet under BRR take 2-3 s of CPU: full suite only (resnet18 keeps BRR in the fast set)
    pytest.param(scheme, name, marks=pytest.mark.slow) if scheme == "brr" and name in ("mobilenet_v2", "squeezenet")
    else (scheme, name)
    for scheme in sorted(SCHEMES) for name in ("mobilenet_v2", "squeezenet", "resnet18")])
def test_the_optimal_total_never_grows_with_the_buffer(zoo_graphs, name, scheme):
    totals = _optimal_totals(zoo_graphs[name], scheme)
    assert totals == sorted(totals, reverse=True), (name, scheme, totals)


# On HEAVY_UNDER_BRR under BRR, benchmarks/bench_exact.py checks this property ("total DRAM grows in: none").
@pytest.mark.slow
@pytest.mark.parametrize("scheme, name", [(scheme, name) for scheme in sorted(SCHEMES) for name in ZOO
                                          if not (scheme == "brr" and name in HEAVY_UNDER_BRR)])
def test_the_optimal_total_never_grows_with_the_buffer_on_the_whole_zoo(zoo_graphs, name, scheme):
    totals = _optimal_totals(zoo_graphs[name], scheme)
    assert totals == sorted(totals, reverse=True), (name, scheme, totals)


def test_the_paper_convention_figure_can_grow_but_the_total_cannot(zoo_graphs):
    # mobilenet_v2 under LBDF: an operator becoming fuseable adds its traffic to the fuseable-only figure
    graph = zoo_graphs["mobilenet_v2"]
    fuseable_only, totals = [], []
    for kb in (256, 512):
        problem = FusionProblem(make_cost_model("lbdf", graph, kb * KB))
        outcome = solve_exact(problem)
        fuseable_only.append(outcome.dram)
        totals.append(outcome.dram + problem.cost.unfuseable_dram())
    assert fuseable_only[1] > fuseable_only[0] and totals[1] <= totals[0]


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_plan_dram_is_the_sum_of_group_dram_for_both_totals(zoo_graphs, scheme):
    # unfuseable operators at 128KB under LBDF; BRR runs every operator of vgg16 at 32KB (its lone-operator
    # blockings fit), so it excludes none
    graph = zoo_graphs["vgg16"]
    problem = FusionProblem(make_cost_model(scheme, graph, (128 if scheme == "lbdf" else 32) * KB))
    outcome = solve_exact(problem)
    document = plan_document(problem, outcome.plan, {"algorithm": "exact"})
    assert document["dram_bytes"] == sum(g["dram_bytes"] for g in document["groups"]) == outcome.dram
    alone = sum(problem.cost.alone_dram(graph.node_index(name)) for name in document["excluded"])
    assert bool(document["excluded"]) == (scheme == "lbdf") and document["excluded_dram_bytes"] == alone
    assert document["total_dram_bytes"] == document["dram_bytes"] + alone
    assert validate_plan(graph, PlanFile(document)) == []
    tampered = dict(document, total_dram_bytes=document["total_dram_bytes"] - 1)
    assert any("total DRAM with unfuseable operators" in r for r in validate_plan(graph, PlanFile(tampered)))
    report = inspect_model(problem.cost)
    assert report.excluded_dram_bytes == alone
    assert report.total_unfused_dram_bytes == report.unfused_dram_bytes + alone
    assert sum(row.alone_dram_bytes for row in report.operators if not row.fuseable) == alone


def test_version_1_plan_files_are_still_read(zoo_graphs, tmp_path):
    graph = zoo_graphs["squeezenet"]
    problem = FusionProblem(make_cost_model("lbdf", graph, 256 * KB))
    document = plan_document(problem, solve_exact(problem).plan, {"algorithm": "exact"})
    for key in ("total_dram_bytes", "excluded_dram_bytes"):
        del document[key]
    document["version"] = 1
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(document))
    assert validate_plan(graph, read_plan_file(path)) == []
    path.write_text(json.dumps(dict(document, version=5)))
    with pytest.raises(FuseplanError, match="version 5 is not supported"):
        read_plan_file(path)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_unfuseable_operators_handed_to_a_cost_model_stand_for_its_own(zoo_graphs, scheme):
    graph = zoo_graphs["resnet18"]
    found = make_cost_model(scheme, graph, 16 * KB)
    if scheme == "brr":  # a lone-operator blocking of every operator fits 16 KB
        assert found.unfuseable == () and found.unfuseable_dram() == 0 and not found.riding
        return
    assert found.unfuseable  # some operators do not fit 16 KB alone
    given = make_cost_model(scheme, graph, 16 * KB)
    given.known_unfuseable(reversed(found.unfuseable))
    assert given.unfuseable == found.unfuseable and given.fuseable == found.fuseable
    assert given.misses == 0  # nothing was priced alone to find them
    assert FusionProblem(given).excluded == FusionProblem(found).excluded
    with pytest.raises(ValueError):
        given.known_unfuseable(())
    with pytest.raises(ValueError):
        found.known_unfuseable(found.unfuseable)


def test_bert_encoder_runs_every_operator_at_256kb_for_a_few_megabytes():
    # LBDF holds its element-wise operators' 1x128x1024 tensors whole, so they do not fit alone and run in the
    # mapper's chunks (compulsory traffic); its matrix products' weights exceed the buffer and run in the
    # mapper's blocks. Totals: the interval DP's plan of the fuseable operators plus every operator run alone.
    # (LBDF priced 268 MB here when its lone operators were held whole.)
    from fuseplan.graph import load_graph
    from fuseplan.search import candidate_orders, interval_dp

    graph = load_graph("bert_encoder")
    totals = {}
    for scheme in sorted(SCHEMES):
        problem = FusionProblem(make_cost_model(scheme, graph, 256 * KB))
        fused = min(interval_dp(problem, order)[1] for order in candidate_orders(problem).values())
        totals[scheme] = fused + problem.cost.unfuseable_dram()
    weights = graph.weight_numel
    assert weights < totals["lbdf"] < 12 * 2**20
    # BRR holds every rank-3 tensor whole (a block of token positions would need all of a MatMul's weights
    # in every block: the tile executor read them once per block where the price read them once), so it
    # streams weights through fused groups but cannot block the sequence: a little above LBDF here
    assert weights < totals["brr"] < 12 * 2**20
    assert 1 < totals["brr"] / totals["lbdf"] < 2
